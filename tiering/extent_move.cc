#include "tiering/extent_move.h"

#include <algorithm>
#include <bit>

#include "raid/device/invariant.h"
#include "tiering/pool.h"
#include "tiering/volume.h"

namespace strata::tiering {

using device::op;
using device::request;

extent_move::extent_move(volume& vol, std::uint64_t volume_extent, extent_location from,
                         extent_location to, std::function<void(std::error_code)> done)
    : vol_(vol),
      pool_(vol.pool_),
      extent_(volume_extent),
      from_(from),
      to_(to),
      granules_(std::min<std::uint64_t>(64, vol.extent_blocks_)),
      granule_blocks_(vol.extent_blocks_ / granules_),
      buffer_(vol.pool_.extent_size_bytes()),
      done_(std::move(done)) {
  dirty_ = granules_ == 64 ? ~0ull : (1ull << granules_) - 1;
}

void extent_move::start() {
  next_pass();
}

void extent_move::write_landed(std::uint64_t first_block, std::uint64_t block_count) noexcept {
  STRATA_INVARIANT(block_count > 0 && first_block + block_count <= vol_.extent_blocks_);
  const std::uint64_t first = first_block / granule_blocks_;
  const std::uint64_t last = (first_block + block_count - 1) / granule_blocks_;
  for (std::uint64_t g = first; g <= last; ++g) dirty_ |= 1ull << g;
}

void extent_move::writes_drained() {
  if (!draining_) return;
  draining_ = false;
  next_pass();
}

void extent_move::next_pass() {
  if (final_pass_) {
    // Nothing new reaches the extent and every write on it has completed,
    // marking what it touched: copy that, then commit.
    STRATA_INVARIANT(vol_.writes_in_flight(extent_) == 0);
    if (dirty_ == 0) return commit();
  } else if (dirty_ == 0 || passes_ >= 2) {
    // Two passes while writes go on; for the last, hold new requests back
    // and let the writes in flight drain (the last one resumes here).
    final_pass_ = true;
    vol_.hold_requests(extent_);
    if (vol_.writes_in_flight(extent_) > 0) {
      draining_ = true;
      return;
    }
    return next_pass();
  }
  ++passes_;
  copying_ = dirty_;
  dirty_ = 0;  // writes completing from now on mark their granules again
  copy_next_run();
}

void extent_move::copy_next_run() {
  if (copying_ == 0) {
    if (copy_failed_) return end(make_error_code(errc::io_error));
    return next_pass();
  }
  // The next run of granules: read it from the old place, then write it to
  // the new one.
  const auto first = static_cast<std::uint64_t>(std::countr_zero(copying_));
  std::uint64_t count = 0;
  while (first + count < granules_ && ((copying_ >> (first + count)) & 1)) {
    copying_ &= ~(1ull << (first + count));
    ++count;
  }
  const std::uint32_t block_size = vol_.geometry().logical_block_size_bytes;
  const std::uint64_t blocks = count * granule_blocks_;
  run_first_ = first;
  segment_ = {buffer_.data(), blocks * block_size};
  req_ = request{};
  req_.operation = op::read;
  req_.priority = io_priority();
  req_.lba = vol_.group_lba(from_, first * granule_blocks_);
  req_.block_count = blocks * vol_.group_blocks_per_block_;
  req_.buffers = {&segment_, 1};
  req_.context = this;
  req_.on_complete = &extent_move::on_copy_read;
  pool_.group(from_.group).submit(req_);
}

void extent_move::on_copy_read(request& r) noexcept {
  extent_move& m = *static_cast<extent_move*>(r.context);
  if (r.result) {
    m.group_error(m.from_.group, r.result);
    return m.copy_next_run();
  }
  const std::uint64_t blocks_read = r.block_count;
  m.req_ = request{};
  m.req_.operation = op::write;
  m.req_.priority = m.io_priority();
  m.req_.lba = m.vol_.group_lba(m.to_, m.run_first_ * m.granule_blocks_);
  m.req_.block_count = blocks_read;
  m.req_.buffers = {&m.segment_, 1};
  m.req_.context = &m;
  m.req_.on_complete = &extent_move::on_copy_write;
  m.pool_.group(m.to_.group).submit(m.req_);
}

void extent_move::on_copy_write(request& r) noexcept {
  extent_move& m = *static_cast<extent_move*>(r.context);
  if (r.result) m.group_error(m.to_.group, r.result);
  m.copy_next_run();
}

void extent_move::group_error(std::uint16_t group, std::error_code ec) {
  vol_.note_group_result(group, ec);
  copy_failed_ = true;
  copying_ = 0;
}

void extent_move::commit() {
  // The copy may sit in the destination disks' write caches: flush them
  // first, or a power cut after the commit would leave the mapping naming
  // data that never reached the disk.
  req_ = request{};
  req_.operation = op::flush;
  req_.priority = io_priority();
  req_.context = this;
  req_.on_complete = [](request& r) noexcept {
    extent_move& m = *static_cast<extent_move*>(r.context);
    m.vol_.note_group_result(m.to_.group, r.result);
    if (r.result) return m.end(r.result);
    m.write_mapping();
  };
  pool_.group(to_.group).submit(req_);
}

void extent_move::write_mapping() {
  metadata_batch batch;
  batch.put(column::extent_map, keys::extent(vol_.record().id, extent_), encode(to_));
  pool_.store().write(std::move(batch), true, [this](std::error_code ec) {
    if (!ec) {
      vol_.move_committed(extent_, from_, to_);
    } else {
      // The record may be on disk after all: keep the copy, and do not hand
      // its extent out again. The pool takes no more writes now, and the
      // requests this move held fail instead of going to the old place.
      keep_destination_ = true;
    }
    end(ec);
  });
}

void extent_move::end(std::error_code result) {
  if (result && !keep_destination_) pool_.free_after_io(to_);  // the old mapping stands
  auto done = std::move(done_);
  vol_.move_ended(extent_);  // destroys this move
  done(result);
}

}  // namespace strata::tiering
