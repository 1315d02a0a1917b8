#include "controller/unit_state.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <thread>

#include "tests/raid/device/harness.h"
#include "tiering/records.h"

using namespace strata::controller;
using strata::device::testing::temp_dir;
namespace tiering = strata::tiering;

TEST_CASE(
    "unit state: kept in the pool's metadata; a save is durable before done, which runs on the "
    "loop; a reopen loads it; "
    "a state only in the config store is loaded from there",
    "[controller]") {
  temp_dir dir;
  const std::string pool_path = (dir.path() / "pool").string();
  auto config = config_store::open((dir.path() / "config").string());
  REQUIRE(config);
  const std::vector<std::uint8_t> state{1, 2, 3, 0, 255, 7};
  const std::vector<std::uint8_t> earlier{9, 9, 9};
  config_batch b;
  b.put("reservations/pools/p1/volumes/v2", std::string(earlier.begin(), earlier.end()));
  REQUIRE((*config)->commit(b));
  {
    boost::asio::io_context loop;
    auto store = tiering::metadata_store::open(pool_path, loop.get_executor());
    REQUIRE(store);
    pool_unit_state_store units(**store, tiering::keys::unit_state(1), **config,
                                "reservations/pools/p1/volumes/v1");
    CHECK(units.load().empty());
    std::optional<std::error_code> outcome;
    std::thread::id ran_on;
    units.save(state, [&](std::error_code ec) {
      outcome = ec;
      ran_on = std::this_thread::get_id();
    });
    // The outcome is posted from the store's thread: keep the loop from
    // running out of work (and stopping) while it waits.
    auto busy = boost::asio::make_work_guard(loop);
    while (!outcome) loop.run_one();
    CHECK(!*outcome);
    CHECK(ran_on == std::this_thread::get_id());  // the loop
    CHECK(units.load() == state);
    (*store)->drain();
  }
  boost::asio::io_context loop;
  auto store = tiering::metadata_store::open(pool_path, loop.get_executor());
  REQUIRE(store);
  CHECK((*store)->get(tiering::column::pool, tiering::keys::unit_state(1)).has_value());
  pool_unit_state_store again(**store, tiering::keys::unit_state(1), **config,
                              "reservations/pools/p1/volumes/v1");
  CHECK(again.load() == state);
  pool_unit_state_store older(**store, tiering::keys::unit_state(2), **config,
                              "reservations/pools/p1/volumes/v2");
  CHECK(older.load() == earlier);
  pool_unit_state_store none(**store, tiering::keys::unit_state(3), **config,
                             "reservations/pools/p1/volumes/v3");
  CHECK(none.load().empty());
}
