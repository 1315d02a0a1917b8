// What the array measures (array.h): the 5 s samples behind the volumes'
// and pools' rates, their statistics, and the extents' heat.
#include <algorithm>

#include "controller/array.h"
#include "controller/array_records.h"
#include "strata/v1/array.pb.h"
#include "strata/v1/resources.pb.h"
#include "tiering/volume.h"

namespace strata::controller {

using namespace records;

namespace {

// The sources of reads a volume reports, by the names the API gives them.
constexpr std::pair<const char*, tiering::source> tier_sources[] = {
    {"performance", tiering::source::performance},
    {"capacity", tiering::source::capacity},
    {"cold", tiering::source::cold},
    {"cache", tiering::source::cache}};

// The bound, in seconds, of the bucket that holds quantile `q` of the
// reads counted between `a` and `b`; beyond the last bound: the last
// bound (the histogram says no more).
double percentile_bound(const tiering::volume_counters::requests& a,
                        const tiering::volume_counters::requests& b, double q) {
  const auto& bounds = tiering::volume_counters::latency_bucket_bounds_seconds;
  const double total = static_cast<double>(b.count - a.count);
  double seen = 0;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    seen += static_cast<double>(b.latency_buckets[i] - a.latency_buckets[i]);
    if (seen >= q * total) return bounds[i];
  }
  return bounds.back();
}

}  // namespace

void array::take_samples() {
  const device::time_point now = clock_.now();
  std::map<std::string, std::pair<sample, sample>> next;
  for (const auto& [pool_name, p] : pools_) {
    for (tiering::volume* v : p.pool->volumes()) {
      const std::string name = pool_name + "/volumes/" + v->record().name;
      auto& [before, last] = next[name];
      if (const auto old = samples_.find(name); old != samples_.end()) before = old->second.second;
      last = {now, v->counters()};
    }
    if (p.write_cache) {
      p.write_cache->sample(std::chrono::duration<double>(statistics_interval).count());
      p.write_cache->redundancy_changed();  // a rebuilt log member makes it redundant again
    }
  }
  samples_ = std::move(next);  // deleted volumes drop out
  watch_cold_groups();
  sampler_->expires_after(statistics_interval);
  sampler_->async_wait([this](boost::system::error_code ec) {
    if (!ec && !closed_) take_samples();
  });
}

