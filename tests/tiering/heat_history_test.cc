// The heat history: snapshots of the hottest extents on a timer, bounded in
// extents and in number, kept across a restart.
#include "tiering/heat_history.h"

#include "tests/tiering/rig.h"

namespace strata::tiering {
namespace {
using namespace testing;

// `reads` random reads of extent `e` (alternating blocks: never a stream).
void heat_up(rig& r, volume& v, std::uint64_t e, int reads) {
  for (int i = 0; i < reads; ++i)
    read_blocks(r.loop, v, e * extent_blocks + (i % 2 == 0 ? 1 : 7), 1);
}

// A minute passes: the timers fire, and their writes land.
void one_minute(rig& r) {
  r.loop.clock.advance_by(std::chrono::minutes(1));
  r.loop.settle();
  r.loop.run_until([&] { return r.store->in_flight() == 0; });
}

std::vector<heat_snapshot> history(rig& r) {
  auto h = heat_history::read(*r.store);
  INFO((h ? std::string() : h.error().message));
  REQUIRE(h);
  return *h;
}

TEST_CASE("heat history: the hottest extents, every interval, the newest kept",
          "[tiering][heat_history]") {
  rig r(4, 16);
  r.options.heat_history = {std::chrono::minutes(1), 3, 2};  // every minute, keep 3, 2 extents each
  r.restart();
  volume& v = r.create("db", 8 * extent_blocks);
  write_blocks(r.loop, v, 0, pattern(5 * extent_bytes, 1));  // 5 extents, 4 on the performance tier
  heat_up(r, v, 1, 30);
  heat_up(r, v, 4, 20);
  heat_up(r, v, 2, 10);

  one_minute(r);
  auto snaps = history(r);
  REQUIRE(snaps.size() == 1);
  const heat_snapshot& s = snaps[0];
  CHECK(s.extents_tracked == 5);
  CHECK(s.taken_unix_seconds > 1'700'000'000);
  REQUIRE(s.hottest.size() == 2);  // bounded: the third-hottest is left out
  CHECK(s.hottest[0].volume_id == v.record().id);
  CHECK(s.hottest[0].volume_extent == 1);
  CHECK(s.hottest[0].where == r.p->tier_of(v.location(1)->group));
  CHECK(s.hottest[1].volume_extent == 4);
  CHECK(s.hottest[1].where == r.p->tier_of(v.location(4)->group));
  CHECK(s.hottest[0].score > s.hottest[1].score);
  CHECK(s.total.read_ios >
        s.hottest[0].heat.read_ios + s.hottest[1].heat.read_ios);  // extent 2 counts here

  // Five more minutes: only the newest three are kept, numbered in a run.
  for (int i = 0; i < 5; ++i) one_minute(r);
  snaps = history(r);
  REQUIRE(snaps.size() == 3);
  CHECK(snaps[0].sequence == 3);
  CHECK(snaps[2].sequence == 5);

  // A restart keeps them, and the numbering goes on.
  r.restart();
  bool done = false;
  r.p->snapshot_heat([&](std::error_code ec) {
    REQUIRE_FALSE(ec);
    done = true;
  });
  r.loop.run_until([&] { return done; });
  snaps = history(r);
  REQUIRE(snaps.size() == 3);
  CHECK(snaps[2].sequence == 6);
  CHECK(snaps[2].hottest.size() == 2);
}

TEST_CASE("heat history: options that keep nothing are refused", "[tiering][heat_history]") {
  rig r;
  r.close();
  r.options.heat_history.keep = 0;
  auto s = metadata_store::open(r.store_path(), r.loop.context.get_executor());
  REQUIRE(s);
  auto opened = pool::open(r.loop.context.get_executor(), **s, r.groups, r.options);
  REQUIRE_FALSE(opened);
  CHECK(opened.error().message.find("at least one snapshot") != std::string::npos);
}

}  // namespace
}  // namespace strata::tiering
