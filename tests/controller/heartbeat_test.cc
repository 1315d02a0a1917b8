// Drive heartbeats and the lease, in virtual time: controllers a and b
// beating on the same three drives (memory devices, behind fault devices
// where a drive must fail), each seeing the other; a partner killed
// (silent after the silence limit, its lease lapsed long before), one
// stopped cleanly, one frozen and thawed; drives failing under the beats.
#include "controller/heartbeat.h"

#include <catch2/catch.hpp>
#include <thread>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "tests/raid/device/harness.h"

using namespace strata;
using namespace strata::controller;
using namespace strata::device::testing;
using namespace std::chrono_literals;

namespace {

// Three shared drives, each behind a fault device (to fail one at will).
struct shelf_of_three {
  test_loop loop;
  std::vector<std::unique_ptr<device::memory_device>> drives;
  std::vector<std::unique_ptr<device::fault_device>> faults;

  shelf_of_three() {
    for (int i = 0; i < 3; ++i) {
      auto m = device::memory_device::create(loop.context.get_executor(), {4096, 64});
      REQUIRE(m);
      drives.push_back(std::move(*m));
      faults.push_back(std::make_unique<device::fault_device>(*drives.back(), loop.clock,
                                                              device::fault_options{}));
    }
  }
  std::vector<heartbeat_drive> heartbeat_drives() {
    std::vector<heartbeat_drive> out;
    for (auto& f : faults) out.push_back({f.get(), 0});
    return out;
  }
  void run_for(device::duration d) {
    const auto until = loop.clock.now() + d;
    loop.run_until([&] { return loop.clock.now() >= until; });
  }
};

struct controller_beat {
  lease own;
  drive_heartbeats beats;
  std::vector<partner_state> seen;
  int renewals = 0;
  controller_beat(shelf_of_three& s, const std::string& self, const std::string& partner)
      : own(s.loop.clock, 1s),
        beats(s.loop.clock, s.loop.context.get_executor(), self, partner, s.heartbeat_drives(),
              own) {
    beats.on_partner = [this](partner_state p) { seen.push_back(p); };
    beats.on_renewed = [this] { ++renewals; };
  }
};

}  // namespace

TEST_CASE("heartbeat: a and b see each other beat, and each beat renews the lease",
          "[controller][heartbeat]") {
  shelf_of_three s;
  controller_beat a(s, "a", "b"), b(s, "b", "a");
  CHECK_FALSE(a.own.valid());  // no lease before the first beat reaches a drive
  a.beats.start();
  b.beats.start();
  s.run_for(2s);
  CHECK(a.beats.partner() == partner_state::beating);
  CHECK(b.beats.partner() == partner_state::beating);
  CHECK(a.seen == std::vector<partner_state>{partner_state::beating});
  CHECK(a.own.valid());
  CHECK(b.own.valid());
  CHECK(a.renewals >= 7);  // every 250 ms
  b.beats.set_config_generation(42);
  s.run_for(1s);
  REQUIRE(a.beats.partner_beat());
  CHECK(a.beats.partner_beat()->config_generation == 42);
  CHECK(a.beats.partner_beat()->controller == "b");
  bool stopped = false;
  a.beats.stop(true, [&] { stopped = true; });
  b.beats.stop(true, [&] {});
  s.loop.run_until([&] { return stopped; });
}

TEST_CASE(
    "heartbeat: a partner killed goes silent after the silence limit, long after its lease lapsed",
    "[controller][heartbeat]") {
  shelf_of_three s;
  controller_beat a(s, "a", "b");
  auto b = std::make_unique<controller_beat>(s, "b", "a");
  a.beats.start();
  b->beats.start();
  s.run_for(1s);
  REQUIRE(a.beats.partner() == partner_state::beating);
  // kill -9: no last beat; b's lease runs out on its own.
  const auto killed = s.loop.clock.now();
  const auto b_lease_until = b->own.until();
  b.reset();
  while (a.beats.partner() != partner_state::silent) s.run_for(50ms);
  const auto detected = s.loop.clock.now() - killed;
  CHECK(detected <= 2s + 50ms);  // the silence limit and a beat
  CHECK(detected >= 1500ms);
  // Whatever b was doing, its lease ended a second before anyone calls it silent.
  CHECK(b_lease_until <= killed + 1s);
  CHECK(s.loop.clock.now() - b_lease_until >= 500ms);
  a.beats.stop(false, [] {});
}

