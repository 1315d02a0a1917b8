#include "tools/bdevperf/cold_tier.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/clock.h"
#include "raid/device/memory_device.h"
#include "raid/device/rbd_device.h"
#include "tiering/metadata_store.h"
#include "tiering/migrator.h"
#include "tiering/pool.h"
#include "tiering/volume.h"
#include "tools/bdevperf/peer.h"
#include "tools/bdevperf/rbd.h"
#include "tools/bdevperf/workload.h"

namespace strata::tools {
namespace {

using namespace strata::device;
using clock_type = std::chrono::steady_clock;
constexpr std::uint64_t extent_bytes = 4 << 20;
constexpr std::uint32_t block_bytes = 4096;
constexpr std::uint64_t extent_blocks = extent_bytes / block_bytes;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Runs the loop until `done`, or fails after `limit` seconds.
template <class Done>
bool run_until(boost::asio::io_context& context, Done done, double limit = 300) {
  const auto start = clock_type::now();
  while (!done()) {
    context.restart();
    context.run_for(std::chrono::milliseconds(20));
    if (seconds_since(start) > limit) return false;
  }
  return true;
}

// `reads` random 4 KiB reads of every extent of `v`, 32 at a time: heat
// enough for the migrator to bring the extents back.
bool heat_every_extent(boost::asio::io_context& context, tiering::volume& v, std::uint64_t extents,
                       int reads) {
  struct slot {
    request req;
    aligned_buffer buffer{block_bytes};
    iovec segment{};
    bool busy = false;
  };
  std::vector<slot> slots(32);
  std::uint64_t next = 0, errors = 0;
  const std::uint64_t total = extents * static_cast<std::uint64_t>(reads);
  std::uint64_t completed = 0;
  auto issue = [&](slot& s) {
    const std::uint64_t e = next % extents, k = next / extents;
    ++next;
    s.segment = {s.buffer.data(), block_bytes};
    s.req = request{};
    s.req.operation = op::read;
    s.req.lba = e * extent_blocks + (k * 97 + 13) % extent_blocks;  // never a stream
    s.req.block_count = 1;
    s.req.buffers = {&s.segment, 1};
    s.req.context = &s;
    s.busy = true;
    s.req.on_complete = [](request& r) noexcept { static_cast<slot*>(r.context)->busy = false; };
    v.submit(s.req);
  };
  for (slot& s : slots) {
    if (next < total) issue(s);
  }
  return run_until(context,
                   [&] {
                     for (slot& s : slots) {
                       if (s.busy || s.req.on_complete == nullptr) continue;
                       ++completed;
                       if (s.req.result && errors++ == 0)
                         fmt::print(stderr, "  a heating read failed: {}\n",
                                    s.req.result.message());
                       s.req.on_complete = nullptr;
                       if (next < total) issue(s);
                     }
                     return completed == total;
                   }) &&
         errors == 0;
}

std::optional<workload_result> run_workload(boost::asio::io_context& context, block_device& d,
                                            const workload_spec& spec) {
  real_clock clock;
  workload w(d, clock, spec);
  w.start();
  if (!run_until(context, [&] { return w.done(); })) return std::nullopt;
  return w.finish();
}

}  // namespace

int cold_part(const cold_part_options& o) {
  auto connected = connect_bench_cluster(o.ceph_env, o.pool);
  if (!connected) return connected.error();
  const auto& env = connected->env;
  const auto& cluster = connected->cluster;
  rados_ioctx_t io = connected->io;
  const std::uint64_t bytes = o.extents * extent_bytes;
  const std::string ours = "bdevperf-cold", theirs = "bdevperf-cold-rbd-bench";
  for (const std::string& name : {ours, theirs}) {
    rbd_remove(io, name.c_str());
    if (auto made = create_rbd_image(*cluster, o.pool, name, bytes); !made) {
      fmt::print(stderr, "strata-bdevperf: {}\n", made.error().message);
      rados_ioctx_destroy(io);
      return 1;
    }
  }
  char dir_template[] = "/var/tmp/strata-bdevperf-cold.XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(dir_template);
  int failures = 0;
  {
    boost::asio::io_context context;
    real_clock clock;
    // A quarter more than the volume: promotions stop at the capacity
    // tier's low water (10% free), and all of them must fit above it.
    auto capacity =
        memory_device::create(context.get_executor(), {block_bytes, bytes / block_bytes * 5 / 4});
    rbd_options ro;
    ro.logical_block_size_bytes = block_bytes;
    ro.queue_depth = 64;
    ro.lock = rbd_lock::take_if_free;
    auto cold = rbd_device::open(context, cluster, o.pool, ours, ro);
    auto store = tiering::metadata_store::open((dir / "metadata").string(), context.get_executor());
    if (!capacity || !cold || !store) {
      fmt::print(stderr, "strata-bdevperf: {}\n",
                 !capacity ? capacity.error().message
                 : !cold   ? cold.error().message
                           : store.error().message);
      return 1;
    }
    tiering::pool_options po;
    po.clock = &clock;
    po.new_extents = tiering::new_extent_tier::capacity;
    po.heat.half_life = std::chrono::seconds(5);  // heated extents cool again between rounds
    auto pool = tiering::pool::open(
        context.get_executor(), **store,
        {{capacity->get(), tiering::tier::capacity}, {cold->get(), tiering::tier::cold}}, po);
    if (!pool) {
      fmt::print(stderr, "strata-bdevperf: {}\n", pool.error().message);
      return 1;
    }
    tiering::volume* v = nullptr;
    (*pool)->create_volume(
        {"bench", block_bytes, bytes / block_bytes, tiering::affinity::automatic},
        [&](std::expected<tiering::volume*, error> made) { v = made ? *made : nullptr; });
    run_until(
        context, [&] { return v != nullptr; }, 30);
    if (v == nullptr) return 1;
    workload_spec fill;
    fill.operation = op::write;
    fill.random = false;
    fill.io_blocks = extent_blocks;
    fill.queue_depth = 16;
    fill.io_count = o.extents;
    run_workload(context, *v, fill);

    tiering::migrator_options mo;
    mo.interval = std::chrono::milliseconds(100);
    mo.max_moves_in_flight = o.moves_in_flight;
    mo.max_bytes_per_second = 1e12;  // the cluster is the limit
    mo.cold_cooling = std::chrono::seconds(1);
    mo.promote_min_score = 4;
    fmt::print(
        "cold part: the array's moves to and from a Ceph tier vs rbd bench, cluster {} at {}, pool "
        "{}\n",
        cluster->fsid(), env.at("CEPH_MON"), o.pool);
    fmt::print(
        "{} extents of 4 MiB ({} MiB) each way per round; moves in flight up to {}; rbd bench: 4 "
        "MiB I/Os, {} threads\n",
        o.extents, bytes >> 20, o.moves_in_flight, o.moves_in_flight);
    std::vector<double> demote, promote, bench_write, bench_read;
    const std::string their_spec = o.pool + "/" + theirs;
    rbd_bench(env, their_spec, true, false, extent_bytes, o.moves_in_flight,
              bytes);  // so its reads read data
    for (int round = 0; round < o.repeat; ++round) {
      // Cooled: idle for the cooling, and the heat of the last promotion
      // decayed below the promotion threshold.
      run_until(
          context,
          [&] {
            return v->heat().score(0) < mo.promote_min_score && v->heat().idle_seconds(0) >= 2;
          },
          60);
      {
        // The wait for the cooling had no foreground I/O: stratad's
        // migrator would have seen its rounds idle, and gone at its cap.
        (void)(*pool)->take_latency_window();
        tiering::migrator m(**pool, mo);
        const auto start = clock_type::now();
        m.run_round();
        m.start();  // a round every interval, as in stratad: the moves in flight ramp up
        const bool moved = run_until(context, [&] {
          if (m.moves_in_flight() == 0 && m.planned() == 0) m.run_round();
          return v->mapped_extents_on(tiering::tier::cold) == o.extents;
        });
        if (moved)
          demote.push_back(static_cast<double>(bytes) / 1e6 / seconds_since(start));
        else
          ++failures;
        run_until(context, [&] { return m.moves_in_flight() == 0; });
      }
      if (!heat_every_extent(context, *v, o.extents, 6)) {
        fmt::print(stderr, "  the reads that heat the extents failed\n");
        ++failures;
      }
      if (const std::string& why = (*pool)->group_pause(1); !why.empty())
        fmt::print(stderr, "  the cold group is paused: {}\n", why);
      {
        // Promotion alone: with the bench's short half-life the extents
        // would cool again within the phase.
        tiering::migrator_options back = mo;
        back.cold_cooling = device::duration::zero();
        (void)(*pool)->take_latency_window();  // the heating reads are over: an idle array
        tiering::migrator m(**pool, back);
        const auto start = clock_type::now();
        m.run_round();
        m.start();  // a round every interval, as in stratad: the moves in flight ramp up
        const bool moved = run_until(
            context,
            [&] {
              if (m.moves_in_flight() == 0 && m.planned() == 0) m.run_round();
              return v->mapped_extents_on(tiering::tier::capacity) == o.extents;
            },
            60);
        if (moved) {
          promote.push_back(static_cast<double>(bytes) / 1e6 / seconds_since(start));
        } else {
          fmt::print(
              stderr,
              "  promotion did not finish: {} back, {} failed moves, extent 0's score {:.1f}\n",
              v->mapped_extents_on(tiering::tier::capacity), m.counters().failed_moves,
              v->heat().score(0));
          ++failures;
        }
        run_until(context, [&] { return m.moves_in_flight() == 0; });
      }
      if (auto w =
              rbd_bench(env, their_spec, true, false, extent_bytes, o.moves_in_flight, bytes)) {
        bench_write.push_back(*w * extent_bytes / 1e6);
      } else {
        ++failures;
      }
      if (auto r =
              rbd_bench(env, their_spec, false, false, extent_bytes, o.moves_in_flight, bytes)) {
        bench_read.push_back(*r * extent_bytes / 1e6);
      } else {
        ++failures;
      }
      fmt::print(
          "  round {}: demotion {:.0f} MB/s (rbd bench writes {:.0f}), promotion {:.0f} MB/s (rbd "
          "bench reads {:.0f})\n",
          round + 1, demote.empty() ? 0 : demote.back(),
          bench_write.empty() ? 0 : bench_write.back(), promote.empty() ? 0 : promote.back(),
          bench_read.empty() ? 0 : bench_read.back());
    }
    fmt::print("\n{:<56} {:>12} {:>12} {:>7}\n", "moves (medians)", "strata", "rbd bench", "ratio");
    fmt::print("{:<56} {:>9.0f} MB/s {:>7.0f} MB/s {:>7.2f}\n",
               "demotion: capacity -> Ceph (vs rbd bench 4 MiB writes)", median(demote),
               median(bench_write),
               median(bench_write) > 0 ? median(demote) / median(bench_write) : 0);
    fmt::print("{:<56} {:>9.0f} MB/s {:>7.0f} MB/s {:>7.2f}\n",
               "promotion: Ceph -> capacity (vs rbd bench 4 MiB reads)", median(promote),
               median(bench_read),
               median(bench_read) > 0 ? median(promote) / median(bench_read) : 0);

    // The tiers under a host's reads: half the extents in Ceph, half local;
    // random 4 KiB reads, skewed (Zipf 1.1) over the volume, QD 8, no moves.
    {
      tiering::migrator m(**pool, mo);
      run_until(
          context,
          [&] {
            return v->heat().score(0) < mo.promote_min_score && v->heat().idle_seconds(0) >= 2;
          },
          60);
      m.run_round();
      m.start();  // a round every interval, as in stratad: the moves in flight ramp up
      run_until(context, [&] {
        if (m.moves_in_flight() == 0 && m.planned() == 0) m.run_round();
        return v->mapped_extents_on(tiering::tier::cold) == o.extents;
      });
      run_until(context, [&] { return m.moves_in_flight() == 0; });
    }
    std::uint64_t back = 0;
    for (std::uint64_t e = 0; e < o.extents / 2; ++e) {
      v->move_extent(e, tiering::tier::capacity, [&](std::error_code ec) { back += ec ? 0 : 1; });
      run_until(
          context, [&] { return back == e + 1; }, 60);
    }
    const tiering::volume_counters before = v->counters();
    auto read_span = [&](std::uint64_t first_extent, std::uint64_t count, double zipf) {
      workload_spec spec;
      spec.operation = op::read;
      spec.random = true;
      spec.io_blocks = 1;
      spec.queue_depth = 8;
      spec.run_time = std::chrono::seconds(5);
      spec.zipf_theta = zipf;
      spec.span_blocks = (first_extent + count) * extent_blocks;
      return run_workload(context, *v, spec);
    };
    const auto mixed = read_span(0, o.extents, 1.1);
    const tiering::volume_counters after = v->counters();
    auto reads_from = [&](tiering::source s) {
      return static_cast<double>(after.reads(s).ios - before.reads(s).ios);
    };
    const double local = reads_from(tiering::source::capacity),
                 in_ceph = reads_from(tiering::source::cold);
    const auto local_only = read_span(0, o.extents / 2, 0);
    if (mixed && local_only && local + in_ceph > 0) {
      fmt::print(
          "\nrandom 4 KiB reads, Zipf 1.1, QD 8, half of the extents in Ceph: {:.0f} IOPS, p50 "
          "{:.2f} ms, p99 {:.2f} ms\n",
          mixed->iops(), std::chrono::duration<double, std::milli>(mixed->percentile(50)).count(),
          std::chrono::duration<double, std::milli>(mixed->percentile(99)).count());
      fmt::print("  served by the capacity tier: {:.0f}%; by Ceph: {:.0f}%\n",
                 100 * local / (local + in_ceph), 100 * in_ceph / (local + in_ceph));
      // The volume's own per-tier latency (tiering::volume_counters): each
      // read piece from its dispatch to the tier to its completion.
      for (const auto& [name, from] : {std::pair{"capacity tier", tiering::source::capacity},
                                       std::pair{"Ceph", tiering::source::cold}}) {
        const auto& a = before.read_latency[static_cast<int>(from)];
        const auto& b = after.read_latency[static_cast<int>(from)];
        if (b.count == a.count) continue;
        const auto& bounds = tiering::volume_counters::latency_bucket_bounds_seconds;
        double seen = 0, p99 = bounds.back();
        for (std::size_t i = 0; i < bounds.size(); ++i) {
          seen += static_cast<double>(b.latency_buckets[i] - a.latency_buckets[i]);
          if (seen >= 0.99 * static_cast<double>(b.count - a.count)) {
            p99 = bounds[i];
            break;
          }
        }
        fmt::print(
            "  {:<14} {:>8} reads, mean {:.3f} ms, p99 at most {:.2f} ms (the volume's "
            "histogram)\n",
            name, b.count - a.count,
            std::chrono::duration<double, std::milli>(b.latency - a.latency).count() /
                static_cast<double>(b.count - a.count),
            p99 * 1000);
      }
      fmt::print(
          "  the local half alone (memory here): p50 {:.3f} ms; so Ceph's share of the latency is "
          "its own\n",
          std::chrono::duration<double, std::milli>(local_only->percentile(50)).count());
    } else {
      ++failures;
    }
    run_until(
        context, [&] { return v->idle() && (*store)->in_flight() == 0; }, 60);
    pool->reset();
    cold->reset();
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  for (const std::string& name : {ours, theirs}) rbd_remove(io, name.c_str());
  rados_ioctx_destroy(io);
  return failures == 0 ? 0 : 1;
}

}  // namespace strata::tools
