// A Ceph cluster for the tests of the Ceph tier's device: the one
// tools/ceph/single-node.sh started, named by STRATA_TEST_CEPH (the path of
// the env file it writes). ctest starts and stops that cluster as a fixture
// (tests/CMakeLists.txt: ceph_cluster_start / _stop).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "raid/device/rbd_device.h"

namespace strata::device::testing {

struct ceph_test_env {
  std::string dir;       // the cluster's directory (for single-node.sh)
  std::string monitors;  // mon_host
  std::string keyring;   // client.admin's keyring
};

// The cluster STRATA_TEST_CEPH names, or nothing when it names none.
std::optional<ceph_test_env> ceph_test_cluster();

// One connection for the test process (connected on first use; REQUIREs it).
std::shared_ptr<ceph_cluster> ceph_test_connection();

// The tests' RADOS pool, made on first use: "strata-test", rbd enabled.
inline constexpr const char* ceph_test_pool = "strata-test";

// Makes an RBD image of `bytes` in the test pool with a unique name, and
// returns that name.
std::string make_test_image(std::uint64_t bytes);
void remove_test_image(const std::string& name);

}  // namespace strata::device::testing
