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
  if (window.ios == 0) return;  // nothing to judge by
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
      if (pool_.tier_of(where->group) == tier::performance) {
        residents.push_back({a == affinity::performance, a == affinity::archive ? archive_score : heat.score(e), v, e});
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
  std::sort(outsiders.begin(), outsiders.end(), [&](const ranked& a, const ranked& b) { return colder(b, a); });

  std::vector<planned_move> demotions, promotions;
  std::uint64_t free = pool_.free_extents(tier::performance);
  const std::uint64_t reserve = pool_.performance_reserve_extents();
  std::size_t r = 0;
  auto demote_next = [&] {
    demotions.push_back({residents[r].vol, residents[r].extent, tier::capacity});
    ++r;
    ++free;
  };
  while (r < residents.size() && (residents[r].score == archive_score || free < reserve)) demote_next();
  for (const ranked& hot : outsiders) {
    if (free > reserve) {
      promotions.push_back({hot.vol, hot.extent, tier::performance});
      --free;
    } else if (r < residents.size() && displaces(hot, residents[r], options_.hysteresis)) {
      demote_next();
      promotions.push_back({hot.vol, hot.extent, tier::performance});
      --free;
    } else {
      break;  // the rest are colder still
    }
  }
  plan_.insert(plan_.end(), demotions.begin(), demotions.end());
  plan_.insert(plan_.end(), promotions.begin(), promotions.end());
}

bool migrator::rate_allows() noexcept {
  const device::time_point now = pool_.clock().now();
  const double elapsed = std::chrono::duration<double>(now - last_refill_).count();
  last_refill_ = now;
  const double extent = static_cast<double>(pool_.extent_size_bytes());
  // A burst of at most one interval's worth (and always one extent).
  const double cap =
      std::max(extent, options_.max_bytes_per_second * std::chrono::duration<double>(options_.interval).count());
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
    next.vol->move_extent(next.extent, next.to, [this, alive = alive_, to = next.to](std::error_code ec) {
      if (!*alive) return;
      --in_flight_;
      if (ec) {
        ++counters_.failed_moves;
      } else {
        ++(to == tier::performance ? counters_.promotions : counters_.demotions);
        counters_.bytes_moved += pool_.extent_size_bytes();
      }
      start_moves();
    });
  }
}

}  // namespace strata::tiering
