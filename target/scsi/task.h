// One SCSI command as every transport hands it to the SCSI layer: the CDB,
// the LUN, the data from the initiator (already received whole), and room
// for the data to the initiator and the status. Protocol-independent: iSCSI
// fills it from a SCSI Command PDU and its Data-Out, and turns it back into
// Data-In and SCSI Response PDUs; nothing here knows of PDUs.
//
// Threads: a task is used on the loop of the logical unit that executes it.
// Ownership: the transport owns the task and its buffers until on_complete.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "raid/device/aligned_buffer.h"

namespace strata::scsi {

// SAM-5 status codes.
enum class status : std::uint8_t {
  good = 0x00,
  check_condition = 0x02,
  condition_met = 0x04,
  busy = 0x08,
  reservation_conflict = 0x18,
  task_set_full = 0x28,
  aca_active = 0x30,
  task_aborted = 0x40,
};

// Sense keys (SPC-4 table 48).
enum class sense_key : std::uint8_t {
  no_sense = 0x0,
  recovered_error = 0x1,
  not_ready = 0x2,
  medium_error = 0x3,
  hardware_error = 0x4,
  illegal_request = 0x5,
  unit_attention = 0x6,
  data_protect = 0x7,
  blank_check = 0x8,
  vendor_specific = 0x9,
  copy_aborted = 0xa,
  aborted_command = 0xb,
  volume_overflow = 0xd,
  miscompare = 0xe,
};

// What CHECK CONDITION reports: the key, the additional sense code and its
// qualifier, and where it applies (the INFORMATION field) if anywhere.
struct sense {
  sense_key key = sense_key::no_sense;
  std::uint8_t asc = 0;
  std::uint8_t ascq = 0;
  std::optional<std::uint64_t> information;
};

struct task {
  std::array<std::uint8_t, 16> cdb{};
  std::uint64_t lun = 0;  // the LUN as the initiator addressed it (single-level, 0..16383)
  // What the initiator expects to move, from the transport (iSCSI's
  // Expected Data Transfer Length). Residuals are computed against it.
  std::uint32_t expected_transfer_bytes = 0;

  // Data from the initiator, complete before execute(); a segment of an
  // aligned buffer the transport owns.
  std::span<std::byte> data_out;

  // Data to the initiator: the logical unit sizes and fills `data_in`, and
  // says how many bytes of it are valid. The transport sends at most
  // expected_transfer_bytes of them and reports the residual.
  //
  // Also on CHECK CONDITION: a read that failed part-way leaves here the
  // bytes before the first bad LBA, which the sense INFORMATION field
  // names. Whether or not it sends them, the transport must report every
  // byte it did not send as residual underflow: Linux completes
  // min(INFORMATION - LBA, bytes transferred) as good, and takes "no
  // residual" to mean every byte arrived.
  //
  // If data_out is shorter than the CDB requires (blocks or parameter list
  // length), the unit fails the command with ILLEGAL REQUEST 0E/03; extra
  // data_out is ignored.
  device::aligned_buffer data_in;
  std::uint32_t data_in_bytes = 0;

  // The outcome, set before on_complete.
  scsi::status result = status::good;
  scsi::sense sense_data;  // valid when result == check_condition

  // Called once when the command is done, never inside execute().
  void (*on_complete)(task&) noexcept = nullptr;
  void* context = nullptr;  // the transport's
};

}  // namespace strata::scsi