std::expected<void, error> array::volume_statistics(const std::string& name,
                                                    v1::VolumeStatistics& out) const {
  const auto [p, v] = volume_named(name);
  if (v == nullptr)
    return std::unexpected(make_error(errc::not_found, "no pool has volume " + name));
  out.set_volume(name);
  const tiering::volume_counters& now = v->counters();
  out.set_reads(now.whole[0].count);
  out.set_writes(now.whole[1].count);
  out.set_read_bytes(now.whole[0].bytes);
  out.set_write_bytes(now.whole[1].bytes);
  out.set_flushes(now.whole[2].count);
  for (const double bound : tiering::volume_counters::latency_bucket_bounds_seconds)
    out.add_latency_bucket_bounds_seconds(bound);
  for (const std::uint64_t n : now.whole[0].latency_buckets) out.add_read_latency_buckets(n);
  for (const std::uint64_t n : now.whole[1].latency_buckets) out.add_write_latency_buckets(n);
  for (const std::uint64_t n : now.whole[2].latency_buckets) out.add_flush_latency_buckets(n);
  out.set_read_latency_seconds_sum(std::chrono::duration<double>(now.whole[0].latency).count());
  out.set_write_latency_seconds_sum(std::chrono::duration<double>(now.whole[1].latency).count());
  out.set_flush_latency_seconds_sum(std::chrono::duration<double>(now.whole[2].latency).count());
  const std::uint64_t cache_hits = now.reads(tiering::source::cache).ios;
  const std::uint64_t fast_reads = now.reads(tiering::source::performance).ios;
  out.set_read_cache_hits(cache_hits);
  out.set_performance_tier_reads(fast_reads);
  out.set_read_pieces(cache_hits + fast_reads + now.reads(tiering::source::capacity).ios +
                      now.reads(tiering::source::cold).ios);
  const std::uint64_t extent_bytes = p->pool->extent_size_bytes();
  out.set_performance_bytes(v->mapped_extents_on(tiering::tier::performance) * extent_bytes);
  out.set_capacity_bytes(v->mapped_extents_on(tiering::tier::capacity) * extent_bytes);
  out.set_cold_bytes(v->mapped_extents_on(tiering::tier::cold) * extent_bytes);
  out.set_allocated_bytes(out.performance_bytes() + out.capacity_bytes() + out.cold_bytes());
  const auto s = samples_.find(name);
  const bool sampled = s != samples_.end() && s->second.first.at != device::time_point{};
  for (const auto& [tier, from] : tier_sources) {
    const tiering::volume_counters::requests& r = now.read_latency[static_cast<int>(from)];
    v1::TierReads& t = *out.add_tier_reads();
    t.set_tier(tier);
    t.set_reads(r.count);
    t.set_latency_seconds_sum(std::chrono::duration<double>(r.latency).count());
    for (const std::uint64_t n : r.latency_buckets) t.add_latency_buckets(n);
    if (!sampled) continue;
    const auto& a = s->second.first.counters.read_latency[static_cast<int>(from)];
    const auto& b = s->second.second.counters.read_latency[static_cast<int>(from)];
    if (b.count == a.count) continue;
    t.set_latency_ms(std::chrono::duration<double, std::milli>(b.latency - a.latency).count() /
                     static_cast<double>(b.count - a.count));
    t.set_p99_latency_ms(1000 * percentile_bound(a, b, 0.99));
  }
  if (p->write_cache) {
    // The volume's share of each cached group's dirty and lost blocks,
    // extent by extent.
    std::vector<const raid::write_back_device*> caches;
    for (const std::string& g : p->groups) {
      const disk_group* group = group_named(g);
      caches.push_back(group == nullptr ? nullptr : p->write_cache->cache_of(*group));
    }
    std::uint64_t dirty_bytes = 0, lost_bytes = 0;
    bool write_back = !v->write_through();
    for (const raid::write_back_device* c : caches) {
      if (c != nullptr && c->mode() != raid::cache_mode::write_back) write_back = false;
    }
    for (std::uint64_t e = 0; e < v->extent_count(); ++e) {
      const std::optional<tiering::extent_location> at = v->location(e);
      if (!at || at->group >= caches.size() || caches[at->group] == nullptr) continue;
      const raid::write_back_device& c = *caches[at->group];
      const std::uint32_t block_bytes = c.geometry().logical_block_size_bytes;
      const std::uint64_t blocks = extent_bytes / block_bytes;
      dirty_bytes += c.dirty_blocks_in(at->extent * blocks, blocks) * block_bytes;
      lost_bytes += c.lost_blocks_in(at->extent * blocks, blocks) * block_bytes;
    }
    out.set_write_cache(write_back ? "write-back" : "write-through");
    out.set_dirty_bytes(dirty_bytes);
    out.set_lost_bytes(lost_bytes);
  }
  if (!sampled) return {};  // one sample: no rates yet
  const auto& [before, last] = s->second;
  const double seconds = std::chrono::duration<double>(last.at - before.at).count();
  out.set_interval_seconds(seconds);
  auto rates = [&](int rw, auto set_iops, auto set_mb, auto set_latency) {
    const auto& a = before.counters.whole[rw];
    const auto& b = last.counters.whole[rw];
    const double ios = static_cast<double>(b.count - a.count);
    (out.*set_iops)(ios / seconds);
    (out.*set_mb)(static_cast<double>(b.bytes - a.bytes) / 1e6 / seconds);
    (out.*set_latency)(
        ios == 0 ? 0.0
                 : std::chrono::duration<double, std::milli>(b.latency - a.latency).count() / ios);
  };
  rates(0, &v1::VolumeStatistics::set_read_iops, &v1::VolumeStatistics::set_read_mb_per_second,
        &v1::VolumeStatistics::set_read_latency_ms);
  rates(1, &v1::VolumeStatistics::set_write_iops, &v1::VolumeStatistics::set_write_mb_per_second,
        &v1::VolumeStatistics::set_write_latency_ms);
  auto pieces = [&](tiering::source from) {
    return static_cast<double>(last.counters.reads(from).ios - before.counters.reads(from).ios);
  };
  const double cache = pieces(tiering::source::cache), fast = pieces(tiering::source::performance),
               slow = pieces(tiering::source::capacity), cold = pieces(tiering::source::cold);
  const double touched = cache + fast + slow + cold;
  out.set_cache_hit_fraction(touched == 0 ? 0.0 : cache / touched);
  out.set_performance_tier_fraction(touched == 0 ? 0.0 : fast / touched);
  out.set_cold_tier_fraction(touched == 0 ? 0.0 : cold / touched);
  return {};
}

