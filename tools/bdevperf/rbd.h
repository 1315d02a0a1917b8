// strata-bdevperf's rbd part: Strata's RBD device (raid/device/rbd_device.h)
// against `rbd bench` on the same Ceph cluster, in the same run.
#pragma once

#include <cstdint>
#include <expected>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "raid/device/rbd_device.h"

namespace strata::tools {

struct rbd_part_options {
  std::string
      ceph_env;  // the env file tools/ceph/single-node.sh wrote (CEPH_MON, CEPH_KEYRING, CEPH_CONF)
  std::string pool = "strata-bench";
  double seconds = 5;  // each run
  int repeat = 3;      // runs of each, alternating; medians compared
  std::uint64_t image_mib = 2048;
};

// Prints the table; 0 when every run worked.
int rbd_part(const rbd_part_options& options);

// What the parts share: the env file's variables, and one `rbd bench` run
// of `total_bytes` (its ops/s, or none if it failed).
std::map<std::string, std::string> read_ceph_env(const std::string& path);
// The cluster the env file names, connected, with RADOS pool `pool` made
// (if need be) and opened for rbd; or the exit status (printed why): 2 for
// a file that names no cluster, 1 for a cluster that cannot be used.
struct bench_cluster {
  std::map<std::string, std::string> env;
  std::shared_ptr<device::ceph_cluster> cluster;
  rados_ioctx_t io = nullptr;  // the caller destroys it
};
std::expected<bench_cluster, int> connect_bench_cluster(const std::string& env_path,
                                                        const std::string& pool);
std::optional<double> rbd_bench(const std::map<std::string, std::string>& env,
                                const std::string& image, bool write, bool random,
                                std::uint32_t io_bytes, std::uint32_t threads,
                                std::uint64_t total_bytes);

}  // namespace strata::tools
