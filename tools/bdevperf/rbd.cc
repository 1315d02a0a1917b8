#include "tools/bdevperf/rbd.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <vector>

#include "raid/device/clock.h"
#include "raid/device/rbd_device.h"
#include "tools/bdevperf/peer.h"
#include "tools/bdevperf/workload.h"

namespace strata::tools {
namespace {

using namespace strata::device;

struct row {
  std::string name;
  op operation;
  bool random;
  std::uint32_t io_bytes;
  std::uint32_t queue_depth;
};

// One run of Strata's device: MB/s (or IOPS for 4 KiB) over `seconds`.
std::optional<workload_result> run_device(rbd_device& device, boost::asio::io_context& context,
                                          const row& r, double seconds) {
  real_clock clock;
  workload_spec spec;
  spec.operation = r.operation;
  spec.random = r.random;
  spec.io_blocks = r.io_bytes / device.geometry().logical_block_size_bytes;
  spec.queue_depth = r.queue_depth;
  spec.run_time = std::chrono::duration_cast<duration>(std::chrono::duration<double>(seconds));
  spec.seed = 7;
  workload w(device, clock, spec);
  w.start();
  context.restart();
  while (!w.done()) {
    if (context.run_one() == 0) {
      fmt::print(stderr, "  strata: the loop ran out of work with I/O in flight\n");
      return std::nullopt;
    }
  }
  workload_result result = w.finish();
  if (result.errors > 0) {
    fmt::print(stderr, "  strata: {} errors, first: {}\n", result.errors,
               result.first_error.message());
    return std::nullopt;
  }
  return result;
}

}  // namespace

std::map<std::string, std::string> read_ceph_env(const std::string& path) {
  std::map<std::string, std::string> env;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// Its last line: "elapsed: S ops: N ops/sec: X bytes/sec: ...".
std::optional<double> rbd_bench(const std::map<std::string, std::string>& env,
                                const std::string& image, bool write, bool random,
                                std::uint32_t io_bytes, std::uint32_t threads,
                                std::uint64_t total_bytes) {
  const std::string command = fmt::format(
      "timeout 600 rbd -c '{}' --keyring '{}' bench --io-type {} --io-size {} --io-threads {} "
      "--io-total {} "
      "--io-pattern {} '{}' 2>&1",
      env.at("CEPH_CONF"), env.at("CEPH_KEYRING"), write ? "write" : "read", io_bytes, threads,
      total_bytes, random ? "rand" : "seq", image);
  const auto run = run_command(command);
  if (!run) return std::nullopt;
  const auto& [status, output] = *run;
  std::smatch m;
  static const std::regex last(R"(elapsed:\s*([0-9.]+)\s+ops:\s*([0-9]+)\s+ops/sec:\s*([0-9.]+))");
  if (status != 0 || !std::regex_search(output, m, last)) {
    fmt::print(stderr, "  rbd bench failed:\n{}\n",
               output.substr(output.size() > 800 ? output.size() - 800 : 0));
    return std::nullopt;
  }
  return std::stod(m[3].str());
}

std::expected<bench_cluster, int> connect_bench_cluster(const std::string& env_path,
                                                        const std::string& pool) {
  bench_cluster b;
  b.env = read_ceph_env(env_path);
  if (!b.env.contains("CEPH_MON") || !b.env.contains("CEPH_KEYRING") ||
      !b.env.contains("CEPH_CONF")) {
    fmt::print(stderr,
               "strata-bdevperf: {} does not name a cluster (tools/ceph/single-node.sh start DIR "
               "writes DIR/env)\n",
               env_path);
    return std::unexpected(2);
  }
  ceph_connection_options connection;
  connection.monitors = b.env.at("CEPH_MON");
  connection.keyring_path = b.env.at("CEPH_KEYRING");
  auto cluster = ceph_cluster::connect(connection);
  if (!cluster) {
    fmt::print(stderr, "strata-bdevperf: {}\n", cluster.error().message);
    return std::unexpected(1);
  }
  b.cluster = std::move(*cluster);
  if (int r = rados_pool_create(b.cluster->handle(), pool.c_str()); r < 0 && r != -EEXIST) {
    fmt::print(stderr, "strata-bdevperf: cannot create the pool {}: {}\n", pool, r);
    return std::unexpected(1);
  }
  if (rados_ioctx_create(b.cluster->handle(), pool.c_str(), &b.io) < 0) return std::unexpected(1);
  rados_application_enable(b.io, "rbd", 1);
  return b;
}

int rbd_part(const rbd_part_options& o) {
  auto connected = connect_bench_cluster(o.ceph_env, o.pool);
  if (!connected) return connected.error();
  const auto& env = connected->env;
  const auto& cluster = connected->cluster;
  rados_ioctx_t io = connected->io;
  const std::uint64_t bytes = o.image_mib << 20;
  // Two images: Strata's and rbd bench's, each written in full once first
  // so that reads read data, not unallocated objects.
  const std::string ours = "bdevperf-strata", theirs = "bdevperf-rbd-bench";
  for (const std::string& name : {ours, theirs}) {
    rbd_remove(io, name.c_str());
    if (auto made = create_rbd_image(*cluster, o.pool, name, bytes); !made) {
      fmt::print(stderr, "strata-bdevperf: {}\n", made.error().message);
      rados_ioctx_destroy(io);
      return 1;
    }
  }
  boost::asio::io_context context;
  auto device = rbd_device::open(context, cluster, o.pool, ours, {4096, 0, 64});
  if (!device) {
    fmt::print(stderr, "strata-bdevperf: {}\n", device.error().message);
    rados_ioctx_destroy(io);
    return 1;
  }
  const std::string their_spec = o.pool + "/" + theirs;
  fmt::print(
      "rbd part: Strata's RBD device vs rbd bench, Ceph cluster {} at {}, pool {}, images of {} "
      "MiB\n",
      cluster->fsid(), env.at("CEPH_MON"), o.pool, o.image_mib);
  // Fill both (sequential 4 MiB writes) so reads find data.
  const row fill{"fill", op::write, false, 4 << 20, 16};
  run_device(**device, context, fill, static_cast<double>(o.image_mib) / 100.0 + 5);
  rbd_bench(env, their_spec, true, false, fill.io_bytes, fill.queue_depth, bytes);

  const std::vector<row> rows = {
      {"4 MiB sequential writes, QD 16 (demotion's pattern)", op::write, false, 4 << 20, 16},
      {"4 MiB sequential reads, QD 16 (promotion's pattern)", op::read, false, 4 << 20, 16},
      {"4 KiB random reads, QD 32 (a host's reads of extents in Ceph)", op::read, true, 4096, 32},
      {"4 KiB random reads, QD 1 (Ceph's latency)", op::read, true, 4096, 1},
  };
  int failures = 0;
  fmt::print("\n{:<62} {:>14} {:>14} {:>7}   {}\n", "workload", "strata", "rbd bench", "ratio",
             "strata p50 / p99");
  for (const row& r : rows) {
    std::vector<double> strata_ops, bench_ops, p50, p99;
    for (int i = 0; i < o.repeat; ++i) {
      // rbd bench runs a byte count, not a time: as many bytes as Strata
      // moved in its run (capped at the image), so both run about as long.
      std::uint64_t total = std::uint64_t{r.io_bytes} * r.queue_depth * 4;
      if (auto s = run_device(**device, context, r, o.seconds)) {
        strata_ops.push_back(s->iops());
        p50.push_back(std::chrono::duration<double, std::milli>(s->percentile(50)).count());
        p99.push_back(std::chrono::duration<double, std::milli>(s->percentile(99)).count());
        total = std::max(total, s->completed * r.io_bytes);
      } else {
        ++failures;
      }
      if (auto b = rbd_bench(env, their_spec, r.operation == op::write, r.random, r.io_bytes,
                             r.queue_depth, std::min(total, bytes))) {
        bench_ops.push_back(*b);
      } else {
        ++failures;
      }
    }
    const bool large = r.io_bytes >= (1 << 20);
    auto show = [&](double ops) {
      return large ? fmt::format("{:.0f} MB/s", ops * r.io_bytes / 1e6)
                   : fmt::format("{:.0f} IOPS", ops);
    };
    const double s = median(strata_ops), b = median(bench_ops);
    fmt::print("{:<62} {:>14} {:>14} {:>7.2f}   {:.2f} / {:.2f} ms\n", r.name, show(s), show(b),
               b > 0 ? s / b : 0, median(p50), median(p99));
  }
  fmt::print("(medians of {} alternating runs of {} s each)\n", o.repeat, o.seconds);
  device->reset();
  for (const std::string& name : {ours, theirs}) rbd_remove(io, name.c_str());
  rados_ioctx_destroy(io);
  return failures == 0 ? 0 : 1;
}

}  // namespace strata::tools
