// strata-raidperf: RAID-6 benchmarks.
//
// 1. Full-stripe writes of a 10+2 group over memory devices, beside raw
//    ISA-L P+Q generation over buffers of the same stripe shape, in the same
//    run, alternating, medians of --repeat runs. Goal: >= 0.8x the raw rate.
//    Data comes from DRAM: the buffers are far larger than the caches.
//    A memory device copies every strip on this same core (a real device
//    would DMA it), so the group is also run over null devices, which
//    complete writes without storing them, as SPDK measures its RAID over
//    null bdevs: that figure is the engine's own cost.
// 2. Sequential reads, healthy and with two members failed (memory devices).
// 3. Rebuild of one member onto a spare: over memory devices, and over 10K
//    HDD models, against one member's sequential media rate (goal >= 0.9x):
//    a plain sequential write of the whole spare through the same model, in
//    the same run. (A whole-disk pass averages the outer and inner zones'
//    rates, so the outer rate alone would be the wrong yardstick.)
// 4. 4 KiB random writes on a 10+2 group of 10K HDD models, healthy and
//    with two members failed: RAID-6's weak spot.
//
// Usage: strata-raidperf [--seconds S] [--repeat N]
#include <fmt/format.h>
#include <isa-l/raid.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "raid/device/hdd_model.h"
#include "raid/device/io_scheduler.h"
#include "raid/device/memory_device.h"
#include "raid/device/null_device.h"
#include "raid/raid6_group.h"
#include "tools/bdevperf/workload.h"
#include "tools/cli.h"

