// Forwarded I/O over a real partner link (two partner_links on one loop,
// over loopback sockets): controller b's forwarded_unit sends its tasks to
// controller a's logical unit, over a device that completes out of order
// and late. Overlapping writes and reads in flight at once land and read
// back whole; sense data, residual fields and data-in come back as the
// owner's unit set them; reservations and unit attentions are the owner
// unit's, whichever port; a link that drops with commands in flight ends
// each of them in NOT READY 04/0A, and the forwarding side answers by
// itself while it cannot forward. Seeded (test_seed(): the device's reordering).
#include "controller/forwarded_unit.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <random>

#include "raid/device/clock.h"
#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "tests/raid/device/harness.h"
#include "tests/target/scsi_harness.h"

using namespace strata;
using namespace strata::scsi;
using namespace strata::scsi::testing;
using strata::device::testing::test_seed;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using controller::forwarding_state;

namespace {

constexpr std::uint32_t block_bytes = 4096;
constexpr std::uint64_t blocks = 4096;
const std::string volume_name = "pools/p1/volumes/v1";

cdb_bytes rw16(std::uint8_t op, std::uint64_t lba, std::uint32_t count) {
  cdb_bytes c{};
  c[0] = op;
  put(c, 2, lba, 8);
  put(c, 10, count, 4);
  return c;
}

// Controller a (owner: the unit, the receiver) and b (the forwarded unit),
// their links on one loop.
struct rig {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  device::real_clock clock;
  std::unique_ptr<device::memory_device> memory;
  std::unique_ptr<device::fault_device> faults;
  std::unique_ptr<logical_unit> unit;
  std::unique_ptr<controller::partner_link> link_a, link_b;
  std::unique_ptr<controller::forward_receiver> receiver;
  controller::forwarding_path path;
  std::unique_ptr<controller::forwarded_unit> forwarded;
  bool serving = true;  // a serves the volume

  rig() {
    auto m = device::memory_device::create(io.get_executor(), {block_bytes, blocks});
    REQUIRE(m);
    memory = std::move(*m);
    const std::uint64_t seed = test_seed();
    faults =
        std::make_unique<device::fault_device>(*memory, clock, device::fault_options{seed, false});
    faults->set_reorder(2ms, 0.5);
    faults->set_delay(1ms, 0.2);
    unit_identity id;
    id.serial = "FWD-1";
    id.port_groups = {{1, alua_state::active_optimized, {1}},
                      {2, alua_state::active_non_optimized, {2}}};
    unit = std::make_unique<logical_unit>(*faults, id);
    receiver = std::make_unique<controller::forward_receiver>([this](const std::string& v) {
      return serving && v == volume_name ? unit.get() : nullptr;
    });

    controller::partner_link_options ob;
    ob.self = "b";
    ob.partner = "a";
    ob.listen_at = asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.2"), 0);
    link_b = std::make_unique<controller::partner_link>(io.get_executor(), ob);
    REQUIRE(link_b->start());
    controller::partner_link_options oa = ob;
    oa.self = "a";
    oa.partner = "b";
    oa.listen_at = link_b->listen_endpoint();
    link_a = std::make_unique<controller::partner_link>(io.get_executor(), oa);
    link_a->handle(controller::link_type::scsi_command,
                   [this](controller::link_bytes p, controller::link_reply r) {
                     receiver->command(std::move(p), std::move(r));
                   });
    link_a->handle(controller::link_type::scsi_nexus_event,
                   [this](controller::link_bytes p, controller::link_reply r) {
                     receiver->nexus_event(std::move(p), std::move(r));
                   });
    REQUIRE(link_a->start());
    run_until([&] { return link_a->up() && link_b->up(); });

    path.loop = io.get_executor();
    path.call = [this](std::uint16_t type, controller::link_bytes payload,
                       controller::link_reply done) {
      link_b->call(type, std::move(payload), std::move(done));
    };
    path.state = [this] {
      return link_b->up() ? forwarding_state::forwarding : forwarding_state::transitioning;
    };
    path.own_group = {2, alua_state::active_non_optimized, {2}};
    path.partner_group = {1, alua_state::active_optimized, {1}};
    forwarded = std::make_unique<controller::forwarded_unit>(volume_name, path);
  }
  ~rig() {
    run_until([&] {
      return forwarded->commands_in_flight() == 0 && unit->commands_in_flight() == 0 &&
             receiver->in_flight() == 0;
    });
    link_a->stop();
    link_b->stop();
    io.poll();
    run_until([&] { return faults->requests_pending() == 0; });
  }

