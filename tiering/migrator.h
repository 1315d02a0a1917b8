// The migrator: decides, continuously, which extents live on the
// performance tier, and moves them there and back with volume::move_extent.
//
// Every `interval` it ranks the pool's mapped extents by heat score
// (heat_map::score: random I/Os per half-life) and plans moves:
//   - extents of `archive` volumes on the performance tier are demoted;
//   - while the performance tier's free extents are below the pool's
//     reserve, the coldest residents are demoted;
//   - the hottest capacity-tier extents of `auto` and `performance`
//     volumes are promoted while there is room above the reserve; past
//     that, one is promoted in place of the coldest resident only if it is
//     hotter by the `hysteresis` factor (so two extents of near-equal heat
//     never trade places back and forth) and has at least
//     `promote_min_score`. `performance` volumes' extents rank above every
//     `auto` extent, and are demoted for nothing but the reserve.
// With a cold tier (a Ceph RBD image), it also plans, on the capacity tier
// and the cold tier:
//   - extents without a counted I/O for `cold_cooling` (of pool age: time
//     down does not count) go to the cold tier, the longest idle first,
//     from the capacity tier and from the performance tier alike;
//     sooner, while the capacity tier's free extents are below
//     `capacity_low_water` of it (the cold tier is what lets a pool hold
//     more than its enclosure). `local` and `performance` volumes never go
//     there, and a cooling of zero sends nothing;
//   - cold extents that heat up (`promote_min_score`), and those of
//     volumes since pinned off it, come back to the capacity tier, while
//     it has room above its low water (the hot ones go on to the
//     performance tier by the rules above, in a later round).
// The plan is carried out a few moves at a time, most urgent first: cold
// demotions the capacity tier needs, performance demotions (they make the
// room), cold promotions, performance promotions, and last the demotions
// of extents that merely cooled; within a copy-rate limit, and paced by foreground
// latency: when the mean foreground latency of an interval exceeds its
// baseline (the mean of intervals without moves) by more than
// `latency_budget`, the number of moves in flight halves; otherwise it
// grows by one, up to `max_moves_in_flight` (additive increase,
// multiplicative decrease, as TCP paces a link it shares).
//
// A plan names volumes by pointer and was made with their affinities: once
// a volume is deleted or its placement changes (pool::volume_changes), the
// rest of the plan is dropped unstarted, and the next round makes a new
// one. Moves in flight are safe: the pool deletes only idle volumes.
//
// Loop thread only. The pool must outlive the migrator; stop() (or the
// destructor) cancels the timer, and moves in flight finish on their own.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "raid/device/clock.h"
#include "tiering/records.h"

namespace strata::tiering {

class pool;
class volume;

// The longest cooling a pool may be given: 100 years (a duration in
// nanoseconds holds 292).
inline constexpr std::uint64_t max_cold_cooling_seconds = 100ULL * 365 * 24 * 3600;

struct migrator_options {
  device::duration interval = std::chrono::seconds(1);
  unsigned max_moves_in_flight = 4;
  // Copy traffic cap, in bytes per second of moved extents.
  double max_bytes_per_second = 200e6;
  // How far migration may push the mean foreground latency over its baseline.
  device::duration latency_budget = std::chrono::milliseconds(2);
  // An extent colder than this (random I/Os per half-life) is never promoted.
  double promote_min_score = 4.0;
  // A promotion in place of a resident needs this many times its score.
  double hysteresis = 1.5;
  // How long an extent goes without a counted I/O before it moves to the
  // cold tier; zero: nothing moves there. 31 days: FabricPool's `auto`
  // default, and a month, so that monthly work (month-end batches and
  // reports) does not send its data out and back every month.
  device::duration cold_cooling = std::chrono::hours(24 * 31);
  // Below this share of free extents on the capacity tier, its longest
  // idle extents go to the cold tier before their cooling is over.
  double capacity_low_water = 0.10;
};

struct migrator_counters {
  std::uint64_t rounds = 0;
  std::uint64_t promotions = 0;       // completed moves to the performance tier
  std::uint64_t demotions = 0;        // ... from the performance tier to the capacity tier
  std::uint64_t cold_demotions = 0;   // ... from the capacity tier to the cold tier
  std::uint64_t cold_promotions = 0;  // ... from the cold tier to the capacity tier
  std::uint64_t bytes_moved = 0;
  std::uint64_t failed_moves = 0;      // includes moves refused because the plan went stale
  std::uint64_t throttled_rounds = 0;  // rounds whose latency was over budget
};

class migrator {
 public:
  migrator(pool& p, const migrator_options& options);
  ~migrator();
  migrator(const migrator&) = delete;
  migrator& operator=(const migrator&) = delete;

  // Ranks and moves every interval from now on.
  void start();
  void stop() noexcept;
  // One ranking and plan, now (the timer does this by itself).
  void run_round();

  // From the next round on; the plan made with the old cooling is dropped.
  void set_cold_cooling(device::duration cooling) noexcept;
  device::duration cold_cooling() const noexcept { return options_.cold_cooling; }

  const migrator_counters& counters() const noexcept { return counters_; }
  unsigned moves_in_flight() const noexcept { return in_flight_; }
  unsigned allowed_in_flight() const noexcept { return allowed_; }
  std::size_t planned() const noexcept { return plan_.size(); }

 private:
  struct planned_move {
    volume* vol;
    std::uint64_t extent;
    tier from;
    tier to;
  };
  void pace();
  void plan();
  // The cold tier's part of the plan: what the capacity tier must shed
  // now, what comes back, and what merely cooled.
  void plan_cold(std::vector<planned_move>& urgent, std::vector<planned_move>& promotions,
                 std::vector<planned_move>& cooled);
  // Whether volume `v`'s extents may live in the cold tier (its affinity).
  static bool may_go_cold(const volume& v) noexcept;
  // Whether the extent has been idle for the cooling time, with a cold
  // tier to go to and an affinity that lets it.
  bool cooled(const volume& v, std::uint64_t extent) const noexcept;
  void start_moves();
  bool rate_allows() noexcept;

  pool& pool_;
  migrator_options options_;
  std::unique_ptr<device::timer> timer_;
  std::deque<planned_move> plan_;
  std::uint64_t planned_at_ = 0;  // pool::volume_changes() when plan_ was made
  unsigned in_flight_ = 0;
  unsigned allowed_;
  bool moved_this_round_ = false;
  double baseline_seconds_ = -1;  // mean foreground latency without moves; < 0: not yet measured
  double rate_tokens_bytes_ = 0;
  device::time_point last_refill_{};
  migrator_counters counters_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // moves outliving the migrator
};

}  // namespace strata::tiering
