// strata-bdevperf: the block-device benchmark.
//
// Part 1 (file): Strata's io_uring file device against fio
//   (--ioengine=io_uring --direct=1) on the same file, in the same run:
//   4 KiB random reads at queue depth 1 and 32, on a file under /tmp and one
//   under /dev/shm. The two alternate, `--repeat` times each, and the
//   medians are compared, since this machine is shared and noisy.
// Part 3 (rbd, only when asked): Strata's RBD device (the Ceph tier's)
//   against `rbd bench` on the same cluster in the same run: 4 MiB
//   sequential writes and reads (demotion's and promotion's pattern) and
//   4 KiB random reads (tools/bdevperf/rbd.h).
// Part cold (--part cold --ceph-env FILE): the array's demotions to and
//   promotions from a Ceph tier against rbd bench, and the tiers' shares of
//   a skewed random read load (tools/bdevperf/cold_tier.h).
// Part 2 (models): the HDD and SSD models in real time over sparse memory
//   devices of their nominal capacity: IOPS and latency percentiles at queue
//   depth 1, 8 and 32, to check against the datasheets (docs/device-models.md).
//
// Usage: strata-bdevperf [--part file|models|all|rbd|cold] [--seconds S] [--repeat N]
//                        [--model-seconds S] [--file-size-mib M] [--dirs D1,D2]
//                        [--ceph-env DIR/env]
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "raid/device/file_device.h"
#include "raid/device/hdd_model.h"
#include "raid/device/memory_device.h"
#include "raid/device/ssd_model.h"
#include "tools/bdevperf/cold_tier.h"
#include "tools/bdevperf/peer.h"
#include "tools/bdevperf/rbd.h"
#include "tools/bdevperf/workload.h"
#include "tools/cli.h"

namespace {

using namespace strata;
using namespace strata::device;
using strata::tools::median;
using strata::tools::workload;
using strata::tools::workload_result;
using strata::tools::workload_spec;

struct options {
  std::string part = "all";
  double seconds = 3;
  int repeat = 3;
  double model_seconds = 3;
  std::uint64_t file_size_mib = 512;
  std::vector<std::string> dirs;
  std::string ceph_env;
};

// The --dirs list: comma-separated, empty items skipped.
std::vector<std::string> split_dirs(const std::string& list) {
  std::vector<std::string> dirs;
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) dirs.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return dirs;
}

options parse(int argc, char** argv) {
  options o;
  CLI::App app{
      "The block-device benchmark: Strata's io_uring file device against fio on the same files, "
      "and the HDD and SSD models in real time.",
      "strata-bdevperf"};
  tools::use_conventions(app);
  app.add_option("--part", o.part,
                 "What to run: file (file device vs fio), models (drive models), all, rbd (the RBD "
                 "device vs rbd bench) or cold (moves to and from Ceph vs rbd bench)")
      ->check(CLI::IsMember({"file", "models", "all", "rbd", "cold"}));
  app.add_option("--seconds", o.seconds, "Length of each file-device and fio run, in seconds")
      ->type_name("S")
      ->check(tools::positive);
  app.add_option("--repeat", o.repeat,
                 "Runs of each (alternating strata and fio); the median is reported")
      ->type_name("N")
      ->check(tools::positive);
  app.add_option("--model-seconds", o.model_seconds, "Length of each drive-model row, in seconds")
      ->type_name("S")
      ->check(tools::positive);
  app.add_option("--file-size-mib", o.file_size_mib,
                 "Size of the file read in each directory, in MiB")
      ->type_name("M")
      ->check(tools::positive);
  std::string dirs = "/tmp,/dev/shm";
  app.add_option("--dirs", dirs,
                 "Directories to lay the file out in, comma-separated (one row each)")
      ->type_name("D1,D2");
  app.add_option(
         "--ceph-env", o.ceph_env,
         "--part rbd and cold: the cluster, as the env file tools/ceph/single-node.sh writes")
      ->type_name("FILE");
  tools::parse_or_exit(app, argc, argv);
  o.dirs = split_dirs(dirs);
  return o;
}

duration seconds_to_duration(double s) {
  return std::chrono::duration_cast<duration>(std::chrono::duration<double>(s));
}

