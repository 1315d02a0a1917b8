// strata-torture's oracle (tools/torture/model.h): which writes a crash may
// lose, and which blocks are garbage.
#include <catch2/catch.hpp>
#include <vector>

#include "tools/torture/model.h"

using namespace strata::torture;

namespace {
std::vector<std::optional<block_value>> holding(std::initializer_list<block_value> values) {
  return {values.begin(), values.end()};
}
}  // namespace

TEST_CASE("torture model: a block names the write that put it there; anything else is garbage",
          "[torture]") {
  std::vector<std::byte> block(block_bytes);
  CHECK(decode_block(block, 7) == block_value{0});
  fill_block(block, 42, 7);
  CHECK(decode_block(block, 7) == block_value{42});
  CHECK_FALSE(decode_block(block, 8));  // misplaced
  block[4000] ^= std::byte{1};
  CHECK_FALSE(decode_block(block, 7));  // torn or corrupt
}

TEST_CASE("torture model: a flushed write must survive; an unflushed one may go", "[torture]") {
  round_model m({0, 0, 0}, 1);
  const auto a = m.write_sent(0, 2, false);
  m.write_done(a, true);
  const auto f = m.flush_sent();
  m.flush_done(f, true);
  const auto b = m.write_sent(1, 2, false);  // acknowledged, never flushed
  m.write_done(b, true);

  auto v = m.verify(holding({a, a, 0}));  // b lost: allowed
  CHECK(v.ok());
  CHECK(v.writes_durable == 1);
  CHECK(v.writes_verified == 1);
  CHECK(v.unflushed_not_found == 1);
  CHECK(m.verify(holding({a, b, b})).ok());  // b landed

  v = m.verify(holding({a, 0, b}));  // block 1 lost a, and b is not there either
  CHECK_FALSE(v.ok());
  CHECK(v.writes_lost == 1);
}

TEST_CASE("torture model: a flush sent before a write completed does not cover it", "[torture]") {
  round_model m({0}, 1);
  const auto a = m.write_sent(0, 1, false);
  const auto f = m.flush_sent();
  m.write_done(a, true);
  m.flush_done(f, true);
  CHECK(m.verify(holding({0})).ok());
  // A flush that failed covers nothing either.
  const auto g = m.flush_sent();
  m.flush_done(g, false);
  CHECK(m.verify(holding({0})).ok());
  const auto h = m.flush_sent();
  m.flush_done(h, true);
  CHECK(m.verify(holding({0})).writes_lost == 1);
}

TEST_CASE(
    "torture model: after the owner's cut (a freeze), a flush through the partner covers only the "
    "writes acknowledged since; the owner's own flushes still count",
    "[torture]") {
  round_model m({0, 0, 0}, 1);
  const auto a = m.write_sent(0, 1, false);
  m.write_done(a, true);
  const auto f = m.flush_sent();  // the owner's flush: a is durable
  m.flush_done(f, true);
  const auto b = m.write_sent(1, 1, false);  // acknowledged by the owner, never flushed by it
  m.write_done(b, true);
  m.owner_cut();
  const auto c = m.write_sent(2, 1, false);  // through the partner
  m.write_done(c, true);
  const auto g = m.flush_sent();
  m.flush_done(g, true);
  auto v = m.verify(holding({a, 0, c}));  // b gone with the owner's caches: allowed
  CHECK(v.ok());
  CHECK(v.writes_durable == 2);
  CHECK(v.unflushed_not_found == 1);
  CHECK(m.verify(holding({0, 0, c})).writes_lost == 1);  // a was flushed by the owner
  CHECK(m.verify(holding({a, b, 0})).writes_lost == 1);  // c, flushed through the partner
}

TEST_CASE("torture model: overlapping writes in flight together may land in either order",
          "[torture]") {
  round_model m({0}, 1);
  const auto a = m.write_sent(0, 1, false);
  const auto b = m.write_sent(0, 1, false);
  m.write_done(b, true);
  m.write_done(a, true);
  const auto f = m.flush_sent();
  m.flush_done(f, true);
  CHECK(m.verify(holding({a})).ok());
  CHECK(m.verify(holding({b})).ok());
  CHECK_FALSE(m.verify(holding({0})).ok());

  // A write acknowledged before a durable one was sent is older than it.
  round_model n({0}, 1);
  const auto c = n.write_sent(0, 1, false);
  n.write_done(c, true);
  const auto d = n.write_sent(0, 1, true);  // FUA: durable once acknowledged
  n.write_done(d, true);
  CHECK(n.verify(holding({d})).ok());
  CHECK(n.verify(holding({c})).writes_lost == 1);
}

TEST_CASE("torture model: a block no write touched must keep what it held", "[torture]") {
  round_model m({5, 6}, 10);
  const auto a = m.write_sent(0, 1, false);
  CHECK(m.plausible(0, 5));
  CHECK(m.plausible(0, a));
  CHECK_FALSE(m.plausible(1, a));
  CHECK(m.verify(holding({5, 6})).ok());
  CHECK(m.verify(holding({5, 0})).garbage_blocks == 1);
  CHECK(m.verify(holding({6, 6})).garbage_blocks == 1);  // another block's value
  const std::vector<std::optional<block_value>> torn{std::nullopt, 6};
  CHECK(m.verify(torn).garbage_blocks == 1);
}
