#include "tiering/migrator.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "tiering/pool.h"
#include "tiering/volume.h"

namespace strata::tiering {

namespace {

struct ranked {
  bool pinned;  // a `performance` volume's extent
  double score;
  volume* vol;
  std::uint64_t extent;
};

// Whether `hot` (on the capacity tier) should take the place of `resident`.
bool displaces(const ranked& hot, const ranked& resident, double hysteresis) {
  if (hot.pinned != resident.pinned) return hot.pinned;
  return hot.score > hysteresis * resident.score;
}

}  // namespace

migrator::migrator(pool& p, const migrator_options& options)
    : pool_(p), options_(options), allowed_(std::min(1u, options.max_moves_in_flight)) {
  last_refill_ = pool_.clock().now();
}

migrator::~migrator() {
  stop();
  *alive_ = false;
}

void migrator::start() {
  if (!timer_) {
    timer_ = pool_.clock().make_timer(pool_.executor(), [this] {
      run_round();
      timer_->arm(pool_.clock().now() + options_.interval);
    });
  }
  timer_->arm(pool_.clock().now() + options_.interval);
}

void migrator::stop() noexcept {
  if (timer_) timer_->cancel();
  plan_.clear();
}

void migrator::set_cold_cooling(device::duration cooling) noexcept {
  options_.cold_cooling = cooling;
  plan_.clear();  // it may hold extents that cooled by the old measure
}

void migrator::run_round() {
  ++counters_.rounds;
  pace();
  plan();
  start_moves();
}

void migrator::pace() {
  const pool::latency_window window = pool_.take_latency_window();
  const bool moved = moved_this_round_;
  moved_this_round_ = in_flight_ > 0;
  if (window.ios == 0) {
    // No foreground I/O: nothing to protect, and nothing to judge by.
    // Moves go at their cap (an idle array demotes at full speed).
    allowed_ = options_.max_moves_in_flight;
    return;
  }
  const double mean = window.mean_seconds();
  if (!moved) {
    // Foreground alone: what migration is measured against.
    baseline_seconds_ = baseline_seconds_ < 0 ? mean : 0.75 * baseline_seconds_ + 0.25 * mean;
    allowed_ = std::min(options_.max_moves_in_flight, allowed_ + 1);
    return;
  }
  const double budget = std::chrono::duration<double>(options_.latency_budget).count();
  if (baseline_seconds_ >= 0 && mean > baseline_seconds_ + budget) {
    allowed_ /= 2;  // may reach 0: the next round then measures a new baseline
    ++counters_.throttled_rounds;
  } else {
    allowed_ = std::min(options_.max_moves_in_flight, allowed_ + 1);
  }
}

void migrator::plan() {
  plan_.clear();
  planned_at_ = pool_.volume_changes();
  if (pool_.write_refusal()) return;  // moves write
  constexpr double archive_score = -1;
  std::vector<ranked> residents;  // on the performance tier
  std::vector<ranked> outsiders;  // on the capacity tier, promotable
  for (volume* v : pool_.volumes()) {
    if (!v->online()) continue;  // a group it uses is lost: nothing of it moves
    const affinity a = v->record().placement;
    const heat_map& heat = v->heat();
    for (std::uint64_t e = 0; e < v->extent_count(); ++e) {
      const std::optional<extent_location> where = v->location(e);
      if (!where || v->moving(e)) continue;
      const tier on = pool_.tier_of(where->group);
      if (on == tier::cold || (on == tier::performance && cooled(*v, e))) continue;  // plan_cold's
      if (on == tier::performance) {
        residents.push_back({a == affinity::performance,
                             a == affinity::archive ? archive_score : heat.score(e), v, e});
      } else if (a == affinity::performance) {
        outsiders.push_back({true, heat.score(e), v, e});
      } else if (a == affinity::automatic) {
        const double s = heat.score(e);
        if (s >= options_.promote_min_score) outsiders.push_back({false, s, v, e});
      }
    }
  }
  auto colder = [](const ranked& a, const ranked& b) {
    return a.pinned != b.pinned ? b.pinned : a.score < b.score;
  };
  std::sort(residents.begin(), residents.end(), colder);
  std::sort(outsiders.begin(), outsiders.end(),
            [&](const ranked& a, const ranked& b) { return colder(b, a); });

  std::vector<planned_move> demotions, promotions;
  std::uint64_t free = pool_.free_extents(tier::performance);
  const std::uint64_t reserve = pool_.performance_reserve_extents();
  std::size_t r = 0;
  auto demote_next = [&] {
    demotions.push_back({residents[r].vol, residents[r].extent, tier::performance, tier::capacity});
    ++r;
    ++free;
  };
  while (r < residents.size() && (residents[r].score == archive_score || free < reserve))
    demote_next();
  for (const ranked& hot : outsiders) {
    if (free > reserve) {
      promotions.push_back({hot.vol, hot.extent, tier::capacity, tier::performance});
      --free;
    } else if (r < residents.size() && displaces(hot, residents[r], options_.hysteresis)) {
      demote_next();
      promotions.push_back({hot.vol, hot.extent, tier::capacity, tier::performance});
      --free;
    } else {
      break;  // the rest are colder still
    }
  }
  std::vector<planned_move> cold_urgent, cold_promotions, cold_cooled;
  plan_cold(cold_urgent, cold_promotions, cold_cooled);
  for (const auto* part : {&cold_urgent, &demotions, &cold_promotions, &promotions, &cold_cooled}) {
    plan_.insert(plan_.end(), part->begin(), part->end());
  }
}

bool migrator::may_go_cold(const volume& v) noexcept {
  const affinity a = v.record().placement;
  return a == affinity::automatic || a == affinity::archive;
}

bool migrator::cooled(const volume& v, std::uint64_t extent) const noexcept {
  // Hot enough to be promoted is never cooled, however short the cooling
  // (a promoted extent must not go straight back).
  return options_.cold_cooling > device::duration::zero() &&
         pool_.capacity_extents(tier::cold) > 0 && may_go_cold(v) &&
         static_cast<double>(v.heat().idle_seconds(extent)) >=
             std::chrono::duration<double>(options_.cold_cooling).count() &&
         v.heat().score(extent) < options_.promote_min_score;
}

void migrator::plan_cold(std::vector<planned_move>& urgent, std::vector<planned_move>& promotions,
                         std::vector<planned_move>& cooled) {
  if (pool_.capacity_extents(tier::cold) == 0) return;
  struct candidate {
    double key;  // idle seconds (to go), or score (to come back)
    volume* vol;
    std::uint64_t extent;
  };
  std::vector<candidate> idle;     // on the capacity tier, allowed in the cold tier
  std::vector<candidate> resting;  // on the performance tier, cooled: straight to the cold tier
  std::vector<candidate> back;     // on the cold tier, hot enough to come back
  std::vector<candidate> pinned;   // on the cold tier, of volumes kept off it
  for (volume* v : pool_.volumes()) {
    if (!v->online()) continue;
    const bool may_go = may_go_cold(*v);
    const heat_map& heat = v->heat();
    for (std::uint64_t e = 0; e < v->extent_count(); ++e) {
      const std::optional<extent_location> where = v->location(e);
      if (!where || v->moving(e) || !pool_.takes_extents(where->group)) continue;
      const tier on = pool_.tier_of(where->group);
      if (on == tier::performance) {
        if (this->cooled(*v, e))
          resting.push_back({static_cast<double>(heat.idle_seconds(e)), v, e});
      } else if (on == tier::capacity && may_go && heat.score(e) < options_.promote_min_score) {
        idle.push_back({static_cast<double>(heat.idle_seconds(e)), v, e});
      } else if (on == tier::cold && !may_go) {
        pinned.push_back({0, v, e});
      } else if (on == tier::cold) {
        const double score = heat.score(e);
        if (score >= options_.promote_min_score) back.push_back({score, v, e});
      }
    }
  }
  auto larger_first = [](const candidate& x, const candidate& y) { return x.key > y.key; };
  std::sort(idle.begin(), idle.end(), larger_first);
  std::sort(back.begin(), back.end(), larger_first);

  const double cooling = std::chrono::duration<double>(options_.cold_cooling).count();
  const auto low_water = static_cast<std::uint64_t>(
      options_.capacity_low_water * static_cast<double>(pool_.capacity_extents(tier::capacity)));
  std::uint64_t cold_free = pool_.free_extents(tier::cold);
  std::uint64_t capacity_free = pool_.free_extents(tier::capacity);
  if (cooling > 0) {
    for (const candidate& c : idle) {
      if (cold_free == 0) break;
      const bool short_of_room = capacity_free < low_water;
      if (!short_of_room && c.key < cooling) break;  // the rest have been idle for less
      (short_of_room ? urgent : cooled).push_back({c.vol, c.extent, tier::capacity, tier::cold});
      --cold_free;
      ++capacity_free;
    }
    // Cooled on the performance tier (it had room to keep them): they go
    // too, rather than hold SSD space for a month of nothing.
    std::sort(resting.begin(), resting.end(), larger_first);
    for (const candidate& c : resting) {
      if (cold_free == 0) break;
      cooled.push_back({c.vol, c.extent, tier::performance, tier::cold});
      --cold_free;
    }
  }
  // Coming back never takes the capacity tier below its low water, or a
  // promoted extent would push out another straight away; pinned extents
  // come back first, while there is any room at all.
  for (const candidate& c : pinned) {
    if (capacity_free == 0) return;
    promotions.push_back({c.vol, c.extent, tier::cold, tier::capacity});
    --capacity_free;
  }
  for (const candidate& c : back) {
    if (capacity_free <= low_water) return;
    promotions.push_back({c.vol, c.extent, tier::cold, tier::capacity});
    --capacity_free;
  }
}

bool migrator::rate_allows() noexcept {
  const device::time_point now = pool_.clock().now();
  const double elapsed = std::chrono::duration<double>(now - last_refill_).count();
  last_refill_ = now;
  const double extent = static_cast<double>(pool_.extent_size_bytes());
  // A burst of at most one interval's worth (and always one extent).
  const double cap = std::max(extent, options_.max_bytes_per_second *
                                          std::chrono::duration<double>(options_.interval).count());
  rate_tokens_bytes_ = std::min(cap, rate_tokens_bytes_ + elapsed * options_.max_bytes_per_second);
  return rate_tokens_bytes_ >= extent;
}

void migrator::start_moves() {
  if (pool_.volume_changes() != planned_at_) {
    plan_.clear();  // it may name a deleted volume, or follow an old affinity
    return;
  }
  while (!plan_.empty() && in_flight_ < allowed_ && rate_allows()) {
    const planned_move next = plan_.front();
    if (next.to == tier::performance &&
        pool_.free_extents(tier::performance) <= pool_.performance_reserve_extents()) {
      return;  // a demotion ahead of it has not freed its extent yet
    }
    plan_.pop_front();
    rate_tokens_bytes_ -= static_cast<double>(pool_.extent_size_bytes());
    ++in_flight_;
    moved_this_round_ = true;
    next.vol->move_extent(next.extent, next.to, [this, alive = alive_, next](std::error_code ec) {
      if (!*alive) return;
      --in_flight_;
      if (ec) {
        ++counters_.failed_moves;
      } else {
        ++(next.to == tier::performance ? counters_.promotions
           : next.to == tier::cold      ? counters_.cold_demotions
           : next.from == tier::cold    ? counters_.cold_promotions
                                        : counters_.demotions);
        counters_.bytes_moved += pool_.extent_size_bytes();
      }
      start_moves();
    });
  }
}

}  // namespace strata::tiering
