// How hot each extent of a volume is: decayed counts of random reads and
// writes, and of their bytes, per volume extent, in memory on the data path.
//
// Decay is exponential with a configurable half-life, applied lazily: an
// entry holds its values as of its last update, and anything that reads it
// decays it to now first. So recording costs one exp2 and four
// multiply-adds, and an idle extent costs nothing.
//
// Sequential streams do not heat: a request that continues a stream (it
// starts where a recent request of the volume ended) is counted only once
// the stream is shorter than sequential_threshold_bytes. A backup or a
// table scan reads every extent once, in order; promoting what it touched
// would evict the working set for data nobody reads twice.
//
// Heat is advisory (ARCHITECTURE.md): it is persisted in batches, without
// sync, and what a crash loses is relearned. Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/device/clock.h"

namespace strata::tiering {

struct heat_options {
  device::duration half_life = std::chrono::hours(1);
  // A stream is sequential once it has run this far.
  std::uint64_t sequential_threshold_bytes = 1 << 20;
  // Streams remembered per volume (interleaved scans each keep their own).
  unsigned streams_tracked = 16;
  // The pool's age (records.h keys::pool_age) when the clock read zero:
  // last I/O times are kept in pool age, which survives restarts.
  std::int64_t age_at_clock_zero_seconds = 0;
};

// One extent's heat, decayed to some moment, and when it last had a
// counted (random) I/O.
struct extent_heat {
  float read_ios = 0;
  float write_ios = 0;
  float read_bytes = 0;
  float write_bytes = 0;
  // In pool age seconds (heat_options::age_at_clock_zero_seconds). Zero
  // for an extent never counted: idle since the pool began.
  std::uint32_t last_io_age_seconds = 0;
};

class heat_map {
 public:
  heat_map(std::uint64_t extent_count, std::uint64_t extent_blocks, std::uint32_t block_size_bytes,
           const heat_options& options, device::clock& clock);

  // Counts a read or write of [lba, lba + block_count) of the volume, split
  // over the extents it touches (one I/O for each). Returns whether it was
  // part of a sequential stream, and so not counted.
  bool record(device::op operation, std::uint64_t lba, std::uint64_t block_count);

  // The extent's heat decayed to now.
  extent_heat heat(std::uint64_t extent) const noexcept;
  // What the migrator ranks by: random I/Os per half-life, reads and writes
  // alike, since either costs an HDD a seek.
  double score(std::uint64_t extent) const noexcept;
  static double score(const extent_heat& h) noexcept {
    return static_cast<double>(h.read_ios) + static_cast<double>(h.write_ios);
  }
  // Seconds of pool age since the extent's last counted I/O: what the
  // cold tier's cooling measures. Sequential I/O does not count, as it
  // does not heat (a backup does not keep data out of the cold tier).
  std::uint64_t idle_seconds(std::uint64_t extent) const noexcept;
  // The pool's age now, and at any moment of `clock` for a pool whose age
  // at the clock's zero is that.
  std::uint64_t age_seconds() const noexcept;
  static std::uint64_t age_at(const device::clock& clock,
                              std::int64_t age_at_clock_zero_seconds) noexcept;
  // Forgets an extent's heat (it was discarded).
  void clear(std::uint64_t extent) noexcept;

  std::uint64_t extent_count() const noexcept { return entries_.size(); }
  // The volume grew to `extent_count` extents: the new ones start cold.
  // REQUIRES: extent_count >= extent_count() (volumes only grow).
  void grow(std::uint64_t extent_count) { entries_.resize(extent_count); }
  // Memory per tracked extent, in bytes: what sizing a pool multiplies.
  static constexpr std::size_t bytes_per_extent() noexcept { return sizeof(entry); }

  // Persistence: the extents changed since the last call, each with its
  // heat decayed to now; they are clean afterwards.
  void take_dirty(const std::function<void(std::uint64_t extent, const extent_heat&)>& fn);
  // A persisted value, taken as of now (time spent down does not decay it).
  void load(std::uint64_t extent, const extent_heat& h) noexcept;

  static std::string encode(const extent_heat& h);
  static std::optional<extent_heat> decode(std::string_view value);

 private:
  struct entry {
    extent_heat values;
    // Seconds of the clock at the last update, with the top bit as "dirty".
    std::uint32_t stamp = 0;
  };
  static constexpr std::uint32_t dirty_bit = 1u << 31;
  struct stream {
    std::uint64_t next_lba = 0;  // where it continues
    std::uint64_t run_bytes = 0;
    std::uint64_t last_used = 0;  // for replacing the least recent
  };

  std::uint32_t now_seconds() const noexcept;
  double decay_factor(std::uint32_t from_seconds, std::uint32_t to_seconds) const noexcept;
  void decay_to(entry& e, std::uint32_t now) const noexcept;
  bool sequential(std::uint64_t lba, std::uint64_t block_count);

  std::vector<entry> entries_;
  std::vector<std::uint64_t> dirty_;  // extents with the dirty bit set
  std::vector<stream> streams_;
  std::uint64_t stream_clock_ = 0;
  std::uint64_t extent_blocks_;
  std::uint32_t block_size_bytes_;
  heat_options options_;
  double half_life_seconds_;
  device::clock& clock_;
};

}  // namespace strata::tiering
