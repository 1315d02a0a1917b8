#include "target/nvme/identify.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "target/nvme/little_endian.h"

namespace strata::nvme {

identify_data identify_controller(const controller_identity& c) {
  identify_data d{};
  put_ascii(d.data() + 4, 20, c.serial);
  put_ascii(d.data() + 24, 40, c.model);
  put_ascii(d.data() + 64, 8, c.firmware);
  // CMIC: several ports and controllers may reach a namespace, and ANA
  // reports their states (a discovery controller has no namespaces).
  if (!c.discovery) d[76] = static_cast<std::uint8_t>(0x1 | 0x2 | (c.ana ? 0x8 : 0));
  d[77] = static_cast<std::uint8_t>(
      std::countr_zero(std::max<std::uint32_t>(c.max_transfer_bytes, 4096) / 4096));  // MDTS
  put16(d.data() + 78, c.controller_id);
  put32(d.data() + 80, 0x00020000);  // VER 2.0
  // OAES: namespace attribute notices (bit 8), ANA change notices (bit 11).
  put32(d.data() + 92, c.discovery ? 0 : (1u << 8 | (c.ana ? 1u << 11 : 0)));
  put32(d.data() + 96, 1u << 0);  // CTRATT: 128-bit host identifier
  d[111] = c.discovery ? 2 : 1;   // CNTRLTYPE
  d[258] = 3;                     // ACL: four Aborts at a time, 0's based
  d[259] = static_cast<std::uint8_t>(std::max<std::uint8_t>(c.async_events, 1) - 1);  // AERL
  d[260] = 0x3;  // FRMW: slot 1 read only, one slot
  d[261] = 0x4;  // LPA: extended data for Get Log Page
  put16(d.data() + 320, static_cast<std::uint16_t>(
                            std::max<std::uint16_t>(c.keep_alive_granularity_ms / 100, 1)));  // KAS
  if (c.ana && !c.discovery) {
    d[342] = c.ana_transition_seconds;  // ANATT
    // ANACAP: optimized, non-optimized, inaccessible, persistent loss and
    // change states reported; groups nonzero. Bit 6 clear: a namespace's
    // group changes (it is the controller serving its pool: a takeover
    // moves it), and the ANA log page says so.
    d[343] = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x80;
    put32(d.data() + 344, c.ana_groups);  // ANAGRPMAX
    put32(d.data() + 348, c.ana_groups);  // NANAGRPID
  }
  d[512] = 0x66;  // SQES: 64 bytes, required and most
  d[513] = 0x44;  // CQES: 16 bytes
  put16(d.data() + 514, c.max_commands);
  put32(d.data() + 516, c.namespaces);
  // MNAN: as many namespaces as NN may be attached (Linux refuses ANA
  // without it).
  if (!c.discovery) put32(d.data() + 540, c.namespaces);
  if (!c.discovery) {
    // ONCS: Compare, Dataset Management, Write Zeroes, and reservations if offered.
    put16(d.data() + 520,
          static_cast<std::uint16_t>(0x1 | 0x4 | 0x8 | (c.reservations ? 0x20 : 0)));
    put16(d.data() + 522, 0x1);                 // FUSES: Compare and Write
    d[525] = c.volatile_write_cache ? 0x1 : 0;  // VWC
  }
  // SGLS: SGLs supported (no alignment), the Transport SGL Data Block (bit 2's
  // keyed descriptors are RDMA's; over TCP, bit 20 offsets in the capsule).
  put32(d.data() + 536, 0x1 | 1u << 20);
  const std::size_t nqn = std::min<std::size_t>(c.subsystem_nqn.size(), 255);
  std::memcpy(d.data() + 768, c.subsystem_nqn.data(),
              nqn);  // SUBNQN, NUL-terminated (the rest is zeros)
  put32(d.data() + 1792,
        static_cast<std::uint32_t>((64 + c.in_capsule_data_bytes) / 16));  // IOCCSZ
  put32(d.data() + 1796, 1);                                               // IORCSZ: 16 bytes
  put16(d.data() + 1800, 0);                                               // ICDOFF
  d[1802] = 0;  // FCATT: the dynamic controller model
  d[1803] = 1;  // MSDBD: one SGL descriptor
  return d;
}

identify_data identify_namespace(const namespace_identity& n) {
  identify_data d{};
  put64(d.data() + 0, n.blocks);
  put64(d.data() + 8, n.blocks);
  put64(d.data() + 16, n.thin ? std::min(n.blocks_allocated, n.blocks) : n.blocks);
  // NSFEAT: thin provisioning (bit 0), and NAWUN and friends not given.
  d[24] = n.thin ? 0x1 : 0;
  d[25] = 0;                   // NLBAF: one format, 0's based
  d[26] = 0;                   // FLBAS: format 0, no metadata
  d[30] = n.shared ? 0x1 : 0;  // NMIC
  // RESCAP: persist through power loss, and every type (write exclusive,
  // exclusive access, their registrants-only and all-registrants forms).
  d[31] = n.reservations ? 0x7f : 0;
  d[33] = n.thin ? 0x1 | 0x8
                 : 0;  // DLFEAT: deallocated blocks read as zeros; Write Zeroes may deallocate
  put32(d.data() + 92, n.ana_group);  // ANAGRPID
  std::memcpy(d.data() + 104, n.nguid.data(), n.nguid.size());
  // LBA format 0: no metadata, LBADS = log2 of the block size, relative
  // performance 0 (best).
  put32(d.data() + 128, static_cast<std::uint32_t>(std::countr_zero(n.block_bytes)) << 16);
  return d;
}

identify_data active_namespace_list(std::span<const std::uint32_t> nsids, std::uint32_t after) {
  std::vector<std::uint32_t> above;
  for (std::uint32_t id : nsids) {
    if (id > after && id != 0 && id < 0xfffffffe) above.push_back(id);
  }
  std::ranges::sort(above);
  const auto [first, last] = std::ranges::unique(above);
  above.erase(first, last);
  identify_data d{};
  for (std::size_t i = 0; i < above.size() && i < identify_bytes / 4; ++i)
    put32(d.data() + 4 * i, above[i]);
  return d;
}

identify_data namespace_descriptors(const std::array<std::uint8_t, 16>& nguid,
                                    const std::array<std::uint8_t, 16>& uuid) {
  identify_data d{};
  // NIDT 2 (NGUID) and 3 (UUID), NIDL 16, two reserved bytes, the identifier.
  d[0] = 0x2;
  d[1] = 16;
  std::memcpy(d.data() + 4, nguid.data(), 16);
  d[20] = 0x3;
  d[21] = 16;
  std::memcpy(d.data() + 24, uuid.data(), 16);
  return d;
}

}  // namespace strata::nvme
