#include "controller/unit_state.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <catch2/catch.hpp>
#include <thread>

#include "tests/raid/device/harness.h"

using namespace strata::controller;
using strata::device::testing::temp_dir;

TEST_CASE("unit state: a save is durable before done, which runs on the unit's loop; a reopen loads it",
          "[controller]") {
  temp_dir dir;
  const std::string path = (dir.path() / "config").string();
  const std::vector<std::uint8_t> state{1, 2, 3, 0, 255, 7};
  {
    auto store = config_store::open(path);
    REQUIRE(store);
    boost::asio::io_context unit_loop;
    boost::asio::thread_pool writer(1);
    config_unit_state_store units(**store, "units/u1/reservations", unit_loop.get_executor(), writer.get_executor());
    CHECK(units.load().empty());
    std::optional<std::error_code> outcome;
    std::thread::id ran_on;
    units.save(state, [&](std::error_code ec) {
      outcome = ec;
      ran_on = std::this_thread::get_id();
    });
    // The outcome is posted from the writer's thread: keep the loop from
    // running out of work (and stopping) while it waits.
    auto busy = boost::asio::make_work_guard(unit_loop);
    while (!outcome) unit_loop.run_one();
    CHECK(!*outcome);
    CHECK(ran_on == std::this_thread::get_id());  // the unit's loop
    CHECK(units.load() == state);
    writer.join();
  }
  auto store = config_store::open(path);
  REQUIRE(store);
  boost::asio::io_context unit_loop;
  config_unit_state_store again(**store, "units/u1/reservations", unit_loop.get_executor(), unit_loop.get_executor());
  CHECK(again.load() == state);
  config_unit_state_store other(**store, "units/u2/reservations", unit_loop.get_executor(), unit_loop.get_executor());
  CHECK(other.load().empty());
}
