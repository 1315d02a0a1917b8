// Reservations and unit attentions of the SCSI layer over a memory volume:
// every PERSISTENT RESERVE IN and OUT service action and its errors, the
// access each reservation type leaves to each kind of nexus (one table, as
// SPC-4 and SBC-3 write it), RESERVE/RELEASE(6/10) and how they meet
// persistent reservations, unit attentions (order, REQUEST SENSE, resets,
// overflow, the fast path), and the saved state: its encoding, corrupt
// bytes, APTPL across a power loss, a takeover, a save that fails.
#include <isa-l/crc.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "raid/device/memory_device.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/reservations.h"
#include "target/scsi/sense.h"
#include "target/scsi/unit_attentions.h"
#include "target/scsi/unit_state_store.h"
#include "tests/raid/device/harness.h"
#include "tests/target/scsi_harness.h"

namespace strata::scsi {
namespace {

using namespace device;
using namespace device::testing;
using namespace strata::scsi::testing;

constexpr std::uint32_t block_size = 512;
constexpr std::uint64_t volume_blocks = 2048;

using bytes = std::vector<std::uint8_t>;

// Initiator port names as an iSCSI transport builds them.
const std::string port_a = "iqn.2026-01.io.strata.test:node-a,i,0x23d000000001";
const std::string port_a2 = "iqn.2026-01.io.strata.test:node-a,i,0x23d000000002";  // a 2nd session
const std::string port_b = "iqn.2026-01.io.strata.test:node-b,i,0x23d000000001";
const std::string port_c = "iqn.2026-01.io.strata.test:node-c,i,0x4000013a00bc";
const i_t_nexus node_a{port_a, 1};
const i_t_nexus node_a2{port_a2, 1};
const i_t_nexus node_a_port2{port_a, 2};
const i_t_nexus node_b{port_b, 1};
const i_t_nexus node_c{port_c, 1};

constexpr std::uint64_t key_a = 0xaaaa000000000001ull;
constexpr std::uint64_t key_b = 0xbbbb000000000002ull;
constexpr std::uint64_t key_c = 0xcccc000000000003ull;

// PERSISTENT RESERVE OUT service actions.
enum : std::uint8_t {
  sa_register = 0,
  sa_reserve = 1,
  sa_release = 2,
  sa_clear = 3,
  sa_preempt = 4,
  sa_preempt_and_abort = 5,
  sa_register_and_ignore = 6,
  sa_register_and_move = 7,
};
// Byte 20 of the basic parameter list.
constexpr std::uint8_t spec_i_pt = 0x08, all_tg_pt = 0x04, aptpl = 0x01;

constexpr std::uint8_t we = 1, ea = 3, we_ro = 5, ea_ro = 6, we_ar = 7, ea_ar = 8;
constexpr std::uint8_t all_types[] = {we, ea, we_ro, ea_ro, we_ar, ea_ar};

cdb_bytes prout_cdb(std::uint8_t action, std::uint8_t type, std::uint32_t list_bytes) {
  cdb_bytes c{};
  c[0] = 0x5f;
  c[1] = action;
  c[2] = type;  // SCOPE 0h
  put(c, 5, list_bytes, 4);
  return c;
}
cdb_bytes prin_cdb(std::uint8_t action, std::uint16_t allocation_length = 8192) {
  cdb_bytes c{};
  c[0] = 0x5e;
  c[1] = action;
  put(c, 7, allocation_length, 2);
  return c;
}
bytes prout_list(std::uint64_t key, std::uint64_t service_key, std::uint8_t flags = 0) {
  bytes p(24, 0);
  put(p, 0, key, 8);
  put(p, 8, service_key, 8);
  p[20] = flags;
  return p;
}
// An iSCSI TransportID, format 01b (name with ISID), null-padded.
bytes transport_id(const std::string& port_name, std::uint8_t format_byte = 0x45) {
  const std::size_t body = std::max<std::size_t>(20, (port_name.size() + 1 + 3) / 4 * 4);
  bytes id(4 + body, 0);
  id[0] = format_byte;
  put(id, 2, body, 2);
  std::memcpy(&id[4], port_name.data(), port_name.size());
  return id;
}
// Bytes 1 and 4 of a 6-byte CDB, the rest zero. Not scsi_test.cc's cdb6
// (READ(6) and WRITE(6), with a 21-bit LBA from byte 1): most 6-byte CDBs
// here carry flags in byte 1 and a length in byte 4.
cdb_bytes cdb6(std::uint8_t op, std::uint8_t byte1 = 0, std::uint8_t byte4 = 0) {
  cdb_bytes c{};
  c[0] = op;
  c[1] = byte1;
  c[4] = byte4;
  return c;
}

bool conflicted(const command& x) {
  return x.t.result == status::reservation_conflict;
}
void require_conflict(const command& x) {
  INFO(describe(x));
  REQUIRE(x.t.result == status::reservation_conflict);
}
void require_illegal(const command& x, additional_sense code) {
  require_sense(x, sense_key::illegal_request, code);
}
void require_attention(const command& x, additional_sense code) {
  require_sense(x, sense_key::unit_attention, code);
}

// A store whose saves complete when the test says so.
class deferred_store final : public unit_state_store {
 public:
  std::vector<std::uint8_t> load() override { return stored; }
  void save(std::vector<std::uint8_t> b, std::function<void(std::error_code)> done) override {
    pending.emplace_back(std::move(b), std::move(done));
  }
  void complete_one(std::error_code ec = {}) {
    REQUIRE_FALSE(pending.empty());
    auto [b, done] = std::move(pending.front());
    pending.erase(pending.begin());
    if (!ec) stored = std::move(b);
    done(ec);
  }
  std::vector<std::uint8_t> stored;
  std::vector<std::pair<std::vector<std::uint8_t>, std::function<void(std::error_code)>>> pending;
};

struct rig {
  test_loop loop;
  std::unique_ptr<memory_device> memory;
  std::unique_ptr<logical_unit> unit;

  explicit rig(unit_state_store* store = nullptr) {
    auto m = memory_device::create(loop.context.get_executor(), {block_size, volume_blocks});
    REQUIRE(m);
    memory = std::move(*m);
    make_unit(store);
  }
  ~rig() {
    loop.settle();
    CHECK(unit->commands_in_flight() == 0);
  }
  // A new unit over the same volume: a restart, or a takeover.
  void make_unit(unit_state_store* store) {
    unit_identity id;
    id.serial = "PR-TEST";
    unit.reset();
    unit = std::make_unique<logical_unit>(*memory, id, store);
  }

  std::unique_ptr<command> start(const i_t_nexus& n, const cdb_bytes& cdb, const bytes& out = {}) {
    auto x = std::make_unique<command>();
    x->set_nexus(n);
    x->t.cdb = cdb;
    x->set_data_out(std::as_bytes(std::span(out)));
    unit->execute(x->t);
    REQUIRE(x->completions == 0);  // never inside execute()
    return x;
  }
  std::unique_ptr<command> run(const i_t_nexus& n, const cdb_bytes& cdb, const bytes& out = {}) {
    auto x = start(n, cdb, out);
    finish(loop, *x);
    return x;
  }

  std::unique_ptr<command> prout(const i_t_nexus& n, std::uint8_t action, std::uint8_t type,
                                 const bytes& list) {
    return run(n, prout_cdb(action, type, static_cast<std::uint32_t>(list.size())), list);
  }
  std::unique_ptr<command> prout(const i_t_nexus& n, std::uint8_t action, std::uint8_t type,
                                 std::uint64_t key, std::uint64_t service_key,
                                 std::uint8_t flags = 0) {
    return prout(n, action, type, prout_list(key, service_key, flags));
  }
  void register_key(const i_t_nexus& n, std::uint64_t key, std::uint8_t flags = 0) {
    require_good(*prout(n, sa_register_and_ignore, 0, 0, key, flags));
  }
  void reserve(const i_t_nexus& n, std::uint64_t key, std::uint8_t type) {
    require_good(*prout(n, sa_reserve, type, key, 0));
  }