TEST_CASE("heartbeat: a partner stopped cleanly is stopped, not silent; started again, it beats",
          "[controller][heartbeat]") {
  shelf_of_three s;
  controller_beat a(s, "a", "b");
  auto b = std::make_unique<controller_beat>(s, "b", "a");
  a.beats.start();
  b->beats.start();
  s.run_for(1s);
  bool stopped = false;
  b->beats.stop(true, [&] { stopped = true; });
  s.loop.run_until([&] { return stopped; });
  CHECK_FALSE(b->own.valid());  // a clean stop gives the lease up
  b.reset();
  s.run_for(5s);
  CHECK(a.beats.partner() == partner_state::stopped);
  b = std::make_unique<controller_beat>(s, "b", "a");
  b->beats.start();
  s.run_for(1s);
  CHECK(a.beats.partner() == partner_state::beating);
  CHECK(a.seen == std::vector<partner_state>{partner_state::beating, partner_state::stopped,
                                             partner_state::beating});
  a.beats.stop(false, [] {});
  b->beats.stop(false, [] {});
}

TEST_CASE(
    "heartbeat: one drive that takes the beat is enough; with none the lease lapses and comes back "
    "with the drives",
    "[controller][heartbeat]") {
  shelf_of_three s;
  controller_beat a(s, "a", "b"), b(s, "b", "a");
  a.beats.start();
  b.beats.start();
  s.run_for(1s);
  s.faults[0]->fail_writes(0, 64);
  s.faults[1]->fail_writes(0, 64);
  s.run_for(3s);
  CHECK(a.own.valid());
  CHECK(a.beats.partner() == partner_state::beating);  // read from the third
  s.faults[2]->fail_writes(0, 64);
  s.run_for(1500ms);
  CHECK_FALSE(a.own.valid());
  CHECK(a.beats.failed_in_a_row() >= 4);
  s.faults[2]->clear_write_failures();
  s.run_for(500ms);
  CHECK(a.own.valid());
  CHECK(a.beats.failed_in_a_row() == 0);
  a.beats.stop(false, [] {});
  b.beats.stop(false, [] {});
}

TEST_CASE(
    "heartbeat: a restarted partner counts past its old beats, even where a drive kept an old "
    "count",
    "[controller][heartbeat]") {
  shelf_of_three s;
  controller_beat a(s, "a", "b");
  auto b = std::make_unique<controller_beat>(s, "b", "a");
  a.beats.start();
  b->beats.start();
  s.run_for(10s);  // 40 beats: in virtual time they count faster than the wall clock's ms
  REQUIRE(a.beats.partner() == partner_state::beating);
  const std::uint64_t old_count = b->beats.beats();
  b.reset();                        // killed
  s.faults[0]->fail_writes(0, 64);  // drive 0 keeps b's old count: the new b's beats miss it
  std::this_thread::sleep_for(
      200ms);  // real beats are 250 ms apart: let the wall clock pass the old count
  b = std::make_unique<controller_beat>(s, "b", "a");
  b->beats.start();
  s.run_for(3s);
  CHECK(b->beats.beats() > old_count);
  CHECK(a.beats.partner() ==
        partner_state::beating);  // not silent: its count moves past the old one
  CHECK(a.beats.partner_beat()->counter == b->beats.beats());
  a.beats.stop(false, [] {});
  b->beats.stop(false, [] {});
}

TEST_CASE(
    "heartbeat: the echo carries the partner's newest counter, but not while a claim is open "
    "(a takeover's epoch not yet on the drives)",
    "[controller][heartbeat]") {
  shelf_of_three s;
  controller_beat a(s, "a", "b"), b(s, "b", "a");
  a.beats.start();
  b.beats.start();
  s.run_for(1s);
  // Each echoes the other within a beat or two.
  const std::uint64_t a_then = a.beats.beats();
  s.run_for(600ms);
  CHECK(a.beats.echoed() >= a_then);
  // b opens a claim (its takeover checked "a DOWN"): a's later beats are
  // read, but not echoed, until the claim is dropped.
  auto claim = b.beats.claim();
  s.run_for(300ms);
  const std::uint64_t a_after_claim = a.beats.beats();
  s.run_for(1s);
  REQUIRE(b.beats.partner_beat());
  CHECK(b.beats.partner_beat()->counter >= a_after_claim);  // read
  CHECK(a.beats.echoed() < a_after_claim);                  // not echoed
  claim.reset();                                            // the epoch landed
  s.run_for(600ms);
  CHECK(a.beats.echoed() >= a_after_claim);
  bool stopped = false;
  a.beats.stop(true, [&] { stopped = true; });
  b.beats.stop(true, [&] {});
  s.loop.run_until([&] { return stopped; });
}
