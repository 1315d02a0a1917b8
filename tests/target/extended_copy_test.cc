// The copy manager (target/scsi/extended_copy.h): EXTENDED COPY(LID1) within
// a unit and between units, every malformed parameter list libiscsi's
// ExtendedCopy tests send (and the rest SPC-4 names a sense for), errors
// while the segments run (COPY ABORTED with a segment pointer), RECEIVE
// COPY RESULTS, and what INQUIRY says about it. Units over memory volumes
// on the test loop; the composer's lookup is a map by NAA designator.
#include "target/scsi/extended_copy.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/sense.h"
#include "tests/raid/device/harness.h"
#include "tests/target/scsi_harness.h"

namespace strata::scsi {
namespace {

using namespace device;
using namespace device::testing;
using namespace strata::scsi::testing;

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t volume_blocks = 8192;  // 32 MiB, sparse

// ---------------------------------------------------------------------------
// CDBs and parameter lists

cdb_bytes xcopy_cdb(std::uint32_t list_bytes, std::uint8_t service_action = 0) {
  cdb_bytes c{0x83, service_action};
  put(c, 10, list_bytes, 4);
  return c;
}
cdb_bytes rcr_cdb(std::uint8_t service_action, std::uint8_t list_id,
                  std::uint32_t allocation_length = 1024) {
  cdb_bytes c{0x84, service_action, list_id};
  put(c, 10, allocation_length, 4);
  return c;
}
constexpr std::uint8_t copy_status = 0x00, receive_data = 0x01, operating_parameters = 0x03,
                       failed_segment_details = 0x04;

// An EXTENDED COPY(LID1) parameter list, as libiscsi's populate_* helpers
// build them.
struct copy_list_builder {
  std::uint8_t list_id = 1;
  std::uint8_t usage = 0;  // LIST ID USAGE: 00b hold, 10b discard, 11b none
  std::uint32_t inline_bytes = 0;
  std::vector<std::uint8_t> cscds;
  std::vector<std::uint8_t> segments;

  // An identification descriptor (E4h) naming `u` by its NAA designator.
  copy_list_builder& cscd(const logical_unit& u) {
    std::array<std::uint8_t, 32> d{};
    d[0] = 0xe4;
    d[4] = 0x01;  // CODE SET binary
    d[5] = 0x03;  // ASSOCIATION logical unit, DESIGNATOR TYPE NAA
    d[7] = 16;
    const auto naa = u.naa_designator();
    std::copy(naa.begin(), naa.end(), d.begin() + 8);
    put(d, 29, u.block_size_bytes(), 3);  // DISK BLOCK LENGTH
    return raw_cscd(d);
  }
  copy_list_builder& raw_cscd(const std::array<std::uint8_t, 32>& d) {
    cscds.insert(cscds.end(), d.begin(), d.end());
    return *this;
  }
  // A block to block descriptor (02h).
  copy_list_builder& segment(std::uint16_t source, std::uint16_t destination, std::uint16_t blocks,
                             std::uint64_t source_lba, std::uint64_t destination_lba) {
    std::array<std::uint8_t, 28> d{};
    d[0] = 0x02;
    put(d, 2, 0x18, 2);
    put(d, 4, source, 2);
    put(d, 6, destination, 2);
    put(d, 10, blocks, 2);
    put(d, 12, source_lba, 8);
    put(d, 20, destination_lba, 8);
    segments.insert(segments.end(), d.begin(), d.end());
    return *this;
  }
  std::vector<std::uint8_t> bytes() const {
    std::vector<std::uint8_t> b(16);
    b[0] = list_id;
    b[1] = static_cast<std::uint8_t>(usage << 3);
    put(b, 2, cscds.size(), 2);
    put(b, 8, segments.size(), 4);
    put(b, 12, inline_bytes, 4);
    b.insert(b.end(), cscds.begin(), cscds.end());
    b.insert(b.end(), segments.begin(), segments.end());
    b.resize(b.size() + inline_bytes, 0);
    return b;
  }
};

// ---------------------------------------------------------------------------
// Units on one loop, and the composer's lookup between them

struct copy_rig {
  struct member {
    std::unique_ptr<memory_device> memory;
    std::unique_ptr<gate_device> gate;
    std::unique_ptr<fault_device> faults;
    std::unique_ptr<logical_unit> unit;
  };
  test_loop loop;
  std::vector<std::unique_ptr<member>> members;
  // Designators the lookup does not answer for (a unit removed).
  std::vector<std::array<std::uint8_t, 16>> hidden;

  enum class between { none, gate, faults };
  logical_unit& add(const std::string& serial, between kind = between::none,
                    std::uint32_t block_size_bytes = block_size, bool write_protected = false) {
    auto m = std::make_unique<member>();
    auto memory =
        memory_device::create(loop.context.get_executor(), {block_size_bytes, volume_blocks});
    REQUIRE(memory);
    m->memory = std::move(*memory);
    block_device* volume = m->memory.get();
    if (kind == between::gate) volume = (m->gate = std::make_unique<gate_device>(*volume)).get();
    if (kind == between::faults)
      volume =
          (m->faults = std::make_unique<fault_device>(*volume, loop.clock, fault_options{})).get();
    unit_identity id;
    id.serial = serial;
    id.write_protected = write_protected;
    m->unit = std::make_unique<logical_unit>(*volume, id);
    m->unit->set_copy_targets([this](std::span<const std::uint8_t, 16> naa) -> logical_unit* {
      for (const auto& h : hidden) {
        if (std::ranges::equal(h, naa)) return nullptr;
      }
      for (const auto& other : members) {
        if (std::ranges::equal(other->unit->naa_designator(), naa)) return other->unit.get();
      }
      return nullptr;
    });
    members.push_back(std::move(m));
    return *members.back()->unit;
  }
  member& of(const logical_unit& u) {
    for (auto& m : members) {
      if (m->unit.get() == &u) return *m;
    }
    FAIL("no such unit");
    return *members.front();
  }
  ~copy_rig() {
    loop.settle();
    for (const auto& m : members) CHECK(m->unit->commands_in_flight() == 0);
  }