  struct keys {
    std::uint32_t generation = 0;
    std::vector<std::uint64_t> list;
  };
  keys read_keys(const i_t_nexus& n = node_c) {
    auto x = run(n, prin_cdb(0x00));
    require_good(*x);
    const auto d = x->data();
    keys k;
    k.generation = static_cast<std::uint32_t>(get(d, 0, 4));
    const auto length = get(d, 4, 4);
    REQUIRE(d.size() == 8 + length);
    for (std::size_t at = 8; at < d.size(); at += 8) k.list.push_back(get(d, at, 8));
    return k;
  }
  struct held {
    std::uint64_t key;
    std::uint8_t type;
  };
  std::optional<held> read_reservation(const i_t_nexus& n = node_c) {
    auto x = run(n, prin_cdb(0x01));
    require_good(*x);
    const auto d = x->data();
    if (get(d, 4, 4) == 0) {
      REQUIRE(d.size() == 8);
      return std::nullopt;
    }
    REQUIRE(get(d, 4, 4) == 16);
    REQUIRE(d.size() == 24);
    CHECK((d[21] >> 4) == 0);  // LU_SCOPE
    return held{get(d, 8, 8), static_cast<std::uint8_t>(d[21] & 0x0f)};
  }
  // Clears what unit attentions `n` has pending.
  void clear_attentions(const i_t_nexus& n) {
    for (int i = 0; i < 16; ++i) {
      auto x = run(n, cdb6(0x00));
      if (x->t.result != status::check_condition ||
          x->t.sense_data.key != sense_key::unit_attention)
        return;
    }
    FAIL("unit attentions do not clear");
  }
  void announce(const i_t_nexus& n) {
    unit->nexus_created(n);
    clear_attentions(n);
  }

