#include "raid/watchdog.h"

#include <vector>

namespace strata::raid {

member_watchdog::member_watchdog(device::clock* clock, device::duration timeout,
                                 boost::asio::any_io_executor executor,
                                 std::function<void(unsigned, const device::block_device*)> on_overdue)
    : clock_(clock), timeout_(timeout), on_overdue_(std::move(on_overdue)) {
  if (clock_ != nullptr && timeout_ > device::duration::zero()) {
    timer_ = clock_->make_timer(std::move(executor), [this] { on_timer(); });
  }
}

void member_watchdog::start(watched_io& io, unsigned member, const device::block_device* device) noexcept {
  io.member = member;
  io.device = device;
  io.abandoned = false;
  if (!enabled()) return;
  io.deadline = clock_->now() + timeout_;
  io.prev = tail_;
  io.next = nullptr;
  if (tail_ != nullptr) {
    tail_->next = &io;
  } else {
    head_ = &io;
  }
  tail_ = &io;
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
    on_overdue_(head_->member, head_->device);  // abandons head_ and the rest on its device
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
