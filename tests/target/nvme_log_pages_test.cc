// Log pages (target/nvme/log_pages.h), checked at the spec's offsets.
#include <catch2/catch.hpp>
#include <vector>

#include "target/nvme/little_endian.h"
#include "target/nvme/log_pages.h"

namespace strata::nvme {

TEST_CASE(
    "nvme log pages: Get Log Page's fields, and the piece asked for, checked before anything is "
    "allocated") {
  std::array<std::uint8_t, 64> s{};
  s[0] = opcode::get_log_page;
  // LID 0x0c, LSP 1 (groups only), RAE, NUMDL 0x3ff (4 KiB), offset 8.
  const std::uint32_t cdw10 = 0x0c | 1u << 8 | 1u << 15 | 0x3ffu << 16;
  for (int i = 0; i < 4; ++i) s[40 + i] = static_cast<std::uint8_t>(cdw10 >> (8 * i));
  s[48] = 8;
  auto r = parse_get_log_page(command_view(s));
  CHECK(r.id == log_page::ana);
  CHECK(r.specific == 1);
  CHECK(r.retain_event);
  CHECK(r.bytes == 4096);
  CHECK(r.offset_bytes == 8);
  const std::vector<std::uint8_t> page{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  auto p = piece(page, r, 1 << 20);
  REQUIRE(p);
  CHECK(p->size() == 4096);
  CHECK((*p)[0] == 9);
  CHECK((*p)[4] == 0);  // past the page: zeros
  s[44] = 0xff;         // NUMDU: 16 GiB asked for
  s[45] = 0xff;
  CHECK(piece(page, parse_get_log_page(command_view(s)), 1 << 20).error() ==
        generic(code::invalid_field));
  r.offset_bytes = 6;
  CHECK(piece(page, r, 1 << 20).error() == generic(code::invalid_field));
}

TEST_CASE("nvme log pages: the ANA page, with and without its namespaces") {
  const std::vector<ana_group> groups{{1, ana_state::optimized, 3, {1, 2}},
                                      {2, ana_state::non_optimized, 4, {5}}};
  const auto d = ana_log(7, groups, false);
  REQUIRE(d.size() == 16 + 32 + 8 + 32 + 4);
  CHECK(get64(d, 0) == 7);
  CHECK(get16(d, 8) == 2);
  CHECK(get32(d, 16) == 1);
  CHECK(get32(d, 20) == 2);
  CHECK(get64(d, 24) == 3);
  CHECK(d[32] == 0x1);
  CHECK(get32(d, 48) == 1);
  CHECK(get32(d, 52) == 2);
  CHECK(get32(d, 56) == 2);  // the second group
  CHECK(d[72] == 0x2);
  CHECK(get32(d, 88) == 5);
  const auto only = ana_log(7, groups, true);
  CHECK(only.size() == 16 + 64);
  CHECK(get32(only, 20) == 0);
}

TEST_CASE("nvme log pages: discovery, health, firmware slot, changed namespaces") {
  const std::vector<discovery_entry> e{
      {false, 1, "nqn.2026-11.io.strata:array", "127.0.0.1", "4420", false},
      {true, 1, "nqn.2014-08.org.nvmexpress.discovery", "127.0.0.2", "4420", false}};
  const auto d = discovery_log(5, e);
  REQUIRE(d.size() == 3 * 1024);
  CHECK(get64(d, 0) == 5);
  CHECK(get64(d, 8) == 2);
  CHECK(d[1024] == 3);  // TCP
  CHECK(d[1025] == 1);  // IPv4
  CHECK(d[1026] == 2);  // an NVMe subsystem
  CHECK(get16(d, 1024 + 6) == 0xffff);
  CHECK(std::string(d.begin() + 1024 + 32, d.begin() + 1024 + 36) == "4420");
  CHECK(d[1024 + 36] == ' ');
  CHECK(std::string(d.begin() + 1024 + 256, d.begin() + 1024 + 283) ==
        "nqn.2026-11.io.strata:array");
  CHECK(std::string(d.begin() + 1024 + 512, d.begin() + 1024 + 521) == "127.0.0.1");
  CHECK(d[2048 + 2] == 3);  // the discovery subsystem itself

  health_counters h;
  h.bytes_read = 512 * 1001;  // 1,001 units of 512 bytes
  h.write_commands = 9;
  h.degraded = true;
  const auto s = health_log(h);
  CHECK(s.size() == 512);
  CHECK(s[0] == 0x04);
  CHECK(get64(s, 32) == 2);  // rounded up
  CHECK(get64(s, 80) == 9);

  const auto f = firmware_slot_log("0.37");
  CHECK(f[0] == 1);
  CHECK(std::string(f.begin() + 8, f.begin() + 16) == "0.37    ");

  const std::vector<std::uint32_t> changed{4, 9};
  const auto c = changed_namespace_log(changed);
  CHECK(get32(c, 0) == 4);
  CHECK(get32(c, 4) == 9);
  CHECK(get32(changed_namespace_log(std::vector<std::uint32_t>(1025, 1)), 0) == 0xffffffff);
}

}  // namespace strata::nvme
