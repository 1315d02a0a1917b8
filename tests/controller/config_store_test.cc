#include "controller/config_store.h"

#include <catch2/catch.hpp>
#include <string>

#include "tests/raid/device/harness.h"

using strata::controller::config_batch;
using strata::controller::config_store;
using strata::device::testing::temp_dir;

TEST_CASE("config store: a committed batch is read back, in key order, and survives a reopen",
          "[controller]") {
  temp_dir dir;
  const std::string path = (dir.path() / "config").string();
  {
    auto store = config_store::open(path);
    REQUIRE(store);
    CHECK((*store)->empty());
    config_batch b;
    b.put("pools/p1", "pool one");
    b.put("pools/p1/volumes/v2", "volume two");
    b.put("pools/p1/volumes/v1", "volume one");
    b.put("pools/p2", "pool two");
    b.put("hosts/h1", "host");
    REQUIRE((*store)->commit(b));
    CHECK((*store)->get("pools/p1/volumes/v1") == "volume one");
    CHECK_FALSE((*store)->get("pools/p1/volumes/v3"));

    config_batch e;
    e.erase("hosts/h1");
    e.put("pools/p1", "pool one, renamed");
    REQUIRE((*store)->commit(e));
  }
  auto store = config_store::open(path);
  REQUIRE(store);
  CHECK_FALSE((*store)->get("hosts/h1"));
  CHECK((*store)->get("pools/p1") == "pool one, renamed");
  const auto volumes = (*store)->list("pools/p1/volumes/");
  REQUIRE(volumes.size() == 2);
  CHECK(volumes[0].first == "pools/p1/volumes/v1");
  CHECK(volumes[1].second == "volume two");
}

TEST_CASE("config store: lists page by the last key of the page before", "[controller]") {
  temp_dir dir;
  auto store = config_store::open((dir.path() / "config").string());
  REQUIRE(store);
  config_batch b;
  for (int i = 0; i < 25; ++i) b.put("hosts/h" + std::to_string(100 + i), std::to_string(i));
  b.put("hostsx", "not under hosts/");
  b.put("groups/g1", "before the prefix");
  REQUIRE((*store)->commit(b));
  std::vector<std::string> seen;
  std::string after;
  for (;;) {
    const auto page = (*store)->list("hosts/", after, 10);
    for (const auto& [k, v] : page) seen.push_back(k);
    if (page.size() < 10) break;
    after = page.back().first;
  }
  REQUIRE(seen.size() == 25);
  CHECK(seen.front() == "hosts/h100");
  CHECK(seen.back() == "hosts/h124");
  CHECK((*store)->list("hosts/", "a-key-before-the-prefix", 3).size() == 3);
}

TEST_CASE("config store: a second open of the same database is refused with its reason",
          "[controller]") {
  temp_dir dir;
  const std::string path = (dir.path() / "config").string();
  auto first = config_store::open(path);
  REQUIRE(first);
  auto second = config_store::open(path);
  REQUIRE_FALSE(second);
  CHECK(second.error().message.find(path) != std::string::npos);
  CHECK(second.error().message.find("lock") != std::string::npos);
}
