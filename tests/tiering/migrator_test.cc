// The migrator's decisions, on a real pool in virtual time: what is
// promoted and demoted, hysteresis, the reserve, and the affinities.
#include "tiering/migrator.h"

#include <cstring>

#include "tests/tiering/migration.h"

namespace strata::tiering {
namespace {
using namespace testing;

migrator_options quick() {
  migrator_options o;
  o.promote_min_score = 4;
  o.hysteresis = 2;
  return o;
}

TEST_CASE("migrator: hot capacity extents are promoted, and the data stays",
          "[tiering][migrator]") {
  rig r(4, 16, new_extent_tier::capacity);
  volume& v = r.create("db", 8 * extent_blocks);
  fill(r, v, 0, 8);
  heat_up(r, v, 2, 10);
  heat_up(r, v, 5, 10);
  heat_up(r, v, 6, 2);  // below promote_min_score
  migrator m(*r.p, quick());
  settle(r, m);
  CHECK(tier_of(r, v, 2) == tier::performance);
  CHECK(tier_of(r, v, 5) == tier::performance);
  CHECK(tier_of(r, v, 6) == tier::capacity);
  CHECK(m.counters().promotions == 2);
  for (std::uint64_t e = 0; e < 8; ++e)
    CHECK(read_blocks(r.loop, v, e * extent_blocks, 1) == pattern(block_size, e + 1));
}

TEST_CASE(
    "migrator: a full tier trades a resident only for an extent hotter by the hysteresis factor",
    "[tiering][migrator]") {
  rig r(2, 16, new_extent_tier::capacity);
  volume& v = r.create("db", 8 * extent_blocks);
  fill(r, v, 0, 8);
  heat_up(r, v, 0, 10);
  heat_up(r, v, 1, 10);
  migrator m(*r.p, quick());
  settle(r, m);
  REQUIRE(tier_of(r, v, 0) == tier::performance);
  REQUIRE(tier_of(r, v, 1) == tier::performance);

  // Slightly hotter than the residents: not worth a move.
  heat_up(r, v, 4, 14);
  settle(r, m);
  CHECK(tier_of(r, v, 4) == tier::capacity);
  CHECK(m.counters().demotions == 0);

  // More than twice as hot: it takes the coldest resident's place.
  heat_up(r, v, 1, 2);
  heat_up(r, v, 4, 12);
  settle(r, m);
  CHECK(tier_of(r, v, 4) == tier::performance);
  CHECK(tier_of(r, v, 0) == tier::capacity);
  CHECK(tier_of(r, v, 1) == tier::performance);
  CHECK(m.counters().demotions == 1);

  // Equal heat from here on: nothing moves back and forth.
  const auto moves = m.counters().promotions + m.counters().demotions;
  for (int round = 0; round < 10; ++round) {
    heat_up(r, v, 0, 4);
    heat_up(r, v, 1, 4);
    heat_up(r, v, 4, 4);
    settle(r, m);
  }
  CHECK(m.counters().promotions + m.counters().demotions == moves);
  for (std::uint64_t e = 0; e < 8; ++e)
    CHECK(read_blocks(r.loop, v, e * extent_blocks, 1) == pattern(block_size, e + 1));
}

TEST_CASE("migrator: promotions leave the reserve free for new writes, and demotions restore it",
          "[tiering][migrator]") {
  rig r(10, 16);  // new extents go to the performance tier first; reserve 10%: one extent
  REQUIRE(r.p->performance_reserve_extents() == 1);
  volume& v = r.create("db", 20 * extent_blocks);
  fill(r, v, 0, 9);  // 9 on the performance tier: exactly down to the reserve
  fill(r, v, 9, 4);  // these go to capacity
  REQUIRE(r.p->free_extents(tier::performance) == 1);
  for (std::uint64_t e = 9; e < 13; ++e) heat_up(r, v, e, 10);
  migrator m(*r.p, quick());
  settle(r, m);
  CHECK(r.p->free_extents(tier::performance) >= 1);
  // The four hot ones displaced four cold residents (score 0).
  for (std::uint64_t e = 9; e < 13; ++e) CHECK(tier_of(r, v, e) == tier::performance);
  CHECK(m.counters().demotions == 4);
}

TEST_CASE(
    "migrator: archive volumes are never promoted and leave the tier; performance volumes stay",
    "[tiering][migrator]") {
  rig r(4, 16, new_extent_tier::capacity);
  volume& hot_archive = r.create("archive", 4 * extent_blocks, affinity::archive);
  volume& pinned = r.create("pinned", 4 * extent_blocks, affinity::performance);
  volume& normal = r.create("auto", 8 * extent_blocks);
  fill(r, hot_archive, 0, 2);
  fill(r, pinned, 0, 2);
  fill(r, normal, 0, 8);
  heat_up(r, hot_archive, 0, 40);
  migrator m(*r.p, quick());
  settle(r, m);
  CHECK(tier_of(r, hot_archive, 0) == tier::capacity);
  // Cold, but its volume asks for the performance tier while there is room.
  CHECK(tier_of(r, pinned, 0) == tier::performance);
  CHECK(tier_of(r, pinned, 1) == tier::performance);

  // An archive extent found on the performance tier (moved there by hand)
  // is sent back.
  bool moved = false;
  hot_archive.move_extent(1, tier::performance, [&](std::error_code ec) {
    REQUIRE_FALSE(ec);
    moved = true;
  });
  r.loop.run_until([&] { return moved; });
  settle(r, m);
  CHECK(tier_of(r, hot_archive, 1) == tier::capacity);

  // Very hot auto extents fill the rest and never displace the pinned ones.
  for (std::uint64_t e = 0; e < 8; ++e) heat_up(r, normal, e, 30);
  settle(r, m);
  CHECK(tier_of(r, pinned, 0) == tier::performance);
  CHECK(tier_of(r, pinned, 1) == tier::performance);
  int promoted = 0;
  for (std::uint64_t e = 0; e < 8; ++e) promoted += tier_of(r, normal, e) == tier::performance;
  CHECK(promoted == 2);
}

TEST_CASE("migrator: moves stop while foreground latency is over budget", "[tiering][migrator]") {
  rig r(8, 16, new_extent_tier::capacity);
  volume& v = r.create("db", 8 * extent_blocks);
  fill(r, v, 0, 8);
  migrator_options o = quick();
  o.latency_budget = std::chrono::milliseconds(1);
  migrator m(*r.p, o);
  // A baseline without moves: fast reads.
  heat_up(r, v, 0, 10);
  r.loop.clock.advance_by(std::chrono::seconds(1));  // the copy-rate budget fills
  m.run_round();  // measures the baseline, then promotes extent 0
  REQUIRE(m.moves_in_flight() == 1);
  r.loop.run_until([&] { return m.moves_in_flight() == 0; });
  // Now the capacity groups answer 5 ms late while a move is under way.
  for (auto& f : r.faults) f->set_delay(std::chrono::milliseconds(5), 1.0);
  heat_up(r, v, 1, 10);
  heat_up(r, v, 2, 10);
  const unsigned before = m.allowed_in_flight();
  m.run_round();  // the window since the last round had a move in flight: over budget
  CHECK(m.counters().throttled_rounds == 1);
  CHECK(m.allowed_in_flight() < before);
}

TEST_CASE(
    "migrator: a plan naming a deleted volume is dropped, not carried out; a placement change "
    "steers it",
    "[tiering][migrator][delete]") {
  rig r(4, 16, new_extent_tier::capacity);
  volume& keep = r.create("keep", 4 * extent_blocks);
  volume& doomed = r.create("doomed", 4 * extent_blocks);
  fill(r, keep, 0, 2);
  fill(r, doomed, 0, 2);
  heat_up(r, keep, 0, 20);  // the hottest: promoted first
  heat_up(r, doomed, 0, 10);
  heat_up(r, doomed, 1, 10);
  migrator_options o = quick();
  o.max_moves_in_flight = 1;  // the rest of the plan waits for the first move
  migrator m(*r.p, o);
  r.loop.clock.advance_by(std::chrono::seconds(1));  // the copy-rate budget fills
  m.run_round();
  REQUIRE(m.moves_in_flight() == 1);  // keep's extent 0
  REQUIRE(m.planned() == 2);          // doomed's two, next when it ends
  REQUIRE(doomed.idle());
  REQUIRE(r.delete_volume("doomed"));
  r.loop.run_until([&] { return m.moves_in_flight() == 0; });
  CHECK(m.planned() == 0);
  CHECK(m.counters().promotions == 1);
  CHECK(m.counters().failed_moves == 0);  // nothing tried on the deleted volume
  CHECK(tier_of(r, keep, 0) == tier::performance);
  settle(r, m);
  CHECK(m.counters().promotions == 1);
  CHECK(m.counters().failed_moves == 0);

  // archive: the next rounds send its extent back, as for any archive volume.
  REQUIRE(r.set_placement("keep", affinity::archive));
  settle(r, m);
  CHECK(tier_of(r, keep, 0) == tier::capacity);
  CHECK(m.counters().demotions == 1);
  CHECK(read_blocks(r.loop, keep, 0, 1) == pattern(block_size, 1));
}

}  // namespace
}  // namespace strata::tiering
