// SCSI sense data: its fixed-format encoding (SPC-4 4.5.3), the additional
// sense codes this layer reports, and THE one place where a Strata error
// (raid/device/status.h) becomes a SCSI status and sense data. Nothing else
// in Strata maps errc values to SCSI; the logical unit calls sense_for() for
// every failed device request.
//
// Pure functions: callable from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <system_error>

#include "raid/device/block_device.h"
#include "target/scsi/task.h"

namespace strata::scsi {

// Fixed-format sense data is 18 bytes here: the 8-byte header and an
// additional sense length of 10 (information, command-specific information,
// ASC/ASCQ, FRU code, sense-key-specific).
inline constexpr std::size_t fixed_sense_bytes = 18;

// Writes `s` as fixed-format sense data, response code 0x70 (current
// error); VALID and the INFORMATION field (its low 32 bits) when
// s.information is set, COMMAND-SPECIFIC INFORMATION when
// s.command_specific is. Returns the bytes written: always 18.
std::size_t encode_fixed_sense(const sense& s,
                               std::span<std::uint8_t, fixed_sense_bytes> out) noexcept;
std::array<std::uint8_t, fixed_sense_bytes> fixed_sense(const sense& s) noexcept;

// Descriptor-format sense data (response code 0x72), for REQUEST SENSE
// with DESC=1: the 8-byte header, plus an information descriptor when
// s.information is set, a command-specific information descriptor when
// s.command_specific is, and a sense key specific descriptor when
// s.key_specific is. Returns the bytes written (8 to 40).
inline constexpr std::size_t descriptor_sense_max_bytes = 40;
std::size_t encode_descriptor_sense(
    const sense& s, std::span<std::uint8_t, descriptor_sense_max_bytes> out) noexcept;

// Additional sense codes used by this layer, as {ASC, ASCQ}.
struct additional_sense {
  std::uint8_t asc;
  std::uint8_t ascq;
};
namespace asc {
inline constexpr additional_sense no_additional_sense{0x00, 0x00};
inline constexpr additional_sense operation_in_progress{0x00, 0x16};
inline constexpr additional_sense asymmetric_access_state_transition{0x04, 0x0a};
inline constexpr additional_sense target_port_in_unavailable_state{0x04, 0x0c};
inline constexpr additional_sense lu_communication_timeout{0x08, 0x01};
// EXTENDED COPY (extended_copy.h): with COPY ABORTED, during the segments.
inline constexpr additional_sense unreachable_copy_target{0x08, 0x04};
inline constexpr additional_sense third_party_device_failure{0x0d, 0x01};
inline constexpr additional_sense copy_target_device_not_reachable{0x0d, 0x02};
inline constexpr additional_sense incorrect_copy_target_device_type{0x0d, 0x03};
inline constexpr additional_sense write_error{0x0c, 0x00};
inline constexpr additional_sense invalid_field_in_command_iu{0x0e, 0x03};
inline constexpr additional_sense unrecovered_read_error{0x11, 0x00};
inline constexpr additional_sense parameter_list_length_error{0x1a, 0x00};
inline constexpr additional_sense defect_list_not_found{0x1c, 0x00};
inline constexpr additional_sense miscompare_during_verify{0x1d, 0x00};
inline constexpr additional_sense invalid_command_operation_code{0x20, 0x00};
inline constexpr additional_sense lba_out_of_range{0x21, 0x00};
inline constexpr additional_sense invalid_field_in_cdb{0x24, 0x00};
inline constexpr additional_sense lu_not_supported{0x25, 0x00};
inline constexpr additional_sense invalid_field_in_parameter_list{0x26, 0x00};
inline constexpr additional_sense invalid_release_of_persistent_reservation{0x26, 0x04};
// EXTENDED COPY: with ILLEGAL REQUEST, before the first segment.
inline constexpr additional_sense too_many_target_descriptors{0x26, 0x06};
inline constexpr additional_sense unsupported_target_descriptor_type_code{0x26, 0x07};
inline constexpr additional_sense too_many_segment_descriptors{0x26, 0x08};
inline constexpr additional_sense unsupported_segment_descriptor_type_code{0x26, 0x09};
inline constexpr additional_sense inline_data_length_exceeded{0x26, 0x0b};
inline constexpr additional_sense invalid_operation_for_copy_source_or_destination{0x26, 0x0c};
inline constexpr additional_sense write_protected{0x27, 0x00};
inline constexpr additional_sense space_allocation_failed_write_protect{0x27, 0x07};
// Unit attentions (unit_attentions.h).
inline constexpr additional_sense power_on_reset_occurred{0x29, 0x00};
inline constexpr additional_sense bus_device_reset_function_occurred{0x29, 0x03};
inline constexpr additional_sense i_t_nexus_loss_occurred{0x29, 0x07};
inline constexpr additional_sense mode_parameters_changed{0x2a, 0x01};
inline constexpr additional_sense reservations_preempted{0x2a, 0x03};
inline constexpr additional_sense reservations_released{0x2a, 0x04};
inline constexpr additional_sense registrations_preempted{0x2a, 0x05};
inline constexpr additional_sense asymmetric_access_state_changed{0x2a, 0x06};
inline constexpr additional_sense capacity_data_has_changed{0x2a, 0x09};
inline constexpr additional_sense saving_parameters_not_supported{0x39, 0x00};
inline constexpr additional_sense reported_luns_data_has_changed{0x3f, 0x0e};
inline constexpr additional_sense internal_target_failure{0x44, 0x00};
inline constexpr additional_sense insufficient_registration_resources{0x55, 0x04};
}  // namespace asc

inline sense make_sense(sense_key key, additional_sense code,
                        std::optional<std::uint64_t> information = std::nullopt) noexcept {
  return sense{key, code.asc, code.ascq, information, std::nullopt, std::nullopt};
}
inline sense illegal_request(additional_sense code) noexcept {
  return make_sense(sense_key::illegal_request, code);
}

// THE mapping from a failed device request to SCSI. `operation` is what
// failed (a media error reads differently from a write error); `lba` is
// where, reported in the INFORMATION field for media errors, where SBC-3
// puts the first LBA that failed.
//
//   errc            status / sense key     ASC/ASCQ
//   media_error     MEDIUM ERROR           11/00 unrecovered read error (read)
//                                          0C/00 write error (write, discard, flush)
//   device_failed   HARDWARE ERROR         44/00 internal target failure
//   no_space        DATA PROTECT           27/07 space allocation failed write protect
//   out_of_range    ILLEGAL REQUEST        21/00 LBA out of range
//   invalid_argument ILLEGAL REQUEST       24/00 invalid field in CDB
//   not_supported   ILLEGAL REQUEST        20/00 invalid command operation code
//   timed_out       ABORTED COMMAND        08/01 LU communication time-out
//   canceled        ABORTED COMMAND        00/00
//   busy            BUSY status, no sense
//   anything else   HARDWARE ERROR         44/00 internal target failure
//   (io_error, misaligned -- our own bug --, errors of other categories)
sense sense_for(std::error_code ec, device::op operation,
                std::optional<std::uint64_t> lba = std::nullopt) noexcept;

// The SAM status that goes with sense_for(ec, ...): BUSY for errc::busy (the
// initiator retries later; no sense data), CHECK CONDITION otherwise.
// REQUIRES: ec is an error.
status status_for(std::error_code ec) noexcept;

// Sets a task's outcome to CHECK CONDITION with `s`.
inline void set_check_condition(task& t, const sense& s) noexcept {
  t.result = status::check_condition;
  t.sense_data = s;
}

}  // namespace strata::scsi
