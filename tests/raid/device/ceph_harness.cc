#include "tests/raid/device/ceph_harness.h"

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <mutex>

namespace strata::device::testing {

std::optional<ceph_test_env> ceph_test_cluster() {
  const char* path = std::getenv("STRATA_TEST_CEPH");
  if (path == nullptr || *path == '\0') return std::nullopt;
  std::ifstream in(path);
  REQUIRE(in);  // named but missing: the fixture did not start it
  ceph_test_env env;
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "CEPH_MON") env.monitors = value;
    if (key == "CEPH_KEYRING") env.keyring = value;
    if (key == "CEPH_DIR") env.dir = value;
  }
  REQUIRE(!env.monitors.empty());
  REQUIRE(!env.keyring.empty());
  return env;
}

std::shared_ptr<ceph_cluster> ceph_test_connection() {
  static std::mutex lock;
  static std::shared_ptr<ceph_cluster> connection;
  std::lock_guard guard(lock);
  if (connection) return connection;
  auto env = ceph_test_cluster();
  REQUIRE(env);
  ceph_connection_options options;
  options.monitors = env->monitors;
  options.keyring_path = env->keyring;
  auto c = ceph_cluster::connect(options);
  INFO((c ? "" : c.error().message));
  REQUIRE(c);
  connection = *c;
  // The pool, once per process (EEXIST when another made it).
  int r = rados_pool_create(connection->handle(), ceph_test_pool);
  REQUIRE((r == 0 || r == -EEXIST));
  rados_ioctx_t io = nullptr;
  REQUIRE(rados_ioctx_create(connection->handle(), ceph_test_pool, &io) == 0);
  rados_application_enable(io, "rbd", 1);
  rados_ioctx_destroy(io);
  return connection;
}

std::string make_test_image(std::uint64_t bytes) {
  static std::atomic<int> counter{0};
  auto c = ceph_test_connection();
  const std::string name = "t" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  rados_ioctx_t io = nullptr;
  REQUIRE(rados_ioctx_create(c->handle(), ceph_test_pool, &io) == 0);
  int order = 0;
  const int r = rbd_create(io, name.c_str(), bytes, &order);
  rados_ioctx_destroy(io);
  INFO("rbd_create " << name << ": " << r);
  REQUIRE(r == 0);
  return name;
}

void remove_test_image(const std::string& name) {
  auto c = ceph_test_connection();
  rados_ioctx_t io = nullptr;
  if (rados_ioctx_create(c->handle(), ceph_test_pool, &io) != 0) return;
  rbd_remove(io, name.c_str());
  rados_ioctx_destroy(io);
}

}  // namespace strata::device::testing
