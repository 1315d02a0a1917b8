#include "raid/device/io_scheduler.h"

#include <algorithm>

namespace strata::device {

io_scheduler::io_scheduler(block_device& backing, clock& c, const io_scheduler_options& options)
    : forwarding_device(backing),
      clock_(c),
      options_(options),
      idle_timer_(c.make_timer(backing.executor(), [this] { admit(); })),
      rejected_(backing.executor()) {
  options_.busy_background_in_flight = std::max(1u, options_.busy_background_in_flight);
  options_.idle_background_in_flight =
      std::max(options_.busy_background_in_flight, options_.idle_background_in_flight);
  last_foreground_end_ = clock_.now() - options_.idle_wait;
}

io_scheduler::~io_scheduler() = default;

void io_scheduler::submit(request& req) noexcept {
  if (auto ec = validate(geometry(), req)) {
    rejected_.complete_later(req, ec);
    return;
  }
  if (req.priority == io_class::foreground) {
    ++counters_.foreground;
    ++foreground_in_flight_;
    dispatch(req);
    return;
  }
  ++counters_.background;
  const unsigned cap =
      quiet() ? options_.idle_background_in_flight : options_.busy_background_in_flight;
  if (held_.empty() && background_in_flight_ < cap) {
    ++background_in_flight_;
    dispatch(req);
    return;
  }
  ++counters_.background_held;
  held_.push_back(req);
  admit();  // arms the timer if the idle wait is what holds it
}

void io_scheduler::expedite(request& req) noexcept {
  request_list rest;
  bool found = false;
  while (request* r = held_.pop_front()) {
    if (r == &req) {
      found = true;
    } else {
      rest.push_back(*r);
    }
  }
  held_ = rest.take_all();
  if (!found) return;
  ++counters_.expedited;
  ++background_in_flight_;
  dispatch(req);
}

bool io_scheduler::holds(const request& req) const noexcept {
  for (const request* r = held_.front(); r != nullptr; r = r->next_in_device) {
    if (r == &req) return true;
  }
  return false;
}

bool io_scheduler::quiet() const noexcept {
  return foreground_in_flight_ == 0 && clock_.now() - last_foreground_end_ >= options_.idle_wait;
}

void io_scheduler::dispatch(request& outer) {
  outer.dispatched_at = clock_.now();
  slot& s = slots_.acquire();
  s.owner = this;
  s.outer = &outer;
  copy_io(outer, s.inner);
  s.inner.context = &s;
  s.inner.on_complete = &io_scheduler::on_done;
  backing().submit(s.inner);
}

void io_scheduler::on_done(request& inner) noexcept {
  slot& s = *static_cast<slot*>(inner.context);
  io_scheduler& self = *s.owner;
  request& outer = *s.outer;
  const std::error_code result = inner.result;
  self.slots_.release(s);
  if (outer.priority == io_class::foreground) {
    --self.foreground_in_flight_;
    self.last_foreground_end_ = self.clock_.now();
  } else {
    --self.background_in_flight_;
  }
  self.admit();
  // Last: the caller may destroy this device from its completion once
  // nothing of its own is in flight.
  complete(outer, result);
}

void io_scheduler::admit() {
  while (!held_.empty()) {
    const unsigned cap =
        quiet() ? options_.idle_background_in_flight : options_.busy_background_in_flight;
    if (background_in_flight_ >= cap) break;
    request& next = *held_.pop_front();
    ++background_in_flight_;
    dispatch(next);
  }
  // Held requests the idle cap would let go once the drive stays quiet.
  if (!held_.empty() && foreground_in_flight_ == 0 &&
      background_in_flight_ < options_.idle_background_in_flight) {
    idle_timer_->arm(last_foreground_end_ + options_.idle_wait);
  }
}

}  // namespace strata::device