// User + system CPU of this process (who = RUSAGE_SELF) or of its waited-for
// children (RUSAGE_CHILDREN), threads included: io_uring's io-wq workers are
// threads of the process that submitted, so both sides are charged for them.
double cpu_seconds(int who) {
  rusage usage{};
  ::getrusage(who, &usage);
  auto to_s = [](timeval t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return to_s(usage.ru_utime) + to_s(usage.ru_stime);
}

// Runs the loop until the workload is done. False if the loop ran dry first
// (a device that lost a completion), rather than spinning.
bool run_to_end(boost::asio::io_context& context, workload& w) {
  context.restart();
  while (!w.done()) {
    if (context.run_one() == 0) {
      fmt::print(stderr, "strata-bdevperf: the loop ran out of work with I/O in flight\n");
      return false;
    }
  }
  return true;
}

struct measurement {
  double iops = 0;
  double cpu_us_per_io = 0;
  double mean_latency_us = 0;
};

// Fills the file with non-zero data, so reads touch real blocks, not holes.
bool lay_out(const std::string& path, std::uint64_t size_bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::vector<char> chunk(1 << 20);
  for (std::size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(i * 131 + 7);
  bool ok = true;
  for (std::uint64_t done = 0; ok && done < size_bytes; done += chunk.size()) {
    ok = ::pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(done)) ==
         static_cast<ssize_t>(chunk.size());
  }
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

std::optional<measurement> run_strata(const std::string& path, std::uint32_t queue_depth,
                                      double seconds, bool& direct) {
  boost::asio::io_context context;
  auto ring = io_ring::create(context, 256);
  if (!ring) {
    fmt::print(stderr, "  strata: {}\n", ring.error().message);
    return std::nullopt;
  }
  file_options file;
  file.logical_block_size_bytes = 4096;
  file.queue_depth = std::max<std::uint32_t>(queue_depth, 32);
  auto device = file_device::open(**ring, path, file);
  if (!device) {
    fmt::print(stderr, "  strata: {}\n", device.error().message);
    return std::nullopt;
  }
  direct = (*device)->uses_direct_io();
  real_clock clock;
  workload_spec spec;
  spec.operation = op::read;
  spec.random = true;
  spec.io_blocks = 1;
  spec.queue_depth = queue_depth;
  spec.run_time = seconds_to_duration(seconds);
  spec.seed = 42;
  workload w(**device, clock, spec);
  const double cpu_before = cpu_seconds(RUSAGE_SELF);
  w.start();
  const bool finished = run_to_end(context, w);
  const double cpu = cpu_seconds(RUSAGE_SELF) - cpu_before;
  if (!finished) return std::nullopt;
  const workload_result r = w.finish();
  if (r.errors > 0) {
    fmt::print(stderr, "  strata: {} errors, first: {}\n", r.errors, r.first_error.message());
    return std::nullopt;
  }
  return measurement{r.iops(), cpu / static_cast<double>(r.completed) * 1e6,
                     std::chrono::duration<double, std::micro>(r.mean()).count()};
}

std::optional<measurement> run_fio(const std::string& path, std::uint64_t size_bytes,
                                   std::uint32_t queue_depth, double seconds) {
  const std::string command = fmt::format(
      "fio --name=peer --filename='{}' --size={} --ioengine=io_uring --direct=1 --rw=randread "
      "--bs=4k --iodepth={} --numjobs=1 --time_based --runtime={}ms --norandommap "
      "--randrepeat=0 --output-format=json 2>&1",
      path, size_bytes, queue_depth, static_cast<long>(seconds * 1000));
  const double cpu_before = cpu_seconds(RUSAGE_CHILDREN);
  const auto run = tools::run_command(command);
  if (!run) return std::nullopt;
  const auto& [status, output] = *run;
  // fio's own usr_cpu/sys_cpu cover its job thread only; measure the whole
  // process tree as for Strata (fio's start-up is a few ms of a run's CPU).
  const double cpu_s = cpu_seconds(RUSAGE_CHILDREN) - cpu_before;
  const auto json_start = output.find('{');
  if (status != 0 || json_start == std::string::npos) {
    fmt::print(stderr, "  fio failed (status {}): {}\n", status, output.substr(0, 400));
    return std::nullopt;
  }
  try {
    const auto j = nlohmann::json::parse(output.substr(json_start));
    const auto& job = j.at("jobs").at(0);
    const auto& read = job.at("read");
    const double ios = read.at("total_ios").get<double>();
    return measurement{read.at("iops").get<double>(), cpu_s / ios * 1e6,
                       read.at("lat_ns").at("mean").get<double>() / 1000.0};
  } catch (const std::exception& e) {
    fmt::print(stderr, "  fio output not understood: {}\n", e.what());
    return std::nullopt;
  }
}

int file_part(const options& o) {
  if (std::system("fio --version > /dev/null 2>&1") != 0) {
    fmt::print(stderr,
               "strata-bdevperf: fio is not installed (tools/install-deps.sh installs it)\n");
    return 1;
  }
  fmt::print("== file device vs fio: 4 KiB random reads, O_DIRECT, {} s per run, median of {} ==\n",
             o.seconds, o.repeat);
  fmt::print("{:<10} {:>3} | {:>10} {:>8} {:>8} | {:>10} {:>8} {:>8} | {:>6} {:>6}\n", "dir", "QD",
             "strata", "cpu us", "lat us", "fio", "cpu us", "lat us", "IOPS", "cpu");
  fmt::print("{:<10} {:>3} | {:>10} {:>8} {:>8} | {:>10} {:>8} {:>8} | {:>6} {:>6}\n", "", "",
             "IOPS", "per io", "mean", "IOPS", "per io", "mean", "ratio", "ratio");
  int failures = 0;
  for (const std::string& dir : o.dirs) {
    const std::filesystem::path work =
        std::filesystem::path(dir) / fmt::format("strata-bdevperf-{}", ::getpid());
    std::error_code ec;
    std::filesystem::create_directories(work, ec);
    const std::string path = (work / "bench.img").string();
    const std::uint64_t size_bytes = o.file_size_mib << 20;
    if (ec || !lay_out(path, size_bytes)) {
      fmt::print(stderr, "strata-bdevperf: cannot lay out {} ({} MiB)\n", path, o.file_size_mib);
      ++failures;
      continue;
    }
    for (std::uint32_t qd : {1u, 32u}) {
      std::vector<double> s_iops, s_cpu, s_lat, f_iops, f_cpu, f_lat;
      bool direct = false;
      auto strata_run = [&] {
        if (auto m = run_strata(path, qd, o.seconds, direct)) {
          s_iops.push_back(m->iops);
          s_cpu.push_back(m->cpu_us_per_io);
          s_lat.push_back(m->mean_latency_us);
        }
      };
      auto fio_run = [&] {
        if (auto m = run_fio(path, size_bytes, qd, o.seconds)) {
          f_iops.push_back(m->iops);
          f_cpu.push_back(m->cpu_us_per_io);
          f_lat.push_back(m->mean_latency_us);
        }
      };
      // Interleaved, and each goes first in turn, so that a noisy neighbour
      // or caches warming over the run favour neither.
      for (int i = 0; i < o.repeat; ++i) {
        if (i % 2 == 0) {
          strata_run();
          fio_run();
        } else {
          fio_run();
          strata_run();
        }
      }
      if (s_iops.empty() || f_iops.empty()) {
        ++failures;
        continue;
      }
      const double si = median(s_iops), sc = median(s_cpu), fi = median(f_iops), fc = median(f_cpu);
      fmt::print(
          "{:<10} {:>3} | {:>10.0f} {:>8.2f} {:>8.1f} | {:>10.0f} {:>8.2f} {:>8.1f} | {:>6.2f} "
          "{:>6.2f}{}\n",
          dir, qd, si, sc, median(s_lat), fi, fc, median(f_lat), si / fi, sc / fc,
          direct ? "" : "  (strata: buffered, O_DIRECT refused)");
    }
    std::filesystem::remove_all(work, ec);
  }
  fmt::print(
      "IOPS ratio = strata / fio (goal at QD32: >= 0.90); cpu ratio = strata / fio (lower is "
      "better)\n\n");
  return failures == 0 ? 0 : 1;
}

// `backing_bytes`: the HDD model needs its nominal capacity (seek distances
// depend on it; random reads of a sparse memory device cost nothing); the SSD
// model's timing does not, and its random writes would take a 1 MiB memory
// chunk each, so it runs over 1 GiB.
template <class Model, class Profile>
bool model_rows(const Profile& profile, const options& o, bool writes_too,
                std::uint64_t backing_bytes) {
  boost::asio::io_context context;
  auto backing = memory_device::create(context.get_executor(), {4096, backing_bytes / 4096});
  if (!backing) {
    fmt::print(stderr, "  {}\n", backing.error().message);
    return false;
  }
  real_clock clock;
  if (writes_too) {
    // Touch every chunk of the backing store first: a sparse memory device
    // takes (and zeroes) 1 MiB on the first write into it, which would show
    // up as model latency.
    workload_spec fill;
    fill.operation = op::write;
    fill.random = false;
    fill.io_blocks = 256;
    fill.queue_depth = 4;
    fill.io_count = backing_bytes / (256 * 4096);
    workload w(**backing, clock, fill);
    w.start();
    if (!run_to_end(context, w)) return false;
  }
  Model model(**backing, clock, profile);
  std::vector<op> ops = {op::read};
  if (writes_too) ops.push_back(op::write);
  for (op operation : ops) {
    for (std::uint32_t qd : {1u, 8u, 32u}) {
      workload_spec spec;
      spec.operation = operation;
      spec.random = true;
      spec.io_blocks = 1;
      spec.queue_depth = qd;
      spec.run_time = seconds_to_duration(o.model_seconds);
      workload w(model, clock, spec);
      w.start();
      if (!run_to_end(context, w)) return false;
      const workload_result r = w.finish();
      auto ms = [](duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
      fmt::print("{:<44} {:<6} {:>3} | {:>9.0f} | {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f}\n",
                 profile.name, operation == op::read ? "read" : "write", qd, r.iops(), ms(r.mean()),
                 ms(r.percentile(50)), ms(r.percentile(99)), ms(r.percentile(100)));
      std::fflush(stdout);
    }
  }
  return true;
}

int models_part(const options& o) {
  fmt::print("== drive models in real time: 4 KiB random I/O, {} s per row ==\n", o.model_seconds);
  fmt::print("{:<44} {:<6} {:>3} | {:>9} | {:>8} {:>8} {:>8} {:>8}\n", "model", "op", "QD", "IOPS",
             "mean ms", "p50 ms", "p99 ms", "max ms");
  bool ok = model_rows<hdd_model>(hdd_profile::sas_10k(), o, false,
                                  hdd_profile::sas_10k().capacity_bytes);
  ok = model_rows<hdd_model>(hdd_profile::nl_sas_7k2(), o, false,
                             hdd_profile::nl_sas_7k2().capacity_bytes) &&
       ok;
  ok = model_rows<ssd_model>(ssd_profile::sas_12g(), o, true, std::uint64_t{1} << 30) && ok;
  fmt::print(
      "datasheet expectations (docs/device-models.md): 10K QD1 ~7.0 ms (~140 IOPS); 7.2K QD1\n"
      "~11.8 ms (~85 IOPS); reordering at QD32 ~2-3x QD1; SSD QD1 read ~92 us, peak ~400K read,\n"
      "~50K write IOPS (a real-time run is bounded by this machine's timers and CPU, not the "
      "model)\n\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  int status = 0;
  if (o.part == "file" || o.part == "all") status |= file_part(o);
  if (o.part == "models" || o.part == "all") status |= models_part(o);
  if (o.part == "rbd" || o.part == "cold") {
    if (o.ceph_env.empty()) {
      fmt::print(stderr, "strata-bdevperf: --part {} needs --ceph-env\n", o.part);
      return 2;
    }
    if (o.part == "rbd")
      status |= tools::rbd_part({o.ceph_env, "strata-bench", o.seconds, o.repeat});
    if (o.part == "cold") status |= tools::cold_part({o.ceph_env, "strata-bench", o.repeat});
  }
  return status;
}
