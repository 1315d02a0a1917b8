// The loop runner: its spin follows the gaps between work, and no handler
// waits for a spin that has stopped paying.
#include "raid/device/run_loop.h"

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <thread>

using strata::device::run_loop;
using strata::device::spin_advisor;

TEST_CASE("spin advisor: spinning stops after a run of long gaps and comes back after short ones") {
  spin_advisor a;
  REQUIRE(a.spin());  // a new loop spins
  int long_gaps = 0;
  while (a.spin()) {
    a.gap(false);
    ++long_gaps;
    REQUIRE(long_gaps < 20);
  }
  CHECK(long_gaps >= 4);  // one slow request does not stop it
  CHECK(long_gaps <= 8);
  a.gap(true);
  CHECK_FALSE(a.spin());  // one short gap does not bring it back
  int short_gaps = 1;
  while (!a.spin()) {
    a.gap(true);
    ++short_gaps;
    REQUIRE(short_gaps < 20);
  }
  CHECK(short_gaps <= 8);
  // Mixed gaps, three short in four: it goes on spinning.
  for (int i = 0; i < 100; ++i) {
    a.gap(i % 4 != 0);
    CHECK(a.spin());
  }
}

TEST_CASE(
    "run_loop: work posted from another thread, close together and far apart, all runs; stop ends "
    "it") {
  boost::asio::io_context loop(1);
  auto guard = boost::asio::make_work_guard(loop);
  std::atomic<int> ran = 0;
  std::thread runner([&] { run_loop(loop, std::chrono::microseconds(100)); });
  // Close together (the spin catches them), then far apart (it gives up
  // spinning and sleeps; each post must still wake it).
  for (int i = 0; i < 200; ++i) boost::asio::post(loop, [&] { ++ran; });
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const int before = ran.load();
    boost::asio::post(loop, [&] { ++ran; });
    for (int w = 0; w < 2000 && ran.load() == before; ++w)
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    REQUIRE(ran.load() == before + 1);
  }
  boost::asio::post(loop, [&] { loop.stop(); });
  runner.join();
  CHECK(ran.load() == 220);
}
