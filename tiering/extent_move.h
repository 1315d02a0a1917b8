// One extent of a thin volume moving to another tier (volume::move_extent):
// the copy, the dirty tracking that keeps host writes from being lost while
// it runs, and the commit. The whole protocol is here; the volume only
// tells the move when a write to its extent lands.
//
// The protocol (docs/tiering-keys.md, "Moving an extent"):
//   1. The destination is allocated; the read cache's lines of the extent
//      are dropped and held (none is filled until the move ends).
//   2. Copy passes run while host writes go on: each copies the granules
//      (1/64 of the extent) marked dirty, reading the old place and writing
//      the new one. Every granule starts dirty.
//   3. A granule is marked dirty when a write to it COMPLETES, whether the
//      write began before the move or during it: a write's data may reach
//      the old place at any moment until then (a RAID-1 member, a disk that
//      reorders its queue, a write waiting for the read cache's index
//      delete), so a copy pass whose read began before the completion may
//      have missed it. Marks made while a pass runs are kept for the next.
//      (Marking at dispatch and consuming the mark when a pass starts lost
//      writes that landed after the pass re-read their granule.)
//   4. After at most two passes, new requests to the extent are held (a
//      transition of the volume's) and the writes in flight on it, counted
//      by the volume since they were dispatched, drain. Every write the
//      commit will cover has then completed and marked its granules; the
//      last pass copies them.
//   5. The destination is flushed, then the new mapping is written, synced.
//      Only then is the old extent freed (quarantined until the I/O in
//      flight drains). A crash before the commit leaves the old mapping, one
//      after it the new: never a mix.
//   6. A failed copy keeps the old mapping and frees the destination. A
//      failed commit leaves its outcome unknown: the destination is kept
//      (the record may be on disk) and the pool takes no more writes.
//
// Loop thread only, like the volume that owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <system_error>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "tiering/records.h"

namespace strata::tiering {

class pool;
class volume;

class extent_move {
 public:
  // A move of `vol`'s extent `volume_extent` from `from` (its mapping) to
  // `to` (allocated for it). `done` gets the outcome, from the loop.
  extent_move(volume& vol, std::uint64_t volume_extent, extent_location from, extent_location to,
              std::function<void(std::error_code)> done);
  extent_move(const extent_move&) = delete;
  extent_move& operator=(const extent_move&) = delete;

  void start();

  // A write to the extent (dispatched before or during the move) completed,
  // with any outcome (a failed write may have landed in part): the granules
  // of [first_block, +block_count), in volume blocks within the extent, are
  // copied again.
  void write_landed(std::uint64_t first_block, std::uint64_t block_count) noexcept;
  // The last write in flight on the extent completed.
  void writes_drained();
  // Requests held by the last pass (final_pass) go on when the move ends.
  bool holds_requests() const noexcept { return final_pass_; }

  extent_location from() const noexcept { return from_; }
  extent_location to() const noexcept { return to_; }
  unsigned passes() const noexcept { return passes_; }

 private:
  void next_pass();
  void copy_next_run();
  static void on_copy_read(device::request& r) noexcept;
  static void on_copy_write(device::request& r) noexcept;
  void commit();
  void write_mapping();
  void end(std::error_code result);
  void group_error(std::uint16_t group, std::error_code ec);
  // Background while host I/O goes on; foreground once the final pass holds
  // the hosts' requests to the extent, which then wait on the copy and the
  // commit's flush (io_scheduler.h).
  device::io_class io_priority() const noexcept {
    return final_pass_ ? device::io_class::foreground : device::io_class::background;
  }

  volume& vol_;
  pool& pool_;
  const std::uint64_t extent_;
  const extent_location from_;
  const extent_location to_;
  const std::uint64_t granules_;        // per extent, at most 64
  const std::uint64_t granule_blocks_;  // volume blocks per granule
  std::uint64_t dirty_ = 0;             // granules written since they were last copied
  std::uint64_t copying_ = 0;           // granules the pass in flight still has to copy
  unsigned passes_ = 0;
  bool final_pass_ = false;  // new requests are held, in-flight writes drain
  bool draining_ = false;    // the final pass waits for writes_drained()
  bool copy_failed_ = false;
  bool keep_destination_ = false;  // the commit's outcome is unknown
  std::uint64_t run_first_ = 0;    // the first granule of the copy run in flight
  device::aligned_buffer buffer_;
  iovec segment_{};
  device::request req_;
  std::function<void(std::error_code)> done_;
};

}  // namespace strata::tiering
