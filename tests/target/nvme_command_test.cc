// NVMe commands in a capsule (target/nvme/command.h) and a fabrics
// controller's properties (target/nvme/registers.h).
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "target/nvme/command.h"
#include "target/nvme/little_endian.h"
#include "target/nvme/registers.h"

namespace strata::nvme {
namespace {

// A Connect as Linux's host sends it: admin queue of 32 entries, KATO 5 s.
std::array<std::uint8_t, 64> connect_sqe() {
  std::array<std::uint8_t, 64> s{};
  s[0] = opcode::fabrics;
  s[1] = 0x80;  // PSDT 2: an SGL
  put16(s.data() + 2, 0x1234);
  s[4] = fctype::connect;
  put32(s.data() + 32, 1024);  // SGL length
  s[39] = static_cast<std::uint8_t>(sgl::data_block << 4 | sgl::subtype_offset);
  put16(s.data() + 42, 0);     // QID
  put16(s.data() + 44, 31);    // SQSIZE, 0's based
  put32(s.data() + 48, 5000);  // KATO
  return s;
}

std::vector<std::uint8_t> connect_data_bytes_for(const std::string& subsystem,
                                                 const std::string& host) {
  std::vector<std::uint8_t> d(connect_data_bytes, 0);
  for (int i = 0; i < 16; ++i) d[i] = static_cast<std::uint8_t>(i + 1);
  put16(d.data() + 16, 0xffff);
  std::memcpy(d.data() + 256, subsystem.data(), subsystem.size());
  std::memcpy(d.data() + 512, host.data(), host.size());
  return d;
}

}  // namespace

TEST_CASE("nvme command: a Connect's fields and data, and the parameters it refuses, by offset") {
  const auto sqe = connect_sqe();
  const command_view c(sqe);
  CHECK(c.opcode() == opcode::fabrics);
  CHECK(c.fabrics_type() == fctype::connect);
  CHECK(c.psdt() == 2);
  CHECK(c.command_id() == 0x1234);
  CHECK(c.sgl_length() == 1024);
  CHECK(c.sgl_type() == sgl::data_block);
  CHECK(c.sgl_subtype() == sgl::subtype_offset);
  const connect_command cc = parse_connect(c);
  CHECK(cc.queue_id == 0);
  CHECK(cc.queue_entries == 32);
  CHECK(cc.keep_alive_ms == 5000);

  const auto data =
      connect_data_bytes_for("nqn.2026-11.io.strata:array", "nqn.2014-08.org.nvmexpress:uuid:host");
  const auto d = parse_connect_data(data);
  REQUIRE(d);
  CHECK(d->subsystem_nqn == "nqn.2026-11.io.strata:array");
  CHECK(d->host_nqn == "nqn.2014-08.org.nvmexpress:uuid:host");
  CHECK(d->controller_id == 0xffff);
  CHECK(d->host_id[15] == 16);

  auto unterminated = data;
  std::memset(unterminated.data() + 512, 'x', 256);
  const auto r = parse_connect_data(unterminated);
  REQUIRE_FALSE(r);
  CHECK(r.error().data_offset == 512);
  CHECK(r.error().why ==
        status{status_type::command_specific, code::connect_invalid_parameters, true});
  CHECK(connect_invalid_parameter_result(512) == (1u << 16 | 512u));
  CHECK(connect_invalid_parameter_result(256) ==
        0x00010100u);  // what Linux's nvmet answers for SUBNQN
  CHECK(connect_invalid_command_field_result(44) == 44u);
  CHECK(parse_connect_data(connect_data_bytes_for("iqn.not-an-nqn", "nqn.h")).error().data_offset ==
        256);
  CHECK(parse_connect_data(std::vector<std::uint8_t>(100, 0)).error().why ==
        generic(code::invalid_field));
}

TEST_CASE("nvme command: Property Get and Set fields, and a reserved size") {
  std::array<std::uint8_t, 64> s{};
  s[0] = opcode::fabrics;
  s[4] = fctype::property_set;
  s[40] = 0;
  put32(s.data() + 44, property::cc);
  put32(s.data() + 48, 0x00460001);
  auto p = parse_property(command_view(s));
  CHECK(p.offset == property::cc);
  CHECK(p.size_bytes == 4);
  CHECK(p.value == 0x00460001);
  s[40] = 1;
  CHECK(parse_property(command_view(s)).size_bytes == 8);
  s[40] = 3;
  CHECK(parse_property(command_view(s)).size_bytes == 0);
}

TEST_CASE(
    "nvme registers: a host reads CAP and VS, enables, waits for RDY, shuts down; a CC it cannot "
    "honour is fatal") {
  controller_registers r(128, 2000);
  const std::uint64_t cap = *r.get(property::cap, 8);
  CHECK((cap & 0xffff) == 127);      // MQES
  CHECK(((cap >> 16) & 1) == 1);     // CQR
  CHECK(((cap >> 24) & 0xff) == 4);  // TO: 2 s in 500 ms units
  CHECK(((cap >> 37) & 1) == 1);     // CSS: the NVM command set
  CHECK(*r.get(property::vs, 4) == 0x00020000);
  CHECK(r.get(property::cap, 4).error() == generic(code::invalid_field));  // CAP has eight bytes
  CHECK(r.get(0x30, 4).error() == generic(code::invalid_field));
  CHECK(r.set(property::csts, 4, 1).error() == generic(code::invalid_field));  // read only
  CHECK_FALSE(r.ready());

  const std::uint32_t good_cc = 6u << 16 | 4u << 20 | 1;  // IOSQES 6, IOCQES 4, EN
  CHECK(*r.set(property::cc, 4, good_cc) == controller_registers::change::enabled);
  CHECK(r.ready());
  CHECK(*r.get(property::csts, 4) == controller_registers::csts_ready);
  CHECK(*r.set(property::cc, 4, good_cc) ==
        controller_registers::change::none);  // written again: nothing changes
  CHECK(*r.set(property::cc, 4, good_cc | 1u << 14) == controller_registers::change::shut_down);
  CHECK(*r.get(property::csts, 4) == controller_registers::csts_shutdown_complete);
  CHECK_FALSE(r.ready());
  CHECK(*r.set(property::cc, 4, good_cc) ==
        controller_registers::change::enabled);  // enabled again from scratch
  CHECK(*r.get(property::csts, 4) == controller_registers::csts_ready);
  CHECK(*r.set(property::cc, 4, 6u << 16 | 4u << 20) == controller_registers::change::reset);
  CHECK(*r.get(property::csts, 4) == 0);

  controller_registers wrong(128, 2000);
  CHECK(*wrong.set(property::cc, 4, 7u << 16 | 4u << 20 | 1) ==
        controller_registers::change::none);  // 128-byte entries
  CHECK(*wrong.get(property::csts, 4) == controller_registers::csts_fatal);
  CHECK_FALSE(wrong.ready());
}

}  // namespace strata::nvme