namespace {

using namespace strata;
using namespace strata::device;
using clock_type = std::chrono::steady_clock;

constexpr unsigned data_strips = 10;
constexpr std::uint64_t strip_bytes = 64 * 1024;
constexpr std::uint64_t stripes = 128;  // 80 MiB of data per pass
constexpr std::uint32_t block_size = 4096;

// The OLTP rows: 8 KiB, 95% reads, 90 in flight, random over the group
// (span_blocks narrows it), on a group of this many stripes.
constexpr std::uint64_t oltp_stripes = 2048;
tools::workload_spec oltp_spec() {
  tools::workload_spec oltp;
  oltp.operation = op::read;
  oltp.random = true;
  oltp.io_blocks = 8192 / block_size;
  oltp.queue_depth = 90;
  oltp.write_percent = 5;
  return oltp;
}

double ms(device::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// GB/s (10^9) of data turned into P and Q by pq_gen alone.
double raw_pq_rate(double seconds) {
  // One buffer per stripe, as a host's write of a whole stripe arrives.
  std::vector<aligned_buffer> data;
  for (std::uint64_t i = 0; i < stripes; ++i) {
    data.emplace_back(data_strips * strip_bytes);
    std::memset(data.back().data(), static_cast<int>(i + 1), data_strips * strip_bytes);
  }
  aligned_buffer p(strip_bytes), q(strip_bytes);
  std::vector<void*> pointers(data_strips + 2);
  std::uint64_t bytes = 0;
  const auto start = clock_type::now();
  while (clock_type::now() - start < std::chrono::duration<double>(seconds)) {
    for (std::uint64_t s = 0; s < stripes; ++s) {
      for (unsigned i = 0; i < data_strips; ++i) pointers[i] = data[s].data() + i * strip_bytes;
      pointers[data_strips] = p.data();
      pointers[data_strips + 1] = q.data();
      pq_gen(static_cast<int>(pointers.size()), static_cast<int>(strip_bytes), pointers.data());
      bytes += data_strips * strip_bytes;
    }
  }
  return static_cast<double>(bytes) /
         std::chrono::duration<double>(clock_type::now() - start).count() / 1e9;
}

enum class backing { memory, null, hdd_model };

// GB/s of data that memcpy alone moves the way the memory devices store a
// full stripe: the stripe's data plus P and Q, copied into 12 distinct
// members' storage. The memory devices pay this on the same core as parity.
double device_copy_rate(double seconds) {
  std::vector<aligned_buffer> data, stored;
  for (std::uint64_t i = 0; i < stripes; ++i) {
    data.emplace_back(data_strips * strip_bytes);
    std::memset(data.back().data(), static_cast<int>(i + 1), data_strips * strip_bytes);
    stored.emplace_back((data_strips + 2) * strip_bytes);
    std::memset(stored.back().data(), 0, (data_strips + 2) * strip_bytes);
  }
  aligned_buffer pq(2 * strip_bytes);
  std::uint64_t bytes = 0;
  const auto start = clock_type::now();
  while (clock_type::now() - start < std::chrono::duration<double>(seconds)) {
    for (std::uint64_t s = 0; s < stripes; ++s) {
      std::memcpy(stored[s].data(), data[s].data(), data_strips * strip_bytes);
      std::memcpy(stored[s].data() + data_strips * strip_bytes, pq.data(), 2 * strip_bytes);
      bytes += data_strips * strip_bytes;
    }
  }
  return static_cast<double>(bytes) /
         std::chrono::duration<double>(clock_type::now() - start).count() / 1e9;
}

// A 10+2 group over memory devices, null devices, or 10K HDD models over
// memory devices; `scheduled`: each model behind the I/O scheduler, as on
// stratad's shelf.
struct group_rig {
  boost::asio::io_context context;
  real_clock clock;
  std::vector<std::unique_ptr<block_device>> disks;
  std::vector<std::unique_ptr<block_device>> models;
  std::unique_ptr<raid::raid6_group> group;
  std::uint64_t member_blocks = 0;

  group_rig(std::uint64_t stripe_count, backing kind, bool scheduled = false) {
    raid::raid6_options options;
    options.strip_size_bytes = strip_bytes;
    options.clock = &clock;
    std::vector<block_device*> members;
    member_blocks = (options.reserved_bytes + stripe_count * strip_bytes) / block_size;
    for (unsigned i = 0; i < data_strips + 3; ++i) {  // the last one is a spare
      if (kind == backing::null) {
        disks.push_back(
            std::make_unique<null_device>(context.get_executor(), block_size, member_blocks));
      } else {
        disks.push_back(
            std::move(*memory_device::create(context.get_executor(), {block_size, member_blocks})));
      }
      block_device* member = disks.back().get();
      if (kind == backing::hdd_model) {
        models.push_back(std::make_unique<hdd_model>(*member, clock, hdd_profile::sas_10k()));
        member = models.back().get();
        if (scheduled) {
          models.push_back(std::make_unique<io_scheduler>(*member, clock));
          member = models.back().get();
        }
      }
      if (i < data_strips + 2) members.push_back(member);
    }
    auto g = raid::raid6_group::create(members, options);
    if (!g) throw std::runtime_error(g.error().message);
    group = std::move(*g);
  }
  block_device& spare() { return models.empty() ? *disks.back() : *models.back(); }

  tools::workload_result run(tools::workload_spec spec, double seconds) {
    spec.run_time = std::chrono::duration_cast<duration>(std::chrono::duration<double>(seconds));
    tools::workload w(*group, clock, spec);
    w.start();
    context.restart();
    while (!w.done()) {
      if (context.run_one() == 0) throw std::runtime_error("the loop ran dry");
    }
    auto r = w.finish();
    if (r.errors) throw std::runtime_error("I/O errors: " + r.first_error.message());
    return r;
  }

  // GB/s of data moved in whole stripes, queue depth 4.
  double stripe_rate(op operation, double seconds) {
    tools::workload_spec spec;
    spec.operation = operation;
    spec.random = false;
    spec.io_blocks = static_cast<std::uint32_t>(group->layout().stripe_data_blocks());
    spec.queue_depth = 4;
    spec.buffer_pool_bytes = stripes * data_strips * strip_bytes;  // as large as the raw run's
    return run(spec, seconds).mb_per_s(spec.io_blocks * std::uint64_t{block_size}) / 1e3;
  }
  double full_stripe_rate(double seconds) { return stripe_rate(op::write, seconds); }

  // Starts rebuilding member 3 onto the spare; `done` is set at its end.
  void start_rebuild(bool& done, std::error_code& result) {
    group->fail_member(3);
    if (auto problem = group->replace_member(3, &spare(), [&](std::error_code ec) {
          done = true;
          result = ec;
        })) {
      throw std::runtime_error(problem->message);
    }
  }

  // MB/s of the new member while member 3 is rebuilt onto the spare.
  double rebuild_rate() {
    bool done = false;
    std::error_code result;
    const auto start = clock_type::now();
    start_rebuild(done, result);
    context.restart();
    while (!done) {
      if (context.run_one() == 0) throw std::runtime_error("the loop ran dry");
    }
    if (result) throw std::runtime_error("rebuild failed: " + result.message());
    const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    return static_cast<double>(group->layout().stripes * strip_bytes) / seconds / 1e6;
  }
};

// Writes a device end to end, 1 MiB at a time, 4 writes in flight.
class sequential_pass {
 public:
  static constexpr std::uint64_t io_blocks = (1 << 20) / block_size;

  explicit sequential_pass(block_device& device) : device_(device) {}

  void start() {
    for (slot& s : slots_) issue(s);
  }
  bool done() const noexcept { return outstanding_ == 0; }
  std::error_code failure() const noexcept { return failure_; }

 private:
  struct slot {
    sequential_pass* owner = nullptr;
    aligned_buffer buffer{io_blocks * block_size};
    iovec segment{};
    request req;
  };

  void issue(slot& s) {
    const std::uint64_t block_count = device_.geometry().block_count;
    if (next_lba_ == block_count || failure_) return;
    s.owner = this;
    s.req = request{};
    s.req.operation = op::write;
    s.req.lba = next_lba_;
    s.req.block_count = std::min(io_blocks, block_count - next_lba_);
    s.segment = {s.buffer.data(), s.req.block_count * block_size};
    s.req.buffers = {&s.segment, 1};
    s.req.context = &s;
    s.req.on_complete = [](request& r) noexcept {
      slot& done = *static_cast<slot*>(r.context);
      sequential_pass& pass = *done.owner;
      --pass.outstanding_;
      if (r.result && !pass.failure_) pass.failure_ = r.result;
      pass.issue(done);
    };
    next_lba_ += s.req.block_count;
    ++outstanding_;
    device_.submit(s.req);
  }

  block_device& device_;
  std::vector<slot> slots_ = std::vector<slot>(4);
  std::uint64_t next_lba_ = 0;
  unsigned outstanding_ = 0;
  std::error_code failure_;
};

// MB/s (10^6) of one sequential write pass over a fresh 10K HDD model of
// `block_count` blocks: the member's media rate as a rebuild would see it,
// through the same model.
double sequential_pass_rate(std::uint64_t block_count) {
  boost::asio::io_context context;
  real_clock clock;
  auto disk = std::move(*memory_device::create(context.get_executor(), {block_size, block_count}));
  hdd_model model(*disk, clock, hdd_profile::sas_10k());
  sequential_pass pass(model);
  const auto start = clock_type::now();
  pass.start();
  while (!pass.done()) {
    if (context.run_one() == 0) throw std::runtime_error("the loop ran dry");
  }
  if (pass.failure())
    throw std::runtime_error("sequential pass failed: " + pass.failure().message());
  const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  return static_cast<double>(block_count * block_size) / seconds / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  int repeat = 3;
  CLI::App app{
      "RAID-6 benchmarks: full-stripe writes against raw ISA-L, reads healthy and degraded, "
      "rebuild over memory and HDD models, 4 KiB random writes on HDD models.",
      "strata-raidperf"};
  strata::tools::use_conventions(app);
  app.add_option("--seconds", seconds, "Length of each timed run, in seconds")
      ->type_name("S")
      ->check(strata::tools::positive);
  app.add_option("--repeat", repeat, "Runs of each measurement; the median is reported")
      ->type_name("N")
      ->check(strata::tools::positive);
  strata::tools::parse_or_exit(app, argc, argv);
  try {
    {
      group_rig rig(stripes, backing::memory);
      group_rig null_rig(stripes, backing::null);
      rig.full_stripe_rate(0.5);  // first pass: the memory devices take their chunks
      std::vector<double> raw, copy, group, engine, healthy, degraded;
      for (int i = 0; i < repeat; ++i) {
        raw.push_back(raw_pq_rate(seconds));
        copy.push_back(device_copy_rate(seconds));
        group.push_back(rig.full_stripe_rate(seconds));
        engine.push_back(null_rig.full_stripe_rate(seconds));
        healthy.push_back(rig.stripe_rate(op::read, seconds));
      }
      rig.group->fail_member(1);
      rig.group->fail_member(6);
      for (int i = 0; i < repeat; ++i) degraded.push_back(rig.stripe_rate(op::read, seconds));
      const double r = median(raw), c = median(copy), g = median(group), e = median(engine),
                   h = median(healthy), d = median(degraded);
      // Parity and the devices' copies one after the other on one core.
      const double serial = 1 / (1 / r + 1 / c);
      fmt::print("== RAID-6 10+2, 64 KiB strips, over memory devices, median of {} ==\n", repeat);
      fmt::print("raw ISA-L pq_gen               {:6.2f} GB/s of data\n", r);
      fmt::print(
          "full-stripe writes             {:6.2f} GB/s of data   ratio {:.2f} (goal >= 0.80)\n", g,
          g / r);
      fmt::print(
          "  over null devices            {:6.2f} GB/s of data   ratio {:.2f}: the engine alone\n",
          e, e / r);
      fmt::print(
          "  memcpy of 12 strips alone    {:6.2f} GB/s of data   (the memory devices' own work)\n",
          c);
      fmt::print(
          "  pq_gen then memcpy, 1 core   {:6.2f} GB/s of data   group over memory devices = "
          "{:.2f}x this\n",
          serial, g / serial);
      fmt::print("sequential reads, healthy      {:6.2f} GB/s\n", h);
      fmt::print("sequential reads, 2 failed     {:6.2f} GB/s           ratio {:.2f} of healthy\n",
                 d, d / h);
    }
    {
      group_rig rig(stripes, backing::memory);
      rig.full_stripe_rate(0.5);
      fmt::print("rebuild of one member          {:6.2f} GB/s of the new member\n",
                 rig.rebuild_rate() / 1e3);
    }
    {
      // 10K HDD models over 128 MiB members: a rebuild reads and writes them
      // end to end, so small members suffice to measure the rate.
      constexpr std::uint64_t hdd_stripes = 2048;
      group_rig rig(hdd_stripes, backing::hdd_model);
      const double rebuild = rig.rebuild_rate();
      const double media = sequential_pass_rate(rig.member_blocks);
      fmt::print("== RAID-6 10+2 over 10K SAS HDD models ==\n");
      fmt::print("rebuild, idle group            {:6.1f} MB/s of the new member\n", rebuild);
      fmt::print(
          "  member's sequential write    {:6.1f} MB/s, one pass over the whole disk   ratio "
          "{:.2f} "
          "(goal >= 0.90)\n",
          media, rebuild / media);
      tools::workload_spec random_writes;
      random_writes.operation = op::write;
      random_writes.random = true;
      random_writes.io_blocks = 1;
      random_writes.queue_depth = 32;
      const auto healthy = rig.run(random_writes, seconds);
      rig.group->fail_member(2);
      rig.group->fail_member(9);
      const auto degraded = rig.run(random_writes, seconds);
      fmt::print(
          "4 KiB random writes, QD32      healthy {:6.0f} IOPS (p99 {:.1f} ms), 2 failed {:6.0f} "
          "IOPS (p99 {:.1f} ms)\n",
          healthy.iops(), std::chrono::duration<double, std::milli>(healthy.percentile(99)).count(),
          degraded.iops(),
          std::chrono::duration<double, std::milli>(degraded.percentile(99)).count());
      fmt::print(
          "  (a 10K drive does ~145 random IOPS alone; a RAID-6 small write costs 3 reads + 3 "
          "writes)\n");
    }
    {
      // OLTP on the HDDs: 8 KiB, 95% reads, 90 in flight, the hot blocks
      // spread over the group or clustered in 4 stripes. A read of a
      // healthy strip goes straight to its member (md's direct read); one
      // that waited for its stripe's lock would queue behind each
      // read-modify-write there.
      group_rig rig(oltp_stripes, backing::hdd_model);
      tools::workload_spec oltp = oltp_spec();
      const auto spread = rig.run(oltp, seconds);
      oltp.span_blocks = 4 * rig.group->layout().stripe_data_blocks();
      const auto clustered = rig.run(oltp, seconds);
      fmt::print(
          "8 KiB OLTP, 95% reads, QD90    spread: {:5.0f} IOPS, reads {:5.1f} ms (p99 {:5.1f}), "
          "writes {:6.1f} ms\n",
          spread.iops(), ms(spread.mean()), ms(spread.percentile(99)), ms(spread.write_mean()));
      fmt::print(
          "  hot blocks in 4 stripes      {:5.0f} IOPS, reads {:5.1f} ms (p99 {:5.1f}), writes "
          "{:6.1f} ms   "
          "reads {:.2f}x spread\n",
          clustered.iops(), ms(clustered.mean()), ms(clustered.percentile(99)),
          ms(clustered.write_mean()), ms(clustered.mean()) / ms(spread.mean()));
    }
    {
      // The same OLTP load (spread) while background work runs, the members
      // behind the I/O scheduler (as on stratad's shelf) or not: the reads'
      // p99 against the work's pace. A scrub is deferrable work; a rebuild
      // is not deferred (its I/O is foreground: the group is degraded until
      // it ends), so it is shown once. Work not finished by the end of the
      // run is cancelled.
      fmt::print("8 KiB OLTP, QD90, spread, beside background work:\n");
      enum class work { rebuild, scrub };
      for (const auto& [kind, scheduled] :
           {std::pair{work::rebuild, true}, std::pair{work::scrub, false},
            std::pair{work::scrub, true}}) {
        group_rig rig(oltp_stripes, backing::hdd_model, scheduled);
        const tools::workload_spec oltp = oltp_spec();
        const auto idle = rig.run(oltp, seconds);
        bool done = false;
        std::error_code result;
        if (kind == work::rebuild) {
          rig.start_rebuild(done, result);
        } else {
          rig.group->scrub([&](const raid::scrub_report& r) {
            done = true;
            result = r.error;
          });
        }
        const auto start = clock_type::now();
        const auto busy = rig.run(oltp, seconds);
        const double elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
        const bool finished = done;
        const std::uint64_t stripes_done =
            finished                ? oltp_stripes
            : kind == work::rebuild ? rig.group->rebuild_status().bytes_done / strip_bytes
                                    : rig.group->scrub_stripes_done();
        // MB/s of one member's share (a strip per stripe), as the rebuild rows count.
        const double pace = static_cast<double>(stripes_done * strip_bytes) / 1e6 / elapsed;
        if (!finished)
          kind == work::rebuild ? rig.group->cancel_rebuild() : rig.group->cancel_scrub();
        rig.context.restart();
        while (!done) {
          if (rig.context.run_one() == 0) throw std::runtime_error("the loop ran dry");
        }
        if (result && result != errc::canceled)
          throw std::runtime_error("background work failed: " + result.message());
        fmt::print(
            "  {} reads p99 {:5.1f} ms idle, {:5.1f} ms beside it ({:4.0f} IOPS); its pace {:5.1f} "
            "MB/s a member{}\n",
            kind == work::rebuild ? "rebuild:              "
            : scheduled           ? "scrub, scheduled:     "
                                  : "scrub, not scheduled: ",
            ms(idle.percentile(99)), ms(busy.percentile(99)), busy.iops(), pace,
            finished ? " (finished within the run: at least)" : "");
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "strata-raidperf: {}\n", e.what());
    return 1;
  }
  return 0;
}
