// The data structures Identify returns (NVM Express Base 2.0, 5.17.2; NVM
// Command Set 1.0, 4.1.5): the controller, a namespace, the active
// namespace list and a namespace's identification descriptors, built
// whole from what the target knows of them. Field offsets are the spec's
// (and those of Linux's struct nvme_id_ctrl and nvme_id_ns).
//
// Nothing here allocates beyond its result or does I/O.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace strata::nvme {

constexpr std::size_t identify_bytes = 4096;
using identify_data = std::array<std::uint8_t, identify_bytes>;

// Identify's CNS values Strata answers.
namespace cns {
constexpr std::uint8_t namespace_data = 0x00;
constexpr std::uint8_t controller = 0x01;
constexpr std::uint8_t active_namespaces = 0x02;
constexpr std::uint8_t namespace_descriptors = 0x03;
}  // namespace cns

struct controller_identity {
  std::string serial;    // SN: at most 20 bytes, ASCII
  std::string model;     // MN: at most 40
  std::string firmware;  // FR: at most 8
  std::uint16_t controller_id = 0;
  std::string subsystem_nqn;
  bool discovery = false;        // the discovery controller (CNTRLTYPE 2), else an I/O controller
  std::uint32_t namespaces = 0;  // NN: the highest NSID the subsystem may have
  std::uint32_t max_transfer_bytes = 1 << 20;  // MDTS, a power of two of 4 KiB pages
  std::uint16_t max_commands = 128;            // MAXCMD: per I/O queue
  std::uint32_t in_capsule_data_bytes =
      8192;                       // IOCCSZ: the capsule, in 16-byte units, past the SQE
  std::uint8_t async_events = 4;  // AERL + 1: outstanding Asynchronous Event Requests
  std::uint16_t keep_alive_granularity_ms = 1000;  // KAS, in 100 ms units
  // ANA: reported per group, every state, groups numbered from 1.
  bool ana = true;
  std::uint32_t ana_groups = 2;              // ANAGRPMAX and NANAGRPID
  std::uint8_t ana_transition_seconds = 10;  // ANATT
  bool volatile_write_cache = true;          // VWC: Flush means something
  bool reservations = true;                  // ONCS: the reservation commands
};
identify_data identify_controller(const controller_identity& c);

struct namespace_identity {
  std::uint64_t blocks = 0;            // NSZE and NCAP
  std::uint64_t blocks_allocated = 0;  // NUSE: what a thin volume holds
  std::uint32_t block_bytes = 512;     // 512 or 4096: the one LBA format
  bool thin = true;                    // NSFEAT bit 0: NUSE may be below NCAP; Deallocate frees
  std::array<std::uint8_t, 16> nguid{};
  std::uint32_t ana_group = 0;  // 0: no ANA group
  bool shared = true;           // NMIC: reachable through several controllers
  bool reservations = true;     // RESCAP: every reservation type
};
identify_data identify_namespace(const namespace_identity& n);

// The active NSIDs above `after`, ascending, at most 1024 (CNS 2).
identify_data active_namespace_list(std::span<const std::uint32_t> nsids, std::uint32_t after);

// A namespace's identification descriptors (CNS 3): its NGUID and UUID.
identify_data namespace_descriptors(const std::array<std::uint8_t, 16>& nguid,
                                    const std::array<std::uint8_t, 16>& uuid);

}  // namespace strata::nvme
