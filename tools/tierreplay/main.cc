// strata-tierreplay: replays a block trace through the real tiering engine
// (pool, thin volumes, heat, migrator) over a modelled shelf in virtual
// time, and sets what it achieves beside an oracle that knows the future.
//
//   strata-tierreplay [--tier 0.05,0.10] [--half-life-s S] [--interval-ms M]
//                     [--lookahead-s S] [--window-s S] [--limit N] TRACE...
//
// The shelf: two RAID-6 8+2 groups of 7,200 rpm nearline SAS models (the
// capacity tier, 20 HDDs as in the seed array) and a RAID-1 pair of SAS SSD
// models (the performance tier) sized to a fraction of the trace's extent
// footprint. The models run over null devices: only time is simulated.
//
// Before the trace starts, every extent it touches is written once (the
// volume held data before the trace began), on the capacity tier. Then:
//   adaptive   the migrator ranks and moves extents as the trace runs;
//   oracle     the N extents with the most I/Os over the whole trace are
//              moved to the performance tier first, and nothing moves after
//              (the best fixed placement chosen in hindsight);
//   lookahead  knows the next interval (--lookahead-s) of the trace: before
//              each, it makes the performance tier hold the N extents with
//              the most I/Os in it, swapping a resident out only for an
//              extent with more, under the migrator's own budget (its copy
//              rate and moves in flight), hottest first. Its first
//              interval's placement is made before the trace, as the
//              oracle's is. A yardstick for reacting, not a fixed placement.
// Latencies are the volume's, from submit to completion, in virtual time.
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/clock.h"
#include "raid/device/hdd_model.h"
#include "raid/device/io_scheduler.h"
#include "raid/device/null_device.h"
#include "raid/device/ssd_model.h"
#include "raid/raid1_group.h"
#include "raid/raid6_group.h"
#include "tiering/cache_policy.h"
#include "tiering/metadata_store.h"
#include "tiering/migrator.h"
#include "tiering/pool.h"
#include "tiering/volume.h"
#include "tools/cli.h"
#include "tools/tierreplay/trace.h"

