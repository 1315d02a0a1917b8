// The configuration as the controllers copy it: which records are
// array-wide, the encodings on the link (and their refusal of bad bytes),
// the generation, and a snapshot installed over an older store.
#include "controller/config_sync.h"

#include <catch2/catch.hpp>

#include "tests/raid/device/harness.h"

using namespace strata;
using namespace strata::controller;

namespace {

std::unique_ptr<config_store> store(const device::testing::temp_dir& dir, const std::string& name) {
  auto s = config_store::open((dir.path() / name).string());
  REQUIRE(s);
  return std::move(*s);
}

}  // namespace

TEST_CASE("config sync: array-wide records, encoded and decoded; bad bytes refused",
          "[controller][config_sync]") {
  CHECK(array_wide("hosts/h1"));
  CHECK(array_wide("pools/p1/volumes/v1"));
  CHECK(array_wide("array/identity"));
  CHECK_FALSE(array_wide("events/0001"));
  CHECK_FALSE(array_wide("operations/op-1"));
  CHECK_FALSE(array_wide("rebuild-resume/groups/g1"));

  const config_records records = {{"hosts/h1", std::string("\0\1binary", 8)}, {"pools/p1", ""}};
  auto back = decode_records(encode_records(records));
  REQUIRE(back);
  CHECK(*back == records);
  auto bytes = encode_records(records);
  bytes.pop_back();
  CHECK_FALSE(decode_records(bytes));  // cut short
  bytes = encode_records(records);
  bytes.push_back(0);
  CHECK_FALSE(decode_records(bytes));  // trailing bytes

  const config_change change = {
      {"hosts/h2", "x"}, {"mappings/m1", std::nullopt}, {"array/generation", "7"}};
  auto decoded = decode_change(encode_change(change));
  REQUIRE(decoded);
  CHECK(*decoded == change);
  // A partner may change array-wide records only.
  auto foreign = decode_change(encode_change({{"events/x", "y"}}));
  REQUIRE_FALSE(foreign);
  CHECK(foreign.error().message.find("not array-wide") != std::string::npos);
  auto cut = encode_change(change);
  cut.resize(cut.size() - 3);
  CHECK_FALSE(decode_change(cut));
}

TEST_CASE(
    "config sync: generations bump with each change; a snapshot replaces the array-wide records "
    "only",
    "[controller][config_sync]") {
  device::testing::temp_dir dir;
  auto newer = store(dir, "newer");
  auto older = store(dir, "older");
  CHECK(generation_of(*newer) == 0);
  config_batch b;
  b.put("hosts/h1", "one");
  b.put("hosts/h2", "two");
  bump_generation(b, generation_of(*newer));
  REQUIRE(newer->commit(b));
  CHECK(generation_of(*newer) == 1);
  config_batch c;
  c.erase("hosts/h2");
  c.put("mappings/m1", "m");
  bump_generation(c, generation_of(*newer));
  REQUIRE(newer->commit(c));
  CHECK(generation_of(*newer) == 2);

  // The older store holds a host the newer one deleted, and events of its own.
  config_batch old;
  old.put("hosts/h2", "stale");
  old.put("hosts/h9", "gone");
  old.put("events/e1", "its own");
  REQUIRE(older->commit(old));
  REQUIRE(older->commit(replace_with(*older, array_wide_records(*newer))));
  CHECK(array_wide_records(*older) == array_wide_records(*newer));
  CHECK(older->get("events/e1") == "its own");
  CHECK_FALSE(older->get("hosts/h9"));
  CHECK(generation_of(*older) == 2);
  // change_of and batch_of round-trip a batch.
  const auto round = change_of(batch_of(change_of(c)));
  CHECK(round == change_of(c));
}