  std::unique_ptr<command> send(logical_unit& u, const cdb_bytes& cdb,
                                std::span<const std::byte> data_out = {},
                                const i_t_nexus* nexus = nullptr) {
    auto c = std::make_unique<command>();
    c->t.cdb = cdb;
    c->set_data_out(data_out);
    if (nexus != nullptr) c->set_nexus(*nexus);
    u.execute(c->t);
    REQUIRE(c->completions == 0);  // never inside execute()
    return c;
  }
  std::unique_ptr<command> run(logical_unit& u, const cdb_bytes& cdb,
                               std::span<const std::byte> data_out = {},
                               const i_t_nexus* nexus = nullptr) {
    auto c = send(u, cdb, data_out, nexus);
    finish(loop, *c);
    return c;
  }
  std::unique_ptr<command> copy(logical_unit& u, const copy_list_builder& list,
                                const i_t_nexus* nexus = nullptr) {
    const auto b = list.bytes();
    return run(u, xcopy_cdb(static_cast<std::uint32_t>(b.size())), std::as_bytes(std::span(b)),
               nexus);
  }
  // WRITE(16)s and READ(16)s of at most MAXIMUM TRANSFER LENGTH each.
  void write(logical_unit& u, std::uint64_t lba, std::span<const std::byte> data) {
    const std::size_t bs = u.block_size_bytes();
    for (std::size_t at = 0; at < data.size();) {
      const std::size_t n = std::min<std::size_t>(data.size() - at, u.max_transfer_blocks() * bs);
      require_good(*run(u, cdb16(0x8a, lba + at / bs, static_cast<std::uint32_t>(n / bs)),
                        data.subspan(at, n)));
      at += n;
    }
  }
  std::vector<std::byte> read(logical_unit& u, std::uint64_t lba, std::uint32_t blocks) {
    std::vector<std::byte> out;
    for (std::uint32_t done = 0; done < blocks;) {
      const std::uint32_t n = std::min(blocks - done, u.max_transfer_blocks());
      auto c = run(u, cdb16(0x88, lba + done, n));
      require_good(*c);
      REQUIRE(c->t.data_in_bytes == n * u.block_size_bytes());
      const auto part = c->data_bytes();
      out.insert(out.end(), part.begin(), part.end());
      done += n;
    }
    return out;
  }
};

using between = copy_rig::between;

// COPY ABORTED with `code`, naming byte `field_at` of the segment
// descriptor at `segment_at` in the parameter list.
void require_copy_aborted(const command& c, additional_sense code, std::uint32_t segment_at,
                          std::uint16_t field_at) {
  require_sense(c, sense_key::copy_aborted, code);
  CHECK(c.t.sense_data.command_specific == segment_at);
  const std::array<std::uint8_t, 3> pointer{0xa0, static_cast<std::uint8_t>(field_at >> 8),
                                            static_cast<std::uint8_t>(field_at)};
  CHECK(c.t.sense_data.key_specific == pointer);
}

std::vector<std::byte> bytes_of(const std::vector<std::uint8_t>& v) {
  const auto b = std::as_bytes(std::span(v));
  return {b.begin(), b.end()};
}

// ---------------------------------------------------------------------------
// Copies

TEST_CASE("extended copy: within one unit, in pieces, byte for byte", "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& u = r.add("ARRAY1-VOL0100");
  // More than one READ(16)/WRITE(16) piece (2048 blocks of 4 KiB), fewer
  // than the 16 MiB a segment may move.
  const std::uint16_t n = 3000;
  const auto data = pattern(std::size_t{n} * block_size, test_seed());
  r.write(u, 0, data);
  // libiscsi's Simple: from the start of the LUN to its end.
  require_good(*r.copy(u, copy_list_builder{}.cscd(u).segment(0, 0, n, 0, volume_blocks - n)));
  CHECK((r.read(u, volume_blocks - n, n) == data));
  CHECK(all_zero(r.read(u, volume_blocks - n - 1, 1)));
  CHECK((r.read(u, 0, n) == data));  // the source is as it was

  // CSCD descriptor ID FFFFh is this unit; two segments run one after the
  // other; a segment of 0 blocks is no error.
  copy_list_builder two;
  two.usage = 2;
  two.segment(0xffff, 0xffff, 10, 0, 5000)
      .segment(0xffff, 0xffff, 0, 0, 0)
      .segment(0xffff, 0xffff, 20, 100, 5100);
  require_good(*r.copy(u, two));
  CHECK((r.read(u, 5000, 10) == std::vector(data.begin(), data.begin() + 10 * block_size)));
  CHECK(r.read(u, 5100, 20) ==
        std::vector(data.begin() + 100 * block_size, data.begin() + 120 * block_size));
}

TEST_CASE("extended copy: overlapping ranges in one unit copy as memmove does",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& u = r.add("ARRAY1-VOL0101");
  const std::uint16_t n = 3000;
  const auto data = pattern(std::size_t{n} * block_size, test_seed());
  for (const bool forward : {true, false}) {
    INFO((forward ? "destination after the source" : "destination before the source"));
    const std::uint64_t source = forward ? 100 : 1100;
    const std::uint64_t destination = forward ? 1100 : 100;
    r.write(u, source, data);
    require_good(*r.copy(u, copy_list_builder{}.cscd(u).segment(0, 0, n, source, destination)));
    CHECK((r.read(u, destination, n) == data));
  }
}

TEST_CASE("extended copy: between units on one loop, through the composer's lookup",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& a = r.add("ARRAY1-VOL0102");
  logical_unit& b = r.add("ARRAY1-VOL0103");
  logical_unit& c = r.add("ARRAY1-VOL0104");
  const auto data = pattern(2500 * std::size_t{block_size}, test_seed());
  r.write(a, 10, data);
  // A, the unit it is sent to, is the source: pushed to B.
  require_good(*r.copy(a, copy_list_builder{}.cscd(a).cscd(b).segment(0, 1, 2500, 10, 20)));
  CHECK((r.read(b, 20, 2500) == data));
  // Pulled from B into A.
  require_good(*r.copy(a, copy_list_builder{}.cscd(b).cscd(a).segment(0, 1, 2500, 20, 4000)));
  CHECK((r.read(a, 4000, 2500) == data));
  // Between two other units: A's copy manager reads B and writes C.
  require_good(*r.copy(a, copy_list_builder{}.cscd(b).cscd(c).segment(0, 1, 100, 20, 0)));
  CHECK((r.read(c, 0, 100) == std::vector(data.begin(), data.begin() + 100 * block_size)));
  CHECK(all_zero(r.read(c, 100, 1)));
}

TEST_CASE("extended copy: a unit not found, or on another loop, is not reachable",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& a = r.add("ARRAY1-VOL0105");
  logical_unit& b = r.add("ARRAY1-VOL0106");
  logical_unit& c = r.add("ARRAY1-VOL0104");
  const auto data = pattern(4 * std::size_t{block_size}, test_seed());
  r.write(a, 0, data);
  r.write(c, 0, data);
  // A unit on another loop: the lookup finds it, but the copy manager will
  // not call into it from this loop.
  boost::asio::io_context other_loop;
  auto other_memory = memory_device::create(other_loop.get_executor(), {block_size, volume_blocks});
  REQUIRE(other_memory);
  unit_identity other_id;
  other_id.serial = "ARRAY2-VOL0001";
  logical_unit other(**other_memory, other_id);
  int lookups = 0;
  a.set_copy_targets([&](std::span<const std::uint8_t, 16> naa) -> logical_unit* {
    ++lookups;
    return std::ranges::equal(naa, other.naa_designator()) ? &other : nullptr;
  });
  // 0D/02 COPY TARGET DEVICE NOT REACHABLE, the segment pointer at the
  // descriptor ID that named it (the segment follows two CSCDs: byte 80).
  require_copy_aborted(*r.copy(a, copy_list_builder{}.cscd(a).cscd(other).segment(0, 1, 4, 0, 0)),
                       asc::copy_target_device_not_reachable, 80, 6);
  CHECK(lookups == 1);
  CHECK(other.commands_in_flight() == 0);
  // Not known to the lookup, or no lookup at all.
  require_copy_aborted(*r.copy(a, copy_list_builder{}.cscd(b).cscd(a).segment(0, 1, 4, 0, 8)),
                       asc::copy_target_device_not_reachable, 80, 4);
  a.set_copy_targets({});
  require_copy_aborted(*r.copy(a, copy_list_builder{}.cscd(a).cscd(b).segment(0, 1, 4, 0, 8)),
                       asc::copy_target_device_not_reachable, 80, 6);
  CHECK(all_zero(r.read(a, 8, 4)));
  CHECK(all_zero(r.read(b, 8, 4)));
  // Removed (the composer's lookup no longer answers for it).
  r.hidden.push_back(b.naa_designator());
  require_copy_aborted(*r.copy(c, copy_list_builder{}.cscd(c).cscd(b).segment(0, 1, 4, 0, 8)),
                       asc::copy_target_device_not_reachable, 80, 6);
  CHECK(all_zero(r.read(b, 8, 4)));
  // A designator that is not an NAA one names no unit either.
  std::array<std::uint8_t, 32> t10{};
  t10[0] = 0xe4;
  t10[4] = 0x02;  // ASCII
  t10[5] = 0x01;  // T10 vendor ID
  t10[7] = 8;
  std::memcpy(t10.data() + 8, "STRATA  ", 8);
  require_copy_aborted(*r.copy(c, copy_list_builder{}.raw_cscd(t10).segment(0, 0, 4, 0, 8)),
                       asc::copy_target_device_not_reachable, 48, 4);
  CHECK(all_zero(r.read(c, 8, 4)));
}

TEST_CASE("extended copy: what the segments must fit, as COPY ABORTED with a segment pointer",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& a = r.add("ARRAY1-VOL0107");
  logical_unit& small_blocks = r.add("ARRAY1-VOL0108", between::none, 512);
  const auto data = pattern(8 * std::size_t{block_size}, test_seed());
  r.write(a, 0, data);
  // With one CSCD the segment is at byte 48.
  // libiscsi's ValidSegDescr: a destination index past the CSCD list is
  // UNREACHABLE COPY TARGET; blocks past the end, NO ADDITIONAL SENSE.
  require_copy_aborted(*r.copy(a, copy_list_builder{}.cscd(a).segment(0, 1, 8, 0, 100)),
                       asc::unreachable_copy_target, 48, 6);
  require_copy_aborted(*r.copy(a, copy_list_builder{}.cscd(a).segment(0x0800, 0, 8, 0, 100)),
                       asc::unreachable_copy_target, 48, 4);
  auto one_segment = [&](std::uint16_t blocks, std::uint64_t from, std::uint64_t to) {
    return r.copy(a, copy_list_builder{}.cscd(a).segment(0, 0, blocks, from, to));
  };
  require_copy_aborted(*one_segment(2048, 0, volume_blocks - 1), asc::no_additional_sense, 48, 20);
  require_copy_aborted(*one_segment(8, volume_blocks - 4, 0), asc::no_additional_sense, 48, 12);
  require_copy_aborted(*one_segment(1, ~std::uint64_t{0}, 0), asc::no_additional_sense, 48, 12);
  // More than copy_limits::max_segment_bytes in one segment (4097 blocks
  // of 4 KiB), though within the volumes.
  require_copy_aborted(*r.copy(a, copy_list_builder{}.cscd(a).segment(0, 0, 4097, 0, 4096)),
                       asc::invalid_field_in_parameter_list, 48, 10);
  // Units of different block sizes (no inexact segments here).
  require_copy_aborted(
      *r.copy(a, copy_list_builder{}.cscd(a).cscd(small_blocks).segment(0, 1, 8, 0, 0)),
      asc::invalid_operation_for_copy_source_or_destination, 80, 6);
  // A CSCD descriptor that says another block length, or another device type.
  copy_list_builder wrong_length;
  wrong_length.cscd(a);
  put(wrong_length.cscds, 29, 512, 3);
  require_copy_aborted(*r.copy(a, wrong_length.segment(0, 0, 8, 0, 100)),
                       asc::incorrect_copy_target_device_type, 48, 4);
  copy_list_builder tape;
  tape.cscd(a);
  tape.cscds[1] = 0x01;  // PERIPHERAL DEVICE TYPE: sequential access
  require_copy_aborted(*r.copy(a, tape.segment(0, 0, 8, 0, 100)),
                       asc::incorrect_copy_target_device_type, 48, 4);
  // Nothing of the above wrote anything.
  CHECK(all_zero(r.read(a, 100, 8)));
  CHECK(all_zero(r.read(a, volume_blocks - 8, 8)));

  // An error in the second segment leaves the first done: COPY ABORTED
  // points at the second (byte 76).
  require_copy_aborted(
      *r.copy(a, copy_list_builder{}.cscd(a).segment(0, 0, 8, 0, 200).segment(0, 3, 8, 0, 300)),
      asc::unreachable_copy_target, 76, 6);
  CHECK((r.read(a, 200, 8) == data));
  CHECK(all_zero(r.read(a, 300, 8)));
}

TEST_CASE("extended copy: a copy target's error is THIRD PARTY DEVICE FAILURE",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& a = r.add("ARRAY1-VOL0109", between::faults);
  logical_unit& wp = r.add("ARRAY1-VOL0110", between::none, block_size, true);
  const std::uint16_t n = 3000;
  const auto data = pattern(std::size_t{n} * block_size, test_seed());
  r.write(a, 0, data);
  // A medium error in the second piece: the first piece (2048 blocks) was
  // written, so INFORMATION holds the 952 the segment did not write.
  r.of(a).faults->add_latent_error(2500, 1);
  auto failed = r.copy(a, copy_list_builder{}.cscd(a).segment(0, 0, n, 0, 4000));
  require_copy_aborted(*failed, asc::third_party_device_failure, 48, 12);
  CHECK(failed->t.sense_data.information == n - 2048);
  CHECK((r.read(a, 4000, 2048) == std::vector(data.begin(), data.begin() + 2048 * block_size)));
  CHECK(all_zero(r.read(a, 4000 + 2048, n - 2048)));
  // A write-protected destination refuses the copy's WRITE(16).
  auto refused = r.copy(a, copy_list_builder{}.cscd(a).cscd(wp).segment(0, 1, 8, 0, 0));
  require_copy_aborted(*refused, asc::third_party_device_failure, 80, 20);
  CHECK(!refused->t.sense_data.information.has_value());  // nothing of it was written
  CHECK(all_zero(r.read(wp, 0, 8)));
}

TEST_CASE("extended copy: another unit's reservation holds for the copy's initiator",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& a = r.add("ARRAY1-VOL0111");
  logical_unit& b = r.add("ARRAY1-VOL0112");
  const i_t_nexus holder{"iqn.2024-01.test:holder,i,0x000000000001", 1};
  const i_t_nexus other{"iqn.2024-01.test:other,i,0x000000000002", 1};
  // PERSISTENT RESERVE OUT: REGISTER key 1, then RESERVE Write Exclusive.
  auto prout = [&](std::uint8_t service_action, std::uint8_t type, std::uint64_t key,
                   std::uint64_t sa_key) {
    cdb_bytes c{0x5f, service_action, type};
    put(c, 5, 24, 4);
    std::vector<std::uint8_t> list(24);
    put(list, 0, key, 8);
    put(list, 8, sa_key, 8);
    require_good(*r.run(b, c, bytes_of(list), &holder));
  };
  prout(0x00, 0x00, 0, 1);
  prout(0x01, 0x01, 1, 0);
  const auto data = pattern(8 * std::size_t{block_size}, test_seed());
  r.write(a, 0, data);
  // `other` may read B (Write Exclusive) but not write it.
  require_copy_aborted(
      *r.copy(a, copy_list_builder{}.cscd(a).cscd(b).segment(0, 1, 8, 0, 0), &other),
      asc::third_party_device_failure, 80, 20);
  CHECK(all_zero(r.read(b, 0, 8)));
  require_good(*r.copy(a, copy_list_builder{}.cscd(b).cscd(a).segment(0, 1, 8, 0, 100), &other));
  // The holder may write it.
  require_good(*r.copy(a, copy_list_builder{}.cscd(a).cscd(b).segment(0, 1, 8, 0, 0), &holder));
  CHECK((r.read(b, 0, 8) == data));
}

// ---------------------------------------------------------------------------
// Parameter lists

TEST_CASE("extended copy: every malformed parameter list gets the sense SPC-4 names",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& u = r.add("ARRAY1-VOL0113");
  const auto data = pattern(8 * std::size_t{block_size}, test_seed());
  r.write(u, 0, data);
  auto good = [&] { return copy_list_builder{}.cscd(u).segment(0, 0, 8, 0, 100); };
  auto refused = [&](const std::vector<std::uint8_t>& list, additional_sense code,
                     std::optional<std::uint32_t> list_bytes = std::nullopt) {
    auto c = r.run(u, xcopy_cdb(list_bytes.value_or(static_cast<std::uint32_t>(list.size()))),
                   bytes_of(list));
    require_sense(*c, sense_key::illegal_request, code);
  };

  // libiscsi's ParamHdr: a list cut inside the CSCD or the segment
  // descriptor is PARAMETER LIST LENGTH ERROR; an empty one is GOOD.
  const auto whole = good().bytes();
  refused(std::vector(whole.begin(), whole.begin() + 16 + 32 - 1),
          asc::parameter_list_length_error);
  refused(std::vector(whole.begin(), whole.end() - 1), asc::parameter_list_length_error);
  require_good(*r.run(u, xcopy_cdb(0)));
  refused(std::vector(whole.begin(), whole.begin() + 15), asc::parameter_list_length_error);
  // More Data-Out than the list is ignored; less than PARAMETER LIST LENGTH
  // is the transport's short delivery.
  auto padded = copy_list_builder{}.cscd(u).segment(0, 0, 8, 0, 200).bytes();
  const auto padded_bytes = static_cast<std::uint32_t>(padded.size());
  padded.resize(padded.size() + 100, 0xee);
  require_good(*r.run(u, xcopy_cdb(padded_bytes), bytes_of(padded)));
  CHECK((r.read(u, 200, 8) == data));
  refused(whole, asc::invalid_field_in_command_iu, static_cast<std::uint32_t>(whole.size() + 1));
  // Service actions other than LID1 (LID4 01h, POPULATE TOKEN 10h, ...).
  for (const std::uint8_t sa : {0x01, 0x10, 0x11, 0x1c}) {
    auto c = r.run(u, xcopy_cdb(static_cast<std::uint32_t>(whole.size()), sa), bytes_of(whole));
    require_sense(*c, sense_key::illegal_request, asc::invalid_field_in_cdb);
  }

  // libiscsi's DescrLimits: one CSCD or segment more than OPERATING
  // PARAMETERS allow; and more descriptors than MAXIMUM DESCRIPTOR LIST
  // LENGTH (with too many CSCDs too: the length is what is reported).
  copy_list_builder many_cscds;
  for (int i = 0; i <= copy_limits::max_cscd_descriptors; ++i) many_cscds.cscd(u);
  refused(many_cscds.segment(0, 0, 8, 0, 100).bytes(), asc::too_many_target_descriptors);
  copy_list_builder many_segments;
  many_segments.cscd(u);
  for (int i = 0; i <= copy_limits::max_segment_descriptors; ++i)
    many_segments.segment(0, 0, 8, 0, 100);
  refused(many_segments.bytes(), asc::too_many_segment_descriptors);
  copy_list_builder too_long = many_cscds;
  while (too_long.cscds.size() + too_long.segments.size() <= copy_limits::max_descriptor_list_bytes)
    too_long.segment(0, 0, 8, 0, 100);
  refused(too_long.bytes(), asc::parameter_list_length_error);

  // libiscsi's DescrType: a Fibre Channel N_Port_Name CSCD (E0h), a stream
  // to stream segment (03h, 20 bytes).
  copy_list_builder fc = good();
  fc.cscds[0] = 0xe0;
  refused(fc.bytes(), asc::unsupported_target_descriptor_type_code);
  copy_list_builder stream;
  stream.cscd(u);
  stream.segments = {0x03, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  refused(stream.bytes(), asc::unsupported_segment_descriptor_type_code);

  // libiscsi's ValidTgtDescr on an SPC-4 unit: LU ID TYPE (reserved) and
  // NUL (obsolete) are ignored, and the copy is done.
  copy_list_builder lu_id = copy_list_builder{}.cscd(u).segment(0, 0, 8, 0, 300);
  lu_id.cscds[1] = 0x80 | 0x20;  // LU ID TYPE 10b, NUL
  require_good(*r.copy(u, lu_id));
  CHECK((r.read(u, 300, 8) == data));

  // The rest of the header and descriptors.
  copy_list_builder reserved_usage = good();
  reserved_usage.usage = 1;
  refused(reserved_usage.bytes(), asc::invalid_field_in_parameter_list);
  copy_list_builder no_list_id = good();
  no_list_id.usage = 3;  // no list id: LIST IDENTIFIER must be 0
  refused(no_list_id.bytes(), asc::invalid_field_in_parameter_list);
  no_list_id.list_id = 0;
  put(no_list_id.segments, 20, 400, 8);
  require_good(*r.copy(u, no_list_id));
  CHECK((r.read(u, 400, 8) == data));
  copy_list_builder with_inline = good();
  with_inline.inline_bytes = 4;
  refused(with_inline.bytes(), asc::inline_data_length_exceeded);
  copy_list_builder bad_length = good();
  put(bad_length.segments, 2, 0x14, 2);
  bad_length.segments.resize(24);
  refused(bad_length.bytes(), asc::invalid_field_in_parameter_list);
  copy_list_builder overrun = good();
  put(overrun.segments, 2, 0x20, 2);  // says 36 bytes; the list has 28
  refused(overrun.bytes(), asc::parameter_list_length_error);
  copy_list_builder half_cscd = good();
  half_cscd.cscds.resize(16);
  refused(half_cscd.bytes(), asc::parameter_list_length_error);
  copy_list_builder long_designator = good();
  long_designator.cscds[7] = 21;  // the DESIGNATOR field is 20 bytes
  refused(long_designator.bytes(), asc::invalid_field_in_parameter_list);

  // None of the refused lists copied anything.
  CHECK(all_zero(r.read(u, 100, 8)));
}

// ---------------------------------------------------------------------------
// RECEIVE COPY RESULTS

TEST_CASE("receive copy results: operating parameters, as libiscsi reads them",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& u = r.add("ARRAY1-VOL0114");
  auto c = r.run(u, rcr_cdb(operating_parameters, 0));
  require_good(*c);
  const auto d = c->data();
  REQUIRE(d.size() >= 44);
  CHECK(get(d, 0, 4) == d.size() - 4);  // AVAILABLE DATA
  CHECK((d[4] & 0x01) == 1);            // SNLID
  CHECK(get(d, 8, 2) == copy_limits::max_cscd_descriptors);
  CHECK(get(d, 8, 2) >= 2);  // a copy between units takes two
  CHECK(get(d, 10, 2) == copy_limits::max_segment_descriptors);
  CHECK(get(d, 12, 4) == copy_limits::max_descriptor_list_bytes);
  CHECK(get(d, 16, 4) == copy_limits::max_segment_bytes);
  CHECK(get(d, 20, 4) == 0);  // MAXIMUM INLINE DATA LENGTH
  CHECK(d[37] == 12);         // DATA SEGMENT GRANULARITY: 2^12, a block
  REQUIRE(d.size() == 44 + std::size_t{d[43]});
  CHECK(std::vector(d.begin() + 44, d.end()) == std::vector<std::uint8_t>{0x02, 0xe4});
  // Every descriptor at the counts reported fits MAXIMUM DESCRIPTOR LIST LENGTH.
  CHECK(get(d, 8, 2) * 32 + get(d, 10, 2) * 28 <= get(d, 12, 4));
  // Cut to the allocation length.
  auto cut = r.run(u, rcr_cdb(operating_parameters, 0, 8));
  require_good(*cut);
  CHECK(cut->t.data_in_bytes == 8);
}

TEST_CASE("receive copy results: copy status and failed segment details, per nexus and list id",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& u = r.add("ARRAY1-VOL0115");
  const i_t_nexus first{"iqn.2024-01.test:first,i,0x000000000001", 1};
  const i_t_nexus second{"iqn.2024-01.test:second,i,0x000000000002", 1};
  const auto data = pattern(8 * std::size_t{block_size}, test_seed());
  r.write(u, 0, data);
  auto status_of = [&](std::uint8_t list_id, const i_t_nexus& n) {
    return r.run(u, rcr_cdb(copy_status, list_id), {}, &n);
  };

  // libiscsi's CopyStatus: no copy yet is INVALID FIELD IN CDB; after a
  // copy with LIST ID USAGE 00b, its status.
  require_sense(*status_of(1, first), sense_key::illegal_request, asc::invalid_field_in_cdb);
  copy_list_builder list;
  list.cscd(u).segment(0, 0, 8, 0, 100).segment(0, 0, 4, 0, 200);
  require_good(*r.copy(u, list, &first));
  require_sense(*status_of(1, second), sense_key::illegal_request, asc::invalid_field_in_cdb);
  auto status = status_of(1, first);
  require_good(*status);
  auto d = status->data();
  REQUIRE(d.size() == 12);
  CHECK(get(d, 0, 4) == 8);  // AVAILABLE DATA
  CHECK(d[4] == 0x01);       // completed, no error
  CHECK(get(d, 5, 2) == 2);  // SEGMENTS PROCESSED
  CHECK(d[7] == 0x00);       // TRANSFER COUNT in bytes
  CHECK(get(d, 8, 4) == 12 * block_size);
  // Told: forgotten.
  require_sense(*status_of(1, first), sense_key::illegal_request, asc::invalid_field_in_cdb);
  require_sense(*r.run(u, rcr_cdb(receive_data, 1), {}, &first), sense_key::illegal_request,
                asc::invalid_field_in_cdb);

  // LIST ID USAGE 10b: the list id is not held after the copy.
  copy_list_builder discarded = list;
  discarded.list_id = 2;
  discarded.usage = 2;
  require_good(*r.copy(u, discarded, &first));
  require_sense(*status_of(2, first), sense_key::illegal_request, asc::invalid_field_in_cdb);

  // A failed copy: COPY STATUS says so (and keeps it), FAILED SEGMENT
  // DETAILS returns the status and sense it ended with, then forgets it.
  copy_list_builder failing;
  failing.list_id = 3;
  failing.cscd(u).segment(0, 0, 8, 0, 300).segment(0, 0, 8, volume_blocks - 4, 0);
  require_copy_aborted(*r.copy(u, failing, &first), asc::no_additional_sense, 76, 12);
  status = status_of(3, first);
  require_good(*status);
  d = status->data();
  CHECK(d[4] == 0x02);  // completed with an error
  CHECK(get(d, 5, 2) == 1);
  CHECK(get(d, 8, 4) == 8 * block_size);
  require_good(*r.run(u, rcr_cdb(receive_data, 3), {}, &first));
  auto details = r.run(u, rcr_cdb(failed_segment_details, 3), {}, &first);
  require_good(*details);
  d = details->data();
  REQUIRE(d.size() == 60 + fixed_sense_bytes);
  CHECK(get(d, 0, 4) == 56 + fixed_sense_bytes);
  CHECK(d[56] == 0x02);  // COPY COMMAND STATUS: CHECK CONDITION
  CHECK(get(d, 58, 2) == fixed_sense_bytes);
  CHECK((d[60 + 2] & 0x0f) == 0x0a);  // COPY ABORTED
  CHECK(get(d, 60 + 8, 4) == 76);     // COMMAND-SPECIFIC INFORMATION: the segment
  CHECK(d[60 + 15] == 0xa0);          // segment pointer
  require_sense(*r.run(u, rcr_cdb(failed_segment_details, 3), {}, &first),
                sense_key::illegal_request, asc::invalid_field_in_cdb);
  // A good copy's FAILED SEGMENT DETAILS: AVAILABLE DATA 0, nothing after it.
  copy_list_builder fine = list;
  fine.list_id = 4;
  require_good(*r.copy(u, fine, &first));
  details = r.run(u, rcr_cdb(failed_segment_details, 4), {}, &first);
  require_good(*details);
  CHECK(details->data_bytes() == std::vector<std::byte>(4));

  // What is held dies with its nexus, and at LOGICAL UNIT RESET.
  CHECK(u.held_copy_results().size() == 1);  // list 4
  fine.list_id = 5;
  require_good(*r.copy(u, fine, &second));
  CHECK(u.held_copy_results().size() == 2);
  u.nexus_lost(first);
  require_sense(*status_of(4, first), sense_key::illegal_request, asc::invalid_field_in_cdb);
  require_good(*status_of(5, second));
  require_good(*r.copy(u, fine, &second));
  u.reset(second);
  require_sense(*status_of(5, second), sense_key::illegal_request, asc::invalid_field_in_cdb);
  // Other service actions (the LID4 ones, ROD tokens) are refused.
  for (const std::uint8_t sa : {0x02, 0x05, 0x07, 0x08}) {
    require_sense(*r.run(u, rcr_cdb(sa, 0)), sense_key::illegal_request, asc::invalid_field_in_cdb);
  }
}

TEST_CASE("receive copy results: a copy in progress, and its list id while it runs",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& u = r.add("ARRAY1-VOL0116", between::gate);
  const auto data = pattern(3000 * std::size_t{block_size}, test_seed());
  r.write(u, 0, data);
  gate_device& gate = *r.of(u).gate;
  gate.close();
  copy_list_builder list;
  list.list_id = 7;
  list.cscd(u).segment(0, 0, 3000, 0, 4000);
  const auto bytes = list.bytes();
  auto c = r.send(u, xcopy_cdb(static_cast<std::uint32_t>(bytes.size())), bytes_of(bytes));
  r.loop.settle();
  // The first piece's READ(16) is out: 2048 blocks, as the unit reads
  // them, in device requests of at most piece_bytes.
  auto held_blocks = [&](op operation) {
    std::uint64_t blocks = 0;
    for (const request* q : gate.held()) {
      CHECK(q->operation == operation);
      CHECK(q->block_count * block_size <= logical_unit::piece_bytes);
      blocks += q->block_count;
    }
    return blocks;
  };
  CHECK(held_blocks(op::read) == 2048);
  CHECK(u.commands_in_flight() == 2);  // the copy, and its read

  auto status = r.run(u, rcr_cdb(copy_status, 7));
  require_good(*status);
  CHECK(status->data()[4] == 0x00);  // in progress
  CHECK(get(status->data(), 8, 4) == 0);
  // The list id is taken while it runs: OPERATION IN PROGRESS.
  require_sense(*r.run(u, xcopy_cdb(static_cast<std::uint32_t>(bytes.size())), bytes_of(bytes)),
                sense_key::illegal_request, asc::operation_in_progress);
  // Failed segment details only of a completed copy.
  require_sense(*r.run(u, rcr_cdb(failed_segment_details, 7)), sense_key::illegal_request,
                asc::invalid_field_in_cdb);

  // The first piece's read, then its write: then the status counts it.
  gate.release_all();
  r.loop.settle();
  CHECK(held_blocks(op::write) == 2048);
  gate.release_all();
  r.loop.settle();
  status = r.run(u, rcr_cdb(copy_status, 7));
  CHECK(status->data()[4] == 0x00);
  CHECK(get(status->data(), 8, 4) == 2048 * block_size);
  gate.open();
  finish(r.loop, *c);
  require_good(*c);
  CHECK((r.read(u, 4000, 3000) == data));
  status = r.run(u, rcr_cdb(copy_status, 7));
  CHECK(status->data()[4] == 0x01);
  CHECK(get(status->data(), 5, 2) == 1);
}

TEST_CASE("extended copy: copies in flight are bounded, and a lost nexus's result is not held",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& u = r.add("ARRAY1-VOL0118", between::gate);
  gate_device& gate = *r.of(u).gate;
  gate.close();
  // One block each, no list id: all held at the gate on their reads.
  copy_list_builder one;
  one.list_id = 0;
  one.usage = 3;
  one.cscd(u).segment(0, 0, 1, 0, 100);
  const auto bytes = one.bytes();
  const auto cdb = xcopy_cdb(static_cast<std::uint32_t>(bytes.size()));
  // One of them from a nexus that is lost while it runs: its result
  // (LIST ID USAGE 00b) is then not held.
  const i_t_nexus n{"iqn.2024-01.test:gone,i,0x000000000001", 1};
  copy_list_builder held = one;
  held.usage = 0;
  held.list_id = 9;
  const auto held_bytes = held.bytes();
  std::vector<std::unique_ptr<command>> copies;
  copies.push_back(r.send(u, cdb, bytes_of(held_bytes), &n));
  while (copies.size() < copy_limits::max_held_results)
    copies.push_back(r.send(u, cdb, bytes_of(bytes)));
  r.loop.settle();
  CHECK(gate.held().size() == copy_limits::max_held_results);
  // One more: BUSY, back-pressure the initiator retries.
  auto refused = r.run(u, cdb, bytes_of(bytes));
  CHECK(refused->t.result == status::busy);
  u.nexus_lost(n);
  gate.open();
  for (const auto& c : copies) {
    finish(r.loop, *c);
    require_good(*c);
  }
  CHECK(u.held_copy_results().size() == 0);
}

// ---------------------------------------------------------------------------
// What the unit says about it

TEST_CASE("extended copy: INQUIRY says 3PC, and the Third-party Copy VPD page describes it",
          "[target][scsi][xcopy]") {
  copy_rig r;
  logical_unit& u = r.add("ARRAY1-VOL0117");
  auto standard = r.run(u, inquiry_cdb(false, 0));
  require_good(*standard);
  CHECK((standard->data()[5] & 0x08) != 0);  // 3PC
  auto pages = r.run(u, inquiry_cdb(true, 0x00));
  require_good(*pages);
  const auto listed = std::vector(pages->data().begin() + 4, pages->data().end());
  CHECK(std::ranges::find(listed, 0x8f) != listed.end());
  CHECK(std::ranges::is_sorted(listed));

  auto page = r.run(u, inquiry_cdb(true, 0x8f));
  require_good(*page);
  const auto d = page->data();
  REQUIRE(d.size() > 4);
  CHECK(d[1] == 0x8f);
  CHECK(get(d, 2, 2) == d.size() - 4);
  // Each descriptor's type, and what follows its length field.
  std::map<std::uint16_t, std::vector<std::uint8_t>> descriptors;
  std::vector<std::uint16_t> order;
  for (std::size_t at = 4; at + 4 <= d.size();) {
    const auto type = static_cast<std::uint16_t>(get(d, at, 2));
    const std::size_t length = get(d, at + 2, 2);
    CHECK((4 + length) % 4 == 0);  // padded to a multiple of 4
    REQUIRE(at + 4 + length <= d.size());
    descriptors[type] = std::vector(d.begin() + at + 4, d.begin() + at + 4 + length);
    order.push_back(type);
    at += 4 + length;
  }
  CHECK(std::ranges::is_sorted(order));
  REQUIRE(descriptors.contains(0x0001));  // Supported Commands
  const auto& commands = descriptors[0x0001];
  const std::vector<std::uint8_t> expected_commands{0x83, 1, 0x00, 0x84, 4, 0x00, 0x01, 0x03, 0x04};
  REQUIRE(commands[0] == expected_commands.size());
  CHECK(std::vector(commands.begin() + 1, commands.begin() + 1 + commands[0]) == expected_commands);
  REQUIRE(descriptors.contains(0x0004));  // Parameter Data
  const auto& parameters = descriptors[0x0004];
  REQUIRE(parameters.size() == 28);
  CHECK(get(parameters, 4, 2) == copy_limits::max_cscd_descriptors);
  CHECK(get(parameters, 6, 2) == copy_limits::max_segment_descriptors);
  CHECK(get(parameters, 8, 4) == copy_limits::max_descriptor_list_bytes);
  CHECK(get(parameters, 12, 4) == 0);
  REQUIRE(descriptors.contains(0x0008));  // Supported Descriptors
  CHECK(std::vector(descriptors[0x0008].begin(), descriptors[0x0008].begin() + 3) ==
        std::vector<std::uint8_t>{2, 0x02, 0xe4});
  REQUIRE(descriptors.contains(0x000c));  // Supported CSCD Descriptor IDs
  CHECK(std::vector(descriptors[0x000c].begin(), descriptors[0x000c].begin() + 4) ==
        std::vector<std::uint8_t>{0, 2, 0xff, 0xff});
  REQUIRE(descriptors.contains(0x8001));  // General Copy Operations
  CHECK(get(descriptors[0x8001], 8, 4) == copy_limits::max_segment_bytes);
}

TEST_CASE("scsi sense: COMMAND-SPECIFIC INFORMATION and the segment pointer of COPY ABORTED",
          "[target][scsi][xcopy]") {
  const sense s = copy_aborted(asc::third_party_device_failure, 76, 20, 952);
  const auto fixed = fixed_sense(s);
  CHECK(fixed[0] == 0xf0);  // VALID: INFORMATION holds the residual
  CHECK((fixed[2] & 0x0f) == 0x0a);
  CHECK(get(fixed, 3, 4) == 952);
  CHECK(get(fixed, 8, 4) == 76);
  CHECK(fixed[12] == 0x0d);
  CHECK(fixed[13] == 0x01);
  CHECK(fixed[15] == 0xa0);  // SKSV, SD
  CHECK(get(fixed, 16, 2) == 20);
  std::array<std::uint8_t, descriptor_sense_max_bytes> out{};
  const std::size_t n = encode_descriptor_sense(s, out);
  REQUIRE(n == 8 + 12 + 12 + 8);
  CHECK(out[7] == n - 8);
  CHECK(out[8] == 0x00);   // information
  CHECK(out[20] == 0x01);  // command-specific information
  CHECK(out[21] == 0x0a);
  CHECK(get(out, 24, 8) == 76);
  CHECK(out[32] == 0x02);  // sense key specific
  CHECK(out[36] == 0xa0);
}

}  // namespace
}  // namespace strata::scsi
