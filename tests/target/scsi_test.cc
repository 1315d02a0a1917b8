// The SCSI layer over a memory volume on the test loop: identity (INQUIRY,
// VPD pages, READ CAPACITY), data in and out, thin provisioning (UNMAP,
// WRITE SAME), verification, mode pages, the LUN map and the LUN field,
// and device errors as sense data. Every command is checked to complete
// exactly once and never inside execute().
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "raid/device/null_device.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/lun_map.h"
#include "target/scsi/sense.h"
#include "tests/raid/device/harness.h"
#include "tests/target/scsi_harness.h"

namespace strata::scsi {
namespace {

using namespace device;
using namespace device::testing;
using namespace strata::scsi::testing;

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t volume_blocks = 4096;  // 16 MiB, sparse

// READ(6) and WRITE(6): a 21-bit LBA in bytes 1 to 3, the length in byte 4.
// Not in scsi_harness.h: reservation_test.cc's cdb6 fills bytes 1 and 4 of
// other 6-byte CDBs, a different layout under the same name.
cdb_bytes cdb6(std::uint8_t op, std::uint64_t lba, std::uint8_t length, std::uint8_t byte1 = 0) {
  cdb_bytes c{};
  c[0] = op;
  put(c, 1, lba, 3);
  c[1] |= byte1;
  c[4] = length;
  return c;
}

struct rig_options {
  std::uint32_t block_size_bytes = block_size;
  std::uint64_t blocks = volume_blocks;
  bool faults = false;
  bool volatile_write_cache = false;
  unit_identity identity = [] {
    unit_identity id;
    id.serial = "ARRAY1-VOL0007";
    id.relative_port = 7;
    id.port_group = 3;
    return id;
  }();
};

struct rig {
  test_loop loop;
  std::unique_ptr<memory_device> memory;
  std::unique_ptr<fault_device> faults;
  std::unique_ptr<logical_unit> unit;

  explicit rig(const rig_options& o = {}) {
    auto m = memory_device::create(loop.context.get_executor(), {o.block_size_bytes, o.blocks});
    REQUIRE(m);
    memory = std::move(*m);
    block_device* volume = memory.get();
    if (o.faults) {
      faults = std::make_unique<fault_device>(*memory, loop.clock,
                                              fault_options{1, o.volatile_write_cache});
      volume = faults.get();
    }
    unit = std::make_unique<logical_unit>(*volume, o.identity);
  }
  ~rig() {
    loop.settle();
    CHECK(unit->commands_in_flight() == 0);
  }

  // Sends `c` through `execute` and runs the loop until it completes.
  std::unique_ptr<command> run_with(const std::function<void(task&)>& execute, const cdb_bytes& cdb,
                                    std::span<const std::byte> data_out = {},
                                    std::uint64_t lun = 0) {
    auto c = std::make_unique<command>();
    c->t.cdb = cdb;
    c->t.lun = lun;
    c->set_data_out(data_out);
    execute(c->t);
    REQUIRE(c->completions == 0);  // never inside execute()
    finish(loop, *c);
    return c;
  }
  std::unique_ptr<command> run(const cdb_bytes& cdb, std::span<const std::byte> data_out = {}) {
    return run_with([&](task& t) { unit->execute(t); }, cdb, data_out);
  }
  std::unique_ptr<command> run(const cdb_bytes& cdb, const std::vector<std::uint8_t>& data_out) {
    return run(cdb, std::as_bytes(std::span(data_out)));
  }