  template <class Done>
  void run_until(Done done) {
    const auto limit = std::chrono::steady_clock::now() + 20s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > limit) FAIL("nothing happened for 20 s");
      io.run_one_for(10ms);
    }
  }
  // Starts `c` through b's port (port 2) on `through`, as a host's session would.
  std::unique_ptr<command> start(unit_interface& through, const cdb_bytes& cdb,
                                 std::span<const std::byte> out = {}, std::uint16_t port = 2) {
    auto c = std::make_unique<command>();
    c->t.cdb = cdb;
    c->set_data_out(out);
    c->set_nexus(i_t_nexus{"iqn.x:host,i,0x000000000001", port});
    through.execute(c->t);
    REQUIRE(c->completions == 0);  // never inside execute()
    return c;
  }
  std::unique_ptr<command> run(unit_interface& through, const cdb_bytes& cdb,
                               std::span<const std::byte> out = {}, std::uint16_t port = 2) {
    auto c = start(through, cdb, out, port);
    run_until([&] { return c->completions > 0; });
    REQUIRE(c->completions == 1);
    return c;
  }
};

std::vector<std::byte> fill(std::size_t bytes, std::uint8_t value) {
  return std::vector<std::byte>(bytes, std::byte{value});
}

}  // namespace

TEST_CASE(
    "forwarded unit: 64 overlapping writes and reads in flight through the partner's port land and "
    "read back whole, "
    "over a device that completes out of order",
    "[controller][forwarding]") {
  rig r;
  // The host's nexus through b's port, announced over the link.
  r.forwarded->nexus_created(i_t_nexus{"iqn.x:host,i,0x000000000001", 2});
  require_sense(*r.run(*r.forwarded, cdb_bytes{}), sense_key::unit_attention,
                asc::power_on_reset_occurred);
  std::vector<std::unique_ptr<command>> flight;
  std::vector<std::vector<std::byte>> data;
  std::mt19937_64 random(test_seed());
  // Writes i and i+1 overlap by 4 blocks: each block ends holding some
  // whole write's byte, never a mix within a block.
  for (int i = 0; i < 64; ++i) {
    data.push_back(fill(8 * block_bytes, static_cast<std::uint8_t>(0x40 + i)));
    flight.push_back(
        r.start(*r.forwarded, rw16(0x8a, static_cast<std::uint64_t>(i) * 4, 8), data.back()));
    if (random() % 2) flight.push_back(r.start(*r.forwarded, rw16(0x88, random() % 256, 4)));
  }
  r.run_until([&] {
    return std::ranges::all_of(flight, [](const auto& c) { return c->completions > 0; });
  });
  for (const auto& c : flight) require_good(*c);
  CHECK(r.faults->counters().requests_reordered > 0);
  // Read through the owner's own port and through the partner's: the same.
  for (std::uint16_t port : {1, 2}) {
    auto read = r.run(port == 1 ? static_cast<unit_interface&>(*r.unit) : *r.forwarded,
                      rw16(0x88, 0, 260), {}, port);
    require_good(*read);
    REQUIRE(read->t.data_in_bytes == 260 * block_bytes);
    const auto bytes = read->data_bytes();
    for (std::size_t b = 0; b < 260; ++b) {
      const std::byte first = bytes[b * block_bytes];
      const bool whole =
          std::all_of(bytes.begin() + b * block_bytes, bytes.begin() + (b + 1) * block_bytes,
                      [&](std::byte x) { return x == first; });
      CHECK(whole);
      // Block b was written by write b/4 and, if b >= 4, by write b/4 - 1.
      const auto last = static_cast<std::uint8_t>(0x40 + std::min<std::uint64_t>(63, b / 4));
      const auto before = static_cast<std::uint8_t>(
          0x40 + (b / 4 == 0 ? 0 : std::min<std::uint64_t>(63, b / 4 - 1)));
      CHECK((first == std::byte{last} || first == std::byte{before}));
    }
  }
}

