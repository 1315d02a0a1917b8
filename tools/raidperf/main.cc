// strata-raidperf: RAID-6 benchmarks.
//
// Full-stripe writes of a 10+2 group over memory devices, beside raw ISA-L
// P+Q generation over buffers of the same stripe shape, in the same run,
// alternating, medians of --repeat runs. The goal is >= 0.8x the raw rate.
// Data comes from DRAM: the buffers are far larger than the caches.
//
// Usage: strata-raidperf [--seconds S] [--repeat N]
#include <fmt/format.h>
#include <isa-l/raid.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "raid/device/memory_device.h"
#include "raid/raid6_group.h"
#include "tools/bdevperf/workload.h"

namespace {

using namespace strata;
using namespace strata::device;
using clock_type = std::chrono::steady_clock;

constexpr unsigned data_strips = 10;
constexpr std::uint64_t strip_bytes = 64 * 1024;
constexpr std::uint64_t stripes = 128;  // 80 MiB of data per pass
constexpr std::uint32_t block_size = 4096;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// GB/s (10^9) of data turned into P and Q by pq_gen alone.
double raw_pq_rate(double seconds) {
  std::vector<aligned_buffer> data;
  for (std::uint64_t i = 0; i < stripes * data_strips; ++i) {
    data.emplace_back(strip_bytes);
    std::memset(data.back().data(), static_cast<int>(i), strip_bytes);
  }
  aligned_buffer p(strip_bytes), q(strip_bytes);
  std::vector<void*> pointers(data_strips + 2);
  std::uint64_t bytes = 0;
  const auto start = clock_type::now();
  while (clock_type::now() - start < std::chrono::duration<double>(seconds)) {
    for (std::uint64_t s = 0; s < stripes; ++s) {
      for (unsigned i = 0; i < data_strips; ++i) pointers[i] = data[s * data_strips + i].data();
      pointers[data_strips] = p.data();
      pointers[data_strips + 1] = q.data();
      pq_gen(static_cast<int>(pointers.size()), static_cast<int>(strip_bytes), pointers.data());
      bytes += data_strips * strip_bytes;
    }
  }
  return static_cast<double>(bytes) / std::chrono::duration<double>(clock_type::now() - start).count() / 1e9;
}

struct group_rig {
  boost::asio::io_context context;
  std::vector<std::unique_ptr<memory_device>> disks;
  std::unique_ptr<raid::raid6_group> group;
  real_clock clock;

  group_rig() {
    raid::raid6_options options;
    options.strip_size_bytes = strip_bytes;
    std::vector<block_device*> members;
    const std::uint64_t member_blocks = (options.reserved_bytes + stripes * strip_bytes) / block_size;
    for (unsigned i = 0; i < data_strips + 2; ++i) {
      disks.push_back(std::move(*memory_device::create(context.get_executor(), {block_size, member_blocks})));
      members.push_back(disks.back().get());
    }
    auto g = raid::raid6_group::create(members, options);
    if (!g) throw std::runtime_error(g.error().message);
    group = std::move(*g);
  }

  // GB/s of data written in full stripes, queue depth 4.
  double full_stripe_rate(double seconds) {
    tools::workload_spec spec;
    spec.operation = op::write;
    spec.random = false;
    spec.io_blocks = static_cast<std::uint32_t>(group->layout().stripe_data_blocks());
    spec.queue_depth = 4;
    spec.run_time = std::chrono::duration_cast<duration>(std::chrono::duration<double>(seconds));
    tools::workload w(*group, clock, spec);
    w.start();
    context.restart();
    while (!w.done()) {
      if (context.run_one() == 0) throw std::runtime_error("the loop ran dry");
    }
    const auto r = w.finish();
    if (r.errors) throw std::runtime_error("write errors: " + r.first_error.message());
    return r.mb_per_s(spec.io_blocks * std::uint64_t{block_size}) / 1e3;
  }
};

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") seconds = std::stod(argv[i + 1]);
    else if (flag == "--repeat") repeat = std::stoi(argv[i + 1]);
    else {
      fmt::print(stderr, "usage: strata-raidperf [--seconds S] [--repeat N]\n");
      return 2;
    }
  }
  group_rig rig;
  rig.full_stripe_rate(0.5);  // first pass: the memory devices take their chunks
  std::vector<double> raw, group;
  for (int i = 0; i < repeat; ++i) {
    raw.push_back(raw_pq_rate(seconds));
    group.push_back(rig.full_stripe_rate(seconds));
  }
  const double r = median(raw), g = median(group);
  fmt::print("== RAID-6 10+2, 64 KiB strips, full-stripe writes over memory devices, median of {} ==\n", repeat);
  fmt::print("raw ISA-L pq_gen          {:6.2f} GB/s of data\n", r);
  fmt::print("raid6_group full stripes  {:6.2f} GB/s of data   ratio {:.2f} (goal >= 0.80)\n", g, g / r);
  return 0;
}
