// Heat over time, for the diagnostics tools (a heat map of the pool across
// hours and days): every interval the pool snapshots its hottest extents
// into the store's heat_history column family, and keeps the newest ones.
//
// Bounded twice: a snapshot holds at most extents_per_snapshot extents
// (with the pool's total heat beside them), and at most `keep` snapshots
// are kept, so the history never outgrows keep x extents_per_snapshot x
// ~50 bytes (50 MB with the defaults), whatever the pool's size. Written
// unsynced, like heat itself: a crash may lose the last snapshot.
//
// Snapshots are numbered; a new one deletes the oldest beyond `keep` in the
// same batch, so the kept ones are always a run of consecutive numbers.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <string>
#include <vector>

#include "raid/device/clock.h"
#include "raid/device/status.h"
#include "tiering/heat.h"
#include "tiering/metadata_store.h"
#include "tiering/records.h"

namespace strata::tiering {

struct heat_history_options {
  device::duration interval = std::chrono::minutes(10);
  std::uint32_t keep = 1008;  // a week of ten-minute snapshots
  std::uint32_t extents_per_snapshot = 1024;
};

struct heat_snapshot {
  std::uint64_t sequence = 0;
  std::int64_t taken_unix_seconds = 0;
  std::uint64_t extents_tracked = 0;  // mapped extents when it was taken
  extent_heat total;                  // their heat summed
  struct hot_extent {
    std::uint32_t volume_id = 0;
    std::uint64_t volume_extent = 0;
    tier where = tier::capacity;  // where it lived when it was taken
    extent_heat heat;
    double score = 0;  // heat_map::score: what the migrator ranked it by
  };
  std::vector<hot_extent> hottest;  // hottest first
};

// Collects one snapshot: offer() every mapped extent, then finish().
class heat_snapshot_builder {
 public:
  explicit heat_snapshot_builder(std::uint32_t extents_per_snapshot)
      : limit_(extents_per_snapshot) {}
  void offer(const heat_snapshot::hot_extent& e);
  heat_snapshot finish(std::int64_t taken_unix_seconds);

 private:
  std::uint32_t limit_;
  std::uint64_t tracked_ = 0;
  extent_heat total_;
  std::vector<heat_snapshot::hot_extent> heap_;  // a min-heap by score: the coolest kept is on top
};

class heat_history {
 public:
  // Finds the snapshots kept in `store`. Blocking: at the pool's open. A
  // clear error for options that keep nothing; a history whose keys are
  // damaged is dropped (it is advisory, like heat).
  static std::expected<heat_history, error> open(metadata_store& store,
                                                 const heat_history_options& options);

  const heat_history_options& options() const noexcept { return options_; }
  // Numbers `snap` and returns the batch that writes it and deletes the
  // snapshots that fall beyond `keep`.
  metadata_batch record(heat_snapshot& snap);
  // Snapshots kept, once the batches record() returned are applied.
  std::uint64_t kept() const noexcept { return next_ - first_; }

  // Every snapshot in `store`, oldest first. Blocking, and safe on any
  // thread: for the diagnostics, off the pool's loop.
  static std::expected<std::vector<heat_snapshot>, error> read(const metadata_store& store);

 private:
  explicit heat_history(const heat_history_options& options) : options_(options) {}
  heat_history_options options_;
  std::uint64_t first_ = 0;  // the oldest snapshot kept
  std::uint64_t next_ = 0;   // the number the next one gets
};

}  // namespace strata::tiering
