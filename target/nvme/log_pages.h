// The log pages Get Log Page returns (NVM Express Base 2.0, 5.16; NVMe over
// Fabrics 1.1, 5.3), built whole from what the target knows, and the
// command's fields. The host reads a page in pieces (offset and dword
// count), so each builder returns the whole page and the caller copies
// the piece asked for (`piece`).
#pragma once

#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <vector>

#include "target/nvme/command.h"

namespace strata::nvme {

namespace log_page {
constexpr std::uint8_t error = 0x01;
constexpr std::uint8_t health = 0x02;  // SMART / health information
constexpr std::uint8_t firmware_slot = 0x03;
constexpr std::uint8_t changed_namespaces = 0x04;
constexpr std::uint8_t ana = 0x0c;  // asymmetric namespace access
constexpr std::uint8_t discovery = 0x70;
}  // namespace log_page

// Get Log Page's fields (CDW10 to CDW13).
struct log_page_request {
  std::uint8_t id = 0;             // LID
  std::uint8_t specific = 0;       // LSP: for the ANA page, bit 0 "groups only" (RGO)
  bool retain_event = false;       // RAE: an asynchronous event it answers stays pending
  std::uint64_t bytes = 0;         // (NUMD + 1) dwords
  std::uint64_t offset_bytes = 0;  // LPO
};
log_page_request parse_get_log_page(const command_view& c) noexcept;

// The piece of `page` the request asks for (past the end reads as zeros,
// as a controller answers), or invalid field: more than
// `max_transfer_bytes` (MDTS) at once, or an offset not on a dword.
std::expected<std::vector<std::uint8_t>, status> piece(std::span<const std::uint8_t> page,
                                                       const log_page_request& r,
                                                       std::uint64_t max_transfer_bytes);

// An ANA group's state, as the log page says it.
enum class ana_state : std::uint8_t {
  optimized = 0x1,
  non_optimized = 0x2,
  inaccessible = 0x3,
  persistent_loss = 0x4,
  change = 0xf,  // transitioning: the host waits ANATT, then reads the page again
};
struct ana_group {
  std::uint32_t id = 0;  // ANAGRPID, from 1
  ana_state state = ana_state::optimized;
  std::uint64_t change_count = 0;
  std::vector<std::uint32_t> nsids;  // ascending
};
// The ANA page: its change count, and each group with its namespaces
// (none if `groups_only`).
std::vector<std::uint8_t> ana_log(std::uint64_t change_count, std::span<const ana_group> groups,
                                  bool groups_only);

// One entry of the discovery log page: a subsystem reachable at a port.
struct discovery_entry {
  bool discovery_subsystem =
      false;  // SUBTYPE 3 (the current discovery subsystem), else 2 (an NVMe subsystem)
  std::uint16_t port_id = 0;
  std::string subsystem_nqn;
  std::string address;           // TRADDR: "127.0.0.1"
  std::string service = "4420";  // TRSVCID: the TCP port
  bool ipv6 = false;
};
std::vector<std::uint8_t> discovery_log(std::uint64_t generation,
                                        std::span<const discovery_entry> entries);

// SMART / health for the controller (NSID 0xffffffff: the whole subsystem).
struct health_counters {
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
  std::uint64_t read_commands = 0;
  std::uint64_t write_commands = 0;
  std::uint64_t power_on_hours = 0;
  std::uint64_t media_errors = 0;
  bool degraded = false;  // a critical warning: reliability degraded (a RAID group degraded, say)
};
std::vector<std::uint8_t> health_log(const health_counters& h);

// The firmware slot page: slot 1 active, holding `revision` (8 bytes, space padded).
std::vector<std::uint8_t> firmware_slot_log(const std::string& revision);

// The changed namespace list: the NSIDs whose attributes changed since it
// was last read (0xffffffff first when more than 1024 did).
std::vector<std::uint8_t> changed_namespace_log(std::span<const std::uint32_t> nsids);

}  // namespace strata::nvme
