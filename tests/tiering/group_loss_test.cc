// Losing a group: beyond its redundancy, only the volumes with extents on
// it go offline, with a status that names it; within it (one SSD of the
// performance pair), nothing changes for the volumes.
#include "tests/tiering/rig.h"
#include "tiering/migrator.h"

namespace strata::tiering {
namespace {
using namespace testing;

std::error_code read_one(rig& r, volume& v, std::uint64_t block) {
  return r.io(v, io::make(op::read, block, 1, block_size));
}

TEST_CASE("group loss: a lost performance group takes only the volumes with extents there offline",
          "[tiering][group_loss]") {
  rig r(4, 16);  // new extents on the performance tier first; a reserve of 0 extents
  volume& hot = r.create("hot", 4 * extent_blocks);
  volume& cold = r.create("cold", 4 * extent_blocks, affinity::archive);
  volume& fresh = r.create("fresh", 4 * extent_blocks);
  write_blocks(r.loop, hot, 0, pattern(2 * extent_bytes, 1));
  write_blocks(r.loop, cold, 0, pattern(2 * extent_bytes, 2));
  REQUIRE(r.p->tier_of(hot.location(0)->group) == tier::performance);
  REQUIRE(r.p->tier_of(cold.location(0)->group) == tier::capacity);

  r.faults[0]->fail();  // the performance group: gone
  // A flush of a volume with nothing there finds the loss, and succeeds.
  REQUIRE_FALSE(r.io(cold, io::flush()));
  CHECK(cold.online());
  CHECK_FALSE(hot.online());
  CHECK(hot.offline_reason().find("group 0 (performance tier) is lost beyond its redundancy") !=
        std::string::npos);
  CHECK_FALSE(r.p->group_usable(0));
  CHECK(fresh.online());

  // Every request to the offline volume fails, even to a never-written extent.
  CHECK(read_one(r, hot, 0) == errc::device_failed);
  CHECK(read_one(r, hot, 3 * extent_blocks) == errc::device_failed);
  CHECK(r.io(hot, io::flush()) == errc::device_failed);

  // The others go on, and new extents land on the capacity tier.
  CHECK(read_blocks(r.loop, cold, 0, 2 * extent_blocks) == pattern(2 * extent_bytes, 2));
  write_blocks(r.loop, fresh, extent_blocks, pattern(extent_bytes, 3));
  REQUIRE(fresh.location(1));
  CHECK(r.p->tier_of(fresh.location(1)->group) == tier::capacity);
  CHECK(read_blocks(r.loop, fresh, extent_blocks, extent_blocks) == pattern(extent_bytes, 3));
  flush(r.loop, fresh);

  // The migrator promotes nothing onto the lost group, and moves nothing of
  // the offline volume.
  for (int i = 0; i < 20; ++i) read_blocks(r.loop, fresh, extent_blocks + (i % 2) * 5, 1);
  migrator m(*r.p, migrator_options{});
  m.run_round();
  r.loop.run_until([&] { return m.moves_in_flight() == 0; });
  CHECK(r.p->tier_of(fresh.location(1)->group) == tier::capacity);
  CHECK(m.counters().promotions == 0);
  CHECK(fresh.online());
}

TEST_CASE("group loss: one SSD of the performance pair lost degrades the group, nothing more",
          "[tiering][group_loss]") {
  rig_shape shape;
  shape.mirrored_performance = true;
  rig r(shape);
  volume& v = r.create("db", 4 * extent_blocks);
  write_blocks(r.loop, v, 0, pattern(2 * extent_bytes, 4));
  REQUIRE(r.p->tier_of(v.location(0)->group) == tier::performance);

  r.faults[0]->fail();  // one SSD
  CHECK(read_blocks(r.loop, v, 0, 2 * extent_blocks) == pattern(2 * extent_bytes, 4));
  write_blocks(r.loop, v, 3, pattern(block_size, 5));
  flush(r.loop, v);
  CHECK(r.mirror->working_members() == 1);
  CHECK(v.online());
  CHECK(r.p->group_usable(0));

  r.faults[1]->fail();  // the other one: the group is lost
  CHECK(read_one(r, v, 0) == errc::device_failed);
  CHECK_FALSE(v.online());
  CHECK(v.offline_reason().find("group 0 (performance tier)") != std::string::npos);
}

}  // namespace
}  // namespace strata::tiering
