// A group's watch over its members' I/O: a member that leaves a request
// unanswered for longer than the timeout is overdue, and the group fails it
// out (as a drive's own error-recovery limit, TLER/ERC, would end a
// stuck command -- but a hung drive or link never answers at all).
//
// Every watched I/O is in one list in submission order. With one timeout
// for all, that is also deadline order, so starting and stopping a watch
// is O(1) and one timer, armed for the oldest, covers them all.
//
// An overdue I/O cannot be taken back from its device: the device may
// still use its buffers. If they are the group's, the group abandons the
// I/O (goes on as if it had failed with timed_out) and frees them only
// when the device answers at last. If they are the caller's (a RAID-1
// read or write, a RAID-6 full-stripe write), it cannot: the caller
// would reuse them. Then only the member is failed out, so no new I/O
// waits for it, and that one I/O waits for the device's own error
// handling (the kernel's SCSI command timeout).
//
// Threads: the group's loop.
#pragma once

#include <functional>
#include <memory>

#include "raid/device/block_device.h"
#include "raid/device/clock.h"

namespace strata::raid {

// One I/O under watch; embedded in the group's per-I/O state.
struct watched_io {
  watched_io* prev = nullptr;
  watched_io* next = nullptr;
  device::time_point deadline{};
  const device::block_device* device = nullptr;
  unsigned member = 0;
  bool linked = false;
  // Overdue: the group went on without it; its answer is awaited only so
  // that its memory can be freed.
  bool abandoned = false;
  // Its buffers are the group's, so it may be abandoned (see above).
  bool abandonable = true;
  // Called when the group abandons the I/O: go on as if it failed.
  void (*expire)(watched_io&) = nullptr;
  void* owner = nullptr;
};

class member_watchdog {
 public:
  // `on_overdue(member, device)` runs when an I/O on that device is overdue;
  // it must end with abandon_all(device). No clock or a zero timeout: no
  // watch at all.
  member_watchdog(device::clock* clock, device::duration timeout, boost::asio::any_io_executor executor,
                  std::function<void(unsigned, const device::block_device*)> on_overdue);

  bool enabled() const noexcept { return timer_ != nullptr; }
  // At submission.
  void start(watched_io& io, unsigned member, const device::block_device* device) noexcept;
  // At its answer (a no-op for an I/O never started or already abandoned).
  void stop(watched_io& io) noexcept;
  // Takes every watched I/O on `device` out of the watch; marks each one
  // that is abandonable abandoned and calls its expire(), oldest first.
  void abandon_all(const device::block_device* device);

 private:
  void on_timer();
  void unlink(watched_io& io) noexcept;

  device::clock* clock_;
  device::duration timeout_;
  std::function<void(unsigned, const device::block_device*)> on_overdue_;
  std::unique_ptr<device::timer> timer_;
  watched_io* head_ = nullptr;
  watched_io* tail_ = nullptr;
  bool armed_ = false;
};

}  // namespace strata::raid
