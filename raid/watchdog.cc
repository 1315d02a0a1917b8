#include "raid/watchdog.h"

#include <vector>

namespace strata::raid {

member_watchdog::member_watchdog(
    device::clock* clock, device::duration timeout, boost::asio::any_io_executor executor,
    std::function<void(unsigned, const device::block_device*)> on_overdue)
    : clock_(clock), timeout_(timeout), on_overdue_(std::move(on_overdue)) {
  if (clock_ != nullptr && timeout_ > device::duration::zero()) {
    timer_ = clock_->make_timer(std::move(executor), [this] { on_timer(); });
  }
}

void member_watchdog::start(watched_io& io, unsigned member, const device::block_device* device,
                            const device::request* req) noexcept {
  io.member = member;
  io.device = device;
  io.request = req;
  io.abandoned = false;
  if (!enabled()) return;
  link_last(io);
}

void member_watchdog::link_last(watched_io& io) noexcept {
  link_at(io, clock_->now() + timeout_);
}

void member_watchdog::link_at(watched_io& io, device::time_point deadline) noexcept {
  io.deadline = deadline;
  // From the tail back to the first that is due no later: O(1) at a
  // submission (now + timeout is the latest deadline of all).
  watched_io* before = tail_;
  while (before != nullptr && before->deadline > deadline) before = before->prev;
  io.prev = before;
  io.next = before != nullptr ? before->next : head_;
  (io.next != nullptr ? io.next->prev : tail_) = &io;
  (before != nullptr ? before->next : head_) = &io;
  io.linked = true;
  if (!armed_) {
    // Armed lazily: a timer that finds the oldest not yet due re-arms for it.
    armed_ = true;
    timer_->arm(io.deadline);
  }
}

void member_watchdog::unlink(watched_io& io) noexcept {
  (io.prev != nullptr ? io.prev->next : head_) = io.next;
  (io.next != nullptr ? io.next->prev : tail_) = io.prev;
  io.prev = io.next = nullptr;
  io.linked = false;
}

void member_watchdog::stop(watched_io& io) noexcept {
  if (io.linked) unlink(io);
}

void member_watchdog::on_timer() {
  armed_ = false;
  const device::time_point now = clock_->now();
  while (head_ != nullptr && head_->deadline <= now) {
    watched_io& io = *head_;
    if (io.request != nullptr) {
      // The drive is late only once it has had the I/O for the timeout: an
      // I/O still queued behind the hosts' (never sent) is watched anew,
      // one sent late is timed from when it was sent. A drive that stops
      // answering is found by the I/O it has in flight.
      const device::time_point sent = io.request->dispatched_at;
      if (io.device->holds(*io.request) ||
          (sent != device::time_point{} && sent + timeout_ > now)) {
        unlink(io);
        link_at(io, io.device->holds(*io.request) ? now + timeout_ : sent + timeout_);
        continue;
      }
    }
    on_overdue_(io.member, io.device);  // abandons io and the rest on its device
  }
  if (head_ != nullptr) {
    armed_ = true;
    timer_->arm(head_->deadline);
  }
}

void member_watchdog::abandon_all(const device::block_device* device) {
  std::vector<watched_io*> victims;
  for (watched_io* io = head_; io != nullptr; io = io->next) {
    if (io->device == device) victims.push_back(io);
  }
  for (watched_io* io : victims) {
    unlink(*io);
    io->abandoned = io->abandonable;
  }
  // Expiring may start new I/O (on other members) but never touches these.
  for (watched_io* io : victims) {
    if (io->abandoned && io->expire != nullptr) io->expire(*io);
  }
}

}  // namespace strata::raid
