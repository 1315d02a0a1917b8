// Identify data (target/nvme/identify.h), checked at the spec's offsets.
#include <catch2/catch.hpp>
#include <vector>

#include "target/nvme/identify.h"
#include "target/nvme/little_endian.h"

namespace strata::nvme {
namespace {
std::string text(const identify_data& d, std::size_t at, std::size_t n) {
  return {d.begin() + static_cast<std::ptrdiff_t>(at),
          d.begin() + static_cast<std::ptrdiff_t>(at + n)};
}
}  // namespace

TEST_CASE("nvme identify: the controller, as a Linux host reads it") {
  controller_identity c;
  c.serial = "a1b2c3";
  c.model = "STRATA VOLUME";
  c.firmware = "0.37";
  c.controller_id = 5;
  c.subsystem_nqn = "nqn.2026-11.io.strata:array";
  c.namespaces = 1024;
  c.max_transfer_bytes = 1 << 20;
  const identify_data d = identify_controller(c);
  CHECK(text(d, 4, 20) == "a1b2c3              ");  // space-padded, never NUL
  CHECK(text(d, 24, 13) == "STRATA VOLUME");
  CHECK(d[76] == 0x0b);  // CMIC: multi-port, multi-controller, ANA
  CHECK(d[77] == 8);     // MDTS: 1 MiB in 4 KiB pages
  CHECK(get16(d, 78) == 5);
  CHECK(get32(d, 80) == 0x00020000);
  CHECK(get32(d, 92) == (1u << 8 | 1u << 11));  // OAES
  CHECK(d[111] == 1);                           // an I/O controller
  CHECK(get16(d, 320) == 10);                   // KAS: 1 s in 100 ms units
  CHECK(d[342] == 10);                          // ANATT
  CHECK((d[343] & 0x1f) == 0x1f);
  CHECK(get32(d, 344) == 2);
  CHECK(get32(d, 348) == 2);
  CHECK(d[512] == 0x66);
  CHECK(d[513] == 0x44);
  CHECK(get32(d, 516) == 1024);
  CHECK(get16(d, 520) == 0x2d);  // ONCS: compare, DSM, write zeroes, reservations
  CHECK(get16(d, 522) == 1);     // FUSES
  CHECK(d[525] == 1);
  CHECK(get32(d, 536) == (1u | 1u << 20));
  CHECK(text(d, 768, 27) == "nqn.2026-11.io.strata:array");
  CHECK(d[768 + 27] == 0);
  CHECK(get32(d, 1792) == (64 + 8192) / 16);
  CHECK(get32(d, 1796) == 1);
  CHECK(d[1803] == 1);

  c.discovery = true;
  const identify_data disc = identify_controller(c);
  CHECK(disc[111] == 2);
  CHECK(get32(disc, 92) == 0);
  CHECK(get16(disc, 520) == 0);
  CHECK(disc[343] == 0);
}

TEST_CASE("nvme identify: a thin namespace of 4 KiB blocks in ANA group 2") {
  namespace_identity n;
  n.blocks = 262144;
  n.blocks_allocated = 1000;
  n.block_bytes = 4096;
  n.ana_group = 2;
  n.nguid[0] = 0x60;
  const identify_data d = identify_namespace(n);
  CHECK(get32(d, 0) == 262144);
  CHECK(get32(d, 8) == 262144);
  CHECK(get32(d, 16) == 1000);
  CHECK(d[24] == 1);
  CHECK(d[30] == 1);
  CHECK(d[31] == 0x7f);
  CHECK(d[33] == 0x09);
  CHECK(get32(d, 92) == 2);
  CHECK(d[104] == 0x60);
  CHECK(get32(d, 128) == 12u << 16);  // LBADS 12
  n.block_bytes = 512;
  CHECK(get32(identify_namespace(n), 128) == 9u << 16);
}

TEST_CASE(
    "nvme identify: the active namespace list starts past the NSID asked for; descriptors carry "
    "NGUID and UUID") {
  const std::vector<std::uint32_t> ids{7, 3, 9, 3, 1};
  const identify_data all = active_namespace_list(ids, 0);
  CHECK(get32(all, 0) == 1);
  CHECK(get32(all, 4) == 3);
  CHECK(get32(all, 8) == 7);
  CHECK(get32(all, 12) == 9);
  CHECK(get32(all, 16) == 0);
  const identify_data later = active_namespace_list(ids, 3);
  CHECK(get32(later, 0) == 7);
  CHECK(get32(later, 8) == 0);

  std::array<std::uint8_t, 16> nguid{}, uuid{};
  nguid[15] = 0xaa;
  uuid[0] = 0xbb;
  const identify_data desc = namespace_descriptors(nguid, uuid);
  CHECK(desc[0] == 2);
  CHECK(desc[1] == 16);
  CHECK(desc[19] == 0xaa);
  CHECK(desc[20] == 3);
  CHECK(desc[24] == 0xbb);
  CHECK(desc[40] == 0);  // the list ends
}

}  // namespace strata::nvme
