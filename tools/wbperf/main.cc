// strata-wbperf: the write-back cache (raid/write_back.h) against writing
// through, on the simulated shelf's models: a RAID-6 10+2 group of 10K SAS
// HDD models, and a write log on a RAID-1 pair of SAS SSD models, every
// drive behind the I/O scheduler as on stratad's shelf. Each row runs the
// same load on the group itself (write-through) and through the cache
// (write-back), alternating, --repeat times; medians.
//
//   OLTP      8 KiB, 95% reads, 90 in flight, hot blocks Zipf-skewed
//             (fio's zipf:1.1) and spread evenly: IOPS, read and write
//             mean and p99
//   random    4 KiB random writes at queue depth 1 and 32: IOPS, p50, p99
//   sequential 1 MiB writes, 4 in flight: MB/s (long writes bypass the log)
//
// The log is small (--log-mib, 256 by default), so a run longer than a few
// seconds of writes reaches the steady state: writes slowed to the destage
// rate. The cache starts each write-back run empty (drained).
//
// Usage: strata-wbperf [--seconds S] [--repeat N] [--log-mib M]
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "raid/device/hdd_model.h"
#include "raid/device/io_scheduler.h"
#include "raid/device/memory_device.h"
#include "raid/device/ssd_model.h"
#include "raid/raid1_group.h"
#include "raid/raid6_group.h"
#include "raid/write_back.h"
#include "tools/bdevperf/workload.h"
#include "tools/cli.h"

