// NVMe completion status (NVM Express Base Specification 2.0, "Status
// Field" and "Completion Queue Entry"): the status types and codes Strata
// answers with, the completion queue entry that carries one, and the one
// mapping from Strata's errors to them, as target/scsi/sense.cc is for
// SCSI.
#pragma once

#include <array>
#include <cstdint>
#include <system_error>

#include "raid/device/block_device.h"

namespace strata::nvme {

enum class status_type : std::uint8_t {
  generic = 0,
  command_specific = 1,
  media = 2,  // media and data integrity errors
  path = 3,   // path-related: ANA states, and errors a host retries on another path
};

// The codes Strata uses, by type.
namespace code {
// generic
constexpr std::uint8_t success = 0x00;
constexpr std::uint8_t invalid_opcode = 0x01;
constexpr std::uint8_t invalid_field = 0x02;
constexpr std::uint8_t command_id_conflict = 0x03;
constexpr std::uint8_t data_transfer_error = 0x04;
constexpr std::uint8_t internal_error = 0x06;
constexpr std::uint8_t aborted_by_request = 0x07;
constexpr std::uint8_t aborted_failed_fused = 0x09;
constexpr std::uint8_t aborted_missing_fused = 0x0a;
constexpr std::uint8_t invalid_namespace = 0x0b;
constexpr std::uint8_t command_sequence_error = 0x0c;
constexpr std::uint8_t namespace_write_protected = 0x20;
constexpr std::uint8_t keep_alive_expired = 0x19;
constexpr std::uint8_t command_interrupted = 0x21;  // the host retries it
constexpr std::uint8_t transient_transport_error =
    0x22;  // a data digest failed: the host retries it
constexpr std::uint8_t lba_out_of_range = 0x80;
constexpr std::uint8_t capacity_exceeded = 0x81;  // a thin namespace that cannot allocate
constexpr std::uint8_t namespace_not_ready = 0x82;
constexpr std::uint8_t reservation_conflict = 0x83;
// command specific: Fabrics Connect
constexpr std::uint8_t connect_incompatible_format = 0x80;
constexpr std::uint8_t connect_controller_busy = 0x81;
constexpr std::uint8_t connect_invalid_parameters = 0x82;
constexpr std::uint8_t connect_invalid_host = 0x84;
// command specific: queue and log page checks
constexpr std::uint8_t invalid_queue_identifier = 0x01;
constexpr std::uint8_t invalid_queue_size = 0x02;
constexpr std::uint8_t invalid_log_page = 0x09;
// media
constexpr std::uint8_t write_fault = 0x80;
constexpr std::uint8_t unrecovered_read_error = 0x81;
constexpr std::uint8_t compare_failure = 0x85;
// path
constexpr std::uint8_t ana_persistent_loss = 0x01;
constexpr std::uint8_t ana_inaccessible = 0x02;
constexpr std::uint8_t ana_transition = 0x03;
}  // namespace code

struct status {
  status_type type = status_type::generic;
  std::uint8_t code = code::success;
  bool do_not_retry = false;  // DNR: the same command would fail again

  constexpr bool ok() const noexcept {
    return type == status_type::generic && code == code::success;
  }
  // The completion's 16-bit status field, phase tag 0 (a fabrics
  // controller's completions carry none): DNR bit 15, SCT bits 11:9, SC bits 8:1.
  constexpr std::uint16_t field() const noexcept {
    return static_cast<std::uint16_t>((do_not_retry ? 0x8000 : 0) |
                                      (static_cast<unsigned>(type) & 7u) << 9 |
                                      unsigned{code} << 1);
  }
  friend constexpr bool operator==(const status&, const status&) = default;
};

constexpr status success{};
constexpr status generic(std::uint8_t c, bool do_not_retry = true) noexcept {
  return {status_type::generic, c, do_not_retry};
}

// The status of a command a volume answered with `ec` for `operation` (a
// read's media error is an unrecovered read error, a write's a write fault).
status status_for(std::error_code ec, device::op operation) noexcept;

// A completion queue entry: `result` in dwords 0 and 1 (a command's
// answer, such as Connect's controller ID), the submission queue's head and
// ID, the command's ID and its status.
std::array<std::uint8_t, 16> completion(std::uint16_t command_id, status s, std::uint16_t sq_head,
                                        std::uint16_t sq_id, std::uint64_t result = 0) noexcept;

}  // namespace strata::nvme
