// strata-bdevperf's cold part: the array's moves to and from a Ceph tier
// against `rbd bench` on the same cluster, in the same run.
//
// In this process: a tiering pool whose capacity group is a memory device
// (so the HDDs are not what is measured) and whose cold group is an RBD
// image (rbd_device), its metadata in RocksDB, and the migrator as stratad
// runs it (its move protocol: copy, flush, commit, free). A volume is
// filled; the extents cool and the migrator demotes them all to Ceph; they
// are read at random until hot, and it promotes them all back. Each phase's
// MB/s is set beside `rbd bench` writing (demotion) and reading
// (promotion) as many bytes, in 4 MiB I/Os at the same queue depth.
// Then the tiers' shares and latencies of a random-read workload with a
// cold set in Ceph.
#pragma once

#include <cstdint>
#include <string>

namespace strata::tools {

struct cold_part_options {
  std::string ceph_env;  // the env file tools/ceph/single-node.sh wrote
  std::string pool = "strata-bench";
  int repeat = 3;  // demotion/promotion rounds, alternating with rbd bench; medians compared
  std::uint64_t extents =
      256;  // 4 MiB extents moved each way (1 GiB: the ramp and the tail are a small part)
  unsigned moves_in_flight = 16;
};

int cold_part(const cold_part_options& options);

}  // namespace strata::tools
