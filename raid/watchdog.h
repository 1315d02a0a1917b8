// A group's watch over its members' I/O: a member that leaves a request
// unanswered for longer than the timeout is overdue, and the group fails it
// out (as a drive's own error-recovery limit, TLER/ERC, would end a
// stuck command -- but a hung drive or link never answers at all).
//
// Every watched I/O is in one list in deadline order. With one timeout
// for all, a new I/O's deadline is the latest, so starting and stopping a
// watch is O(1) and one timer, armed for the oldest, covers them all.
//
// The timeout is the drive's, not the queue's: an I/O the member's
// io_scheduler still holds behind the hosts' (background work on a busy
// drive, which may wait far longer than any timeout) is not overdue, and
// one it sent late is timed from its sending (block_device::holds,
// request::dispatched_at). Those re-enter the list in order, walking back
// from its tail: a rare path, taken only at a deadline.
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
  // The I/O itself, if the caller gave it: while `device` still holds it
  // back (block_device::holds: a background request behind the hosts'),
  // its deadline passing means nothing, and it is watched anew from then;
  // once sent (request::dispatched_at), it is timed from its sending.
  const device::request* request = nullptr;
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
  member_watchdog(device::clock* clock, device::duration timeout,
                  boost::asio::any_io_executor executor,
                  std::function<void(unsigned, const device::block_device*)> on_overdue);

  bool enabled() const noexcept { return timer_ != nullptr; }
  // At submission. `req`: the I/O submitted, when the device may hold it
  // back (see watched_io::request).
  void start(watched_io& io, unsigned member, const device::block_device* device,
             const device::request* req = nullptr) noexcept;
  // At its answer (a no-op for an I/O never started or already abandoned).
  void stop(watched_io& io) noexcept;
  // Takes every watched I/O on `device` out of the watch; marks each one
  // that is abandonable abandoned and calls its expire(), oldest first.
  void abandon_all(const device::block_device* device);

 private:
  void on_timer();
  void link_last(watched_io& io) noexcept;  // due at now + timeout, the latest deadline
  void link_at(watched_io& io, device::time_point deadline) noexcept;  // in deadline order
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
