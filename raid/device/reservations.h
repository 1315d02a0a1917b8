// Persistent reservations on a shared drive (SPC-4 5.13, NVMe's
// Reservations), the fence of clustered storage: each host that may write
// registers a key with the drive; one holds a Write Exclusive, Registrants
// Only reservation, under which only registered hosts may write (anyone
// may read); a host that takes over from a dead or frozen one removes the
// other's key (PREEMPT AND ABORT), and from then on the drive itself
// refuses that host's writes, even those it had queued before it froze.
// Pacemaker's fence_scsi and ZFS HA fence this way.
//
// Two kinds:
// - block_reservations: a real block device, through Linux's block-layer
//   ioctls (linux/pr.h), which the SCSI and NVMe drivers turn into
//   PERSISTENT RESERVE OUT and Reservation Register/Acquire. The drive
//   checks each command as it executes it, and aborts the preempted
//   host's commands in its task set.
// - file_reservations: a simulated drive (a file), which the kernel does
//   not fence: the same state in a small file beside the drive's, mapped
//   shared by every process that opens the drive (docs/reservations.md).
//   The drive's file device asks admits_write() as it hands each write to
//   the kernel (file_device.h), the place where a real drive would check.
//   Unlike a real drive it cannot abort what the other process already
//   handed to the kernel (io_uring's workers finish it), nor check and
//   write in one step: the lease and the takeover's wait cover those
//   (controller/lease.h).
//
// A request a reservation refused completes with errc::reservation_conflict
// (the kernel's EBADE).
//
// Threads: any; every call is one ioctl or a few atomic operations on the
// shared mapping, and never waits on the other host. The ioctls block for
// as long as the drive takes to answer: not on a loop that must stay live.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <system_error>

#include "raid/device/status.h"

namespace strata::device {

class reservations {
 public:
  virtual ~reservations() = default;
  // Registers `key` for this host (REGISTER AND IGNORE EXISTING KEY):
  // idempotent. Key 0 is not a key.
  virtual std::error_code register_key(std::uint64_t key) = 0;
  // Takes the Write Exclusive, Registrants Only reservation with `key`
  // (registered). Success if `key` holds it already; reservation_conflict
  // if another key does (under this type every registrant writes anyway).
  virtual std::error_code reserve(std::uint64_t key) = 0;
  // PREEMPT AND ABORT: removes `victim`'s registration (its reservation
  // passes to `key`, which must be registered), and aborts its commands.
  // Success, too, if `victim` is not registered (preempted already).
  virtual std::error_code preempt(std::uint64_t key, std::uint64_t victim) = 0;
  // What the drive says, for people: "block (SCSI/NVMe)" or "file".
  virtual const char* kind() const noexcept = 0;
};

// Linux's persistent-reservation ioctls on the block device at `path`.
// not_supported if its driver has none (a loop device, a partition of
// some drivers); the caller then fences by its lease alone.
std::expected<std::unique_ptr<reservations>, error> block_reservations(const std::string& path);

// The simulated drive's reservations, kept in the file `path` (created,
// zeroed, if missing; docs/reservations.md): what every process that opens
// it sees at once.
class file_reservations final : public reservations {
 public:
  static std::expected<std::unique_ptr<file_reservations>, error> open(
      const std::filesystem::path& path);
  ~file_reservations() override;
  file_reservations(const file_reservations&) = delete;
  file_reservations& operator=(const file_reservations&) = delete;

  std::error_code register_key(std::uint64_t key) override;
  std::error_code reserve(std::uint64_t key) override;
  std::error_code preempt(std::uint64_t key, std::uint64_t victim) override;
  const char* kind() const noexcept override { return "file"; }

  // May the host registered as `key` write now? Yes with no reservation,
  // or with `key` registered. Two loads of the shared mapping: the drive's
  // dispatch check, on every write.
  bool admits_write(std::uint64_t key) const noexcept;
  bool registered(std::uint64_t key) const noexcept;
  std::uint64_t holder() const noexcept;
  // Bumped by every change (SPC's PRgeneration).
  std::uint64_t generation() const noexcept;

 private:
  struct layout;
  explicit file_reservations(layout* mapped) : mapped_(mapped) {}
  void changed() noexcept;
  layout* mapped_;
};

// A controller's reservation key: the array's id (its first 7 bytes) and
// the controller's name (the last byte), so that the two controllers of
// one array never share a key and another array's never match.
std::uint64_t reservation_key(std::span<const std::uint8_t> array_id, char controller) noexcept;

}  // namespace strata::device