namespace strata::tools {
namespace {

using namespace std::chrono_literals;
using device::op;
using device::request;

constexpr std::uint32_t block_size = 512;
constexpr std::uint64_t extent_bytes = 4 << 20;
constexpr std::uint64_t reserved_bytes = 1 << 20;  // the RAID groups' superblock area

enum class placement { adaptive, oracle, lookahead, none };
std::string_view name(placement p) {
  switch (p) {
    case placement::adaptive:
      return "adaptive";
    case placement::oracle:
      return "oracle";
    case placement::lookahead:
      return "lookahead";
    case placement::none:
      return "none";
  }
  return "?";
}
constexpr std::uint64_t line_bytes = 64 << 10;

// A duration in whole microseconds, the trace's unit; at least 1.
std::uint64_t whole_us(device::duration d) {
  return static_cast<std::uint64_t>(
      std::max<std::int64_t>(1, std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
}

struct run_config {
  placement mode = placement::adaptive;
  std::uint64_t tier_extents = 0;
  tiering::migrator_options migration;
  device::duration half_life = tiering::heat_options{}.half_life;
  std::uint64_t sequential_threshold_bytes = tiering::heat_options{}.sequential_threshold_bytes;
  // I/Os the hosts keep in flight at most, all volumes together (an HBA's
  // queue depth); the rest wait on the host.
  std::uint64_t queue_depth = 256;
  // A read cache of this many 64 KiB lines (0: none), with this policy.
  std::uint64_t cache_lines = 0;
  std::string cache_policy;
  unsigned fills_in_flight = tiering::read_cache_options{}.fills_in_flight;
  // The look-ahead oracle's interval.
  device::duration lookahead = std::chrono::seconds(60);
  // Print the SSD share of each window this long (0: none).
  device::duration window{};
};

struct run_result {
  std::uint64_t ios = 0;  // pieces (a record across extents counts per extent)
  std::uint64_t ssd_ios = 0;
  std::uint64_t bytes = 0;
  std::uint64_t ssd_bytes = 0;
  double mean_latency_ms = 0;
  double p99_latency_ms = 0;
  std::uint64_t moved_bytes = 0;  // during the trace (the oracle's placement is before it)
  std::uint64_t promotions = 0;
  std::uint64_t demotions = 0;
  std::uint64_t throttled_rounds = 0;
  std::uint64_t capacity_reads = 0;  // reads of capacity-tier data (from the HDDs or the cache)
  std::uint64_t cache_reads = 0;     // of which the cache served
  std::uint64_t cache_fills = 0;
};

// The engine on a modelled shelf, in virtual time.
class rig {
 public:
  rig(const trace& t, const run_config& config) : trace_(t) {
    dir_ = make_temp_dir();
    build_shelf(config.tier_extents, config.cache_lines);
    auto s = tiering::metadata_store::open(dir_ + "/metadata", context_.get_executor());
    if (!s) throw std::runtime_error(s.error().message);
    store_ = std::move(*s);
    tiering::pool_options options;
    options.clock = &clock_;
    options.extent_size_bytes = extent_bytes;
    options.overcommit = 1e9;  // the volumes are sized to the trace, not to the shelf
    options.new_extents = tiering::new_extent_tier::capacity;
    options.heat.half_life = config.half_life;
    options.heat.sequential_threshold_bytes = config.sequential_threshold_bytes;
    if (cache_) {
      options.read_cache_device = cache_.get();
      options.read_cache.line_bytes = line_bytes;
      options.read_cache.policy = config.cache_policy;
      options.read_cache.fills_in_flight = config.fills_in_flight;
    }
    auto p = tiering::pool::open(context_.get_executor(), *store_, groups_, options);
    if (!p) throw std::runtime_error(p.error().message);
    pool_ = std::move(*p);
    for (std::size_t v = 0; v < t.volume_extents.size(); ++v) {
      bool created = false;
      pool_->create_volume(
          {fmt::format("v{}", v), block_size, t.volume_extents[v] * (extent_bytes / block_size)},
          [&](std::expected<tiering::volume*, error> r) {
            if (!r) throw std::runtime_error(r.error().message);
            volumes_.push_back(*r);
            created = true;
          });
      run_until([&] { return created; });
    }
  }

  ~rig() {
    if (migrator_) migrator_->stop();
    run_until([&] {
      return (!migrator_ || migrator_->moves_in_flight() == 0) &&
             (!pool_->cache() || pool_->cache()->idle()) &&
             std::all_of(volumes_.begin(), volumes_.end(),
                         [](tiering::volume* v) { return v->idle(); });
    });
    migrator_.reset();
    pool_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Every extent the trace touches holds data before it starts.
  void populate() {
    buffer_ = device::aligned_buffer(extent_bytes);
    for (std::uint32_t v = 0; v < volumes_.size(); ++v) {
      for (std::uint64_t e = 0; e < trace_.volume_extents[v]; ++e) {
        submit(v, op::write, e * extent_bytes, block_size, [] {});
        run_until([&] { return in_flight_ < 64; });
      }
    }
    run_until([&] { return in_flight_ == 0; });
    for (tiering::volume* v : volumes_) {
      for (std::uint64_t e = 0; e < v->extent_count(); ++e) v->heat().clear(e);
    }
  }

  using extent_key = std::pair<std::uint32_t, std::uint64_t>;  // volume, extent
  using extent_counts = std::map<extent_key, std::uint64_t>;

  // I/Os per extent of the records that arrive in [from_us, to_us) (the
  // records are in time order).
  extent_counts count_ios(std::uint64_t from_us, std::uint64_t to_us) const {
    auto arrival = [](const trace_record& r, std::uint64_t us) { return r.time_us < us; };
    const auto first =
        std::lower_bound(trace_.records.begin(), trace_.records.end(), from_us, arrival);
    const auto end = std::lower_bound(first, trace_.records.end(), to_us, arrival);
    extent_counts ios;
    for (const trace_record& r : std::span(first, end)) {
      const std::uint64_t last = (r.offset_bytes + r.size_bytes - 1) / extent_bytes;
      for (std::uint64_t e = r.offset_bytes / extent_bytes; e <= last; ++e) ++ios[{r.volume, e}];
    }
    return ios;
  }

  // The N extents with the most I/Os in `ios`, most first.
  static std::vector<extent_key> hottest(const extent_counts& ios, std::uint64_t n) {
    std::vector<std::pair<std::uint64_t, extent_key>> ranked;
    for (const auto& [k, count] : ios) ranked.push_back({count, k});
    std::sort(ranked.begin(), ranked.end(), std::greater<>());
    ranked.resize(std::min<std::size_t>(n, ranked.size()));
    std::vector<extent_key> out;
    for (const auto& [count, k] : ranked) out.push_back(k);
    return out;
  }

  // Before the trace: the N extents with the most I/Os in `ios` go to the
  // performance tier (the oracles' free first placement).
  void place_hottest(const extent_counts& ios, std::uint64_t n) {
    unsigned moving = 0;
    for (const extent_key& k : hottest(ios, n)) {
      ++moving;
      volumes_[k.first]->move_extent(k.second, tiering::tier::performance, [&](std::error_code ec) {
        if (ec) throw std::runtime_error("oracle placement: " + ec.message());
        --moving;
      });
      run_until([&] { return moving < 8; });
    }
    run_until([&] { return moving == 0; });
  }
  void place_hottest(std::uint64_t n) { place_hottest(count_ios(0, UINT64_MAX), n); }

  // The look-ahead oracle's plan for the records arriving in [from_us,
  // to_us): the performance tier should hold that interval's N hottest
  // extents. Newcomers go in hottest first, into free room, else each in
  // place of the resident with the fewest I/Os ahead if it has more. The
  // last interval's unstarted moves are dropped.
  void plan_lookahead(const run_config& config, std::uint64_t from_us, std::uint64_t to_us) {
    const extent_counts ios = count_ios(from_us, to_us);
    auto count = [&](const extent_key& k) {
      const auto it = ios.find(k);
      return it == ios.end() ? std::uint64_t{0} : it->second;
    };
    std::vector<extent_key> leaving(lookahead_.residents.begin(), lookahead_.residents.end());
    std::sort(leaving.begin(), leaving.end(),
              [&](const extent_key& a, const extent_key& b) { return count(a) < count(b); });
    lookahead_.plan.clear();
    std::uint64_t room = config.tier_extents -
                         std::min<std::uint64_t>(config.tier_extents, lookahead_.residents.size());
    std::size_t out = 0;
    for (const extent_key& k : hottest(ios, config.tier_extents)) {
      if (lookahead_.residents.contains(k)) continue;
      if (room > 0) {
        --room;
      } else if (out < leaving.size() && count(leaving[out]) < count(k)) {
        lookahead_.plan.push_back({leaving[out++], tiering::tier::capacity});
      } else {
        break;
      }
      lookahead_.plan.push_back({k, tiering::tier::performance});
    }
    // The migrator's copy-rate cap, as one interval's allowance.
    lookahead_.allowance_bytes =
        config.migration.max_bytes_per_second * static_cast<double>(to_us - from_us) / 1e6;
  }

  // Starts planned moves while the budget allows: the migrator's moves in
  // flight and copy rate; a promotion waits for the demotion before it.
  void move_lookahead(const run_config& config) {
    while (!lookahead_.plan.empty() &&
           lookahead_.in_flight < config.migration.max_moves_in_flight &&
           lookahead_.allowance_bytes >= static_cast<double>(extent_bytes)) {
      const auto [k, to] = lookahead_.plan.front();
      tiering::volume& v = *volumes_[k.first];
      if (v.moving(k.second)) return;
      if (to == tiering::tier::performance && pool_->free_extents(tiering::tier::performance) == 0)
        return;
      lookahead_.plan.pop_front();
      lookahead_.allowance_bytes -= static_cast<double>(extent_bytes);
      ++lookahead_.in_flight;
      if (to == tiering::tier::capacity) {
        lookahead_.residents.erase(k);
      } else {
        lookahead_.residents.insert(k);
      }
      v.move_extent(k.second, to, [this, k, to](std::error_code ec) {
        if (ec) throw std::runtime_error("look-ahead move: " + ec.message());
        --lookahead_.in_flight;
        ++(to == tiering::tier::performance ? lookahead_.promotions : lookahead_.demotions);
      });
    }
  }

  run_result replay(const run_config& config) {
    const auto before = served();
    if (config.mode == placement::adaptive) {
      migrator_ = std::make_unique<tiering::migrator>(*pool_, config.migration);
      migrator_->start();
    }
    const std::uint64_t lookahead_us = whole_us(config.lookahead);
    std::uint64_t next_plan_us = lookahead_us;  // the first interval was placed before the trace
    pool_->take_latency_window();
    const device::time_point start = clock_.now();
    std::vector<float> latencies_ms;
    latencies_ms.reserve(trace_.records.size());
    std::size_t next = 0;
    auto window_start = before;
    device::time_point window_end = start + config.window;
    while (next < trace_.records.size() || in_flight_ > 0 || lookahead_.in_flight > 0) {
      if (config.mode == placement::lookahead) {
        if (next < trace_.records.size() &&
            clock_.now() >= start + std::chrono::microseconds(next_plan_us)) {
          plan_lookahead(config, next_plan_us, next_plan_us + lookahead_us);
          next_plan_us += lookahead_us;
        }
        move_lookahead(config);
      }
      // Arrived records wait in the host's queue while its depth is full;
      // their latency counts from arrival.
      while (next < trace_.records.size() && in_flight_ < config.queue_depth &&
             start + std::chrono::microseconds(trace_.records[next].time_us) <= clock_.now()) {
        const trace_record& r = trace_.records[next++];
        const device::time_point issued = start + std::chrono::microseconds(r.time_us);
        submit(r.volume, r.write ? op::write : op::read, r.offset_bytes, r.size_bytes, [&, issued] {
          latencies_ms.push_back(static_cast<float>(
              std::chrono::duration<double, std::milli>(clock_.now() - issued).count()));
        });
      }
      if (config.window.count() > 0 && clock_.now() >= window_end) {
        const auto now_served = served();
        fmt::print(
            "  {:>9} t={:>6.0f} s  SSD I/Os {:.3f} of {:>6}  promoted so far {:>5}\n",
            name(config.mode), std::chrono::duration<double>(clock_.now() - start).count(),
            static_cast<double>(now_served.ssd_ios - window_start.ssd_ios) /
                static_cast<double>(std::max<std::uint64_t>(1, now_served.ios - window_start.ios)),
            now_served.ios - window_start.ios,
            migrator_ ? migrator_->counters().promotions : lookahead_.promotions);
        window_start = now_served;
        window_end += config.window;
      }
      std::optional<device::time_point> until;
      if (next < trace_.records.size() && in_flight_ < config.queue_depth) {
        until = start + std::chrono::microseconds(trace_.records[next].time_us);
      }
      if (config.mode == placement::lookahead && next < trace_.records.size()) {
        const device::time_point plan_at = start + std::chrono::microseconds(next_plan_us);
        if (!until || plan_at < *until) until = plan_at;
      }
      step(until);
    }
    run_result out;
    const auto after = served();
    out.ios = after.ios - before.ios;
    out.ssd_ios = after.ssd_ios - before.ssd_ios;
    out.bytes = after.bytes - before.bytes;
    out.ssd_bytes = after.ssd_bytes - before.ssd_bytes;
    double sum = 0;
    for (float l : latencies_ms) sum += l;
    out.mean_latency_ms = sum / static_cast<double>(latencies_ms.size());
    std::sort(latencies_ms.begin(), latencies_ms.end());
    out.p99_latency_ms = latencies_ms[latencies_ms.size() * 99 / 100];
    out.capacity_reads = after.capacity_reads - before.capacity_reads;
    out.cache_reads = after.cache_reads - before.cache_reads;
    if (pool_->cache()) out.cache_fills = pool_->cache()->counters().fills;
    if (migrator_) {
      const auto& c = migrator_->counters();
      out.moved_bytes = c.bytes_moved;
      out.promotions = c.promotions;
      out.demotions = c.demotions;
      out.throttled_rounds = c.throttled_rounds;
    } else if (config.mode == placement::lookahead) {
      out.moved_bytes = (lookahead_.promotions + lookahead_.demotions) * extent_bytes;
      out.promotions = lookahead_.promotions;
      out.demotions = lookahead_.demotions;
    }
    return out;
  }

  // The look-ahead oracle's first placement: the next interval's hottest.
  void place_lookahead(const run_config& config) {
    const extent_counts ios = count_ios(0, whole_us(config.lookahead));
    place_hottest(ios, config.tier_extents);
    const std::vector<extent_key> placed = hottest(ios, config.tier_extents);
    lookahead_.residents.insert(placed.begin(), placed.end());
  }

 private:
  struct totals {
    std::uint64_t ios = 0, ssd_ios = 0, bytes = 0, ssd_bytes = 0, capacity_reads = 0,
                  cache_reads = 0;
  };
  totals served() const {
    totals t;
    for (const tiering::volume* v : volumes_) {
      const auto& c = v->counters();
      t.capacity_reads +=
          c.reads(tiering::source::capacity).ios + c.reads(tiering::source::cache).ios;
      t.cache_reads += c.reads(tiering::source::cache).ios;
      for (int s = 0; s < tiering::source_count; ++s) {
        for (int w = 0; w < 2; ++w) {
          const auto& x = c.by_source[s][w];
          t.ios += x.ios;
          t.bytes += x.bytes;
          if (s == static_cast<int>(tiering::source::performance) ||
              s == static_cast<int>(tiering::source::cache)) {
            t.ssd_ios += x.ios;
            t.ssd_bytes += x.bytes;
          }
        }
      }
    }
    return t;
  }

  struct in_flight_io {
    rig* owner;
    request req;
    iovec segment;
    std::function<void()> done;
  };

  void submit(std::uint32_t v, op operation, std::uint64_t offset, std::uint32_t size,
              std::function<void()> done) {
    if (buffer_.size() < size) {
      // The replayer's one buffer: the null devices never touch data.
      if (in_flight_ != 0) throw std::runtime_error("buffer grown under I/O");
      buffer_ = device::aligned_buffer(std::max<std::uint64_t>(size, extent_bytes));
    }
    auto io = std::make_unique<in_flight_io>();
    io->owner = this;
    io->done = std::move(done);
    io->segment = {buffer_.data(), size};
    io->req.operation = operation;
    io->req.lba = offset / block_size;
    io->req.block_count = size / block_size;
    io->req.buffers = {&io->segment, 1};
    io->req.context = io.get();
    io->req.on_complete = [](request& r) noexcept {
      std::unique_ptr<in_flight_io> x(static_cast<in_flight_io*>(r.context));
      if (r.result) {
        fmt::print(stderr, "strata-tierreplay: I/O failed: {}\n", r.result.message());
        std::exit(1);
      }
      --x->owner->in_flight_;
      x->done();
    };
    ++in_flight_;
    volumes_[v]->submit(io.release()->req);
  }

  // Runs what is runnable; else waits for the store; else moves virtual
  // time to the next timer or `until`, whichever comes first.
  void step(std::optional<device::time_point> until) {
    context_.restart();
    if (context_.poll() > 0) return;
    if (store_ && store_->in_flight() > 0) {
      context_.run_one();
      return;
    }
    std::optional<device::time_point> next = clock_.next_deadline();
    if (until && (!next || *until < *next)) next = until;
    if (!next) throw std::runtime_error("the replay is stuck: nothing runnable and no timer armed");
    clock_.advance_to(*next);
  }
  template <class Done>
  void run_until(Done done) {
    while (!done()) step(std::nullopt);
  }

  // A drive model with stratad's scheduler on top (controller/shelf.cc):
  // extent moves and cache fills yield to the hosts' I/O as they do there.
  device::block_device* drive(device::block_device& model, bool hdd) {
    schedulers_.push_back(std::make_unique<device::io_scheduler>(
        model, clock_,
        hdd ? device::io_scheduler_options{.busy_background_in_flight = 1,
                                           .idle_background_in_flight = 8,
                                           .idle_wait = std::chrono::milliseconds(10)}
            : device::io_scheduler_options{.busy_background_in_flight = 4,
                                           .idle_background_in_flight = 32,
                                           .idle_wait = std::chrono::milliseconds(1)}));
    return schedulers_.back().get();
  }

  void build_shelf(std::uint64_t tier_extents, std::uint64_t cache_lines) {
    if (cache_lines > 0) {
      // The read cache: one SSD (a one-member RAID-1).
      nulls_.push_back(std::make_unique<device::null_device>(
          context_.get_executor(), block_size,
          (cache_lines * line_bytes + reserved_bytes) / block_size));
      ssds_.push_back(std::make_unique<device::ssd_model>(*nulls_.back(), clock_,
                                                          device::ssd_profile::sas_12g()));
      raid::raid1_options options;
      options.clock = &clock_;
      options.reserved_bytes = reserved_bytes;
      auto group = raid::raid1_group::create({drive(*ssds_.back(), false)}, options);
      if (!group) throw std::runtime_error(group.error().message);
      cache_ = std::move(*group);
    }
    const auto hdd = device::hdd_profile::nl_sas_7k2();
    const auto ssd = device::ssd_profile::sas_12g();
    for (int g = 0; g < 2; ++g) {
      std::vector<device::block_device*> members;
      for (int m = 0; m < 10; ++m) {
        nulls_.push_back(std::make_unique<device::null_device>(context_.get_executor(), block_size,
                                                               hdd.capacity_bytes / block_size));
        hdds_.push_back(std::make_unique<device::hdd_model>(*nulls_.back(), clock_, hdd));
        members.push_back(drive(*hdds_.back(), true));
      }
      raid::raid6_options options;
      options.clock = &clock_;
      options.reserved_bytes = reserved_bytes;
      auto group = raid::raid6_group::create(members, options);
      if (!group) throw std::runtime_error(group.error().message);
      groups_.push_back({group->get(), tiering::tier::capacity});
      raid6_.push_back(std::move(*group));
    }
    std::vector<device::block_device*> members;
    for (int m = 0; m < 2; ++m) {
      nulls_.push_back(std::make_unique<device::null_device>(
          context_.get_executor(), block_size,
          (tier_extents * extent_bytes + reserved_bytes) / block_size));
      ssds_.push_back(std::make_unique<device::ssd_model>(*nulls_.back(), clock_, ssd));
      members.push_back(drive(*ssds_.back(), false));
    }
    raid::raid1_options options;
    options.clock = &clock_;
    options.reserved_bytes = reserved_bytes;
    auto group = raid::raid1_group::create(members, options);
    if (!group) throw std::runtime_error(group.error().message);
    groups_.push_back({group->get(), tiering::tier::performance});
    raid1_ = std::move(*group);
  }

  static std::string make_temp_dir() {
    const std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string pattern = base + "/strata-tierreplay-XXXXXX";
    if (!mkdtemp(pattern.data()))
      throw std::runtime_error("cannot make a temporary directory in " + base);
    return pattern;
  }

  const trace& trace_;
  boost::asio::io_context context_;
  device::virtual_clock clock_;
  std::string dir_;
  std::vector<std::unique_ptr<device::null_device>> nulls_;
  std::vector<std::unique_ptr<device::hdd_model>> hdds_;
  std::vector<std::unique_ptr<device::ssd_model>> ssds_;
  std::vector<std::unique_ptr<device::io_scheduler>> schedulers_;
  std::vector<std::unique_ptr<raid::raid6_group>> raid6_;
  std::unique_ptr<raid::raid1_group> raid1_;
  std::unique_ptr<raid::raid1_group> cache_;
  std::vector<tiering::pool_group> groups_;
  std::unique_ptr<tiering::metadata_store> store_;
  std::unique_ptr<tiering::pool> pool_;
  std::unique_ptr<tiering::migrator> migrator_;
  std::vector<tiering::volume*> volumes_;
  device::aligned_buffer buffer_;
  std::uint64_t in_flight_ = 0;
  struct {
    std::set<extent_key> residents;  // on the performance tier, or moving there
    std::deque<std::pair<extent_key, tiering::tier>> plan;
    double allowance_bytes = 0;
    unsigned in_flight = 0;
    std::uint64_t promotions = 0, demotions = 0;
  } lookahead_;
};

run_result run(const trace& t, const run_config& config) {
  rig r(t, config);
  r.populate();
  if (config.mode == placement::oracle) r.place_hottest(config.tier_extents);
  if (config.mode == placement::lookahead) r.place_lookahead(config);
  return r.replay(config);
}

// The fewest misses a cache of `lines` 64 KiB lines could have on the
// trace's reads, a write giving its lines new identities.
double belady_miss_ratio(const trace& t, std::uint64_t lines) {
  std::unordered_map<std::uint64_t, std::uint64_t> version;
  std::vector<std::uint64_t> reads;
  for (const trace_record& r : t.records) {
    const std::uint64_t first = r.offset_bytes / line_bytes,
                        last = (r.offset_bytes + r.size_bytes - 1) / line_bytes;
    for (std::uint64_t l = first; l <= last; ++l) {
      const std::uint64_t key = (std::uint64_t{r.volume} << 40) | l;
      if (r.write) {
        ++version[key];
      } else {
        reads.push_back(key * 1000003 + version[key]);
      }
    }
  }
  if (reads.empty()) return 0;
  return static_cast<double>(tiering::belady_misses(reads, lines)) /
         static_cast<double>(reads.size());
}

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    out.emplace_back(s.substr(0, comma));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

std::vector<double> parse_list(std::string_view s) {
  std::vector<double> out;
  for (const std::string& item : split(s)) out.push_back(std::stod(item));
  return out;
}

// What the command line asks for.
struct command_line {
  std::vector<double> tiers;
  std::vector<std::string> paths;
  std::uint64_t limit = 0;
  bool cache_table = false;
  std::vector<std::string> policies;
  run_config base;
};

command_line parse(int argc, char** argv) {
  command_line c;
  CLI::App app{
      "Replays block traces through the real tiering engine over a modelled shelf in virtual time, "
      "beside a fixed oracle and a look-ahead oracle (tier) or Belady's MIN (--cache).",
      "strata-tierreplay"};
  use_conventions(app);
  std::string tier_list = "0.05,0.10";
  // The baselines the issue names, then the engine's default.
  std::string policy_list = "lru,arc,s3fifo," + tiering::read_cache_options{}.policy;
  std::int64_t half_life_s =
      std::chrono::duration_cast<std::chrono::seconds>(c.base.half_life).count();
  double lookahead_s = std::chrono::duration<double>(c.base.lookahead).count();
  double window_s = 0;
  std::int64_t interval_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(c.base.migration.interval).count();
  std::int64_t latency_budget_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(c.base.migration.latency_budget)
          .count();
  std::uint64_t sequential_kib = c.base.sequential_threshold_bytes >> 10;
  const auto number_list = [](const std::string& text) -> std::string {
    try {
      parse_list(text);
      return {};
    } catch (const std::logic_error&) {
      return "not a comma-separated list of numbers: " + text;
    }
  };
  app.add_option("--tier", tier_list,
                 "Performance-tier sizes to run, as fractions of the trace's extent footprint, "
                 "comma-separated")
      ->type_name("F1,F2")
      ->check(number_list);
  app.add_flag(
      "--cache", c.cache_table,
      "A read cache of each size instead of the tier, one run per --policies, beside Belady's MIN");
  app.add_option("--half-life-s", half_life_s, "Half-life of the extents' heat, in seconds")
      ->type_name("S");
  app.add_option("--interval-ms", interval_ms, "The migrator's round interval, in milliseconds")
      ->type_name("M");
  app.add_option("--min-score", c.base.migration.promote_min_score,
                 "Lowest heat an extent is promoted with (random I/Os per half-life)")
      ->type_name("X");
  app.add_option("--hysteresis", c.base.migration.hysteresis,
                 "How many times a resident's score a promotion in its place needs")
      ->type_name("X");
  app.add_option("--sequential-kib", sequential_kib,
                 "Sequential streams heat only while shorter than this, in KiB")
      ->type_name("K");
  app.add_option(
         "--latency-budget-ms", latency_budget_ms,
         "How far migration may push the mean host latency over its baseline, in milliseconds")
      ->type_name("M");
  app.add_option("--max-moves", c.base.migration.max_moves_in_flight,
                 "Extent moves in flight at most")
      ->type_name("N");
  app.add_option("--lookahead-s", lookahead_s, "The look-ahead oracle's interval, in seconds")
      ->type_name("S");
  app.add_option("--window-s", window_s,
                 "Also print each placement's SSD share per window of this many seconds (0: none)")
      ->type_name("S");
  app.add_option("--queue-depth", c.base.queue_depth,
                 "I/Os the hosts keep in flight at most, all volumes together")
      ->type_name("N");
  app.add_option("--fills", c.base.fills_in_flight, "Read-cache fills in flight at most (--cache)")
      ->type_name("N");
  app.add_option("--policies", policy_list,
                 "Read-cache policies to run with --cache, comma-separated")
      ->type_name("P1,P2");
  app.add_option("--limit", c.limit, "Records read from each trace at most (0: all)")
      ->type_name("N");
  app.add_option("TRACE", c.paths,
                 "Traces: the project's CSV (ts_us,vol,offset,size,op), SNIA/MSR Cambridge CSV, or "
                 "page references "
                 "(*.u32be), each optionally .gz")
      ->type_name("FILE")
      ->default_str("")
      ->required();
  parse_or_exit(app, argc, argv);
  c.tiers = parse_list(tier_list);
  c.policies = split(policy_list);
  const auto seconds = [](double s) {
    return std::chrono::duration_cast<device::duration>(std::chrono::duration<double>(s));
  };
  c.base.half_life = std::chrono::seconds(half_life_s);
  c.base.lookahead = seconds(lookahead_s);
  c.base.window = seconds(window_s);
  c.base.migration.interval = std::chrono::milliseconds(interval_ms);
  c.base.migration.latency_budget = std::chrono::milliseconds(latency_budget_ms);
  c.base.sequential_threshold_bytes = sequential_kib << 10;
  return c;
}

int main(int argc, char** argv) {
  const command_line c = parse(argc, argv);
  const std::vector<double>& tiers = c.tiers;
  const std::vector<std::string>& paths = c.paths;
  const std::uint64_t limit = c.limit;
  const bool cache_table = c.cache_table;
  const std::vector<std::string>& policies = c.policies;
  const run_config& base = c.base;
  for (const std::string& path : paths) {
    auto t = load_trace(path, extent_bytes, limit);
    if (!t) {
      fmt::print(stderr, "strata-tierreplay: {}\n", t.error());
      return 1;
    }
    fmt::print(
        "{}: {} I/Os over {:.0f} s, {} volumes, {} extents of 4 MiB touched, host moved {:.1f} MB, "
        "{:.0f}% reads\n",
        t->name, t->records.size(), static_cast<double>(t->records.back().time_us) / 1e6,
        t->volume_extents.size(), t->footprint_extents, static_cast<double>(t->host_bytes) / 1e6,
        100 * t->read_fraction);
    fmt::print("{:>6} {:>9} {:>8} {:>9} {:>10} {:>9} {:>10} {:>9} {:>9} {:>9}\n", "tier",
               "placement", "SSD I/Os", "SSD bytes", "mean ms", "p99 ms", "moved MB", "promoted",
               "demoted", "throttled");
    for (double fraction : tiers) {
      run_config config = base;
      if (cache_table) {
        config.mode = placement::none;
        config.tier_extents = 1;
        config.cache_lines = std::max<std::uint64_t>(
            1, static_cast<std::uint64_t>(fraction * static_cast<double>(t->footprint_extents)) *
                   (extent_bytes / line_bytes));
        const double belady = belady_miss_ratio(*t, config.cache_lines);
        fmt::print(
            "{:>5.0f}% read cache of {} lines; Belady (MIN, every random read, no bypass) miss "
            "ratio {:.3f}\n",
            100 * fraction, config.cache_lines, belady);
        for (const std::string& policy : policies) {
          config.cache_policy = policy;
          const run_result r = run(*t, config);
          fmt::print(
              "       {:<12} miss ratio {:.3f}  fills {:>7}  mean {:>8.2f} ms  p99 {:>8.2f} ms\n",
              policy,
              1.0 - static_cast<double>(r.cache_reads) /
                        static_cast<double>(std::max<std::uint64_t>(1, r.capacity_reads)),
              r.cache_fills, r.mean_latency_ms, r.p99_latency_ms);
        }
        continue;
      }
      config.tier_extents = std::max<std::uint64_t>(
          1, static_cast<std::uint64_t>(fraction * static_cast<double>(t->footprint_extents)));
      std::map<placement, run_result> results;
      for (placement mode : {placement::oracle, placement::lookahead, placement::adaptive}) {
        config.mode = mode;
        const run_result& r = results[mode] = run(*t, config);
        fmt::print(
            "{:>5.0f}% {:>9} {:>8.3f} {:>9.3f} {:>10.2f} {:>9.2f} {:>10.1f} {:>9} {:>9} {:>9}\n",
            100 * fraction, name(mode), static_cast<double>(r.ssd_ios) / static_cast<double>(r.ios),
            static_cast<double>(r.ssd_bytes) / static_cast<double>(r.bytes), r.mean_latency_ms,
            r.p99_latency_ms, static_cast<double>(r.moved_bytes) / 1e6, r.promotions, r.demotions,
            r.throttled_rounds);
      }
      const run_result& adaptive = results[placement::adaptive];
      auto ssd_ratio = [&](placement yardstick) {
        return static_cast<double>(adaptive.ssd_ios) /
               static_cast<double>(std::max<std::uint64_t>(1, results[yardstick].ssd_ios));
      };
      fmt::print(
          "       adaptive/oracle SSD I/Os {:.3f} (goal >= 1); adaptive/lookahead {:.3f}; "
          "moved/host bytes {:.3f} (goal < 1)\n",
          ssd_ratio(placement::oracle), ssd_ratio(placement::lookahead),
          static_cast<double>(adaptive.moved_bytes) / static_cast<double>(t->host_bytes));
    }
  }
  return 0;
}

}  // namespace
}  // namespace strata::tools

int main(int argc, char** argv) {
  try {
    return strata::tools::main(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "strata-tierreplay: {}\n", e.what());
    return 1;
  }
}
