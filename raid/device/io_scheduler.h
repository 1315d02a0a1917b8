// A decorator that puts a drive's background I/O behind its foreground I/O:
// the array's deferrable work (scrub, extent moves, cache fills; destage to
// come) yields to the hosts', as Linux's BFQ and io.latency make a disk's
// idle-class I/O yield. Rebuilds and resyncs are foreground: deferring
// them lengthens the window in which a group is degraded.
//
//   foreground  passes at once, never held.
//   background  held, in arrival order, while the drive has
//               options.busy_background_in_flight background requests in
//               flight and foreground I/O in flight or ended less than
//               options.idle_wait ago: its share of a busy drive. Once
//               the drive has been quiet of foreground I/O for idle_wait,
//               up to options.idle_background_in_flight go at once.
//
// A busy drive so keeps at least one background request in flight (no
// background work starves), and the drive's own queue never holds more
// than that ahead of a host request. The wait after foreground I/O ends
// covers a host that issues its next request as soon as one completes
// (queue depth 1): without it, background work would fill the queue in
// the gap (CFQ's slice_idle for the same reason).
//
// Background work that holds something foreground work then waits for (a
// RAID-6 stripe a scrub holds, a moving extent's held requests) would hold
// the host behind it: the layer that knows calls expedite() on its held
// requests, and issues the rest of that work as foreground.
//
// Holding a request changes nothing a caller may rely on: requests in
// flight together may complete in any order, and a flush covers only
// writes completed before it was submitted.
//
// Threads, lifetime: as block_device. The backing device and the clock
// outlive the scheduler.
#pragma once

#include <cstdint>
#include <memory>

#include "raid/device/clock.h"
#include "raid/device/forwarding_device.h"
#include "raid/device/request_queue.h"
#include "raid/device/timing.h"

namespace strata::device {

struct io_scheduler_options {
  unsigned busy_background_in_flight = 1;  // at least 1
  unsigned idle_background_in_flight = 8;
  duration idle_wait = std::chrono::milliseconds(10);
};

struct io_scheduler_counters {
  std::uint64_t foreground = 0;  // requests passed
  std::uint64_t background = 0;
  std::uint64_t background_held = 0;  // background requests that had to wait
  std::uint64_t expedited = 0;        // ... of which let go early, foreground work waiting on them
};

class io_scheduler final : public forwarding_device {
 public:
  io_scheduler(block_device& backing, clock& c, const io_scheduler_options& options = {});
  ~io_scheduler() override;

  void submit(request& req) noexcept override;
  // A held background request goes at once, beside the cap (foreground
  // work waits on it); nothing for one already passed on.
  void expedite(request& req) noexcept override;
  // A held background request (a walk of the held list: asked only when
  // a watchdog's deadline passes).
  bool holds(const request& req) const noexcept override;
  const io_scheduler_counters& counters() const noexcept { return counters_; }
  std::size_t background_waiting() const noexcept { return held_.size(); }

 private:
  struct slot {
    io_scheduler* owner = nullptr;
    request* outer = nullptr;
    request inner;
  };
  void dispatch(request& outer);
  static void on_done(request& inner) noexcept;
  // Starts held background requests while the cap allows; arms the timer
  // for the end of the idle wait if more could go then.
  void admit();
  bool quiet() const noexcept;

  clock& clock_;
  io_scheduler_options options_;
  slot_pool<slot> slots_;
  request_list held_;
  unsigned foreground_in_flight_ = 0;
  unsigned background_in_flight_ = 0;
  time_point last_foreground_end_{};
  std::unique_ptr<timer> idle_timer_;
  completion_queue rejected_;
  io_scheduler_counters counters_;
};

}  // namespace strata::device
