// The cold tier (a Ceph RBD image in the array; a memory device here), on
// a real pool in virtual time: what cools goes there and reads back, what
// heats comes back, the affinities that keep volumes off it, the capacity
// tier's low water, cooling counted in pool age across restarts, and a
// cold group that fails without taking its volumes down.
#include <cstring>

#include "tests/tiering/migration.h"
#include "tiering/migrator.h"

namespace strata::tiering {
namespace {
using namespace testing;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

bool holds(rig& r, volume& v, std::uint64_t extent) {
  return read_blocks(r.loop, v, extent * extent_blocks, 1) == pattern(block_size, extent + 1);
}

rig_shape with_cold(std::uint64_t cold_extents = 32) {
  rig_shape s;
  s.performance_extents = 4;
  s.capacity_extents = 16;
  s.new_extents = new_extent_tier::capacity;
  s.cold_extents = cold_extents;
  return s;
}

migrator_options cooling(device::duration d) {
  migrator_options o;
  o.promote_min_score = 4;
  o.hysteresis = 2;
  o.cold_cooling = d;
  return o;
}

constexpr std::uint16_t cold_group = 3;  // after the performance group and two capacity groups

TEST_CASE(
    "cold tier: extents idle for the cooling time go there and read back; heated, they come back",
    "[tiering][cold]") {
  rig r(with_cold());
  REQUIRE(r.p->tier_of(cold_group) == tier::cold);
  volume& v = r.create("db", 8 * extent_blocks);
  fill(r, v, 0, 8);
  migrator m(*r.p, cooling(hours(1)));
  r.loop.clock.advance_by(minutes(50));
  heat_up(r, v, 5, 1);  // extent 5 is read now: its cooling starts again
  settle(r, m);
  for (std::uint64_t e = 0; e < 8; ++e)
    CHECK(tier_of(r, v, e) == tier::capacity);  // 50 minutes: not yet

  r.loop.clock.advance_by(minutes(20));
  settle(r, m);
  for (std::uint64_t e = 0; e < 8; ++e) {
    INFO("extent " << e);
    CHECK(tier_of(r, v, e) == (e == 5 ? tier::capacity : tier::cold));
  }
  CHECK(m.counters().cold_demotions == 7);
  CHECK(r.p->free_extents(tier::cold) == 32 - 7);
  CHECK(v.mapped_extents_on(tier::cold) == 7);
  for (std::uint64_t e = 0; e < 8; ++e) CHECK(holds(r, v, e));
  CHECK(v.counters().reads(source::cold).ios == 7);
  CHECK(v.counters().read_latency[static_cast<int>(source::cold)].count ==
        7);  // each read timed, as Ceph's

  // One read each (just now) is not heat enough to bring them back.
  settle(r, m);
  CHECK(m.counters().cold_promotions == 0);
  // Extent 0 turns hot: it comes back, and on to the performance tier
  // (in the round after: a move at a time).
  heat_up(r, v, 0, 10);
  settle(r, m);
  CHECK(tier_of(r, v, 0) == tier::capacity);
  settle(r, m);
  CHECK(tier_of(r, v, 0) == tier::performance);
  CHECK(m.counters().cold_promotions == 1);
  CHECK(holds(r, v, 0));
  // Quiet again: nothing moves back and forth while the others stay cool.
  const auto moved = m.counters().bytes_moved;
  for (int i = 0; i < 5; ++i) {
    r.loop.clock.advance_by(minutes(5));
    settle(r, m);
  }
  CHECK(m.counters().bytes_moved == moved);
}

TEST_CASE(
    "cold tier: the cooling changed on a running migrator: off holds everything, on again moves "
    "what cooled",
    "[tiering][cold]") {
  rig r(with_cold());
  volume& v = r.create("db", 4 * extent_blocks);
  fill(r, v, 0, 4);
  migrator m(*r.p, cooling(hours(1)));
  m.set_cold_cooling(device::duration::zero());
  CHECK(m.cold_cooling() == device::duration::zero());
  r.loop.clock.advance_by(hours(2));
  settle(r, m);
  for (std::uint64_t e = 0; e < 4; ++e) CHECK(tier_of(r, v, e) == tier::capacity);
  CHECK(m.counters().cold_demotions == 0);

  m.set_cold_cooling(minutes(30));  // idle two hours: cooled by the new measure
  settle(r, m);
  for (std::uint64_t e = 0; e < 4; ++e) CHECK(tier_of(r, v, e) == tier::cold);
  CHECK(m.counters().cold_demotions == 4);
  for (std::uint64_t e = 0; e < 4; ++e) CHECK(holds(r, v, e));
}

TEST_CASE("cold tier: extents that cooled on the performance tier go straight there",
          "[tiering][cold]") {
  rig_shape shape = with_cold();
  shape.new_extents = new_extent_tier::performance_first;
  rig r(shape);
  volume& v = r.create("db", 4 * extent_blocks);
  fill(r, v, 0, 3);
  REQUIRE(tier_of(r, v, 0) == tier::performance);
  migrator m(*r.p, cooling(hours(1)));
  r.loop.clock.advance_by(minutes(30));
  heat_up(r, v, 2, 1);
  r.loop.clock.advance_by(minutes(40));
  settle(r, m);
  CHECK(tier_of(r, v, 0) == tier::cold);
  CHECK(tier_of(r, v, 1) == tier::cold);
  CHECK(tier_of(r, v, 2) == tier::performance);  // read 40 minutes ago
  CHECK(m.counters().cold_demotions == 2);
  CHECK(m.counters().demotions == 0);  // not by way of the capacity tier
  for (std::uint64_t e = 0; e < 3; ++e) CHECK(holds(r, v, e));
}

TEST_CASE("cold tier: local and performance volumes never go there; one pinned later comes back",
          "[tiering][cold]") {
  rig r(with_cold());
  volume& local = r.create("local", 4 * extent_blocks, affinity::local);
  volume& pinned = r.create("pinned", 4 * extent_blocks, affinity::performance);
  volume& archive = r.create("archive", 4 * extent_blocks, affinity::archive);
  fill(r, local, 0, 2);
  fill(r, pinned, 0, 2);
  fill(r, archive, 0, 2);
  migrator m(*r.p, cooling(hours(1)));
  r.loop.clock.advance_by(hours(2));
  settle(r, m);
  CHECK(tier_of(r, local, 0) == tier::capacity);
  CHECK(tier_of(r, local, 1) == tier::capacity);
  CHECK(tier_of(r, pinned, 0) == tier::performance);
  CHECK(tier_of(r, archive, 0) == tier::cold);
  CHECK(tier_of(r, archive, 1) == tier::cold);

  // The archive volume is pinned off the cold tier: its extents come back.
  REQUIRE(r.manage([&](auto done) { r.p->set_placement("archive", affinity::local, done); }));
  settle(r, m);
  CHECK(tier_of(r, archive, 0) == tier::capacity);
  CHECK(tier_of(r, archive, 1) == tier::capacity);
  CHECK(m.counters().cold_promotions == 2);
  CHECK(holds(r, archive, 0));
  CHECK(holds(r, archive, 1));
}

TEST_CASE("cold tier: below the capacity tier's low water, the longest idle extents go early",
          "[tiering][cold]") {
  rig r(with_cold());  // 32 capacity extents: the low water (10%) is 3
  volume& v = r.create("db", 40 * extent_blocks);
  for (std::uint64_t e = 0; e < 31; ++e) {
    fill(r, v, e, 1);
    r.loop.clock.advance_by(minutes(1));  // extent 0 idle the longest
  }
  REQUIRE(r.p->free_extents(tier::capacity) == 1);
  migrator m(*r.p, cooling(hours(24 * 31)));
  settle(r, m);
  CHECK(r.p->free_extents(tier::capacity) == 3);
  CHECK(m.counters().cold_demotions == 2);
  CHECK(tier_of(r, v, 0) == tier::cold);
  CHECK(tier_of(r, v, 1) == tier::cold);
  CHECK(tier_of(r, v, 2) == tier::capacity);

  // A cooling of zero turns the cold tier off: nothing goes, even short of room.
  fill(r, v, 31, 2);
  migrator off(*r.p, cooling(device::duration::zero()));
  settle(r, off);
  CHECK(off.counters().cold_demotions == 0);
  CHECK(r.p->free_extents(tier::capacity) == 1);
}

TEST_CASE("cold tier: cooling counts pool age, which a restart keeps and time down does not add to",
          "[tiering][cold]") {
  rig r(with_cold());
  volume* v = &r.create("db", 4 * extent_blocks);
  fill(r, *v, 0, 2);
  r.loop.clock.advance_by(minutes(40));  // the heat (and the age) are written every minute
  r.loop.settle();                       // the timer's turn
  r.loop.run_until([&] { return r.store->in_flight() == 0; });
  const std::uint64_t age = r.p->age_seconds();
  CHECK(age >= 40 * 60);
  r.close();
  r.loop.clock.advance_by(hours(10));  // down: it does not count
  r.open();
  CHECK(r.p->age_seconds() <= age);
  CHECK(r.p->age_seconds() + 60 >= age);
  v = r.p->find_volume("db");
  REQUIRE(v != nullptr);
  CHECK(v->heat().idle_seconds(0) < 41 * 60);
  {
    migrator m(*r.p, cooling(hours(1)));
    settle(r, m);
    CHECK(tier_of(r, *v, 0) == tier::capacity);
  }
  r.loop.clock.advance_by(minutes(25));
  migrator m(*r.p, cooling(hours(1)));
  settle(r, m);
  CHECK(tier_of(r, *v, 0) == tier::cold);
  CHECK(tier_of(r, *v, 1) == tier::cold);
  CHECK(holds(r, *v, 0));
}

TEST_CASE(
    "cold tier: a failed cold group fails its extents' I/O only; the volume serves the rest, moves "
    "pause",
    "[tiering][cold]") {
  rig r(with_cold());
  std::vector<std::string> pauses;
  r.p.reset();
  r.store.reset();
  r.options.on_group_paused = [&](std::uint16_t g, const std::string& why) {
    pauses.push_back(std::to_string(g) + ": " + (why.empty() ? "resumed" : why));
  };
  r.open();
  volume& v = r.create("db", 8 * extent_blocks);
  fill(r, v, 0, 4);
  migrator m(*r.p, cooling(hours(1)));
  r.loop.clock.advance_by(hours(2));
  fill(r, v, 4, 2);  // fresh: they stay
  settle(r, m);
  REQUIRE(tier_of(r, v, 0) == tier::cold);
  REQUIRE(tier_of(r, v, 4) == tier::capacity);

  r.faults.back()->fail();  // Ceph is out of reach
  CHECK(r.io(v, io::make(op::read, 0, 1, block_size)) == errc::device_failed);
  CHECK(v.online());
  CHECK(r.p->group_usable(cold_group));
  CHECK(!r.p->group_pause(cold_group).empty());
  REQUIRE(pauses.size() == 1);
  CHECK(pauses[0].starts_with("3: its I/O failed"));
  CHECK(holds(r, v, 4));                                               // the capacity tier serves
  write_blocks(r.loop, v, 6 * extent_blocks, pattern(block_size, 7));  // and takes new extents
  CHECK(holds(r, v, 6));
  CHECK(r.p->free_extents(tier::cold) == 0);  // paused: no moves to it

  // Extent 4 cools meanwhile, and extent 1 heats: neither moves while paused.
  for (int i = 0; i < 10; ++i) {  // these reads fail, but are heat all the same
    CHECK(r.io(v, io::make(op::read, extent_blocks + (i % 2 == 0 ? 3 : 9), 1, block_size)) ==
          errc::device_failed);
  }
  r.loop.clock.advance_by(seconds(10));
  settle(r, m);
  CHECK(m.counters().cold_promotions == 0);
  CHECK(tier_of(r, v, 1) == tier::cold);
  // With no failure for the pause interval, it takes moves again.
  r.loop.clock.advance_by(seconds(30));
  r.loop.settle();
  CHECK(r.p->group_pause(cold_group).empty());
  REQUIRE(pauses.size() == 2);
  CHECK(pauses[1] == "3: resumed");
}

TEST_CASE("cold tier: a hung cluster stalls no flush of a volume that wrote nothing there",
          "[tiering][cold]") {
  rig r(with_cold());
  volume& v = r.create("db", 8 * extent_blocks);
  fill(r, v, 0, 2);
  migrator m(*r.p, cooling(hours(1)));
  r.loop.clock.advance_by(hours(2));
  settle(r, m);
  REQUIRE(tier_of(r, v, 0) == tier::cold);
  r.faults.back()->hang();  // Ceph stops answering
  fill(r, v, 4, 1);         // a write on the local tiers
  auto f = io::flush();
  v.submit(f->req);
  r.loop.run_until([&] { return f->completions > 0; });
  CHECK(f->completions == 1);
  CHECK_FALSE(f->req.result);

  // A host write to the extent in Ceph: the next flush covers it, and so
  // waits for the cluster.
  auto w = io::make(op::write, 0, 1, block_size);
  v.submit(w->req);
  r.loop.settle();
  r.faults.back()->resume();
  r.loop.run_until([&] { return w->completions > 0; });
  REQUIRE_FALSE(w->req.result);
  r.faults.back()->hang();
  auto g = io::flush();
  v.submit(g->req);
  r.loop.run_until(
      [&] { return g->completions > 0 || r.loop.clock.now().time_since_epoch() > hours(3); });
  CHECK(g->completions == 0);  // held by the hung cold group
  r.faults.back()->resume();
  r.loop.run_until([&] { return g->completions > 0; });
  CHECK_FALSE(g->req.result);
}

}  // namespace
}  // namespace strata::tiering