  void write(std::uint64_t lba, std::span<const std::byte> data) {
    require_good(
        *run(cdb16(0x8a, lba, static_cast<std::uint32_t>(data.size() / block_size)), data));
  }
  std::vector<std::byte> read(std::uint64_t lba, std::uint32_t blocks) {
    auto c = run(cdb16(0x88, lba, blocks));
    require_good(*c);
    REQUIRE(c->t.data_in_bytes == blocks * block_size);
    return c->data_bytes();
  }
};

// ---------------------------------------------------------------------------
// Sense data and the error mapping

TEST_CASE("scsi sense: fixed format carries key, codes and INFORMATION", "[target][scsi]") {
  const auto s =
      fixed_sense(make_sense(sense_key::medium_error, asc::unrecovered_read_error, 0x01020304));
  CHECK(s[0] == 0xf0);  // VALID, current error
  CHECK(s[2] == 0x03);
  CHECK(s[3] == 0x01);
  CHECK(s[4] == 0x02);
  CHECK(s[5] == 0x03);
  CHECK(s[6] == 0x04);
  CHECK(s[7] == 10);
  CHECK(s[12] == 0x11);
  CHECK(s[13] == 0x00);
  const auto plain = fixed_sense(illegal_request(asc::invalid_field_in_cdb));
  CHECK(plain[0] == 0x70);  // no INFORMATION: VALID clear
  CHECK(plain[2] == 0x05);
  CHECK(plain[12] == 0x24);
  // An LBA beyond 32 bits cannot be reported in fixed format.
  CHECK(fixed_sense(make_sense(sense_key::medium_error, asc::unrecovered_read_error,
                               1ull << 32))[0] == 0x70);
}

TEST_CASE("scsi sense: each Strata error maps to its sense", "[target][scsi]") {
  struct expected {
    errc e;
    op operation;
    sense_key key;
    additional_sense code;
  };
  const expected table[] = {
      {errc::media_error, op::read, sense_key::medium_error, asc::unrecovered_read_error},
      {errc::media_error, op::write, sense_key::medium_error, asc::write_error},
      {errc::device_failed, op::read, sense_key::hardware_error, asc::internal_target_failure},
      {errc::no_space, op::write, sense_key::data_protect,
       asc::space_allocation_failed_write_protect},
      {errc::out_of_range, op::read, sense_key::illegal_request, asc::lba_out_of_range},
      {errc::invalid_argument, op::read, sense_key::illegal_request, asc::invalid_field_in_cdb},
      {errc::not_supported, op::discard, sense_key::illegal_request,
       asc::invalid_command_operation_code},
      {errc::timed_out, op::read, sense_key::aborted_command, asc::lu_communication_timeout},
      {errc::canceled, op::write, sense_key::aborted_command, asc::no_additional_sense},
      {errc::io_error, op::write, sense_key::hardware_error, asc::internal_target_failure},
      {errc::misaligned, op::write, sense_key::hardware_error, asc::internal_target_failure},
  };
  for (const expected& x : table) {
    INFO("errc " << static_cast<int>(x.e));
    const sense s = sense_for(x.e, x.operation, 42);
    CHECK(s.key == x.key);
    CHECK(s.asc == x.code.asc);
    CHECK(s.ascq == x.code.ascq);
    CHECK(s.information.has_value() == (x.e == errc::media_error));
    CHECK(status_for(x.e) == status::check_condition);
  }
  CHECK(status_for(errc::busy) == status::busy);
  CHECK(sense_for(std::make_error_code(std::errc::io_error), op::read).key ==
        sense_key::hardware_error);
}

// ---------------------------------------------------------------------------
// Identity

TEST_CASE("scsi inquiry: standard data", "[target][scsi]") {
  rig r;
  auto c = r.run(inquiry_cdb(false, 0));
  require_good(*c);
  const auto d = c->data();
  REQUIRE(d.size() == standard_inquiry_bytes);
  CHECK(d[0] == 0x00);               // qualifier 0, direct-access block device
  CHECK(d[2] == 0x06);               // SPC-4
  CHECK((d[3] & 0x0f) == 0x02);      // response data format 2
  CHECK((d[3] & 0x10) != 0);         // HiSup
  CHECK(d[4] == d.size() - 5);       // additional length
  CHECK(((d[5] >> 4) & 0x03) == 1);  // TPGS: implicit ALUA
  CHECK((d[7] & 0x02) != 0);         // CmdQue
  CHECK(std::string(d.begin() + 8, d.begin() + 16) == "STRATA  ");
  CHECK(std::string(d.begin() + 16, d.begin() + 32) == "VOLUME          ");
  CHECK(std::string(d.begin() + 32, d.begin() + 36) == "0001");

  // The allocation length cuts the data.
  auto short_answer = r.run(inquiry_cdb(false, 0, 5));
  require_good(*short_answer);
  REQUIRE(short_answer->t.data_in_bytes == 5);
  CHECK(std::equal(short_answer->data().begin(), short_answer->data().end(), d.begin()));

  // A page code without EVPD, CmdDt, and an unknown page are refused.
  require_sense(*r.run(inquiry_cdb(false, 0x80)), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  auto cmddt = inquiry_cdb(false, 0);
  cmddt[1] = 0x02;
  require_sense(*r.run(cmddt), sense_key::illegal_request, asc::invalid_field_in_cdb);
  require_sense(*r.run(inquiry_cdb(true, 0x99)), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
}

TEST_CASE("scsi inquiry: VPD pages", "[target][scsi]") {
  rig_options o;
  o.identity.unit_id = 0x1122334455667788ull;
  o.identity.ieee_company_id = 0xabcdef;
  rig r(o);
  auto page = [&](std::uint8_t code) {
    auto c = r.run(inquiry_cdb(true, code));
    require_good(*c);
    const auto d = c->data();
    REQUIRE(d.size() >= 4);
    CHECK(d[0] == 0x00);
    CHECK(d[1] == code);
    CHECK(get(d, 2, 2) == d.size() - 4);  // page length
    return std::vector<std::uint8_t>(d.begin(), d.end());
  };

  SECTION("00h: supported pages, ascending") {
    const auto d = page(0x00);
    CHECK(std::vector<std::uint8_t>(d.begin() + 4, d.end()) ==
          std::vector<std::uint8_t>{0x00, 0x80, 0x83, 0x86, 0x8f, 0xb0, 0xb1, 0xb2});
  }
  SECTION("80h: unit serial number") {
    const auto d = page(0x80);
    CHECK(std::string(d.begin() + 4, d.end()) == "ARRAY1-VOL0007");
  }
  SECTION("83h: NAA, T10 vendor ID, relative target port, target port group") {
    const auto d = page(0x83);
    std::vector<std::uint8_t> naa, t10;
    std::optional<std::uint64_t> relative_port, port_group;
    for (std::size_t at = 4; at + 4 <= d.size();) {
      const std::uint8_t type = d[at + 1] & 0x0f;
      const std::uint8_t association = (d[at + 1] >> 4) & 0x03;
      const std::size_t length = d[at + 3];
      REQUIRE(at + 4 + length <= d.size());
      const std::vector<std::uint8_t> body(d.begin() + at + 4, d.begin() + at + 4 + length);
      if (type == 3 && association == 0) naa = body;
      if (type == 1 && association == 0) t10 = body;
      if (type == 4 && association == 1) relative_port = get(body, 2, 2);
      if (type == 5 && association == 1) port_group = get(body, 2, 2);
      at += 4 + length;
    }
    REQUIRE(naa.size() == 16);
    CHECK(naa[0] >> 4 == 6);
    CHECK(((get(naa, 0, 4) >> 4) & 0xffffff) == 0xabcdef);  // the company id
    CHECK(get(naa, 8, 8) == 0x1122334455667788ull);
    CHECK(std::string(t10.begin(), t10.end()) == "STRATA  ARRAY1-VOL0007");
    CHECK(relative_port == 7);
    CHECK(port_group == 3);
  }
  SECTION("86h: extended inquiry, task attributes") {
    const auto d = page(0x86);
    REQUIRE(d.size() == 64);
    CHECK((d[5] & 0x07) == 0x07);  // HEADSUP, ORDSUP, SIMPSUP
  }
  SECTION("B0h: block limits") {
    const auto d = page(0xb0);
    REQUIRE(d.size() == 64);
    CHECK(get(d, 8, 4) == logical_unit::max_transfer_bytes / block_size);
    CHECK(get(d, 20, 4) == logical_unit::max_unmap_bytes / block_size);
    CHECK(get(d, 24, 4) == logical_unit::max_unmap_descriptors);
    CHECK(get(d, 36, 8) == logical_unit::max_write_same_bytes / block_size);
  }
  SECTION("B1h: non-rotating") {
    const auto d = page(0xb1);
    CHECK(get(d, 4, 2) == 1);
    CHECK((d[7] & 0x0f) == 0);  // nominal form factor not reported
  }
  SECTION("B2h: thin provisioning, reads of unmapped blocks are zeros") {
    const auto d = page(0xb2);
    CHECK((d[5] & 0x80) != 0);  // LBPU
    CHECK((d[5] & 0x40) != 0);  // LBPWS
    CHECK((d[5] & 0x20) != 0);  // LBPWS10
    CHECK((d[5] & 0x04) != 0);  // LBPRZ
    CHECK((d[6] & 0x07) == 2);  // thin
  }
  SECTION("the NAA id is derived from the serial when not given") {
    rig_options a, b;
    a.identity.serial = "A";
    b.identity.serial = "B";
    rig ra(a), rb(b);
    CHECK(ra.unit->naa_designator() != rb.unit->naa_designator());
    CHECK(ra.unit->naa_designator() == rig(a).unit->naa_designator());
  }
}

TEST_CASE("scsi: a fully provisioned unit reports no thin provisioning and refuses UNMAP",
          "[target][scsi]") {
  rig_options o;
  o.identity.thin_provisioned = false;
  rig r(o);
  auto pages = r.run(inquiry_cdb(true, 0x00));
  require_good(*pages);
  const auto d = pages->data();
  CHECK(std::find(d.begin() + 4, d.end(), 0xb2) == d.end());
  require_sense(*r.run(inquiry_cdb(true, 0xb2)), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  auto cap = r.run(read_capacity_16_cdb());
  require_good(*cap);
  CHECK((cap->data()[14] & 0xc0) == 0);
  std::vector<std::uint8_t> list(24, 0);
  require_sense(*r.run(cdb10(0x42, 0, 24), list), sense_key::illegal_request,
                asc::invalid_command_operation_code);
}

TEST_CASE("scsi read capacity: 10 and 16", "[target][scsi]") {
  rig r;
  auto c10 = r.run(cdb10(0x25, 0, 0));
  require_good(*c10);
  REQUIRE(c10->t.data_in_bytes == 8);
  CHECK(get(c10->data(), 0, 4) == volume_blocks - 1);
  CHECK(get(c10->data(), 4, 4) == block_size);

  cdb_bytes rc16 = read_capacity_16_cdb();
  auto c16 = r.run(rc16);
  require_good(*c16);
  REQUIRE(c16->t.data_in_bytes == 32);
  CHECK(get(c16->data(), 0, 8) == volume_blocks - 1);
  CHECK(get(c16->data(), 8, 4) == block_size);
  CHECK((c16->data()[13] & 0x0f) == 0);     // one logical block per physical block
  CHECK((c16->data()[14] & 0xc0) == 0xc0);  // LBPME, LBPRZ

  // Another service action of SERVICE ACTION IN(16) is refused (13h,
  // REPORT REFERRALS; 12h is GET LBA STATUS).
  rc16[1] = 0x13;
  require_sense(*r.run(rc16), sense_key::illegal_request, asc::invalid_field_in_cdb);
}

TEST_CASE("scsi read capacity(10): a capacity beyond 32 bits reads FFFFFFFFh", "[target][scsi]") {
  test_loop loop;
  null_device volume(loop.context.get_executor(), 512, (1ull << 32) + 1);
  unit_identity id;
  id.serial = "big";
  logical_unit unit(volume, id);
  command c;
  c.t.cdb = cdb10(0x25, 0, 0);
  unit.execute(c.t);
  loop.run_until([&] { return c.completions == 1; });
  require_good(c);
  CHECK(get(c.data(), 0, 4) == 0xffffffffu);

  command c16;
  c16.t.cdb = read_capacity_16_cdb();
  unit.execute(c16.t);
  finish(loop, c16);
  require_good(c16);
  CHECK(get(c16.data(), 0, 8) == 1ull << 32);
  CHECK((c16.data()[13] & 0x0f) == 0);  // one logical block per physical block, unless told
}

TEST_CASE("scsi write protect: a write-protected unit refuses every change", "[target][scsi]") {
  rig_options o;
  o.identity.write_protected = true;
  rig r(o);
  const auto block = pattern(block_size, 7);
  const std::vector<cdb_bytes> changes = {cdb10(0x2a, 0, 1), cdb12(0xaa, 0, 1), cdb16(0x8a, 0, 1),
                                          cdb10(0x2e, 0, 1), cdb16(0x8e, 0, 1), cdb10(0x41, 0, 1),
                                          cdb16(0x93, 0, 1)};
  for (const cdb_bytes& cdb : changes) {
    INFO("opcode " << int(cdb[0]));
    require_sense(*r.run(cdb, block), sense_key::data_protect, asc::write_protected);
  }
  CHECK(all_zero(r.read(0, 1)));
  // Reads, and MODE SENSE with WP set in the device-specific parameter.
  require_good(*r.run(cdb16(0x88, 0, 1)));
  cdb_bytes sense6{};
  sense6[0] = 0x1a;
  sense6[2] = 0x3f;
  sense6[4] = 0xff;
  const auto m = r.run(sense6);
  require_good(*m);
  CHECK((m->data()[2] & 0x80) != 0);
}

TEST_CASE("scsi read capacity(16): logical blocks per physical block", "[target][scsi]") {
  test_loop loop;
  null_device volume(loop.context.get_executor(), 512, 1 << 20);
  unit_identity id;
  id.serial = "4k";
  id.physical_block_bytes = 4096;
  logical_unit unit(volume, id);
  command c16;
  c16.t.cdb = read_capacity_16_cdb();
  unit.execute(c16.t);
  finish(loop, c16);
  require_good(c16);
  CHECK((c16.data()[13] & 0x0f) == 3);  // 512-byte blocks over 4 KiB ones: 2^3 per physical block
}

// ---------------------------------------------------------------------------
// Data

TEST_CASE("scsi read/write: every size of CDB round-trips data", "[target][scsi]") {
  rig r;
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  struct form {
    const char* name;
    std::function<cdb_bytes(std::uint8_t, std::uint64_t, std::uint32_t)> make;
    std::uint8_t read_op, write_op;
  };
  const form forms[] = {
      {"6",
       [](std::uint8_t op, std::uint64_t lba, std::uint32_t n) {
         return cdb6(op, lba, static_cast<std::uint8_t>(n));
       },
       0x08, 0x0a},
      {"10",
       [](std::uint8_t op, std::uint64_t lba, std::uint32_t n) {
         return cdb10(op, lba, static_cast<std::uint16_t>(n));
       },
       0x28, 0x2a},
      {"12", [](std::uint8_t op, std::uint64_t lba, std::uint32_t n) { return cdb12(op, lba, n); },
       0xa8, 0xaa},
      {"16", [](std::uint8_t op, std::uint64_t lba, std::uint32_t n) { return cdb16(op, lba, n); },
       0x88, 0x8a},
  };
  std::uint64_t lba = 3;
  for (const form& f : forms) {
    INFO("READ/WRITE(" << f.name << ")");
    const auto data = pattern(5 * block_size, seed + lba);
    require_good(*r.run(f.make(f.write_op, lba, 5), data));
    auto c = r.run(f.make(f.read_op, lba, 5));
    require_good(*c);
    CHECK(c->data_bytes() == data);
    CHECK(read_blocks(r.loop, *r.memory, lba, 5) == data);  // on the volume itself
    lba += 100;
  }
  // READ(6)/WRITE(6) with TRANSFER LENGTH 0 move 256 blocks.
  const auto data = pattern(256 * block_size, seed);
  require_good(*r.run(cdb6(0x0a, 1000, 0), data));
  auto c = r.run(cdb6(0x08, 1000, 0));
  require_good(*c);
  CHECK(c->data_bytes() == data);
}

TEST_CASE("scsi read/write: the largest transfer crosses many device requests", "[target][scsi]") {
  rig r;
  const std::uint32_t blocks = logical_unit::max_transfer_bytes / block_size;
  const auto data = pattern(std::size_t{blocks} * block_size, test_seed());
  r.write(17, data);
  CHECK(r.read(17, blocks) == data);
  // One block more is refused before any I/O.
  require_sense(*r.run(cdb16(0x88, 0, blocks + 1)), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
}

TEST_CASE("scsi read/write: concurrent commands all complete with their own data",
          "[target][scsi]") {
  rig r;
  std::vector<std::unique_ptr<command>> writes;
  std::vector<std::vector<std::byte>> contents;
  for (int i = 0; i < 12; ++i) {
    auto c = std::make_unique<command>();
    contents.push_back(pattern(3 * block_size, 100 + i));
    c->set_data_out(contents.back());
    c->t.expected_transfer_bytes = static_cast<std::uint32_t>(c->t.data_out.size());
    c->t.cdb = cdb16(0x8a, 10 * i, 3);
    writes.push_back(std::move(c));
  }
  for (auto& c : writes) r.unit->execute(c->t);
  CHECK(r.unit->commands_in_flight() == writes.size());
  r.loop.run_until([&] {
    return std::all_of(writes.begin(), writes.end(), [](auto& c) { return c->completions == 1; });
  });
  for (std::size_t i = 0; i < writes.size(); ++i) {
    require_good(*writes[i]);
    CHECK(r.read(10 * i, 3) == contents[i]);
  }
}

TEST_CASE("scsi write: data_out not aligned for the volume is bounced", "[target][scsi]") {
  rig r;
  const auto data = pattern(2 * block_size, test_seed());
  command c;
  c.out = aligned_buffer(3 * block_size);
  std::memcpy(c.out.data() + 512, data.data(), data.size());
  c.t.data_out = c.out.bytes().subspan(512, data.size());
  c.t.expected_transfer_bytes = static_cast<std::uint32_t>(data.size());
  c.t.cdb = cdb10(0x2a, 40, 2);
  r.unit->execute(c.t);
  r.loop.run_until([&] { return c.completions == 1; });
  require_good(c);
  CHECK(r.read(40, 2) == data);
}

TEST_CASE("scsi read/write: bad ranges and fields are refused", "[target][scsi]") {
  rig r;
  require_sense(*r.run(cdb16(0x88, volume_blocks - 1, 2)), sense_key::illegal_request,
                asc::lba_out_of_range);
  require_sense(*r.run(cdb10(0x2a, volume_blocks, 1), pattern(block_size, 1)),
                sense_key::illegal_request, asc::lba_out_of_range);
  require_sense(*r.run(cdb16(0x88, ~std::uint64_t{0}, 1)), sense_key::illegal_request,
                asc::lba_out_of_range);
  // The last block itself is fine, and so is no block at the end.
  require_good(*r.run(cdb16(0x88, volume_blocks - 1, 1)));
  require_good(*r.run(cdb10(0x28, volume_blocks, 0)));
  // RDPROTECT: this unit has no protection information.
  require_sense(*r.run(cdb10(0x28, 0, 1, 0x20)), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  // The initiator expects to send less than the CDB describes: only the
  // whole blocks within its expected transfer length are written, and the
  // rest is the transport's residual overflow (libiscsi's residual tests).
  const auto one = pattern(block_size, 1);
  const auto shorter = r.run(cdb10(0x2a, 0, 2), one);
  require_good(*shorter);
  CHECK(shorter->t.data_out_described_bytes == 2 * block_size);
  CHECK(r.read(0, 1) == one);
  CHECK(all_zero(r.read(1, 1)));
  // Less than a block expected: nothing is written.
  require_good(*r.run(cdb10(0x2a, 2, 1), std::span(one).first(200)));
  CHECK(all_zero(r.read(2, 1)));
  // Less data than the initiator said it would send: refused, nothing written.
  const auto starved = r.run_with(
      [&](task& t) {
        t.expected_transfer_bytes = 2 * block_size;
        r.unit->execute(t);
      },
      cdb10(0x2a, 4, 2), one);
  require_sense(*starved, sense_key::illegal_request, asc::invalid_field_in_command_iu);
  CHECK(all_zero(r.read(4, 2)));
}

TEST_CASE("scsi: an unknown operation code is refused", "[target][scsi]") {
  rig r;
  cdb_bytes c{};
  c[0] = 0xc1;
  require_sense(*r.run(c), sense_key::illegal_request, asc::invalid_command_operation_code);
  c[0] = 0xa3;  // MAINTENANCE IN, an unknown service action
  c[1] = 0x05;
  require_sense(*r.run(c), sense_key::illegal_request, asc::invalid_field_in_cdb);
}

TEST_CASE("scsi: TEST UNIT READY, START STOP UNIT and REQUEST SENSE", "[target][scsi]") {
  rig r;
  require_good(*r.run(cdb_bytes{}));
  cdb_bytes ssu{};
  ssu[0] = 0x1b;
  require_good(*r.run(ssu));
  cdb_bytes rs{};
  rs[0] = 0x03;
  rs[4] = 252;
  auto c = r.run(rs);
  require_good(*c);
  REQUIRE(c->t.data_in_bytes == fixed_sense_bytes);
  CHECK(c->data()[0] == 0x70);
  CHECK((c->data()[2] & 0x0f) == 0);  // NO SENSE
  CHECK(c->data()[12] == 0);
  rs[1] = 0x01;  // descriptor format
  auto d = r.run(rs);
  require_good(*d);
  REQUIRE(d->t.data_in_bytes == 8);
  CHECK(d->data()[0] == 0x72);
}

// ---------------------------------------------------------------------------
// Cache

TEST_CASE("scsi synchronize cache: flushes the volume's write cache", "[target][scsi]") {
  rig_options o;
  o.faults = true;
  o.volatile_write_cache = true;
  rig r(o);
  r.write(8, pattern(4 * block_size, test_seed()));
  REQUIRE(r.faults->dirty_blocks() == 4);
  require_good(*r.run(cdb10(0x35, 0, 0)));
  CHECK(r.faults->dirty_blocks() == 0);

  r.write(8, pattern(2 * block_size, 5));
  REQUIRE(r.faults->dirty_blocks() == 2);
  require_good(*r.run(cdb16(0x91, 8, 2)));
  CHECK(r.faults->dirty_blocks() == 0);
  require_sense(*r.run(cdb16(0x91, volume_blocks + 1, 0)), sense_key::illegal_request,
                asc::lba_out_of_range);
}

TEST_CASE("scsi write: FUA leaves nothing in the volume's write cache", "[target][scsi]") {
  rig_options o;
  o.faults = true;
  o.volatile_write_cache = true;
  rig r(o);
  const auto data = pattern(3 * block_size, test_seed());
  require_good(*r.run(cdb10(0x2a, 20, 3, 0x08), data));
  CHECK(r.faults->dirty_blocks() == 0);
  require_good(*r.run(cdb10(0x2a, 30, 3), data));
  CHECK(r.faults->dirty_blocks() == 3);  // without FUA the cache holds it
}

// ---------------------------------------------------------------------------
// Thin provisioning

std::vector<std::uint8_t> unmap_list(
    std::initializer_list<std::pair<std::uint64_t, std::uint32_t>> ranges) {
  std::vector<std::uint8_t> list(8 + 16 * ranges.size(), 0);
  const std::size_t descriptors_bytes = 16 * ranges.size();
  list[0] = static_cast<std::uint8_t>((list.size() - 2) >> 8);
  list[1] = static_cast<std::uint8_t>(list.size() - 2);
  list[2] = static_cast<std::uint8_t>(descriptors_bytes >> 8);
  list[3] = static_cast<std::uint8_t>(descriptors_bytes);
  std::size_t at = 8;
  for (const auto& [lba, blocks] : ranges) {
    for (int i = 0; i < 8; ++i) list[at + i] = static_cast<std::uint8_t>(lba >> (56 - 8 * i));
    for (int i = 0; i < 4; ++i)
      list[at + 8 + i] = static_cast<std::uint8_t>(blocks >> (24 - 8 * i));
    at += 16;
  }
  return list;
}

TEST_CASE("scsi unmap: the ranges read as zeros, the rest is kept", "[target][scsi]") {
  rig r;
  const auto data = pattern(512 * block_size, test_seed());
  r.write(0, std::span(data).first(256 * block_size));
  r.write(256, std::span(data).subspan(256 * block_size));
  const auto list = unmap_list({{10, 5}, {300, 20}, {400, 0}});
  require_good(*r.run(cdb10(0x42, 0, static_cast<std::uint16_t>(list.size())), list));
  const auto got = read_blocks(r.loop, *r.memory, 0, 512);
  for (std::uint64_t b = 0; b < 512; ++b) {
    INFO("block " << b);
    const bool unmapped = (b >= 10 && b < 15) || (b >= 300 && b < 320);
    const auto block = std::span(got).subspan(b * block_size, block_size);
    if (unmapped) {
      CHECK(std::all_of(block.begin(), block.end(), [](std::byte x) { return x == std::byte{0}; }));
    } else {
      CHECK(std::equal(block.begin(), block.end(), data.begin() + b * block_size));
    }
  }
}

TEST_CASE("scsi unmap: a descriptor out of range fails the command with nothing unmapped",
          "[target][scsi]") {
  rig r;
  const auto data = pattern(8 * block_size, test_seed());
  r.write(0, data);
  const auto list = unmap_list({{0, 8}, {volume_blocks - 1, 2}});
  require_sense(*r.run(cdb10(0x42, 0, static_cast<std::uint16_t>(list.size())), list),
                sense_key::illegal_request, asc::lba_out_of_range);
  CHECK(r.read(0, 8) == data);
  // A parameter list shorter than its header.
  require_sense(*r.run(cdb10(0x42, 0, 4), std::vector<std::uint8_t>(4, 0)),
                sense_key::illegal_request, asc::parameter_list_length_error);
  // More descriptors than the block limits page allows.
  std::vector<std::uint8_t> many(8 + 16 * (logical_unit::max_unmap_descriptors + 1), 0);
  many[2] = static_cast<std::uint8_t>((many.size() - 8) >> 8);
  many[3] = static_cast<std::uint8_t>(many.size() - 8);
  require_sense(*r.run(cdb10(0x42, 0, static_cast<std::uint16_t>(many.size())), many),
                sense_key::illegal_request, asc::invalid_field_in_parameter_list);
}

TEST_CASE("scsi write same: without UNMAP the block is written to every LBA", "[target][scsi]") {
  rig r;
  const auto block = pattern(block_size, test_seed());
  // More blocks than one device request carries, so that several pieces
  // write from the one pattern buffer.
  const std::uint32_t blocks = logical_unit::piece_bytes / block_size + 44;
  require_good(*r.run(cdb16(0x93, 7, blocks), block));
  const auto got = read_blocks(r.loop, *r.memory, 6, blocks + 2);
  CHECK(all_zero({got.begin(), got.begin() + block_size}));
  for (std::uint32_t i = 0; i < blocks; ++i) {
    INFO("block " << 7 + i);
    CHECK(std::equal(block.begin(), block.end(), got.begin() + (1 + i) * block_size));
  }
  CHECK(all_zero({got.end() - block_size, got.end()}));

  // WRITE SAME(10) too; a zero block without UNMAP is written, not discarded.
  require_good(*r.run(cdb10(0x41, 7, 3), std::vector<std::byte>(block_size)));
  CHECK(all_zero(r.read(7, 3)));
  // No blocks means to the last LBA: here more than MAXIMUM WRITE SAME
  // LENGTH, so refused. No data is refused.
  require_sense(*r.run(cdb16(0x93, 7, 0), block), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  require_sense(*r.run(cdb16(0x93, 7, 1)), sense_key::illegal_request,
                asc::invalid_field_in_command_iu);
}

TEST_CASE("scsi write same: UNMAP with a zero block deallocates", "[target][scsi]") {
  rig r;
  const std::uint64_t chunk_blocks = memory_device::chunk_size_bytes / block_size;
  r.write(chunk_blocks, pattern(chunk_blocks * block_size, 1));
  r.write(2 * chunk_blocks, pattern(chunk_blocks * block_size, 2));
  const std::uint64_t resident_before = r.memory->resident_bytes();
  REQUIRE(resident_before == 2 * memory_device::chunk_size_bytes);
  require_good(*r.run(cdb16(0x93, chunk_blocks, static_cast<std::uint32_t>(2 * chunk_blocks), 0x08),
                      std::vector<std::byte>(block_size)));
  CHECK(all_zero(r.read(chunk_blocks, 16)));
  // A write of zeros would have kept the memory; a discard gives it back.
  CHECK(r.memory->resident_bytes() == 0);

  // NDOB: no data, zeros, with UNMAP.
  r.write(0, pattern(4 * block_size, 3));
  require_good(*r.run(cdb16(0x93, 0, 4, 0x08 | 0x01)));
  CHECK(all_zero(r.read(0, 4)));
}

TEST_CASE("scsi write same: UNMAP deallocates whatever the block holds", "[target][scsi]") {
  rig r;
  const auto block = pattern(block_size, test_seed());
  r.write(50, pattern(4 * block_size, test_seed() + 1));
  require_good(*r.run(cdb10(0x41, 50, 4, 0x08), block));
  const auto got = r.read(50, 4);
  CHECK(std::ranges::all_of(got, [](std::byte b) { return b == std::byte{0}; }));  // LBPRZ
}

// ---------------------------------------------------------------------------
// Verification

TEST_CASE("scsi verify: BYTCHK=1 compares with the medium", "[target][scsi]") {
  rig r;
  auto data = pattern(6 * block_size, test_seed());
  r.write(100, data);
  require_good(*r.run(cdb16(0x8f, 100, 6, 0x02), data));
  require_good(*r.run(cdb10(0x2f, 100, 6, 0x02), data));
  require_good(*r.run(cdb12(0xaf, 100, 6, 0x02), data));
  require_good(*r.run(cdb16(0x8f, 100, 6)));  // BYTCHK=0: medium verification only

  const std::size_t offset = 2 * block_size + 7;
  data[offset] ^= std::byte{0x5a};
  auto c = r.run(cdb16(0x8f, 100, 6, 0x02), data);
  require_sense(*c, sense_key::miscompare, asc::miscompare_during_verify);
  CHECK(c->t.sense_data.information == offset);

  // BYTCHK=11b: one block compared with each.
  const auto block = pattern(block_size, 9);
  require_good(*r.run(cdb16(0x93, 200, 3), block));
  require_good(*r.run(cdb16(0x8f, 200, 3, 0x06), block));
  auto m = r.run(cdb16(0x8f, 199, 3, 0x06), block);  // block 199 was never written
  require_sense(*m, sense_key::miscompare, asc::miscompare_during_verify);
  CHECK(m->t.sense_data.information == 0);
  require_sense(*r.run(cdb16(0x8f, 100, 6, 0x04), data), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
}

TEST_CASE("scsi write and verify: writes, then compares", "[target][scsi]") {
  rig r;
  const auto data = pattern(3 * block_size, test_seed());
  require_good(*r.run(cdb16(0x8e, 60, 3, 0x02), data));
  CHECK(r.read(60, 3) == data);
  require_good(*r.run(cdb10(0x2e, 70, 3), data));
  CHECK(r.read(70, 3) == data);
}

// ---------------------------------------------------------------------------
// Mode pages

TEST_CASE("scsi mode sense: the caching page says WCE, the block descriptor the geometry",
          "[target][scsi]") {
  rig r;
  cdb_bytes ms6{};
  ms6[0] = 0x1a;
  ms6[2] = 0x08;
  ms6[4] = 255;
  auto c = r.run(ms6);
  require_good(*c);
  const auto d = c->data();
  REQUIRE(d.size() == 4 + 8 + 20);
  CHECK(d[0] == d.size() - 1);
  CHECK((d[2] & 0x10) != 0);  // DPOFUA
  CHECK(d[3] == 8);
  CHECK(get(d, 4, 4) == volume_blocks);
  CHECK(get(d, 9, 3) == block_size);
  CHECK((d[12] & 0x3f) == 0x08);
  CHECK(d[13] == 0x12);
  CHECK((d[14] & 0x04) != 0);  // WCE
  CHECK((d[14] & 0x01) == 0);  // RCD

  // MODE SENSE(10), all pages, no block descriptor.
  cdb_bytes ms10{};
  ms10[0] = 0x5a;
  ms10[1] = 0x08;
  ms10[2] = 0x3f;
  put(ms10, 7, 1024, 2);
  auto all = r.run(ms10);
  require_good(*all);
  const auto a = all->data();
  REQUIRE(a.size() == 8 + 20 + 12);
  CHECK(get(a, 0, 2) == a.size() - 2);
  CHECK(get(a, 6, 2) == 0);
  CHECK(a[8] == 0x08);
  CHECK(a[28] == 0x0a);
  CHECK((a[30] & 0x04) == 0);  // D_SENSE 0: fixed format

  // Changeable values: nothing.
  ms6[2] = 0x40 | 0x08;
  auto changeable = r.run(ms6);
  require_good(*changeable);
  CHECK((changeable->data()[14] & 0x04) == 0);
  // Saved values are not supported; nor is an unknown page.
  ms6[2] = 0xc0 | 0x08;
  require_sense(*r.run(ms6), sense_key::illegal_request, asc::saving_parameters_not_supported);
  ms6[2] = 0x1c;
  require_sense(*r.run(ms6), sense_key::illegal_request, asc::invalid_field_in_cdb);
  // The allocation length cuts the data.
  ms6[2] = 0x08;
  ms6[4] = 4;
  auto cut = r.run(ms6);
  require_good(*cut);
  CHECK(cut->t.data_in_bytes == 4);
  CHECK(cut->data()[0] == 4 + 8 + 20 - 1);
}

TEST_CASE("scsi mode select: the current values are accepted, changes refused", "[target][scsi]") {
  rig r;
  cdb_bytes ms6{};
  ms6[0] = 0x1a;
  ms6[2] = 0x08;
  ms6[4] = 255;
  auto current = r.run(ms6);
  require_good(*current);
  std::vector<std::uint8_t> list(current->data().begin(), current->data().end());
  list[0] = 0;  // MODE DATA LENGTH is reserved in MODE SELECT
  cdb_bytes sel{};
  sel[0] = 0x15;
  sel[1] = 0x10;  // PF
  sel[4] = static_cast<std::uint8_t>(list.size());
  require_good(*r.run(sel, list));
  list[14] &= ~0x04;  // WCE off
  require_sense(*r.run(sel, list), sense_key::illegal_request,
                asc::invalid_field_in_parameter_list);
  sel[1] = 0x11;  // SP: nothing can be saved
  list[14] |= 0x04;
  require_sense(*r.run(sel, list), sense_key::illegal_request, asc::invalid_field_in_cdb);
}

// ---------------------------------------------------------------------------
// Reports

TEST_CASE("scsi report supported operation codes", "[target][scsi]") {
  rig r;
  auto all = r.run(rsoc(0, 0, 0));
  require_good(*all);
  const auto d = all->data();
  REQUIRE(get(d, 0, 4) == d.size() - 4);
  bool read16 = false, rc16 = false;
  for (std::size_t at = 4; at + 8 <= d.size(); at += 8) {
    if (d[at] == 0x88) read16 = get(d, at + 6, 2) == 16 && (d[at + 5] & 0x01) == 0;
    if (d[at] == 0x9e && get(d, at + 2, 2) == 0x10) rc16 = (d[at + 5] & 0x01) != 0;
  }
  CHECK(read16);
  CHECK(rc16);

  auto ws16 = r.run(rsoc(1, 0x93, 0));
  require_good(*ws16);
  CHECK((ws16->data()[1] & 0x07) == 0x03);
  CHECK(get(ws16->data(), 2, 2) == 16);
  CHECK(ws16->data()[4] == 0x93);
  auto none = r.run(rsoc(1, 0xc1, 0));
  require_good(*none);
  CHECK((none->data()[1] & 0x07) == 0x01);
  auto with_sa = r.run(rsoc(2, 0x9e, 0x10));
  require_good(*with_sa);
  CHECK((with_sa->data()[1] & 0x07) == 0x03);
  require_sense(*r.run(rsoc(1, 0x9e, 0)), sense_key::illegal_request, asc::invalid_field_in_cdb);
}

TEST_CASE("scsi: every command reported as supported is answered", "[target][scsi]") {
  rig r;
  lun_map map(r.loop.context.get_executor());
  REQUIRE_FALSE(map.add(0, *r.unit));
  auto all = r.run(rsoc(0, 0, 0));
  require_good(*all);
  const auto d = all->data();
  std::size_t count = 0;
  for (std::size_t at = 4; at + 8 <= d.size(); at += 8, ++count) {
    cdb_bytes probe{};
    probe[0] = d[at];
    if ((d[at + 5] & 0x01) != 0) probe[1] = static_cast<std::uint8_t>(get(d, at + 2, 2));
    INFO("opcode " << int{probe[0]} << " service action " << int{probe[1]});
    auto answer = r.run_with([&](task& t) { map.execute(t); }, probe);
    const bool refused_opcode = answer->t.result == status::check_condition &&
                                answer->t.sense_data.asc == asc::invalid_command_operation_code.asc;
    CHECK_FALSE(refused_opcode);
  }
  CHECK(count >= 30);
}

TEST_CASE("scsi report target port groups: one group, active/optimized, this port",
          "[target][scsi]") {
  rig r;
  cdb_bytes c{};
  c[0] = 0xa3;
  c[1] = 0x20 | 0x0a;  // extended header
  put(c, 6, 1024, 4);
  auto answer = r.run(c);
  require_good(*answer);
  const auto d = answer->data();
  REQUIRE(d.size() == 20);
  CHECK(get(d, 0, 4) == 16);
  CHECK((d[4] >> 4) == 1);
  CHECK((d[8] & 0x0f) == 0);  // active/optimized
  CHECK(get(d, 10, 2) == 3);  // port group
  CHECK(d[15] == 1);
  CHECK(get(d, 18, 2) == 7);  // relative port
}

TEST_CASE(
    "scsi ALUA over two controllers' ports: VPD 83h names the port a command came through and its "
    "group; "
    "REPORT TARGET PORT GROUPS lists both groups with their states; a change of states is 2A/06",
    "[target][scsi]") {
  rig_options o;
  o.identity.relative_port = 1;
  o.identity.port_group = 1;
  o.identity.port_groups = {{1, alua_state::active_optimized, {1}},
                            {2, alua_state::active_non_optimized, {2}}};
  rig r(o);
  auto on_port = [&](std::uint16_t port, const cdb_bytes& c) {
    return r.run_with(
        [&](task& t) {
          t.nexus = i_t_nexus{"iqn.x:host,i,0x000000000001", port};
          r.unit->execute(t);
        },
        c);
  };
  auto vpd83 = [&](std::uint16_t port) {
    auto answer = on_port(port, inquiry_cdb(true, 0x83));
    require_good(*answer);
    const auto d = answer->data();
    std::pair<std::uint64_t, std::uint64_t> found{};
    for (std::size_t at = 4; at + 4 <= d.size(); at += 4 + d[at + 3]) {
      const std::vector<std::uint8_t> body(d.begin() + at + 4, d.begin() + at + 4 + d[at + 3]);
      if ((d[at + 1] & 0x0f) == 4) found.first = get(body, 2, 2);
      if ((d[at + 1] & 0x0f) == 5) found.second = get(body, 2, 2);
    }
    return found;
  };
  CHECK(vpd83(1) == std::pair<std::uint64_t, std::uint64_t>{1, 1});
  CHECK(vpd83(2) == std::pair<std::uint64_t, std::uint64_t>{2, 2});
  CHECK(vpd83(9) == std::pair<std::uint64_t, std::uint64_t>{
                        1, 1});  // a port no group names: the identity's own

  cdb_bytes c{};
  c[0] = 0xa3;
  c[1] = 0x20 | 0x0a;  // extended header
  put(c, 6, 1024, 4);
  auto rtpg = [&](std::uint16_t port) {
    auto answer = on_port(port, c);
    require_good(*answer);
    const auto d = answer->data();
    REQUIRE(d.size() == 8 + 2 * 12);
    CHECK(get(d, 0, 4) == d.size() - 4);
    CHECK(d[5] == logical_unit::implicit_transition_seconds);
    std::vector<std::tuple<std::uint64_t, int, std::uint64_t>>
        groups;  // (group, state, its one port)
    for (std::size_t at = 8; at < d.size(); at += 12) {
      CHECK(d[at + 1] == 0x8b);  // T_SUP, U_SUP, AN_SUP, AO_SUP
      REQUIRE(d[at + 7] == 1);
      groups.emplace_back(get(d, at + 2, 2), d[at] & 0x0f, get(d, at + 10, 2));
    }
    return groups;
  };
  const std::vector<std::tuple<std::uint64_t, int, std::uint64_t>> before{{1, 0, 1}, {2, 1, 2}};
  CHECK(rtpg(1) == before);
  CHECK(rtpg(2) == before);  // the same answer through either port

  // A host logged in through port 2 (its first command meets 29/00)...
  r.unit->nexus_created(i_t_nexus{"iqn.x:host,i,0x000000000001", 2});
  require_sense(*on_port(2, cdb_bytes{}), sense_key::unit_attention, asc::power_on_reset_occurred);
  // ... and the other controller serves the volume now: its group is the optimized one.
  r.unit->set_port_groups(
      {{1, alua_state::active_non_optimized, {1}}, {2, alua_state::active_optimized, {2}}});
  auto tur = on_port(2, cdb_bytes{});
  require_sense(*tur, sense_key::unit_attention, asc::asymmetric_access_state_changed);
  const std::vector<std::tuple<std::uint64_t, int, std::uint64_t>> after{{1, 1, 1}, {2, 0, 2}};
  CHECK(rtpg(2) == after);
}

// ---------------------------------------------------------------------------
// Device errors

TEST_CASE("scsi read: a latent error is MEDIUM ERROR at its LBA, the blocks before it are good",
          "[target][scsi]") {
  rig_options o;
  o.faults = true;
  rig r(o);
  const std::uint32_t blocks = 600;  // several device requests
  const auto data = pattern(std::size_t{blocks} * block_size, test_seed());
  r.write(100, data);
  const std::uint64_t bad_lba = 100 + 300;
  r.faults->add_latent_error(bad_lba, 2);

  auto c = r.run(cdb16(0x88, 100, blocks));
  require_sense(*c, sense_key::medium_error, asc::unrecovered_read_error);
  CHECK(c->t.sense_data.information == bad_lba);
  const auto encoded = fixed_sense(c->t.sense_data);
  CHECK((encoded[0] & 0x80) != 0);  // VALID
  CHECK(get(encoded, 3, 4) == bad_lba);
  REQUIRE(c->t.data_in_bytes == (bad_lba - 100) * block_size);
  const auto good = c->data_bytes();
  CHECK(std::equal(good.begin(), good.end(), data.begin()));

  // VERIFY reads the medium, so it finds the error too.
  auto v = r.run(cdb16(0x8f, 100, blocks));
  require_sense(*v, sense_key::medium_error, asc::unrecovered_read_error);
  CHECK(v->t.sense_data.information == bad_lba);

  // Rewriting the blocks clears the error.
  r.write(bad_lba, std::span(data).subspan(300 * block_size, 2 * block_size));
  CHECK(r.read(100, blocks) == data);
}

TEST_CASE("scsi write: a media error is MEDIUM ERROR, WRITE ERROR", "[target][scsi]") {
  rig_options o;
  o.faults = true;
  rig r(o);
  r.faults->fail_writes(10, 1);
  auto c = r.run(cdb10(0x2a, 8, 4), pattern(4 * block_size, 1));
  require_sense(*c, sense_key::medium_error, asc::write_error);
  CHECK(c->t.sense_data.information == 8);  // the first LBA of the request that failed
}

TEST_CASE("scsi: a failed device is HARDWARE ERROR", "[target][scsi]") {
  rig_options o;
  o.faults = true;
  rig r(o);
  r.faults->fail();
  require_sense(*r.run(cdb16(0x88, 0, 1)), sense_key::hardware_error, asc::internal_target_failure);
  require_sense(*r.run(cdb10(0x35, 0, 0)), sense_key::hardware_error, asc::internal_target_failure);
  // Commands that need no I/O still answer.
  require_good(*r.run(inquiry_cdb(false, 0)));
}

// ---------------------------------------------------------------------------
// The LUN map

TEST_CASE("scsi lun: the LUN field encodes and decodes", "[target][scsi]") {
  CHECK(encode_lun(0) == std::array<std::uint8_t, 8>{});
  CHECK(encode_lun(5) == std::array<std::uint8_t, 8>{0x00, 0x05});
  CHECK(encode_lun(300) == std::array<std::uint8_t, 8>{0x41, 0x2c});
  CHECK(encode_lun(16383) == std::array<std::uint8_t, 8>{0x7f, 0xff});
  for (std::uint32_t lun = 0; lun < lun_count; ++lun) {
    const auto field = encode_lun(static_cast<std::uint16_t>(lun));
    REQUIRE(decode_lun(field) == lun);
  }
  // Flat space may also name a LUN below 256.
  CHECK(decode_lun(std::array<std::uint8_t, 8>{0x40, 0x05}) == 5);
  // Other forms: a bus, a second level, logical unit and extended addressing.
  CHECK_FALSE(decode_lun(std::array<std::uint8_t, 8>{0x01, 0x05}));
  CHECK_FALSE(decode_lun(std::array<std::uint8_t, 8>{0x00, 0x05, 0x00, 0x01}));
  CHECK_FALSE(decode_lun(std::array<std::uint8_t, 8>{0x80, 0x05}));
  CHECK_FALSE(decode_lun(std::array<std::uint8_t, 8>{0xc0, 0x05}));
}

TEST_CASE("scsi lun map: REPORT LUNS and the units behind it", "[target][scsi]") {
  rig r;
  auto m = memory_device::create(r.loop.context.get_executor(), {block_size, 64});
  REQUIRE(m);
  unit_identity other_id;
  other_id.serial = "ARRAY1-VOL0300";
  logical_unit other(**m, other_id);
  lun_map map(r.loop.context.get_executor());
  REQUIRE_FALSE(map.add(300, other));
  REQUIRE_FALSE(map.add(0, *r.unit));
  CHECK(map.add(0, other) == errc::invalid_argument);
  CHECK(map.add(16384, other) == errc::invalid_argument);
  // What another loop reads (a transport's task management): the LUNs with a unit.
  CHECK(map.mapped(0));
  CHECK(map.mapped(300));
  CHECK_FALSE(map.mapped(1));
  CHECK_FALSE(map.mapped(299));
  CHECK_FALSE(map.mapped(16384));
  CHECK_FALSE(map.mapped(unaddressable_lun));
  auto via_map = [&](const cdb_bytes& cdb, std::uint64_t lun, std::span<const std::byte> out = {}) {
    return r.run_with([&](task& t) { map.execute(t); }, cdb, out, lun);
  };

  cdb_bytes report{};
  report[0] = 0xa0;
  put(report, 6, 1024, 4);
  auto c = via_map(report, 0);
  require_good(*c);
  const auto d = c->data();
  REQUIRE(d.size() == 8 + 16);
  CHECK(get(d, 0, 4) == 16);
  CHECK(std::vector<std::uint8_t>(d.begin() + 8, d.begin() + 16) ==
        std::vector<std::uint8_t>{0x00, 0x00, 0, 0, 0, 0, 0, 0});
  CHECK(std::vector<std::uint8_t>(d.begin() + 16, d.end()) ==
        std::vector<std::uint8_t>{0x41, 0x2c, 0, 0, 0, 0, 0, 0});
  // Addressed to an absent LUN, REPORT LUNS still answers.
  require_good(*via_map(report, 9));
  report[2] = 0x01;  // well-known LUs only: none
  auto known = via_map(report, 0);
  require_good(*known);
  CHECK(get(known->data(), 0, 4) == 0);
  report[2] = 0x07;
  require_sense(*via_map(report, 0), sense_key::illegal_request, asc::invalid_field_in_cdb);

  // Each LUN reaches its own unit.
  auto serial_of = [&](std::uint64_t lun) {
    auto s = via_map(inquiry_cdb(true, 0x80), lun);
    require_good(*s);
    return std::string(s->data().begin() + 4, s->data().end());
  };
  CHECK(serial_of(0) == "ARRAY1-VOL0007");
  CHECK(serial_of(300) == "ARRAY1-VOL0300");
  const auto data = pattern(2 * block_size, test_seed());
  require_good(*via_map(cdb10(0x2a, 3, 2), 300, data));
  CHECK(read_blocks(r.loop, **m, 3, 2) == data);
  CHECK(all_zero(read_blocks(r.loop, *r.memory, 3, 2)));

  CHECK(map.remove(300));
  CHECK_FALSE(map.mapped(300));
  CHECK(map.mapped(0));
  CHECK(map.luns() == std::vector<std::uint16_t>{0});
  require_sense(*via_map(cdb10(0x28, 3, 2), 300), sense_key::illegal_request,
                asc::lu_not_supported);
  CHECK(map.answers_in_flight() == 0);
}

TEST_CASE("scsi lun map: an absent LUN", "[target][scsi]") {
  rig r;
  lun_map map(r.loop.context.get_executor());
  REQUIRE_FALSE(map.add(0, *r.unit));
  auto via_map = [&](const cdb_bytes& cdb, std::uint64_t lun) {
    return r.run_with([&](task& t) { map.execute(t); }, cdb, {}, lun);
  };
  auto inq = via_map(inquiry_cdb(false, 0), 5);
  require_good(*inq);
  REQUIRE(inq->t.data_in_bytes >= 36);
  CHECK(inq->data()[0] == 0x7f);  // qualifier 011b, type 1Fh
  require_sense(*via_map(inquiry_cdb(true, 0x83), 5), sense_key::illegal_request,
                asc::lu_not_supported);

  cdb_bytes rs{};
  rs[0] = 0x03;
  rs[4] = 255;
  auto sense_data = via_map(rs, 5);
  require_good(*sense_data);
  REQUIRE(sense_data->t.data_in_bytes == fixed_sense_bytes);
  CHECK((sense_data->data()[2] & 0x0f) == 0x05);
  CHECK(sense_data->data()[12] == 0x25);
  CHECK(sense_data->data()[13] == 0x00);

  require_sense(*via_map(cdb_bytes{}, 5), sense_key::illegal_request, asc::lu_not_supported);
  require_sense(*via_map(cdb16(0x88, 0, 1), unaddressable_lun), sense_key::illegal_request,
                asc::lu_not_supported);
  // And the present one still answers.
  require_good(*via_map(cdb_bytes{}, 0));
}

}  // namespace
}  // namespace strata::scsi
