#include "controller/disk_group.h"

#include <catch2/catch.hpp>

#include "controller/shelf.h"
#include "tests/controller/shelf_helpers.h"
#include "tests/raid/device/harness.h"

using namespace strata;
using namespace strata::controller;
using namespace strata::device::testing;
using strata::controller::testing::drives;

namespace {

// 6 HDDs (a RAID-6 4+2), 2 SSDs (RAID-1), 1 SSD (the read cache), small.
std::vector<drive_spec> small_shelf() {
  return strata::controller::testing::small_shelf(6, 3);
}

// Virtual time over real files: no member watchdog, which would fire
// before a file's I/O completes.
group_options opts(test_loop& loop) {
  return {&loop.clock, {}, {}, {}};
}

std::unique_ptr<disk_group> wait(test_loop& loop, std::function<void(group_done)> start) {
  std::optional<std::expected<std::unique_ptr<disk_group>, error>> got;
  start([&](auto r) { got = std::move(r); });
  loop.run_until([&] { return got.has_value(); });
  if (!*got) FAIL(got->error().message + " (" + got->error().code.message() + ")");
  return std::move(**got);
}

std::string failure(test_loop& loop, std::function<void(group_done)> start) {
  std::optional<std::expected<std::unique_ptr<disk_group>, error>> got;
  start([&](auto r) { got = std::move(r); });
  loop.run_until([&] { return got.has_value(); });
  REQUIRE_FALSE(*got);
  return got->error().message;
}

void clean(test_loop& loop, disk_group& g) {
  std::optional<std::error_code> done;
  g.mark_clean([&](std::error_code ec) { done = ec; });
  loop.run_until([&] { return done.has_value() && g.idle(); });
  REQUIRE(!*done);
}

}  // namespace

TEST_CASE(
    "disk groups: created on blank drives, found again after a restart by the ids on their "
    "superblocks",
    "[controller]") {
  temp_dir dir;
  const auto specs = small_shelf();
  const auto data = pattern(16 * 4096, test_seed());
  group_id raid6_id{}, raid1_id{}, cache_id{};
  {
    test_loop loop;
    auto s = shelf::open(*loop.ring, loop.clock, dir.path(), specs);
    REQUIRE(s);
    auto r6 = wait(loop, [&](group_done d) {
      create_group(group_kind::raid6, drives(**s, 0, 6), opts(loop), d);
    });
    auto r1 = wait(loop, [&](group_done d) {
      create_group(group_kind::raid1, drives(**s, 6, 2), opts(loop), d);
    });
    auto rc = wait(loop, [&](group_done d) {
      create_group(group_kind::read_cache, drives(**s, 8, 1), opts(loop), d);
    });
    CHECK(r6->id() != r1->id());
    CHECK(r1->id() != rc->id());
    raid6_id = r6->id();
    raid1_id = r1->id();
    cache_id = rc->id();
    write_blocks(loop, r6->device(), 100, data);
    write_blocks(loop, r1->device(), 5, data);
    CHECK(failure(loop, [&](group_done d) {
            create_group(group_kind::raid6, drives(**s, 0, 6), opts(loop), d);
          }).size() > 0);
    clean(loop, *r6);
    clean(loop, *r1);
    clean(loop, *rc);
  }
  test_loop loop;
  auto s = shelf::open(*loop.ring, loop.clock, dir.path(), specs);
  REQUIRE(s);
  const auto all = drives(**s, 0, 9);  // every drive: each group picks its own out
  auto r6 = wait(
      loop, [&](group_done d) { assemble_group(group_kind::raid6, raid6_id, all, opts(loop), d); });
  auto r1 = wait(
      loop, [&](group_done d) { assemble_group(group_kind::raid1, raid1_id, all, opts(loop), d); });
  auto rc = wait(loop, [&](group_done d) {
    assemble_group(group_kind::read_cache, cache_id, all, opts(loop), d);
  });
  CHECK(read_blocks(loop, r6->device(), 100, 16) == data);
  CHECK(read_blocks(loop, r1->device(), 5, 16) == data);
  CHECK(rc->kind() == group_kind::read_cache);

  group_id unknown{};
  unknown[0] = 0x5a;
  CHECK(failure(loop, [&](group_done d) {
          assemble_group(group_kind::raid6, unknown, all, opts(loop), d);
        }).find("no drive holds it") != std::string::npos);
  CHECK(failure(loop, [&](group_done d) {
          assemble_group(group_kind::raid6, raid1_id, all, opts(loop), d);
        }).find("another RAID level") != std::string::npos);
  clean(loop, *r6);
  clean(loop, *r1);
  clean(loop, *rc);
}
