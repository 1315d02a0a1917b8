// The Ceph tier's device against a real single-node Ceph (ctest's
// rbd_device, with the cluster as a fixture): what an administrator gets
// wrong when connecting a cluster, each refused with an error naming it;
// and an OSD outage that fails the image's I/O with a clear code, in
// bounded time, and I/O that resumes when the OSD is back. The
// conformance suite (conformance_test.cc) covers the I/O itself.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/raid/device/ceph_harness.h"
#include "tests/raid/device/harness.h"

namespace strata::device::testing {
namespace {

ceph_connection_options test_options() {
  auto env = ceph_test_cluster();
  REQUIRE(env);  // ctest's rbd_device names the cluster
  ceph_connection_options o;
  o.monitors = env->monitors;
  o.keyring_path = env->keyring;
  return o;
}

std::string connect_error(const ceph_connection_options& o) {
  auto c = ceph_cluster::connect(o);
  REQUIRE(!c);
  return c.error().message;
}

void single_node(const std::string& verb, const std::string& osd) {
  auto env = ceph_test_cluster();
  REQUIRE(env);
  const std::string command = (source_dir() / "tools/ceph/single-node.sh").string() + " " + verb +
                              " " + env->dir + " " + osd;
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
}

}  // namespace

TEST_CASE("rbd device: a cluster connected with bad input is refused, naming what is wrong",
          "[.rbd]") {
  const ceph_connection_options good = test_options();
  temp_dir dir;

  SECTION("a keyring file that does not exist") {
    auto o = good;
    o.keyring_path = (dir.path() / "missing.keyring").string();
    const std::string m = connect_error(o);
    CHECK_THAT(
        m, Catch::Contains("cannot read the cephx keyring") && Catch::Contains("missing.keyring"));
  }
  SECTION("a wrong key") {
    auto o = good;
    o.keyring_path = (dir.path() / "wrong.keyring").string();
    // A well-formed key that is not client.admin's.
    std::ofstream(o.keyring_path)
        << "[client.admin]\n\tkey = AQBsF0RlAAAAABAAbm90LXRoZS1yaWdodC1rZXkxMg==\n";
    o.connect_timeout = std::chrono::seconds(10);
    const std::string m = connect_error(o);
    CHECK_THAT(m, Catch::Contains("cannot connect to Ceph at"));
    CHECK_THAT(m, Catch::Contains("refused client.admin's key") ||
                      Catch::Contains("Permission denied") ||
                      Catch::Contains("Operation not permitted"));
  }
  SECTION("no monitor at the address") {
    auto o = good;
    o.monitors = "[v2:127.0.0.1:13391]";  // nothing listens there
    o.connect_timeout = std::chrono::seconds(3);
    const auto started = std::chrono::steady_clock::now();
    const std::string m = connect_error(o);
    CHECK_THAT(
        m, Catch::Contains("no monitor answered within 3 s") && Catch::Contains("127.0.0.1:13391"));
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
  }
  SECTION("no monitor address at all") {
    auto o = good;
    o.monitors.clear();
    CHECK_THAT(connect_error(o), Catch::Contains("no Ceph monitor address"));
  }
  SECTION("a pool, an image, a size that are wrong") {
    test_loop loop;
    auto cluster = ceph_test_connection();
    auto pool = rbd_device::open(loop.context, cluster, "no-such-pool", "x", {});
    REQUIRE(!pool);
    CHECK(pool.error().message == "the RADOS pool no-such-pool does not exist");
    CHECK(pool.error().code == errc::not_found);

    auto image = rbd_device::open(loop.context, cluster, ceph_test_pool, "no-such-image", {});
    REQUIRE(!image);
    CHECK(image.error().message ==
          std::string("the RBD image ") + ceph_test_pool + "/no-such-image does not exist");

    const std::string name = make_test_image(8 << 20);
    rbd_options wrong;
    wrong.block_count = 1024;  // 4 MiB of 4 KiB blocks, the image is 8 MiB
    auto sized = rbd_device::open(loop.context, cluster, ceph_test_pool, name, wrong);
    REQUIRE(!sized);
    CHECK_THAT(sized.error().message,
               Catch::Contains("is 8388608 bytes, not the 4194304 expected"));

    const std::string odd = make_test_image((8 << 20) + 512);
    auto odd_size = rbd_device::open(loop.context, cluster, ceph_test_pool, odd, {});
    REQUIRE(!odd_size);
    CHECK_THAT(odd_size.error().message, Catch::Contains("not a positive multiple of 4096"));
    rbd_options bs512;
    bs512.logical_block_size_bytes = 512;
    CHECK(rbd_device::open(loop.context, cluster, ceph_test_pool, odd, bs512));
    remove_test_image(name);
    remove_test_image(odd);
  }
}

TEST_CASE(
    "rbd device: an OSD outage shows in Ceph's health and fails the image's I/O with timed_out; "
    "I/O resumes after",
    "[.rbd]") {
  auto o = test_options();
  o.op_timeout = std::chrono::seconds(5);
  auto c = ceph_cluster::connect(o);
  INFO((c ? "" : c.error().message));
  REQUIRE(c);
  test_loop loop;
  const std::string name = make_test_image(64 << 20);
  auto d = rbd_device::open(loop.context, *c, ceph_test_pool, name, {});
  REQUIRE(d);
  rbd_device& dev = **d;
  loop.elsewhere = [&] { return dev.in_flight(); };
  std::vector<std::byte> a(64 * 1024, std::byte{0xa5});
  write_blocks(loop, dev, 0, a);

  auto healthy = (*c)->health();
  INFO((healthy ? "" : healthy.error().message));
  REQUIRE(healthy);
  CHECK(!healthy->has("OSD_DOWN"));
  auto usage = (*c)->usage();
  REQUIRE(usage);
  CHECK(usage->size_bytes >= 4ull << 30);  // the fixture's 8 GiB OSD, less BlueStore's own
  CHECK(usage->available_bytes <= usage->size_bytes);

  single_node("osd-stop", "0");
  // The monitors say so (single-node.sh marks it down at once).
  auto down = (*c)->health();
  REQUIRE(down);
  INFO("health: " << down->status);
  CHECK(down->status != "HEALTH_OK");
  CHECK(down->has("OSD_DOWN"));
  auto w = io::make(op::write, 1024, 16, 4096);
  std::memset(w->buffer.data(), 0x5a, 16 * 4096);
  const auto started = std::chrono::steady_clock::now();
  const std::error_code failed = run(loop, dev, *w);
  const auto waited = std::chrono::steady_clock::now() - started;
  INFO("the write failed with "
       << failed.message() << " after "
       << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() << " ms");
  CHECK(failed == errc::timed_out);
  CHECK(waited < std::chrono::seconds(30));
  CHECK(w->completions == 1);

  single_node("osd-start", "0");
  auto up = (*c)->health();
  REQUIRE(up);
  CHECK(!up->has("OSD_DOWN"));
  // After the outage: the write again, and what was written before it.
  CHECK(run(loop, dev, *w) == std::error_code{});
  const auto before = read_blocks(loop, dev, 0, 16);
  CHECK(before == a);
  const auto after = read_blocks(loop, dev, 1024, 16);
  CHECK(std::all_of(after.begin(), after.end(), [](std::byte b) { return b == std::byte{0x5a}; }));
  loop.elsewhere = nullptr;
  d->reset();
  remove_test_image(name);
}

}  // namespace strata::device::testing