std::expected<void, error> array::pool_statistics(const std::string& name,
                                                  v1::PoolStatistics& out) const {
  const served_pool* served = pool_named(name);
  if (served == nullptr) return std::unexpected(make_error(errc::not_found, "no pool " + name));
  const tiering::pool& pool = *served->pool;
  out.set_pool(name);
  const std::uint64_t extent_bytes = pool.extent_size_bytes();
  out.set_performance_bytes(pool.capacity_extents(tiering::tier::performance) * extent_bytes);
  out.set_performance_free_bytes(pool.free_extents(tiering::tier::performance) * extent_bytes);
  out.set_capacity_bytes(pool.capacity_extents(tiering::tier::capacity) * extent_bytes);
  out.set_capacity_free_bytes(pool.free_extents(tiering::tier::capacity) * extent_bytes);
  out.set_cold_bytes(pool.capacity_extents(tiering::tier::cold) * extent_bytes);
  // Bounded by what the RADOS pools may still take: a cluster shared with
  // other images may have less room than the images' sizes promise.
  std::uint64_t cold_free = pool.free_extents(tiering::tier::cold) * extent_bytes;
  std::optional<std::uint64_t> room;
  for (const std::string& g : served->groups) {
    const disk_group* group = group_named(g);
    const ceph_image* image = group != nullptr ? group->ceph() : nullptr;
    if (image == nullptr) continue;
    const auto available = image->status().pool_available_bytes;
    if (!available) continue;
    room = room.value_or(0) +
           *available;  // a pool's images in one RADOS pool: counted once each (an upper bound)
  }
  out.set_cold_free_bytes(room ? std::min(cold_free, *room) : cold_free);
  out.set_committed_bytes(pool.committed_bytes());
  out.set_writes_stopped(pool.writes_stopped());
  if (served->write_cache) served->write_cache->statistics(out);
  if (served->migrator) {
    const tiering::migrator_counters& moved = served->migrator->counters();
    out.set_promotions(moved.promotions);
    out.set_demotions(moved.demotions);
    out.set_cold_demotions(moved.cold_demotions);
    out.set_cold_promotions(moved.cold_promotions);
    out.set_migrated_bytes(moved.bytes_moved);
    out.set_failed_moves(moved.failed_moves);
    out.set_moves_in_flight(served->migrator->moves_in_flight());
  }
  if (const device::block_device* cache = pool.options().read_cache_device) {
    out.set_read_cache_bytes(cache->geometry().block_count *
                             cache->geometry().logical_block_size_bytes);
  }
  for (tiering::volume* v : pool.volumes()) {
    v1::VolumeStatistics each;
    if (!volume_statistics(name + "/volumes/" + v->record().name, each)) continue;
    out.set_read_iops(out.read_iops() + each.read_iops());
    out.set_write_iops(out.write_iops() + each.write_iops());
    out.set_read_mb_per_second(out.read_mb_per_second() + each.read_mb_per_second());
    out.set_write_mb_per_second(out.write_mb_per_second() + each.write_mb_per_second());
  }
  return {};
}

std::expected<void, error> array::heat(const std::string& name, bool hottest_first,
                                       std::uint64_t first, std::size_t limit,
                                       v1::ListHeatResponse& out) const {
  const auto [p, v] = volume_named(name);
  if (v == nullptr)
    return std::unexpected(make_error(errc::not_found, "no pool has volume " + name));
  const tiering::pool& pool = *p->pool;
  const tiering::heat_map& map = v->heat();
  const std::uint64_t count = v->extent_count();
  out.set_extent_bytes(pool.extent_size_bytes());
  out.set_total_extents(count);
  std::vector<std::uint64_t> order;
  if (hottest_first) {
    // Ranked on each call: a sort of the volume's extents (1 M extents: ~0.1 s),
    // for diagnostics, not the data path.
    order.resize(count);
    for (std::uint64_t e = 0; e < count; ++e) order[e] = e;
    const std::size_t wanted =
        static_cast<std::size_t>(std::min<std::uint64_t>(count, first + limit));
    std::partial_sort(
        order.begin(), order.begin() + static_cast<std::ptrdiff_t>(wanted), order.end(),
        [&](std::uint64_t a, std::uint64_t b) { return map.score(a) > map.score(b); });
  }
  for (std::uint64_t i = first; i < count && static_cast<std::size_t>(i - first) < limit; ++i) {
    const std::uint64_t e = hottest_first ? order[i] : i;
    const tiering::extent_heat h = map.heat(e);
    v1::ExtentHeat* row = out.add_extents();
    row->set_extent(e);
    row->set_offset_bytes(e * pool.extent_size_bytes());
    row->set_reads(h.read_ios);
    row->set_writes(h.write_ios);
    row->set_read_bytes(h.read_bytes);
    row->set_write_bytes(h.write_bytes);
    if (const auto at = v->location(e)) {
      row->set_tier(tier_of(pool.tier_of(at->group)));
      row->set_group(at->group < p->groups.size() ? p->groups[at->group] : "");
    } else {
      row->set_tier(v1::TIER_UNMAPPED);
    }
  }
  return {};
}

}  // namespace strata::controller
