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
#include <string_view>

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
  // The SENSE KEY SPECIFIC field (SPC-4 4.5.2.4), SKSV included, when there
  // is one: a unit attention's (SKSV, and OVERFLOW when the nexus's queue
  // of conditions overflowed; unit_attentions.h), and COPY ABORTED's
  // segment pointer (extended_copy.h).
  std::optional<std::array<std::uint8_t, 3>> key_specific;
  // The COMMAND-SPECIFIC INFORMATION field, when there is one: COPY
  // ABORTED's byte offset of the first segment descriptor not completely
  // processed (SPC-4 6.4.3.3).
  std::optional<std::uint32_t> command_specific;
};

// The I_T nexus a command came through (SAM-5): the SCSI initiator port
// and the target port. Reservations and unit attentions are kept per nexus
// (reservations.h, unit_attentions.h), so two sessions of one initiator are
// two nexuses, as SPC-4 requires.
struct i_t_nexus {
  // The SCSI initiator port name. For iSCSI (RFC 7143, SPC-4 7.6.4.6):
  // "<initiator iSCSI name>,i,0x<ISID as 12 lowercase hex digits>", which
  // is also what READ FULL STATUS returns in an iSCSI TransportID. The
  // storage belongs to whoever built the task (the transport: its session)
  // and must outlive the task; the SCSI layer copies what it keeps.
  std::string_view initiator_port;
  // The relative target port identifier of the target port (VPD 83h), 1
  // on a target with one port.
  std::uint16_t relative_target_port = 1;

  friend bool operator==(const i_t_nexus&, const i_t_nexus&) = default;
};

// SAM-5 8.6 task attributes: how a task is ordered against the others in
// its logical unit's task set. A transport maps its own field to these
// (iSCSI's ATTR: untagged and simple to simple; ACA, which this target
// does not support (NACA 0), to simple too).
enum class task_attribute : std::uint8_t {
  simple,         // runs concurrently with other SIMPLE tasks, in any order
  ordered,        // runs after every older task has completed, and before every newer one starts
  head_of_queue,  // runs at once, ahead of any task waiting
};

struct task {
  std::array<std::uint8_t, 16> cdb{};
  task_attribute attribute = task_attribute::simple;
  std::uint64_t lun = 0;  // the LUN as the initiator addressed it (single-level, 0..16383)
  // The nexus it came through. A transport that does not set it runs every
  // command as one nexus with an empty name.
  i_t_nexus nexus;
  // What the initiator expects to move, from the transport (iSCSI's
  // Expected Data Transfer Length). Residuals are computed against it.
  // A WRITE or WRITE AND VERIFY whose CDB describes more than this moves
  // only the whole blocks within it (SAM-5 5.4.3: residual overflow), as
  // libiscsi's residual tests require; a transport that delivers less
  // data_out than this gets ILLEGAL REQUEST 0E/03 instead.
  std::uint32_t expected_transfer_bytes = 0;
  // Set by the unit for WRITE and WRITE AND VERIFY: the bytes of data-out
  // their CDB describes. The transport reports the difference from
  // expected_transfer_bytes as the residual; for other commands with
  // data-out, the residual is against what arrived.
  std::optional<std::uint32_t> data_out_described_bytes;

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
  // data_out is ignored (but refused the same way by COMPARE AND WRITE and
  // WRITE SAME, whose Data-Out has exactly one right size).
  device::aligned_buffer data_in;
  std::uint32_t data_in_bytes = 0;

  // The outcome, set before on_complete.
  scsi::status result = status::good;
  scsi::sense sense_data;  // valid when result == check_condition

  // Called once when the command is done, never inside execute().
  void (*on_complete)(task&) noexcept = nullptr;
  void* context = nullptr;  // the transport's

  // The logical unit's while the task is in its task set (task_set.h):
  // the transport's completion, which the unit's own stands in for, and
  // the link of the held tasks' queue. The transport leaves them alone.
  struct in_task_set {
    void (*on_complete)(task&) noexcept = nullptr;
    void* context = nullptr;
    task* next_held = nullptr;
  } task_set_state;
};

}  // namespace strata::scsi
