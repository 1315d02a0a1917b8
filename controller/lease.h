// This controller's lease on the pools it owns: the time until which it may
// use their drives. Each drive heartbeat that reached the drives renews it
// for `length` from when the beat started (controller/heartbeat.h). The
// partner takes a pool over only after it has seen this controller's drive
// heartbeat stand still for longer than `length` and the link silent
// (README.md, "Two controllers"), so a controller frozen past its lease
// (SIGSTOP, a stalled VM) finds it lapsed when it thaws, before it can touch
// a drive: the gates in front of the drives (raid/device/gate_device.h)
// ask valid() at every request and hold them until the controller has
// read the ownership records again.
//
// Threads: the loop's.
#pragma once

#include <algorithm>

#include "raid/device/clock.h"

namespace strata::controller {

class lease {
 public:
  lease(device::clock& clock, device::duration length) : clock_(clock), length_(length) {}

  bool valid() const noexcept { return clock_.now() < until_; }
  // Valid, and not lapsed since the ownership records were last read: a
  // lease renewed after it lapsed (a thawed controller's first beat) does
  // not say the pools are still this controller's; the gates wait for
  // confirm().
  bool usable() const noexcept { return valid() && !lapsed_; }
  // Fenced: the lease was taken (the first beat renewed it) and is not
  // usable now. Before the first beat, and after end(), nothing is held:
  // a controller without a lease yet (start-up) or any more (its stop).
  bool fenced() const noexcept { return until_ != device::time_point{} && !usable(); }
  device::time_point until() const noexcept { return until_; }
  device::duration length() const noexcept { return length_; }
  // A heartbeat that started at `beat_started` reached the drives.
  void renew(device::time_point beat_started) noexcept {
    if (until_ != device::time_point{} && !valid()) lapsed_ = true;
    until_ = std::max(until_, beat_started + length_);
  }
  // The ownership records were read while the lease was valid again.
  void confirm() noexcept { lapsed_ = false; }
  // Gives it up (stepping down, stopping): valid() is false from now on, until renewed.
  void end() noexcept {
    until_ = device::time_point{};
    lapsed_ = false;
  }

 private:
  device::clock& clock_;
  const device::duration length_;
  device::time_point until_{};
  bool lapsed_ = false;
};

}  // namespace strata::controller
