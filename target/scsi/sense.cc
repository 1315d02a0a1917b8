#include "target/scsi/sense.h"

#include <algorithm>

#include "raid/device/status.h"

namespace strata::scsi {

std::size_t encode_fixed_sense(const sense& s,
                               std::span<std::uint8_t, fixed_sense_bytes> out) noexcept {
  std::fill(out.begin(), out.end(), std::uint8_t{0});
  // The INFORMATION field is 4 bytes in fixed format; an LBA that does not
  // fit cannot be reported there (SPC-4 4.5.3), so VALID stays clear and
  // the initiator treats the whole command as failed, which is safe.
  const bool valid = s.information.has_value() && *s.information <= 0xffffffffu;
  out[0] = 0x70 | (valid ? 0x80 : 0x00);  // current error, fixed format
  out[2] = static_cast<std::uint8_t>(s.key) & 0x0f;
  if (valid) {
    const auto info = static_cast<std::uint32_t>(*s.information);
    out[3] = static_cast<std::uint8_t>(info >> 24);
    out[4] = static_cast<std::uint8_t>(info >> 16);
    out[5] = static_cast<std::uint8_t>(info >> 8);
    out[6] = static_cast<std::uint8_t>(info);
  }
  if (s.command_specific) {
    const std::uint32_t info = *s.command_specific;
    out[8] = static_cast<std::uint8_t>(info >> 24);
    out[9] = static_cast<std::uint8_t>(info >> 16);
    out[10] = static_cast<std::uint8_t>(info >> 8);
    out[11] = static_cast<std::uint8_t>(info);
  }
  out[7] = fixed_sense_bytes - 8;  // additional sense length: 10
  out[12] = s.asc;
  out[13] = s.ascq;
  if (s.key_specific) std::copy(s.key_specific->begin(), s.key_specific->end(), out.begin() + 15);
  return fixed_sense_bytes;
}

std::array<std::uint8_t, fixed_sense_bytes> fixed_sense(const sense& s) noexcept {
  std::array<std::uint8_t, fixed_sense_bytes> out{};
  encode_fixed_sense(s, out);
  return out;
}

std::size_t encode_descriptor_sense(
    const sense& s, std::span<std::uint8_t, descriptor_sense_max_bytes> out) noexcept {
  std::fill(out.begin(), out.end(), std::uint8_t{0});
  out[0] = 0x72;  // current error, descriptor format
  out[1] = static_cast<std::uint8_t>(s.key) & 0x0f;
  out[2] = s.asc;
  out[3] = s.ascq;
  std::size_t n = 8;
  if (s.information) {
    // Information descriptor (SPC-4 4.5.2.2): type 0, length 0x0a, VALID,
    // the full 64-bit INFORMATION.
    out[n] = 0x00;
    out[n + 1] = 0x0a;
    out[n + 2] = 0x80;
    for (int i = 0; i < 8; ++i)
      out[n + 4 + i] = static_cast<std::uint8_t>(*s.information >> (56 - 8 * i));
    n += 12;
  }
  if (s.command_specific) {
    // Command-specific information descriptor (SPC-4 4.5.2.3): type 1,
    // length 0x0a, the 8-byte field.
    out[n] = 0x01;
    out[n + 1] = 0x0a;
    const std::uint64_t info = *s.command_specific;
    for (int i = 0; i < 8; ++i) out[n + 4 + i] = static_cast<std::uint8_t>(info >> (56 - 8 * i));
    n += 12;
  }
  if (s.key_specific) {
    // Sense key specific descriptor (SPC-4 4.5.2.4): type 2, length 6.
    out[n] = 0x02;
    out[n + 1] = 0x06;
    std::copy(s.key_specific->begin(), s.key_specific->end(), out.begin() + n + 4);
    n += 8;
  }
  out[7] = static_cast<std::uint8_t>(n - 8);  // additional sense length
  return n;
}

sense sense_for(std::error_code ec, device::op operation,
                std::optional<std::uint64_t> lba) noexcept {
  if (ec.category() != strata_category()) {
    return make_sense(sense_key::hardware_error, asc::internal_target_failure);
  }
  switch (static_cast<errc>(ec.value())) {
    case errc::media_error:
      // SBC-3 4.18: the INFORMATION field holds the first LBA in error, so
      // that the initiator can complete the blocks before it.
      return operation == device::op::read
                 ? make_sense(sense_key::medium_error, asc::unrecovered_read_error, lba)
                 : make_sense(sense_key::medium_error, asc::write_error, lba);
    case errc::device_failed:
      // HARDWARE ERROR rather than NOT READY 04/03: device_failed means the
      // volume is gone for good (errc: "nothing on it can be reached"), and
      // no other path to this array reaches it either. Linux treats NOT
      // READY 04/03 as a path error, so dm-multipath would fail every path
      // and, with queue_if_no_path, hold the I/O forever; HARDWARE ERROR is
      // a target error that ends the I/O with EIO at once.
      return make_sense(sense_key::hardware_error, asc::internal_target_failure);
    case errc::no_space:
      // SBC-3 4.7.3.6: a thin-provisioned unit that cannot allocate.
      return make_sense(sense_key::data_protect, asc::space_allocation_failed_write_protect);
    case errc::out_of_range:
      return illegal_request(asc::lba_out_of_range);
    case errc::invalid_argument:
      return illegal_request(asc::invalid_field_in_cdb);
    case errc::not_supported:
      // A volume that cannot discard, say. Linux turns discard off for the
      // disk on this answer to UNMAP or WRITE SAME with UNMAP.
      return illegal_request(asc::invalid_command_operation_code);
    case errc::timed_out:
      // ABORTED COMMAND: the initiator retries it, which suits a slow answer.
      return make_sense(sense_key::aborted_command, asc::lu_communication_timeout);
    case errc::canceled:
    // A drive fenced this controller (its partner took the pool over): the
    // initiator retries, and multipath finds the pool on the other path.
    case errc::reservation_conflict:
      return make_sense(sense_key::aborted_command, asc::no_additional_sense);
    case errc::busy:
      // status_for() says BUSY, which carries no sense; if sense is sent
      // anyway, ABORTED COMMAND also asks for a retry.
      return make_sense(sense_key::aborted_command, asc::no_additional_sense);
    case errc::misaligned:  // our buffers are aligned: a bug here, not the initiator's fault
    case errc::io_error:    // the OS failed the I/O; retrying blindly does not help
    case errc::not_found:   // set-up errors; not expected per I/O
    case errc::permission_denied:
    case errc::too_small:
      break;
  }
  return make_sense(sense_key::hardware_error, asc::internal_target_failure);
}

status status_for(std::error_code ec) noexcept {
  return ec == errc::busy ? status::busy : status::check_condition;
}

}  // namespace strata::scsi
