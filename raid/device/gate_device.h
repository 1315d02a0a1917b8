// A gate in front of a device, for fencing: while it is open, requests go
// straight through (the caller's request itself, nothing copied); while it
// is held, every request (reads too) waits in arrival order; once shut,
// every request fails. The controller puts one in front of each shared
// drive and holds it whenever its ownership lease is not known to be valid
// (controller/lease.h), so that a controller that was frozen and lost its
// pools meanwhile neither writes to their drives nor reads what its partner
// has written since (a stale read), even for a moment after it thaws.
//
// The check is made at submit(), against `allowed()` (the lease's clock
// test): not by a timer that might run after the first request of a thawed
// loop. A request the check stops holds the gate and calls on_hold once;
// whoever renews the lease then opens the gate (or shuts it, when the pool
// is gone). Reads are held as well because a controller that lost a pool
// may hold stale maps of it.
//
// Requests already passed to the device below are not called back. A
// frozen process's I/O inside the kernel completes while it is frozen
// (io-wq workers are not stopped), but I/O queued in user space below a
// gate (a scheduler's held background writes, a drive model's queue, a
// volatile cache) freezes with the process and would go on after the
// thaw: so the controller puts a second gate at the bottom of each
// drive's stack, right above the file, and the file device asks the same
// question once more right before the io_uring_enter that hands a request
// to the kernel, handing what it refuses back to that gate (refused();
// file_device.h, controller/shelf.h). A request marked
// fence_exempt (the controller's own heartbeat and ownership records) is
// never held, shut or not: it is what renews and checks the lease.
//
// Threads, lifetime: as block_device. The device below outlives the gate.
#pragma once

#include <functional>
#include <system_error>

#include "raid/device/forwarding_device.h"
#include "raid/device/request_queue.h"

namespace strata::device {

class gate_device final : public forwarding_device {
 public:
  enum class state { open, held, shut };

  // `allowed`: asked at each submit() while the gate is open; false holds
  // it. Empty: always allowed.
  gate_device(block_device& backing, std::function<bool()> allowed = {},
              std::function<void()> on_hold = {})
      : forwarding_device(backing),
        allowed_(std::move(allowed)),
        on_hold_(std::move(on_hold)),
        rejected_(backing.executor()) {}

  void submit(request& req) noexcept override {
    if (req.fence_exempt) return backing().submit(req);
    if (state_ == state::open && allowed_ && !allowed_()) hold();
    switch (state_) {
      case state::open:
        backing().submit(req);
        return;
      case state::held:
        held_.push_back(req);
        return;
      case state::shut:
        rejected_.complete_later(req, why_);
        return;
    }
  }
  // The next request is stopped (as when allowed() says no).
  void hold() noexcept {
    if (state_ != state::open) return;
    state_ = state::held;
    if (on_hold_) on_hold_();
  }
  // Lets the held requests through, in the order they came, and the rest.
  void open() noexcept {
    if (state_ == state::shut) return;
    state_ = state::open;
    request_list waiting = held_.take_all();
    while (request* r = waiting.pop_front()) backing().submit(*r);
  }
  // Fails the held requests, and every later one, with `why`. For good.
  void shut(std::error_code why) noexcept {
    state_ = state::shut;
    why_ = why;
    request_list waiting = held_.take_all();
    while (request* r = waiting.pop_front()) rejected_.complete_later(*r, why_);
  }
  // A request the device below refused for its persistent reservation
  // (reservations.h: the drive fenced this host): held as if this gate had
  // stopped it, which calls on_hold. The controller's own records fail
  // instead, with reservation_conflict: they are how it learns whether it
  // is still the owner, and must not wait for that answer.
  void refused(request& req) noexcept {
    if (req.fence_exempt) return rejected_.complete_later(req, errc::reservation_conflict);
    hold();
    if (state_ == state::shut) return rejected_.complete_later(req, why_);
    held_.push_back(req);
  }
  // Both reach the device below, which has the caller's own request. A
  // request the gate holds is not the drive's wait either, but a fenced
  // controller's: the watchdog counts it, as before (it is short, and a
  // controller that cannot write must not wait forever on its members).
  void expedite(request& req) noexcept override { backing().expedite(req); }
  bool holds(const request& req) const noexcept override { return backing().holds(req); }
  state current() const noexcept { return state_; }
  std::size_t held() const noexcept { return held_.size(); }

 private:
  std::function<bool()> allowed_;
  std::function<void()> on_hold_;
  state state_ = state::open;
  std::error_code why_;
  request_list held_;
  completion_queue rejected_;
};

// Marks every request through it fence_exempt: the way past the gates
// for the controller's own records (controller/shelf.h raw_drive).
class fence_exempt_device final : public forwarding_device {
 public:
  explicit fence_exempt_device(block_device& backing) : forwarding_device(backing) {}
  void submit(request& req) noexcept override {
    req.fence_exempt = true;
    backing().submit(req);
  }
  void expedite(request& req) noexcept override { backing().expedite(req); }
  bool holds(const request& req) const noexcept override { return backing().holds(req); }
};

}  // namespace strata::device
