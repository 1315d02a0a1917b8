// 512e: 512-byte logical blocks over a device of 4096-byte blocks, the way
// a disk with 4 KiB sectors presents 512-byte ones ("512 emulation").
//
// Why: qemu and many initiators want 512-byte sectors, while Strata's RAID
// groups (and so its thin volumes) work in 4096-byte blocks. The volume
// keeps its 4 KiB blocks; this decorator sits between it and the LUN.
//
// What it does with a request of 512-byte blocks [lba, lba + block_count):
// - Whole 4 KiB blocks whose buffer segments are 4 KiB-aligned and whole
//   4 KiB long go straight through (the case for aligned I/O, which the
//   SCSI layer asks initiators for through LOGICAL BLOCKS PER PHYSICAL
//   BLOCK EXPONENT 3 and 8-block granularities).
// - A read otherwise reads the 4 KiB blocks that cover it into a bounce
//   buffer and copies out the part asked for.
// - A write otherwise is a read-modify-write: the partial 4 KiB blocks at
//   its head and tail are read into a bounce buffer, the caller's data is
//   copied over them, and the whole covered range is written from it.
// - A discard deallocates the whole 4 KiB blocks inside it and writes
//   zeros over the 512-byte blocks of partial ones (read-modify-write), so
//   that the whole range reads as zeros, as block_device.h promises (the
//   tiering volume treats discard and write-zeroes as one request).
//
// Concurrency: a read-modify-write reads a 4 KiB block and writes it back
// later; a write to that block in between would be lost. So every request
// that changes the medium holds a range lock on the 4 KiB blocks it
// covers, and one that does a read-modify-write excludes every other
// such request overlapping it, from its read to its write: overlapping
// ones wait and start in arrival order. Plain whole-block writes never
// wait for each other (block_device.h lets overlapping requests in flight
// run in any order), and reads never wait: while no read-modify-write is
// running or waiting, a write pays one counter test for the lock.
//
// Memory: per-request state lives in slots that grow to the peak number of
// requests in flight and stay (as slot_pool does); a slot's bounce buffer
// grows to the largest unaligned request it has carried and stays. Waiting
// requests are linked through their slots. A steady load allocates nothing.
//
// Threads, ownership, lifetime: as block_device. The inner device outlives
// this one. The geometry follows the inner device's block count (a thin
// volume grows); the inner device must have 4096-byte blocks.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/device/request_queue.h"
#include "raid/device/wait_queue.h"

namespace strata::device {

class emulated_512e final : public block_device {
 public:
  static constexpr std::uint32_t logical_block_bytes = 512;
  static constexpr std::uint32_t physical_block_bytes = 4096;
  static constexpr std::uint64_t blocks_per_physical = physical_block_bytes / logical_block_bytes;

  // REQUIRES: inner.geometry().logical_block_size_bytes == 4096.
  explicit emulated_512e(block_device& inner);
  ~emulated_512e() override;
  emulated_512e(const emulated_512e&) = delete;
  emulated_512e& operator=(const emulated_512e&) = delete;

  // 512-byte blocks, eight per inner block. Buffers need only 512-byte
  // alignment: anything not aligned for the inner device is bounced.
  const block_geometry& geometry() const noexcept override;
  boost::asio::any_io_executor executor() const noexcept override { return inner_.executor(); }
  void submit(request& req) noexcept override;
  // The inner device's answer, in 512-byte blocks.
  allocation_run allocation_at(std::uint64_t lba, std::uint64_t max_blocks) const noexcept override;

  block_device& inner() const noexcept { return inner_; }
  // Requests that needed a read-modify-write, for tests and metrics.
  std::uint64_t read_modify_writes() const noexcept { return read_modify_writes_; }

 private:
  struct slot;
  // fetching: reading the 4 KiB blocks a request covers only in part (or,
  // for a bounced read, all of them); transferring: the request itself.
  enum class phase : std::uint8_t { fetching, transferring };

  slot& acquire();
  void release(slot& s) noexcept;
  void start(slot& s) noexcept;  // through the range lock
  void run(slot& s) noexcept;
  bool blocked(const slot& s) const noexcept;
  void issue_fetch(slot& s) noexcept;
  void issue_transfer(slot& s) noexcept;
  void issue_inner(slot& s, op operation, std::uint64_t physical_lba, std::uint64_t physical_blocks,
                   std::byte* data) noexcept;
  void on_inner_done(request& inner) noexcept;
  void phase_done(slot& s) noexcept;
  void finish(slot& s) noexcept;

  block_device& inner_;
  mutable block_geometry geometry_;
  completion_queue rejected_;
  std::vector<std::unique_ptr<slot>> slots_;  // never move: inner requests point into them
  std::vector<slot*> free_;
  // The range lock: requests that do a read-modify-write, running or waiting.
  std::size_t rmw_holders_ = 0;
  wait_queue<slot> waiting_;
  std::uint64_t read_modify_writes_ = 0;
};

}  // namespace strata::device