TEST_CASE(
    "forwarded unit: the owner's sense data, data-in and residual fields come back; reservations "
    "and unit attentions "
    "are the owner unit's, whichever port",
    "[controller][forwarding]") {
  rig r;
  const i_t_nexus via_b{"iqn.x:host,i,0x000000000001", 2};
  r.forwarded->nexus_created(via_b);
  require_sense(*r.run(*r.forwarded, cdb_bytes{}), sense_key::unit_attention,
                asc::power_on_reset_occurred);

  // A read past the end: ILLEGAL REQUEST 21/00, as the owner's unit said it.
  require_sense(*r.run(*r.forwarded, rw16(0x88, blocks - 1, 2)), sense_key::illegal_request,
                asc::lba_out_of_range);
  // COMPARE AND WRITE that miscompares at byte 5 of its first block.
  require_good(*r.run(*r.forwarded, rw16(0x8a, 10, 1), fill(block_bytes, 0x11)));
  cdb_bytes caw{};
  caw[0] = 0x89;
  put(caw, 2, 10, 8);
  caw[13] = 1;
  auto compare = fill(block_bytes, 0x11);
  compare[5] = std::byte{0x12};
  auto both = compare;
  both.resize(2 * block_bytes, std::byte{0x22});
  auto miscompared = r.run(*r.forwarded, caw, both);
  require_sense(*miscompared, sense_key::miscompare, asc::miscompare_during_verify);
  CHECK(miscompared->t.sense_data.information == 5);
  // A WRITE whose CDB describes more than the initiator expects: the
  // described length comes back for the residual.
  auto shorter = r.start(*r.forwarded, rw16(0x8a, 20, 2), fill(2 * block_bytes, 0x33));
  r.run_until([&] { return shorter->completions > 0; });
  CHECK(shorter->t.data_out_described_bytes == 2 * block_bytes);
  // VPD 83h through b's port names port 2 and group 2 (answered by a's unit).
  auto vpd = r.run(*r.forwarded, inquiry_cdb(true, 0x83));
  require_good(*vpd);
  CHECK(vpd->t.data_in_bytes > 20);

  // A key registered through b's port is the owner unit's.
  cdb_bytes register_cdb{};
  register_cdb[0] = 0x5f;
  put(register_cdb, 7, 24, 2);
  std::vector<std::uint8_t> params(24, 0);
  params[15] = 0x0b;
  require_good(*r.run(*r.forwarded, register_cdb, std::as_bytes(std::span(params))));
  REQUIRE(r.unit->persistent_reservations().state().registrations.size() == 1);
  CHECK(r.unit->persistent_reservations().state().registrations[0].relative_port == 2);

  // A LUN reset through b reaches the owner's unit: 29/03 on a's own nexus too.
  const i_t_nexus via_a{"iqn.x:host,i,0x000000000001", 1};
  r.unit->nexus_created(via_a);
  require_sense(*r.run(*r.unit, cdb_bytes{}, {}, 1), sense_key::unit_attention,
                asc::power_on_reset_occurred);
  r.forwarded->reset(via_b);
  r.run_until([&] { return r.unit->attentions().pending(via_a) > 0; });
  require_sense(*r.run(*r.unit, cdb_bytes{}, {}, 1), sense_key::unit_attention,
                asc::bus_device_reset_function_occurred);
}

TEST_CASE(
    "forwarded unit: commands in flight when the link drops end in NOT READY 04/0A; while it is "
    "down the forwarding "
    "side answers by itself, REPORT TARGET PORT GROUPS too",
    "[controller][forwarding]") {
  rig r;
  r.forwarded->nexus_created(i_t_nexus{"iqn.x:host,i,0x000000000001", 2});
  require_sense(*r.run(*r.forwarded, cdb_bytes{}), sense_key::unit_attention,
                asc::power_on_reset_occurred);
  // Hold the owner's device so that the writes are in flight at the drop.
  r.faults->set_delay(50ms, 1.0);
  std::vector<std::unique_ptr<command>> flight;
  const auto data = fill(block_bytes, 0x55);
  for (int i = 0; i < 16; ++i)
    flight.push_back(r.start(*r.forwarded, rw16(0x8a, static_cast<std::uint64_t>(i), 1), data));
  r.run_until([&] { return r.receiver->in_flight() == 16; });
  r.link_b->stop();
  r.run_until([&] {
    return std::ranges::all_of(flight, [](const auto& c) { return c->completions > 0; });
  });
  for (const auto& c : flight)
    require_sense(*c, sense_key::not_ready, asc::asymmetric_access_state_transition);

  require_sense(*r.run(*r.forwarded, rw16(0x88, 0, 1)), sense_key::not_ready,
                asc::asymmetric_access_state_transition);
  cdb_bytes rtpg{};
  rtpg[0] = 0xa3;
  rtpg[1] = 0x0a;
  put(rtpg, 6, 1024, 4);
  auto groups = r.run(*r.forwarded, rtpg);
  require_good(*groups);
  const auto d = groups->data();
  REQUIRE(d.size() == 4 + 2 * 12);
  CHECK(get(d, 6, 2) == 2);
  CHECK((d[4] & 0x0f) == static_cast<int>(alua_state::transitioning));
  CHECK(get(d, 18, 2) == 1);
  CHECK((d[16] & 0x0f) == static_cast<int>(alua_state::unavailable));
  r.run_until([&] { return r.unit->commands_in_flight() == 0; });
  r.faults->set_delay(0ms, 0.0);
}

TEST_CASE(
    "forwarded unit: a volume the owner does not serve (a hand-over under way) is a transition; "
    "once it does, "
    "its unit hears of the nexuses again",
    "[controller][forwarding]") {
  rig r;
  r.serving = false;
  r.forwarded->nexus_created(
      i_t_nexus{"iqn.x:host,i,0x000000000001", 2});  // refused there: not served
  require_sense(*r.run(*r.forwarded, cdb_bytes{}), sense_key::not_ready,
                asc::asymmetric_access_state_transition);
  // Served now (the hand-over is done): the first good answer makes the
  // forwarding side announce its nexuses again, so the unit hears of the
  // host before its next command.
  r.serving = true;
  require_good(*r.run(*r.forwarded, cdb_bytes{}));  // a nexus the unit does not know yet
  require_sense(*r.run(*r.forwarded, cdb_bytes{}), sense_key::unit_attention,
                asc::power_on_reset_occurred);
  require_good(*r.run(*r.forwarded, cdb_bytes{}));
}