  std::unique_ptr<command> read(const i_t_nexus& n) { return run(n, cdb10(0x28, 1, 1)); }
  std::unique_ptr<command> write(const i_t_nexus& n) {
    return run(n, cdb10(0x2a, 1, 1), bytes(block_size, 0x5a));
  }
};

// ---------------------------------------------------------------------------
// Registering

TEST_CASE("reservations: REGISTER, READ KEYS and PRgeneration", "[target][scsi][reservations]") {
  rig r;
  CHECK(r.read_keys().generation == 0);
  CHECK(r.read_keys().list.empty());

  SECTION("an unregistered nexus registers with RESERVATION KEY 0") {
    require_good(*r.prout(node_a, sa_register, 0, 0, key_a));
    const auto k = r.read_keys();
    CHECK(k.generation == 1);
    CHECK(k.list == std::vector<std::uint64_t>{key_a});
  }
  SECTION("with a nonzero RESERVATION KEY it conflicts") {
    require_conflict(*r.prout(node_a, sa_register, 0, 5, key_a));
    CHECK(r.read_keys().list.empty());
  }
  SECTION("SERVICE ACTION RESERVATION KEY 0 on an unregistered nexus: GOOD, nothing happens") {
    require_good(*r.prout(node_a, sa_register, 0, 0, 0));
    require_good(*r.prout(node_a, sa_register_and_ignore, 0, 0, 0));
    CHECK(r.read_keys().generation == 0);
  }
  SECTION("registering again needs the current key (libiscsi's re-register test)") {
    r.register_key(node_a, key_a);
    require_conflict(*r.prout(node_a, sa_register, 0, 0, key_a + 1));
    require_conflict(*r.prout(node_a, sa_register, 0, key_b, key_a + 1));
    require_good(*r.prout(node_a, sa_register, 0, key_a, key_a + 1));
    const auto k = r.read_keys();
    CHECK(k.list == std::vector<std::uint64_t>{key_a + 1});
    CHECK(k.generation == 2);
  }
  SECTION("REGISTER AND IGNORE EXISTING KEY replaces whatever key") {
    r.register_key(node_a, key_a);
    require_good(*r.prout(node_a, sa_register_and_ignore, 0, 12345, key_b));
    CHECK(r.read_keys().list == std::vector<std::uint64_t>{key_b});
  }
  SECTION("unregistering: SERVICE ACTION RESERVATION KEY 0") {
    r.register_key(node_a, key_a);
    r.register_key(node_b, key_b);
    require_good(*r.prout(node_a, sa_register, 0, key_a, 0));
    const auto k = r.read_keys();
    CHECK(k.list == std::vector<std::uint64_t>{key_b});
    CHECK(k.generation == 3);
  }
  SECTION("each session of an initiator is its own nexus, each port too") {
    r.register_key(node_a, key_a);
    r.register_key(node_a2, key_b);
    r.register_key(node_a_port2, key_c);
    CHECK(r.read_keys().list == std::vector<std::uint64_t>{key_a, key_b, key_c});
    require_good(*r.prout(node_a2, sa_register, 0, key_b, 0));
    CHECK(r.read_keys().list == std::vector<std::uint64_t>{key_a, key_c});
  }
}

TEST_CASE("reservations: REGISTER with ALL_TG_PT covers every target port",
          "[target][scsi][reservations]") {
  rig r;
  r.register_key(node_a, key_a, all_tg_pt);
  CHECK(r.read_keys().list == std::vector<std::uint64_t>{key_a});
  // Through port 2 the initiator port is registered as well: it may reserve.
  r.reserve(node_a_port2, key_a, we);
  CHECK(r.read_reservation()->key == key_a);
  auto full = r.run(node_c, prin_cdb(0x03));
  require_good(*full);
  const auto d = full->data();
  CHECK((d[8 + 12] & 0x02) != 0);  // ALL_TG_PT
  CHECK(get(d, 8 + 18, 2) == 0);   // no one relative target port
  // Through port 2 the nexus is registered: REGISTER needs the key there too.
  require_conflict(*r.prout(node_a_port2, sa_register, 0, 0, key_b));
  require_good(*r.prout(node_a_port2, sa_register, 0, key_a, key_b));
  CHECK(r.read_keys().list == std::vector<std::uint64_t>{key_b});
  // Another session of the initiator is another initiator port.
  require_good(*r.prout(node_a2, sa_register, 0, 0, key_c, all_tg_pt));
  CHECK(r.read_keys().list.size() == 2);
}

TEST_CASE("reservations: ALL_TG_PT while registered through one port conflicts",
          "[target][scsi][reservations]") {
  rig r;
  r.register_key(node_a, key_a);
  require_conflict(*r.prout(node_a_port2, sa_register, 0, 0, key_b, all_tg_pt));
  require_good(*r.prout(node_a_port2, sa_register, 0, 0, key_b));
  CHECK(r.read_keys().list.size() == 2);
}

TEST_CASE("reservations: SPEC_I_PT registers the initiator ports named",
          "[target][scsi][reservations]") {
  rig r;
  auto list = [](std::uint8_t flags, const std::vector<bytes>& ids) {
    bytes p = prout_list(0, key_a, flags);
    bytes all;
    for (const auto& id : ids) all.insert(all.end(), id.begin(), id.end());
    bytes length(4);
    put(length, 0, all.size(), 4);
    p.insert(p.end(), length.begin(), length.end());
    p.insert(p.end(), all.begin(), all.end());
    return p;
  };
  SECTION("each gets the key, on the port the command came through") {
    std::string upper = port_c;
    std::transform(upper.end() - 12, upper.end(), upper.end() - 12, ::toupper);  // ISID in capitals
    require_good(*r.prout(node_a, sa_register, 0,
                          list(spec_i_pt, {transport_id(port_b), transport_id(upper)})));
    CHECK(r.read_keys().list == std::vector<std::uint64_t>{key_a, key_a, key_a});
    // b and c are registered: they may reserve with the key.
    r.reserve(node_c, key_a, ea);
    CHECK(r.read_reservation()->key == key_a);
    auto full = r.run(node_b, prin_cdb(0x03));
    require_good(*full);
    const auto d = full->data();
    // The third descriptor is c's, its TransportID with the ISID lowercase.
    std::size_t at = 8;
    for (int i = 0; i < 2; ++i) at += 24 + get(d, at + 20, 4);
    const std::string name(reinterpret_cast<const char*>(d.data() + at + 24 + 4), port_c.size());
    CHECK(name == port_c);
    CHECK((d[at + 12] & 0x01) != 0);  // R_HOLDER
    CHECK((d[at + 13] & 0x0f) == ea);
  }
  SECTION("the errors") {
    // Not with REGISTER AND IGNORE EXISTING KEY, nor on a registered nexus.
    require_illegal(
        *r.prout(node_a, sa_register_and_ignore, 0, list(spec_i_pt, {transport_id(port_b)})),
        asc::invalid_field_in_parameter_list);
    r.register_key(node_c, key_c);
    bytes again = list(spec_i_pt, {transport_id(port_b)});
    put(again, 0, key_c, 8);
    require_illegal(*r.prout(node_c, sa_register, 0, again), asc::invalid_field_in_parameter_list);
    // A nexus registered already, or named twice.
    require_illegal(*r.prout(node_a, sa_register, 0, list(spec_i_pt, {transport_id(port_c)})),
                    asc::invalid_field_in_parameter_list);
    require_illegal(*r.prout(node_a, sa_register, 0,
                             list(spec_i_pt, {transport_id(port_b), transport_id(port_b)})),
                    asc::invalid_field_in_parameter_list);
    // Format 00b (every port of an initiator), another protocol, no ISID.
    require_illegal(*r.prout(node_a, sa_register, 0, list(spec_i_pt, {transport_id(port_b, 0x05)})),
                    asc::invalid_field_in_parameter_list);
    require_illegal(*r.prout(node_a, sa_register, 0, list(spec_i_pt, {transport_id(port_b, 0x41)})),
                    asc::invalid_field_in_parameter_list);
    require_illegal(*r.prout(node_a, sa_register, 0,
                             list(spec_i_pt, {transport_id("iqn.2026-01.io.strata.test:x")})),
                    asc::invalid_field_in_parameter_list);
    // A TRANSPORTID PARAMETER DATA LENGTH past the list.
    bytes longer = list(spec_i_pt, {transport_id(port_b)});
    put(longer, 24, 400, 4);
    require_illegal(*r.prout(node_a, sa_register, 0, longer), asc::parameter_list_length_error);
    // Nothing of any of these was registered.
    CHECK(r.read_keys().list == std::vector<std::uint64_t>{key_c});
  }
}

TEST_CASE("reservations: INSUFFICIENT REGISTRATION RESOURCES past the limit",
          "[target][scsi][reservations]") {
  rig r;
  std::vector<std::string> names;
  for (std::size_t i = 0; i <= reservations::max_registrations; ++i) {
    char isid[13];
    std::snprintf(isid, sizeof isid, "%012zx", i);
    names.push_back("iqn.2026-01.io.strata.test:many,i,0x" + std::string(isid));
  }
  for (std::size_t i = 0; i < reservations::max_registrations; ++i)
    r.register_key(i_t_nexus{names[i], 1}, key_a + i);
  require_illegal(*r.prout(i_t_nexus{names.back(), 1}, sa_register, 0, 0, key_b),
                  asc::insufficient_registration_resources);
  CHECK(r.read_keys().list.size() == reservations::max_registrations);
}

// ---------------------------------------------------------------------------
// Reserving and releasing

TEST_CASE("reservations: RESERVE, READ RESERVATION, RELEASE", "[target][scsi][reservations]") {
  rig r;
  require_conflict(*r.prout(node_a, sa_reserve, we, key_a, 0));  // not registered
  r.register_key(node_a, key_a);
  r.register_key(node_b, key_b);
  const auto generation = r.read_keys().generation;
  require_conflict(*r.prout(node_a, sa_reserve, we, key_b, 0));  // not its key
  CHECK_FALSE(r.read_reservation());

  r.reserve(node_a, key_a, we);
  auto held = r.read_reservation();
  REQUIRE(held);
  CHECK(held->key == key_a);
  CHECK(held->type == we);
  CHECK(r.read_keys().generation == generation);  // RESERVE does not count

  r.reserve(node_a, key_a, we);                                  // again: GOOD, nothing changes
  require_conflict(*r.prout(node_a, sa_reserve, ea, key_a, 0));  // another type
  require_conflict(*r.prout(node_b, sa_reserve, we, key_b, 0));  // another holder

  // RELEASE from a registered non-holder, or with no reservation: GOOD, nothing.
  require_good(*r.prout(node_b, sa_release, we, key_b, 0));
  CHECK(r.read_reservation());
  require_conflict(*r.prout(node_c, sa_release, we, 0, 0));  // not registered
  require_illegal(*r.prout(node_a, sa_release, ea, key_a, 0),
                  asc::invalid_release_of_persistent_reservation);
  require_good(*r.prout(node_a, sa_release, we, key_a, 0));
  CHECK_FALSE(r.read_reservation());
  require_good(*r.prout(node_a, sa_release, we, key_a, 0));
}

TEST_CASE("reservations: all-registrants types have every registrant for holder",
          "[target][scsi][reservations]") {
  for (const std::uint8_t type : {we_ar, ea_ar}) {
    INFO("type " << int{type});
    rig r;
    r.register_key(node_a, key_a);
    r.register_key(node_b, key_b);
    r.reserve(node_a, key_a, type);
    auto held = r.read_reservation();
    REQUIRE(held);
    CHECK(held->key == 0);           // no one key (SPC-4)
    r.reserve(node_b, key_b, type);  // b holds it too
    // libiscsi's ownership test: the reserver unregisters, the reservation stays.
    require_good(*r.prout(node_a, sa_register, 0, key_a, 0));
    CHECK(r.read_reservation());
    require_good(*r.write(node_b));
    require_good(*r.prout(node_b, sa_release, type, key_b, 0));
    CHECK_FALSE(r.read_reservation());
  }
}

TEST_CASE("reservations: the holder unregistering releases the reservation",
          "[target][scsi][reservations]") {
  rig r;
  r.announce(node_b);
  r.register_key(node_a, key_a);
  r.register_key(node_b, key_b);
  SECTION("Write Exclusive: silently") {
    r.reserve(node_a, key_a, we);
    require_good(*r.prout(node_a, sa_register, 0, key_a, 0));
    CHECK_FALSE(r.read_reservation(node_a));
    CHECK(r.unit->attentions().pending(node_b) == 0);
  }
  SECTION("registrants only: the other registrants hear RESERVATIONS RELEASED") {
    r.reserve(node_a, key_a, we_ro);
    require_good(*r.prout(node_a, sa_register, 0, key_a, 0));
    CHECK_FALSE(r.read_reservation(node_a));
    require_attention(*r.read(node_b), asc::reservations_released);
    require_good(*r.read(node_b));
  }
}

TEST_CASE("reservations: RELEASE of a registrants-only or all-registrants type tells the others",
          "[target][scsi][reservations]") {
  for (const std::uint8_t type : all_types) {
    INFO("type " << int{type});
    rig r;
    r.announce(node_a);
    r.announce(node_b);
    r.register_key(node_a, key_a);
    r.register_key(node_b, key_b);
    r.reserve(node_a, key_a, type);
    require_good(*r.prout(node_a, sa_release, type, key_a, 0));
    const bool told = type != we && type != ea;
    CHECK(r.unit->attentions().pending(node_b) == (told ? 1u : 0u));
    CHECK(r.unit->attentions().pending(node_a) == 0);
    if (told) require_attention(*r.read(node_b), asc::reservations_released);
  }
}

TEST_CASE("reservations: CLEAR removes everything and tells every other registrant",
          "[target][scsi][reservations]") {
  rig r;
  r.announce(node_a);
  r.announce(node_b);
  r.announce(node_c);
  r.register_key(node_a, key_a);
  r.register_key(node_b, key_b);
  r.reserve(node_a, key_a, ea);
  const auto generation = r.read_keys(node_b).generation;
  require_conflict(*r.prout(node_c, sa_clear, 0, 0, 0));  // not registered
  require_good(*r.prout(node_b, sa_clear, 0, key_b, 0));
  const auto k = r.read_keys(node_b);
  CHECK(k.list.empty());
  CHECK(k.generation == generation + 1);
  CHECK_FALSE(r.read_reservation(node_b));
  require_attention(*r.read(node_a), asc::reservations_preempted);
  CHECK(r.unit->attentions().pending(node_c) == 0);  // not registered: not told
}

TEST_CASE("reservations: PREEMPT", "[target][scsi][reservations]") {
  rig r;
  r.announce(node_a);
  r.announce(node_b);
  r.announce(node_c);
  r.register_key(node_a, key_a);
  r.register_key(node_b, key_b);
  r.register_key(node_c, key_c);
  const auto generation = r.read_keys().generation;

  SECTION("without a reservation: removes the registrations of the key (libiscsi's test)") {
    require_good(*r.prout(node_b, sa_preempt, ea, key_b, key_a));
    const auto k = r.read_keys();
    CHECK(k.list == std::vector<std::uint64_t>{key_b, key_c});
    CHECK(k.generation == generation + 1);
    require_attention(*r.read(node_a), asc::registrations_preempted);
    CHECK(r.unit->attentions().pending(node_c) == 0);
    CHECK(r.unit->attentions().pending(node_b) == 0);
    // A key nobody has: conflict; key 0: invalid.
    require_conflict(*r.prout(node_b, sa_preempt, ea, key_b, 0x77));
    require_illegal(*r.prout(node_b, sa_preempt, ea, key_b, 0),
                    asc::invalid_field_in_parameter_list);
  }
  SECTION("the holder's key: takes the reservation, with the CDB's type") {
    r.reserve(node_a, key_a, we);
    require_good(*r.prout(node_b, sa_preempt, ea, key_b, key_a));
    const auto held = r.read_reservation(node_b);
    REQUIRE(held);
    CHECK(held->key == key_b);
    CHECK(held->type == ea);
    CHECK(r.read_keys(node_b).list == std::vector<std::uint64_t>{key_b, key_c});
    require_attention(*r.read(node_a), asc::registrations_preempted);
    // The type changed: c, still registered, has lost the reservation it knew.
    require_attention(*r.read(node_c), asc::reservations_released);
  }
  SECTION("the holder's key with the same type: nobody else hears of a release") {
    r.reserve(node_a, key_a, we);
    require_good(*r.prout(node_b, sa_preempt_and_abort, we, key_b, key_a));
    CHECK(r.read_reservation(node_b)->key == key_b);
    require_attention(*r.read(node_a), asc::registrations_preempted);
    CHECK(r.unit->attentions().pending(node_c) == 0);
  }
  SECTION("the holder may preempt itself to change the type") {
    r.reserve(node_a, key_a, we);
    require_good(*r.prout(node_a, sa_preempt, ea, key_a, key_a));
    CHECK(r.read_reservation(node_a)->type == ea);
    CHECK(r.read_keys(node_a).list.size() == 3);
    require_attention(*r.read(node_b), asc::reservations_released);
  }
  SECTION("another key than the holder's: removes those registrations only") {
    r.reserve(node_a, key_a, we);
    require_good(*r.prout(node_b, sa_preempt, we, key_b, key_c));
    CHECK(r.read_reservation(node_b)->key == key_a);
    CHECK(r.read_keys(node_b).list == std::vector<std::uint64_t>{key_a, key_b});
    require_attention(*r.read(node_c), asc::registrations_preempted);
    CHECK(r.unit->attentions().pending(node_a) == 0);
  }
  SECTION("all registrants, key 0: everyone else goes, the sender holds the new type") {
    r.reserve(node_a, key_a, ea_ar);
    require_good(*r.prout(node_b, sa_preempt, we, key_b, 0));
    CHECK(r.read_keys(node_b).list == std::vector<std::uint64_t>{key_b});
    const auto held = r.read_reservation(node_b);
    REQUIRE(held);
    CHECK(held->key == key_b);
    CHECK(held->type == we);
    require_attention(*r.read(node_a), asc::registrations_preempted);
    require_attention(*r.read(node_c), asc::registrations_preempted);
  }
  SECTION("all registrants, a key: those registrations go, the reservation stays") {
    r.reserve(node_a, key_a, ea_ar);
    require_good(*r.prout(node_b, sa_preempt, ea_ar, key_b, key_c));
    CHECK(r.read_keys(node_b).list == std::vector<std::uint64_t>{key_a, key_b});
    CHECK(r.read_reservation(node_b)->type == ea_ar);
  }
  SECTION("an unregistered nexus, or a wrong key, conflicts") {
    const i_t_nexus d{"iqn.2026-01.io.strata.test:node-d,i,0x000000000001", 1};
    require_conflict(*r.prout(d, sa_preempt, we, 0, key_a));
    require_conflict(*r.prout(node_b, sa_preempt, we, key_a, key_a));
    CHECK(r.read_keys().generation == generation);
  }
  SECTION("a preempted nexus's next command is checked against the new reservation") {
    r.reserve(node_a, key_a, ea);
    require_good(*r.prout(node_b, sa_preempt_and_abort, ea, key_b, key_a));
    require_attention(*r.read(node_a), asc::registrations_preempted);
    require_conflict(*r.read(node_a));
  }
}

TEST_CASE("reservations: REGISTER AND MOVE", "[target][scsi][reservations]") {
  rig r;
  auto move_list = [](std::uint64_t key, std::uint64_t service_key, std::uint8_t flags,
                      std::uint16_t port, const bytes& id) {
    bytes p(24, 0);
    put(p, 0, key, 8);
    put(p, 8, service_key, 8);
    p[17] = flags;
    put(p, 18, port, 2);
    put(p, 20, id.size(), 4);
    p.insert(p.end(), id.begin(), id.end());
    return p;
  };
  r.register_key(node_a, key_a);
  r.register_key(node_c, key_c);
  SECTION("without a reservation, or from a non-holder: conflict") {
    require_conflict(*r.prout(node_a, sa_register_and_move, 0,
                              move_list(key_a, key_b, 0, 1, transport_id(port_b))));
    r.reserve(node_a, key_a, we);
    require_conflict(*r.prout(node_c, sa_register_and_move, 0,
                              move_list(key_c, key_b, 0, 1, transport_id(port_b))));
  }
  SECTION("to an unregistered nexus, the source staying registered") {
    r.reserve(node_a, key_a, we_ro);
    const auto generation = r.read_keys().generation;
    // The CDB's TYPE is ignored: the reservation keeps its own.
    require_good(*r.prout(node_a, sa_register_and_move, ea,
                          move_list(key_a, key_b, 0, 1, transport_id(port_b))));
    const auto held = r.read_reservation();
    REQUIRE(held);
    CHECK(held->key == key_b);
    CHECK(held->type == we_ro);
    const auto k = r.read_keys();
    CHECK(k.list == std::vector<std::uint64_t>{key_a, key_c, key_b});
    CHECK(k.generation == generation + 1);
    require_good(*r.write(node_b));
  }
  SECTION("with UNREG, to a registered nexus, which gets the new key") {
    r.register_key(node_b, key_b);
    r.reserve(node_a, key_a, ea);
    require_good(*r.prout(node_a, sa_register_and_move, 0,
                          move_list(key_a, key_b + 1, 0x02, 1, transport_id(port_b))));
    CHECK(r.read_keys().list == std::vector<std::uint64_t>{key_c, key_b + 1});
    CHECK(r.read_reservation()->key == key_b + 1);
    require_good(*r.write(node_b));
    require_conflict(*r.write(node_a));
    require_conflict(*r.write(node_c));
  }
  SECTION("to the same initiator port on another target port") {
    r.reserve(node_a, key_a, ea);
    require_good(*r.prout(node_a, sa_register_and_move, 0,
                          move_list(key_a, key_b, 0, 2, transport_id(port_a))));
    require_good(*r.write(node_a_port2));
    require_conflict(*r.write(node_a));
  }
  SECTION("the errors") {
    r.reserve(node_a, key_a, we);
    require_conflict(*r.prout(node_a, sa_register_and_move, 0,
                              move_list(key_c, key_b, 0, 1, transport_id(port_b))));
    require_illegal(
        *r.prout(node_a, sa_register_and_move, 0, move_list(key_a, 0, 0, 1, transport_id(port_b))),
        asc::invalid_field_in_parameter_list);
    require_illegal(*r.prout(node_a, sa_register_and_move, 0,
                             move_list(key_a, key_b, 0, 1, transport_id(port_a))),
                    asc::invalid_field_in_parameter_list);  // to itself
    require_illegal(*r.prout(node_a, sa_register_and_move, 0,
                             move_list(key_a, key_b, 0, 1, transport_id(port_b, 0x05))),
                    asc::invalid_field_in_parameter_list);
    require_illegal(*r.prout(node_a, sa_register_and_move, 0,
                             move_list(key_a, key_b, 0, 0, transport_id(port_b))),
                    asc::invalid_field_in_parameter_list);  // relative target port 0
    bytes longer = move_list(key_a, key_b, 0, 1, transport_id(port_b));
    put(longer, 20, 200, 4);
    require_illegal(*r.prout(node_a, sa_register_and_move, 0, longer),
                    asc::parameter_list_length_error);
    CHECK(r.read_reservation()->key == key_a);
  }
  SECTION("all-registrants reservations do not move") {
    r.reserve(node_a, key_a, we_ar);
    require_conflict(*r.prout(node_a, sa_register_and_move, 0,
                              move_list(key_a, key_b, 0, 1, transport_id(port_b))));
  }
}

TEST_CASE("reservations: PERSISTENT RESERVE OUT CDB and parameter list errors",
          "[target][scsi][reservations]") {
  rig r;
  r.register_key(node_a, key_a);
  const bytes list = prout_list(key_a, 0);
  auto with_cdb = [&](std::uint8_t byte1, std::uint8_t byte2) {
    cdb_bytes cdb = prout_cdb(0, 0, 24);
    cdb[1] = byte1;
    cdb[2] = byte2;
    return r.run(node_a, cdb, list);
  };
  require_illegal(*with_cdb(0x08, 0), asc::invalid_field_in_cdb);                // service action 8
  require_illegal(*with_cdb(sa_reserve, 0x10 | we), asc::invalid_field_in_cdb);  // scope 1h
  require_illegal(*with_cdb(sa_reserve, 0x02), asc::invalid_field_in_cdb);       // type 2h
  require_illegal(*with_cdb(sa_reserve, 0x00), asc::invalid_field_in_cdb);       // type 0h
  require_illegal(*r.run(node_a, prout_cdb(sa_register, 0, 23), bytes(23, 0)),
                  asc::parameter_list_length_error);
  require_illegal(*r.run(node_a, prout_cdb(sa_register, 0, 28), bytes(28, 0)),
                  asc::parameter_list_length_error);
  require_illegal(*r.run(node_a, prout_cdb(sa_register, 0, 24), bytes(16, 0)),
                  asc::invalid_field_in_command_iu);
  require_illegal(*r.prout(node_a, sa_reserve, we, prout_list(key_a, 0, spec_i_pt)),
                  asc::invalid_field_in_parameter_list);
  // APTPL needs somewhere to persist to: this unit has no store.
  require_illegal(*r.prout(node_a, sa_register, 0, key_a, key_b, aptpl),
                  asc::invalid_field_in_parameter_list);
  CHECK(r.read_keys().list == std::vector<std::uint64_t>{key_a});
  CHECK_FALSE(r.read_reservation());
}

TEST_CASE("reservations: PERSISTENT RESERVE IN", "[target][scsi][reservations]") {
  rig r;
  SECTION("service actions past READ FULL STATUS are refused (libiscsi's range test)") {
    for (std::uint8_t action = 4; action < 0x20; ++action) {
      require_illegal(*r.run(node_a, prin_cdb(action)), asc::invalid_field_in_cdb);
    }
  }
  SECTION("REPORT CAPABILITIES") {
    auto x = r.run(node_a, prin_cdb(0x02));
    require_good(*x);
    const auto d = x->data();
    REQUIRE(d.size() == 8);
    CHECK(get(d, 0, 2) == 8);
    CHECK((d[2] & 0x10) != 0);         // CRH
    CHECK((d[2] & 0x08) != 0);         // SIP_C
    CHECK((d[2] & 0x04) != 0);         // ATP_C
    CHECK((d[2] & 0x01) == 0);         // PTPL_C: no store
    CHECK((d[3] & 0x80) != 0);         // TMV
    CHECK(((d[3] >> 4) & 0x07) == 1);  // ALLOW COMMANDS
    CHECK(get(d, 4, 2) == 0xea01);     // every type
  }
  SECTION("READ FULL STATUS: one descriptor per registration, with its TransportID") {
    r.register_key(node_a, key_a);
    r.register_key(node_b, key_b);
    r.reserve(node_b, key_b, ea_ro);
    auto x = r.run(node_c, prin_cdb(0x03));
    require_good(*x);
    const auto d = x->data();
    CHECK(get(d, 0, 4) == r.read_keys().generation);
    REQUIRE(get(d, 4, 4) == d.size() - 8);
    std::vector<std::string> names;
    std::size_t at = 8;
    for (int i = 0; i < 2; ++i) {
      REQUIRE(at + 24 <= d.size());
      CHECK(get(d, at, 8) == (i == 0 ? key_a : key_b));
      CHECK((d[at + 12] & 0x01) == (i == 1 ? 1 : 0));  // R_HOLDER
      CHECK(d[at + 13] == (i == 1 ? ea_ro : 0));
      CHECK(get(d, at + 18, 2) == 1);  // relative target port
      const auto id_bytes = get(d, at + 20, 4);
      REQUIRE(at + 24 + id_bytes <= d.size());
      CHECK(id_bytes % 4 == 0);
      CHECK(d[at + 24] == 0x45);  // format 01b, iSCSI
      CHECK(get(d, at + 26, 2) == id_bytes - 4);
      names.emplace_back(reinterpret_cast<const char*>(d.data() + at + 28));
      at += 24 + id_bytes;
    }
    CHECK(at == d.size());
    CHECK(names == std::vector<std::string>{port_a, port_b});
  }
  SECTION("the allocation length cuts the data, not the lengths in it") {
    r.register_key(node_a, key_a);
    r.register_key(node_b, key_b);
    auto x = r.run(node_a, prin_cdb(0x00, 12));
    require_good(*x);
    CHECK(x->data().size() == 12);
    CHECK(get(x->data(), 4, 4) == 16);
  }
}

// ---------------------------------------------------------------------------
// Access: the SPC-4 and SBC-3 tables of commands allowed in the presence of
// reservations, written out here independently
// of classify_access().

enum class kind { any, read, write };
struct access_row {
  const char* name;
  cdb_bytes cdb;
  std::size_t data_out_bytes;
  kind k;
};

std::vector<access_row> access_rows() {
  auto sa = [](std::uint8_t op, std::uint8_t action) {
    cdb_bytes c{};
    c[0] = op;
    c[1] = action;
    put(c, 6, 512, 4);
    return c;
  };
  auto sai16 = [](std::uint8_t action) {
    cdb_bytes c{};
    c[0] = 0x9e;
    c[1] = action;
    put(c, 10, 32, 4);
    return c;
  };
  cdb_bytes inquiry = cdb6(0x12, 0, 96);
  cdb_bytes request_sense = cdb6(0x03, 0, 18);
  cdb_bytes rc10{};
  rc10[0] = 0x25;
  cdb_bytes start = cdb6(0x1b, 0, 0x01);
  cdb_bytes stop = cdb6(0x1b, 0, 0x00);
  cdb_bytes sleep = cdb6(0x1b, 0, 0x31);  // START with a power condition
  cdb_bytes mode_sense6 = cdb6(0x1a, 0, 255);
  mode_sense6[2] = 0x3f;
  cdb_bytes mode_sense10 = cdb10(0x5a, 0, 255);
  mode_sense10[2] = 0x3f;
  cdb_bytes unmap{};
  unmap[0] = 0x42;
  cdb_bytes caw{};
  caw[0] = 0x89;
  cdb_bytes orwrite{};
  orwrite[0] = 0x8b;
  cdb_bytes log_sense = cdb10(0x4d, 0, 64);
  cdb_bytes read32{};
  read32[0] = 0x7f;
  read32[9] = 0x09;
  cdb_bytes write32{};
  write32[0] = 0x7f;
  write32[9] = 0x0b;
  return {
      {"TEST UNIT READY", cdb6(0x00), 0, kind::any},
      {"REQUEST SENSE", request_sense, 0, kind::any},
      {"INQUIRY", inquiry, 0, kind::any},
      {"READ CAPACITY(10)", rc10, 0, kind::any},
      {"READ CAPACITY(16)", sai16(0x10), 0, kind::any},
      {"PERSISTENT RESERVE IN", prin_cdb(0x00), 0, kind::any},
      {"REPORT TARGET PORT GROUPS", sa(0xa3, 0x0a), 0, kind::any},
      {"LOG SENSE", log_sense, 0, kind::any},
      {"START STOP UNIT, START", start, 0, kind::any},
      {"START STOP UNIT, STOP", stop, 0, kind::write},
      {"START STOP UNIT, power condition", sleep, 0, kind::write},
      {"READ(6)", cdb6(0x08, 0, 1), 0, kind::read},
      {"READ(10)", cdb10(0x28, 0, 1), 0, kind::read},
      {"READ(16)", cdb10(0x88, 0, 0), 0, kind::read},
      {"READ(32)", read32, 0, kind::read},
      {"VERIFY(10)", cdb10(0x2f, 0, 1), 0, kind::read},
      {"VERIFY(16)", cdb10(0x8f, 0, 0), 0, kind::read},
      {"PRE-FETCH(10)", cdb10(0x34, 0, 1), 0, kind::read},
      {"PRE-FETCH(16)", cdb10(0x90, 0, 0), 0, kind::read},
      {"GET LBA STATUS", sai16(0x12), 0, kind::read},
      {"READ DEFECT DATA(10)", cdb10(0x37, 0, 8), 0, kind::read},
      {"MODE SENSE(6)", mode_sense6, 0, kind::read},
      {"MODE SENSE(10)", mode_sense10, 0, kind::read},
      {"REPORT SUPPORTED OPERATION CODES", sa(0xa3, 0x0c), 0, kind::read},
      {"READ BUFFER", cdb10(0x3c, 0, 0), 0, kind::read},
      {"WRITE(6)", cdb6(0x0a, 0, 1), block_size, kind::write},
      {"WRITE(10)", cdb10(0x2a, 0, 1), block_size, kind::write},
      {"WRITE(16)", cdb10(0x8a, 0, 0), 0, kind::write},
      {"WRITE(32)", write32, 0, kind::write},
      {"WRITE AND VERIFY(10)", cdb10(0x2e, 0, 1), block_size, kind::write},
      {"WRITE SAME(10)", cdb10(0x41, 0, 1), block_size, kind::write},
      {"UNMAP", unmap, 0, kind::write},
      {"SYNCHRONIZE CACHE(10)", cdb10(0x35, 0, 0), 0, kind::write},
      {"SYNCHRONIZE CACHE(16)", cdb10(0x91, 0, 0), 0, kind::write},
      {"COMPARE AND WRITE", caw, 0, kind::write},
      {"ORWRITE(16)", orwrite, 0, kind::write},
      {"MODE SELECT(6)", cdb6(0x15, 0x10, 0), 0, kind::write},
      {"MODE SELECT(10)", cdb10(0x55, 0, 0, 0x10), 0, kind::write},
      {"FORMAT UNIT", cdb6(0x04), 0, kind::write},
      {"WRITE BUFFER", cdb10(0x3b, 0, 0), 0, kind::write},
      {"LOG SELECT", cdb10(0x4c, 0, 0), 0, kind::write},
      {"SEND DIAGNOSTIC", cdb6(0x1d), 0, kind::write},
  };
}

TEST_CASE("reservations: what each type leaves to the holder, registrants and others",
          "[target][scsi][reservations]") {
  const std::vector<access_row> rows = access_rows();
  for (const std::uint8_t type : all_types) {
    rig r;
    r.register_key(node_a, key_a);
    r.register_key(node_b, key_b);
    r.reserve(node_a, key_a, type);
    const bool write_exclusive = type == we || type == we_ro || type == we_ar;
    const bool registrants_may = type != we && type != ea;  // RO and AR types
    struct who {
      const char* name;
      i_t_nexus n;
      bool registered;
    };
    for (const who w : {who{"holder", node_a, true}, who{"registered", node_b, true},
                        who{"unregistered", node_c, false}}) {
      for (const access_row& row : rows) {
        bool allowed = false;
        if (w.n == node_a || (w.registered && registrants_may)) {
          allowed = true;
        } else {
          allowed = row.k == kind::any || (row.k == kind::read && write_exclusive);
        }
        auto x = r.run(w.n, row.cdb, bytes(row.data_out_bytes, 0));
        INFO("type " << int{type} << ", " << w.name << ", " << row.name << ": " << describe(*x));
        CHECK(conflicted(*x) == !allowed);
      }
    }
    // The same as libiscsi's access tests check, with b unregistered.
    require_good(*r.prout(node_b, sa_register, 0, key_b, 0));
    CHECK(conflicted(*r.read(node_b)) == !write_exclusive);
    CHECK(conflicted(*r.write(node_b)));
  }
}

TEST_CASE("reservations: without a reservation, registrations restrict nothing",
          "[target][scsi][reservations]") {
  rig r;
  r.register_key(node_a, key_a);
  require_good(*r.write(node_c));
  require_good(*r.read(node_c));
  CHECK(r.unit->persistent_reservations().quiet());
}

// ---------------------------------------------------------------------------
// RESERVE(6) and RELEASE(6)

TEST_CASE("reservations: RESERVE(6) and RELEASE(6) between two initiators (libiscsi's)",
          "[target][scsi][reservations]") {
  rig r;
  for (const bool ten : {false, true}) {
    INFO((ten ? "10-byte" : "6-byte"));
    const cdb_bytes reserve = ten ? cdb10(0x56, 0, 0) : cdb6(0x16);
    const cdb_bytes release = ten ? cdb10(0x57, 0, 0) : cdb6(0x17);
    require_good(*r.run(node_a, reserve));
    require_good(*r.run(node_a, reserve));  // again
    require_conflict(*r.run(node_b, reserve));
    require_good(*r.run(node_b, release));  // from another nexus: GOOD, nothing happens
    auto mode_sense = cdb6(0x1a, 0, 255);
    mode_sense[2] = 0x3f;
    require_good(*r.run(node_a, mode_sense));
    require_conflict(*r.run(node_b, mode_sense));
    require_conflict(*r.run(node_b, cdb6(0x00)));
    require_conflict(*r.read(node_a2));               // another session of the same initiator
    require_good(*r.run(node_b, cdb6(0x12, 0, 96)));  // INQUIRY
    require_good(*r.run(node_b, cdb6(0x03, 0, 18)));  // REQUEST SENSE
    cdb_bytes rtpg{};
    rtpg[0] = 0xa3;
    rtpg[1] = 0x0a;
    put(rtpg, 6, 512, 4);
    require_good(*r.run(node_b, rtpg));
    // Persistent reservations conflict with it, from everyone (SPC-2 5.5.1).
    require_conflict(*r.run(node_b, prin_cdb(0x00)));
    require_conflict(*r.run(node_a, prin_cdb(0x00)));
    require_conflict(*r.prout(node_a, sa_register, 0, 0, key_a));
    require_good(*r.write(node_a));
    require_good(*r.run(node_a, release));
    require_good(*r.run(node_b, reserve));
    require_good(*r.run(node_b, release));
  }
  SECTION("third-party reservations and extents are refused") {
    require_illegal(*r.run(node_a, cdb6(0x16, 0x10)), asc::invalid_field_in_cdb);
    require_illegal(*r.run(node_a, cdb6(0x16, 0x01)), asc::invalid_field_in_cdb);
    require_illegal(*r.run(node_a, cdb10(0x56, 0, 0, 0x02)), asc::invalid_field_in_cdb);
    require_good(*r.run(node_a, cdb6(0x16, 0xe0)));  // the obsolete LUN field is ignored
  }
}

TEST_CASE("reservations: a LUN reset and the holder's nexus loss release RESERVE(6)",
          "[target][scsi][reservations]") {
  rig r;
  require_good(*r.run(node_a, cdb6(0x16)));
  SECTION("LUN reset") {
    r.unit->reset(node_b);
    require_good(*r.run(node_b, cdb6(0x16)));
  }
  SECTION("I_T nexus loss of the holder") {
    r.unit->nexus_lost(node_b);  // not the holder: nothing
    require_conflict(*r.run(node_b, cdb6(0x16)));
    r.unit->nexus_lost(node_a);
    require_good(*r.run(node_b, cdb6(0x16)));
  }
}

TEST_CASE("reservations: RESERVE(6) meets persistent reservations (CRH=1)",
          "[target][scsi][reservations]") {
  rig r;
  r.register_key(node_a, key_a);
  SECTION("registrations and no reservation: conflict for everyone") {
    require_conflict(*r.run(node_a, cdb6(0x16)));
    require_conflict(*r.run(node_c, cdb6(0x16)));
    require_conflict(*r.run(node_c, cdb6(0x17)));
  }
  SECTION("from the holder: GOOD, and nothing is reserved") {
    r.reserve(node_a, key_a, we);
    require_good(*r.run(node_a, cdb6(0x16)));
    CHECK_FALSE(r.unit->persistent_reservations().spc2_reserved_by(node_a));
    require_good(*r.run(node_a, cdb6(0x17)));
    CHECK(r.read_reservation());
  }
  SECTION("from a registrant under a registrants-only type: GOOD; otherwise conflict") {
    r.register_key(node_b, key_b);
    r.reserve(node_a, key_a, we_ro);
    require_good(*r.run(node_b, cdb6(0x16)));
    require_conflict(*r.run(node_c, cdb6(0x16)));
  }
}

// ---------------------------------------------------------------------------
// Unit attentions

TEST_CASE("unit attentions: a nexus announced gets POWER ON once", "[target][scsi][attentions]") {
  rig r;
  r.unit->nexus_created(node_a);
  // INQUIRY passes and leaves it.
  require_good(*r.run(node_a, cdb6(0x12, 0, 96)));
  auto first = r.run(node_a, cdb6(0x00));
  require_attention(*first, asc::power_on_reset_occurred);
  REQUIRE(first->t.sense_data.key_specific);
  CHECK((*first->t.sense_data.key_specific)[0] == 0x80);  // SKSV, no overflow
  CHECK(fixed_sense(first->t.sense_data)[15] == 0x80);
  require_good(*r.run(node_a, cdb6(0x00)));
  // Announcing it again changes nothing; other nexuses were never told anything.
  r.unit->nexus_created(node_a);
  require_good(*r.run(node_a, cdb6(0x00)));
  require_good(*r.run(node_b, cdb6(0x00)));
}

TEST_CASE("unit attentions: REQUEST SENSE returns the condition and clears it",
          "[target][scsi][attentions]") {
  rig r;
  r.unit->nexus_created(node_a);
  SECTION("fixed format") {
    auto x = r.run(node_a, cdb6(0x03, 0, 18));
    require_good(*x);
    const auto d = x->data();
    REQUIRE(d.size() == 18);
    CHECK(d[0] == 0x70);
    CHECK((d[2] & 0x0f) == 0x6);
    CHECK(d[12] == 0x29);
    CHECK(d[13] == 0x00);
    CHECK(d[15] == 0x80);
  }
  SECTION("descriptor format") {
    auto x = r.run(node_a, cdb6(0x03, 0x01, 252));
    require_good(*x);
    const auto d = x->data();
    REQUIRE(d.size() == 16);
    CHECK(d[0] == 0x72);
    CHECK((d[1] & 0x0f) == 0x6);
    CHECK(d[2] == 0x29);
    CHECK(d[7] == 8);
    CHECK(d[8] == 0x02);  // sense key specific descriptor
    CHECK(d[12] == 0x80);
  }
  require_good(*r.run(node_a, cdb6(0x00)));
  auto none = r.run(node_a, cdb6(0x03, 0, 18));
  require_good(*none);
  CHECK((none->data()[2] & 0x0f) == 0);
}

TEST_CASE("unit attentions: reset, capacity, ALUA, mode parameters", "[target][scsi][attentions]") {
  rig r;
  r.announce(node_a);
  r.announce(node_b);
  SECTION("a LUN reset: every nexus, the issuer's too, BUS DEVICE RESET FUNCTION OCCURRED") {
    r.unit->reset(node_a);
    require_attention(*r.read(node_a), asc::bus_device_reset_function_occurred);
    require_good(*r.read(node_a));
    require_attention(*r.read(node_b), asc::bus_device_reset_function_occurred);
    require_good(*r.read(node_b));
  }
  SECTION("capacity and ALUA state: every nexus, oldest first") {
    r.unit->capacity_changed();
    r.unit->set_port_groups(
        {{1, alua_state::active_non_optimized, {1}}, {2, alua_state::active_optimized, {2}}});
    r.unit->capacity_changed();  // pending already: once
    for (const i_t_nexus& n : {node_a, node_b}) {
      require_attention(*r.read(n), asc::capacity_data_has_changed);
      require_attention(*r.read(n), asc::asymmetric_access_state_changed);
      require_good(*r.read(n));
    }
  }
  SECTION("MODE PARAMETERS CHANGED: the others") {
    r.unit->mode_parameters_changed(node_b);
    require_attention(*r.read(node_a), asc::mode_parameters_changed);
    require_good(*r.read(node_b));
  }
  SECTION("a reset replaces what was pending") {
    r.unit->capacity_changed();
    r.unit->reset(node_a);
    require_attention(*r.read(node_b), asc::bus_device_reset_function_occurred);
    require_good(*r.read(node_b));
  }
  SECTION("a registered nexus never announced is told too") {
    r.register_key(node_c, key_c);
    r.unit->capacity_changed();
    require_attention(*r.read(node_c), asc::capacity_data_has_changed);
  }
}

TEST_CASE("unit attentions: a lost nexus hears of it when it comes back",
          "[target][scsi][attentions]") {
  rig r;
  r.announce(node_a);
  r.unit->capacity_changed();
  r.unit->nexus_lost(node_a);
  CHECK(r.unit->attentions().quiet());  // a gone nexus keeps no one on the slow path
  r.unit->nexus_created(node_a);
  require_attention(*r.read(node_a), asc::i_t_nexus_loss_occurred);
  require_good(*r.read(node_a));
}

TEST_CASE("unit attentions: a unit attention comes before a reservation conflict",
          "[target][scsi][attentions]") {
  rig r;
  r.register_key(node_a, key_a);
  r.reserve(node_a, key_a, ea);
  r.unit->nexus_created(node_c);
  require_attention(*r.read(node_c), asc::power_on_reset_occurred);
  require_conflict(*r.read(node_c));
}

TEST_CASE("unit attentions: the fast path looks nothing up", "[target][scsi][attentions]") {
  rig r;
  const auto& attentions = r.unit->attentions();
  const auto& reservations = r.unit->persistent_reservations();
  CHECK(attentions.quiet());
  CHECK(reservations.quiet());
  // Commands from nexuses never announced leave no trace, and none is
  // looked up.
  for (const i_t_nexus& n : {node_a, node_b, node_c}) require_good(*r.read(n));
  CHECK(attentions.nexus_count() == 0);
  CHECK(attentions.lookups() == 0);
  r.unit->nexus_created(node_a);
  CHECK_FALSE(attentions.quiet());
  r.clear_attentions(node_a);
  CHECK(attentions.quiet());
  const auto looked_up = attentions.lookups();
  CHECK(looked_up > 0);
  r.register_key(node_a, key_a);
  CHECK(reservations.quiet());
  require_good(*r.read(node_b));
  CHECK(attentions.lookups() == looked_up);  // registrations alone restrict nothing
  r.reserve(node_a, key_a, we);
  CHECK_FALSE(reservations.quiet());
  require_good(*r.read(node_b));
  CHECK(attentions.lookups() == looked_up + 1);
  require_good(*r.prout(node_a, sa_release, we, key_a, 0));
  CHECK(reservations.quiet());
  require_good(*r.prout(node_a, sa_register, 0, key_a, 0));
  require_good(*r.run(node_b, cdb6(0x16)));
  CHECK_FALSE(reservations.quiet());
}

TEST_CASE("unit attentions: the queue is bounded, oldest first, and says when it overflowed",
          "[target][scsi][attentions]") {
  unit_attentions u;
  u.nexus_created(node_a);
  auto s = u.take(node_a);
  REQUIRE(s);
  CHECK(s->asc == 0x29);
  constexpr std::size_t extra = 3;
  for (std::size_t i = 0; i < unit_attentions::max_conditions_per_nexus + extra; ++i)
    u.establish(node_a, additional_sense{0x2a, static_cast<std::uint8_t>(0x10 + i)});
  u.establish(node_a, additional_sense{0x2a, 0x10});  // pending already: not queued twice
  CHECK(u.pending(node_a) == unit_attentions::max_conditions_per_nexus);
  for (std::size_t i = 0; i < unit_attentions::max_conditions_per_nexus; ++i) {
    s = u.take(node_a);
    REQUIRE(s);
    CHECK(s->key == sense_key::unit_attention);
    CHECK(s->ascq == 0x10 + i);
    REQUIRE(s->key_specific);
    CHECK((*s->key_specific)[0] == (i == 0 ? 0x81 : 0x80));  // OVERFLOW on the first after it
  }
  CHECK_FALSE(u.take(node_a));
  CHECK(u.quiet());
}

TEST_CASE("unit attentions: at most max_nexuses are tracked; gone ones are forgotten first",
          "[target][scsi][attentions]") {
  unit_attentions u;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < unit_attentions::max_nexuses + 8; ++i)
    names.push_back("iqn.2026-01.io.strata.test:n" + std::to_string(i) + ",i,0x000000000001");
  for (std::size_t i = 0; i < unit_attentions::max_nexuses; ++i) u.nexus_created({names[i], 1});
  CHECK(u.nexus_count() == unit_attentions::max_nexuses);
  u.nexus_created({names[unit_attentions::max_nexuses], 1});  // all connected: dropped
  CHECK(u.nexus_count() == unit_attentions::max_nexuses);
  CHECK(u.pending({names[unit_attentions::max_nexuses], 1}) == 0);
  u.nexus_lost({names[5], 1});
  u.nexus_created({names[unit_attentions::max_nexuses + 1], 1});  // takes the place of the lost one
  CHECK(u.nexus_count() == unit_attentions::max_nexuses);
  CHECK(u.pending({names[unit_attentions::max_nexuses + 1], 1}) == 1);
  CHECK(u.pending({names[5], 1}) == 0);
}

// ---------------------------------------------------------------------------
// The saved state

reservation_state random_state(std::mt19937_64& random) {
  reservation_state s;
  s.generation = static_cast<std::uint32_t>(random());
  s.aptpl = random() % 2 == 0;
  const std::size_t count = random() % 20;
  for (std::size_t i = 0; i < count; ++i) {
    registration r;
    r.initiator_port = "iqn.2026-01.io.strata.test:" + std::to_string(random() % 1000000) +
                       ",i,0x" + std::to_string(100000000000 + i);
    r.all_target_ports = random() % 4 == 0;
    r.relative_port = r.all_target_ports ? 0 : static_cast<std::uint16_t>(1 + random() % 4);
    r.key = random() | 1;
    s.registrations.push_back(r);
  }
  if (count > 0 && random() % 2 == 0) {
    s.reservation = static_cast<pr_type>(all_types[random() % 6]);
    if (*s.reservation != pr_type::write_exclusive_all_registrants &&
        *s.reservation != pr_type::exclusive_access_all_registrants)
      s.registrations[random() % count].holder = true;
  }
  return s;
}

TEST_CASE("reservation state: encoding round trips", "[target][scsi][reservations]") {
  const auto seed = test_seed();
  INFO("seed " << seed);
  std::mt19937_64 random(seed);
  for (int i = 0; i < 200; ++i) {
    const reservation_state s = random_state(random);
    const auto decoded = decode_reservation_state(encode_reservation_state(s));
    REQUIRE(decoded);
    CHECK(*decoded == s);
  }
}

TEST_CASE("reservation state: corrupt bytes are refused with a reason",
          "[target][scsi][reservations]") {
  reservation_state s;
  s.generation = 7;
  s.aptpl = true;
  s.registrations = {{port_a, 1, false, key_a, true}, {port_b, 0, true, key_b, false}};
  s.reservation = pr_type::exclusive_access;
  const auto good = encode_reservation_state(s);
  REQUIRE(decode_reservation_state(good));
  auto refused = [](const bytes& b, const std::string& reason) {
    const auto d = decode_reservation_state(b);
    REQUIRE_FALSE(d);
    CHECK(d.error().code == errc::invalid_argument);
    INFO(d.error().message);
    CHECK(d.error().message.find(reason) != std::string::npos);
  };
  // With the checksum made right again, the content checks speak.
  auto resealed = [](bytes b) {
    const auto crc = ~crc32_iscsi(b.data(), static_cast<int>(b.size() - 4), ~std::uint32_t{0});
    put(b, b.size() - 4, crc, 4);
    return b;
  };
  SECTION("every single flipped byte") {
    for (std::size_t i = 0; i < good.size(); ++i) {
      bytes b = good;
      b[i] ^= 0x40;
      INFO("byte " << i);
      CHECK_FALSE(decode_reservation_state(b));
    }
  }
  SECTION("every truncation, and an extra byte") {
    for (std::size_t n = 0; n < good.size(); ++n) {
      INFO("length " << n);
      CHECK_FALSE(decode_reservation_state(std::span(good.data(), n)));
    }
    bytes longer = good;
    longer.insert(longer.end() - 4, 0);
    refused(resealed(longer), "trailing");
  }
  SECTION("each content check") {
    bytes b = good;
    b[0] = 'X';
    refused(b, "magic");
    b = good;
    b[5] = 2;
    refused(resealed(b), "version 2");
    b = good;
    b[7] = 2;
    refused(resealed(b), "type");
    b = good;
    b[6] = 0x80;
    refused(resealed(b), "flags");
    refused(bytes(good.begin(), good.begin() + 10), "too short");
    b = good;
    b[b.size() - 1] ^= 1;
    refused(b, "checksum");
    reservation_state two_holders = s;
    two_holders.registrations[1].holder = true;
    refused(encode_reservation_state(two_holders), "holder");
    reservation_state zero_key = s;
    zero_key.registrations[0].key = 0;
    refused(encode_reservation_state(zero_key), "zero");
    reservation_state twice = s;
    twice.registrations.push_back({port_b, 2, false, key_c, false});  // b is on every port already
    refused(encode_reservation_state(twice), "two registrations");
  }
}

TEST_CASE("reservation state: saved on every change, before the command completes",
          "[target][scsi][reservations]") {
  deferred_store store;
  rig r(&store);
  auto x = r.start(node_a, prout_cdb(sa_register_and_ignore, 0, 24), prout_list(0, key_a));
  auto y = r.start(node_b, prout_cdb(sa_register_and_ignore, 0, 24), prout_list(0, key_b));
  r.loop.settle();
  CHECK(x->completions == 0);
  CHECK(y->completions == 0);
  REQUIRE(store.pending.size() == 1);  // one at a time
  CHECK(r.unit->commands_in_flight() == 2);
  CHECK(r.unit->persistent_reservations().state().registrations.empty());  // not before it is saved
  store.complete_one();
  r.loop.settle();
  CHECK(x->completions == 1);
  require_good(*x);
  REQUIRE(store.pending.size() == 1);  // the second, against the state the first left
  store.complete_one();
  r.loop.settle();
  require_good(*y);
  const auto saved = decode_reservation_state(store.stored);
  REQUIRE(saved);
  CHECK(saved->registrations.size() == 2);
  CHECK(saved->generation == 2);
  CHECK(*saved == r.unit->persistent_reservations().state());
  // Nothing changed (RESERVE of what is held, a no-op REGISTER): nothing saved.
  auto z = r.start(node_c, prout_cdb(sa_register, 0, 24), prout_list(0, 0));
  r.loop.settle();
  require_good(*z);
  CHECK(store.pending.empty());
}

TEST_CASE("reservation state: a save that fails fails the command and changes nothing",
          "[target][scsi][reservations]") {
  memory_unit_state_store store;
  rig r(&store);
  r.register_key(node_a, key_a);
  const auto before = store.bytes();
  store.fail_next(errc::io_error);
  auto x = r.prout(node_a, sa_reserve, we, key_a, 0);
  require_sense(*x, sense_key::hardware_error, asc::internal_target_failure);
  CHECK_FALSE(r.read_reservation());
  CHECK(store.bytes() == before);
  store.fail_next(errc::no_space);
  require_sense(*r.prout(node_b, sa_register_and_ignore, 0, 0, key_b), sense_key::data_protect,
                asc::space_allocation_failed_write_protect);
  CHECK(r.read_keys().list == std::vector<std::uint64_t>{key_a});
  r.reserve(node_a, key_a, we);  // and the next works
  CHECK(r.read_reservation());
}

TEST_CASE("reservation state: a power loss keeps APTPL state, a takeover keeps all",
          "[target][scsi][reservations]") {
  memory_unit_state_store store;
  rig r(&store);
  SECTION("APTPL=1 survives a power loss") {
    r.register_key(node_a, key_a, aptpl);
    r.register_key(node_b, key_b, aptpl);
    r.reserve(node_a, key_a, ea);
    const auto before = r.read_keys();
    r.make_unit(&store);
    REQUIRE(r.unit->restore_state(state_origin::power_loss));
    const auto after = r.read_keys();
    CHECK(after.list == before.list);
    CHECK(after.generation == before.generation);
    CHECK(r.read_reservation()->key == key_a);
    require_conflict(*r.read(node_c));  // enforced from the first command
    require_good(*r.write(node_a));
    auto caps = r.run(node_a, prin_cdb(0x02));
    CHECK((caps->data()[2] & 0x01) != 0);  // PTPL_C
    CHECK((caps->data()[3] & 0x01) != 0);  // PTPL_A
  }
  SECTION("APTPL=0 does not, and a later takeover does not bring it back") {
    r.register_key(node_a, key_a);
    r.reserve(node_a, key_a, ea);
    r.make_unit(&store);
    REQUIRE(r.unit->restore_state(state_origin::power_loss));
    r.loop.settle();
    CHECK(r.read_keys().list.empty());
    CHECK(r.read_keys().generation == 0);
    require_good(*r.read(node_c));
    r.make_unit(&store);
    REQUIRE(r.unit->restore_state(state_origin::failover));
    CHECK(r.read_keys().list.empty());
  }
  SECTION("a takeover keeps everything, APTPL or not") {
    r.register_key(node_a, key_a);
    r.register_key(node_b, key_b, aptpl);  // the last REGISTER decides APTPL
    require_good(*r.prout(node_b, sa_register, 0, key_b, key_c));
    r.reserve(node_a, key_a, we_ro);
    const auto before = r.unit->persistent_reservations().state();
    CHECK_FALSE(before.aptpl);
    r.make_unit(&store);
    REQUIRE(r.unit->restore_state(state_origin::failover));
    CHECK(r.unit->persistent_reservations().state() == before);
    require_conflict(*r.write(node_c));
  }
  SECTION("a corrupt state is refused, and the unit starts without reservations") {
    r.register_key(node_a, key_a, aptpl);
    auto b = store.bytes();
    b[20] ^= 1;
    store.set_bytes(b);
    r.make_unit(&store);
    const auto restored = r.unit->restore_state(state_origin::failover);
    REQUIRE_FALSE(restored);
    CHECK(restored.error().message.find("checksum") != std::string::npos);
    CHECK(r.read_keys().list.empty());
  }
  SECTION("an empty store is a unit never reserved") {
    r.make_unit(&store);
    CHECK(r.unit->restore_state(state_origin::power_loss));
    CHECK(r.read_keys().list.empty());
  }
}

// ---------------------------------------------------------------------------

TEST_CASE("reservations: the opcodes are reported, and VPD 86h says UASK_SUP",
          "[target][scsi][reservations]") {
  rig r;
  auto all = r.run(node_a, rsoc(0, 0, 0));
  require_good(*all);
  const auto d = all->data();
  std::vector<std::pair<int, int>> found;
  for (std::size_t at = 4; at + 8 <= d.size(); at += 8)
    found.emplace_back(d[at], get(d, at + 2, 2));
  for (const auto& want : std::vector<std::pair<int, int>>{{0x16, 0},
                                                           {0x17, 0},
                                                           {0x56, 0},
                                                           {0x57, 0},
                                                           {0x5e, 0},
                                                           {0x5e, 3},
                                                           {0x5f, 0},
                                                           {0x5f, 7}}) {
    INFO("opcode " << want.first << " service action " << want.second);
    CHECK(std::find(found.begin(), found.end(), want) != found.end());
  }
  auto page = r.run(node_a, inquiry_cdb(true, 0x86, 0xff));
  require_good(*page);
  CHECK((page->data()[5] & 0x20) != 0);
}

}  // namespace
}  // namespace strata::scsi