namespace {

using namespace strata;
using namespace strata::device;

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t strip_bytes = 64 * 1024;
constexpr unsigned data_strips = 10;
constexpr std::uint64_t stripes = 2048;  // 1.25 GiB of data, 128 MiB members

double ms(duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct rig {
  boost::asio::io_context context;
  real_clock clock;
  std::vector<std::unique_ptr<block_device>> layers;
  std::unique_ptr<raid::raid6_group> group;
  std::unique_ptr<raid::raid1_group> log;
  std::unique_ptr<raid::write_back_device> cache;

  explicit rig(std::uint64_t log_mib) {
    auto drive = [&](std::uint64_t blocks, bool hdd) -> block_device* {
      layers.push_back(
          std::move(*memory_device::create(context.get_executor(), {block_size, blocks})));
      block_device* d = layers.back().get();
      if (hdd) {
        layers.push_back(std::make_unique<hdd_model>(*d, clock, hdd_profile::sas_10k()));
      } else {
        layers.push_back(std::make_unique<ssd_model>(*d, clock, ssd_profile::sas_12g()));
      }
      d = layers.back().get();
      // As controller/shelf.cc schedules its drives.
      layers.push_back(std::make_unique<io_scheduler>(
          *d, clock,
          hdd ? io_scheduler_options{.busy_background_in_flight = 1,
                                     .idle_background_in_flight = 8,
                                     .idle_wait = std::chrono::milliseconds(10)}
              : io_scheduler_options{.busy_background_in_flight = 4,
                                     .idle_background_in_flight = 32,
                                     .idle_wait = std::chrono::milliseconds(1)}));
      return layers.back().get();
    };
    raid::raid6_options r6;
    r6.strip_size_bytes = strip_bytes;
    r6.clock = &clock;
    std::vector<block_device*> members;
    for (unsigned i = 0; i < data_strips + 2; ++i)
      members.push_back(drive((r6.reserved_bytes + stripes * strip_bytes) / block_size, true));
    auto g = raid::raid6_group::create(members, r6);
    if (!g) throw std::runtime_error(g.error().message);
    group = std::move(*g);
    raid::raid1_options r1;
    r1.clock = &clock;
    std::vector<block_device*> mirrors;
    for (int i = 0; i < 2; ++i)
      mirrors.push_back(drive((r1.reserved_bytes + (log_mib << 20)) / block_size, false));
    auto l = raid::raid1_group::create(mirrors, r1);
    if (!l) throw std::runtime_error(l.error().message);
    log = std::move(*l);
    std::optional<std::error_code> formatted;
    raid::write_back_device::format(*log, group->geometry(), {1},
                                    [&](std::error_code ec) { formatted = ec; });
    drive_until([&] { return formatted.has_value(); });
    if (*formatted) throw std::runtime_error("format: " + formatted->message());
    raid::write_back_options o;
    o.clock = &clock;
    o.stripe_blocks = group->layout().stripe_data_blocks();
    o.max_record_blocks = static_cast<std::uint32_t>(o.stripe_blocks);
    std::optional<raid::write_back_device::opened> opened;
    raid::write_back_device::open(
        *group, *log, {1}, o, [&](raid::write_back_device::opened r) { opened = std::move(r); });
    drive_until([&] { return opened.has_value(); });
    if (!*opened) throw std::runtime_error("open: " + opened->error().message);
    cache = std::move(**opened);
  }
  ~rig() {
    bool stopped = false;
    cache->stop([&] { stopped = true; });
    drive_until([&] { return stopped; });
  }

  template <class Done>
  void drive_until(Done done) {
    context.restart();
    while (!done()) {
      // Nothing for a minute: a request lost somewhere; say where things stand.
      if (context.run_one_for(std::chrono::seconds(60)) == 0) {
        throw std::runtime_error("nothing happened for a minute; the cache: " +
                                 (cache ? cache->debug_state() : std::string("-")));
      }
    }
  }

  // Destages everything; returns stripes a second destaged meanwhile.
  double drain() {
    const auto start = std::chrono::steady_clock::now();
    const std::uint64_t before = cache->counters().stripes_destaged;
    cache->set_mode(raid::cache_mode::write_through);
    drive_until([&] { return cache->drained(); });
    cache->set_mode(raid::cache_mode::write_back);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return static_cast<double>(cache->counters().stripes_destaged - before) /
           std::max(seconds, 1e-3);
  }

  tools::workload_result run(block_device& target, tools::workload_spec spec, double seconds) {
    spec.run_time = std::chrono::duration_cast<duration>(std::chrono::duration<double>(seconds));
    tools::workload w(target, clock, spec);
    w.start();
    drive_until([&] { return w.done(); });
    auto r = w.finish();
    if (r.errors) throw std::runtime_error("I/O errors: " + r.first_error.message());
    return r;
  }
};

struct figures {
  std::vector<double> iops, read_mean, read_p99, write_mean, write_p99, p50;
  void add(const tools::workload_result& r, bool mixed) {
    iops.push_back(r.iops());
    p50.push_back(ms(r.percentile(50)));
    if (mixed) {
      read_mean.push_back(ms(r.mean()));
      read_p99.push_back(ms(r.percentile(99)));
      write_mean.push_back(ms(r.write_mean()));
      write_p99.push_back(ms(r.write_percentile(99)));
    } else {
      write_mean.push_back(ms(r.mean()));
      write_p99.push_back(ms(r.percentile(99)));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  int repeat = 3;
  std::uint64_t log_mib = 256;
  CLI::App app{
      "The write-back cache against writing through, on HDD and SSD models as on stratad's shelf: "
      "OLTP, 4 KiB random writes, 1 MiB sequential writes.",
      "strata-wbperf"};
  strata::tools::use_conventions(app);
  app.add_option("--seconds", seconds, "Length of each run, in seconds")
      ->type_name("S")
      ->check(strata::tools::positive);
  app.add_option("--repeat", repeat,
                 "Runs of each row (write-through and write-back alternating); medians")
      ->type_name("N")
      ->check(strata::tools::positive);
  app.add_option("--log-mib", log_mib, "Size of the write log (the RAID-1 SSD pair), in MiB")
      ->type_name("M")
      ->check(strata::tools::positive);
  strata::tools::parse_or_exit(app, argc, argv);
  try {
    rig r(log_mib);
    fmt::print(
        "== write-back (log: RAID-1 of 2 SAS SSD models, {} MiB) against write-through, RAID-6 "
        "10+2 of 10K SAS "
        "HDD models; {} s runs, median of {} ==\n",
        log_mib, seconds, repeat);
    std::fflush(stdout);
    struct row {
      const char* name;
      tools::workload_spec spec;
      bool mixed;
    };
    std::vector<row> rows;
    tools::workload_spec oltp;
    oltp.operation = op::read;
    oltp.io_blocks = 2;
    oltp.queue_depth = 90;
    oltp.write_percent = 5;
    oltp.zipf_theta = 1.1;
    rows.push_back({"8 KiB OLTP, 95% reads, QD90, zipf:1.1", oltp, true});
    oltp.zipf_theta = 0;
    rows.push_back({"8 KiB OLTP, 95% reads, QD90, uniform ", oltp, true});
    tools::workload_spec random_writes;
    random_writes.operation = op::write;
    random_writes.io_blocks = 1;
    random_writes.queue_depth = 1;
    rows.push_back({"4 KiB random writes, QD1           ", random_writes, false});
    random_writes.queue_depth = 32;
    rows.push_back({"4 KiB random writes, QD32          ", random_writes, false});
    tools::workload_spec sequential;
    sequential.operation = op::write;
    sequential.random = false;
    sequential.io_blocks = (1 << 20) / block_size;
    sequential.queue_depth = 4;
    rows.push_back({"1 MiB sequential writes, QD4       ", sequential, false});
    for (const row& w : rows) {
      figures through, back;
      std::vector<double> destage_rates;
      for (int i = 0; i < repeat; ++i) {
        through.add(r.run(*r.group, w.spec, seconds), w.mixed);
        r.drain();
        back.add(r.run(*r.cache, w.spec, seconds), w.mixed);
        destage_rates.push_back(r.drain());
      }
      const double bytes = static_cast<double>(w.spec.io_blocks) * block_size;
      auto line = [&](const char* mode, const figures& f) {
        if (w.mixed) {
          fmt::print(
              "  {:13} {:6.0f} IOPS  reads {:6.2f} ms (p99 {:6.1f})  writes {:6.2f} ms (p99 "
              "{:6.1f})\n",
              mode, median(f.iops), median(f.read_mean), median(f.read_p99), median(f.write_mean),
              median(f.write_p99));
        } else {
          fmt::print("  {:13} {:6.0f} IOPS {:7.1f} MB/s  p50 {:6.2f} ms  p99 {:6.1f} ms\n", mode,
                     median(f.iops), median(f.iops) * bytes / 1e6, median(f.p50),
                     median(f.write_p99));
        }
      };
      fmt::print("{}\n", w.name);
      line("write-through", through);
      line("write-back", back);
      fmt::print("  ratio          {:5.2f}x IOPS", median(back.iops) / median(through.iops));
      fmt::print(", then drained at {:.0f} stripes/s", median(destage_rates));
      if (w.mixed)
        fmt::print(", writes {:5.1f}x faster",
                   median(through.write_mean) / median(back.write_mean));
      fmt::print("\n");
      std::fflush(stdout);
    }
    const raid::write_back_counters& k = r.cache->counters();
    fmt::print(
        "cache: {} writes logged, {} direct, {} group commits, {} stripes destaged ({} full-stripe "
        "writes), {} "
        "writes waited for log space\n",
        k.writes_logged, k.writes_direct, k.log_flushes, k.stripes_destaged, k.full_stripe_writes,
        k.writes_waited_for_space);
  } catch (const std::exception& e) {
    fmt::print(stderr, "strata-wbperf: {}\n", e.what());
    return 1;
  }
  return 0;
}
