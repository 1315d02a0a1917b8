// The NVM command set (NVM Command Set 1.0, section 3) over a Strata volume's
// unit: each command becomes the SCSI commands of `target/scsi/` that do
// the same (Read: READ(16); Write: WRITE(16); Compare: VERIFY(16) with
// BYTCHK; a fused Compare and Write: COMPARE AND WRITE; Flush: SYNCHRONIZE
// CACHE(16); Write Zeroes: WRITE SAME(16) with NDOB; Dataset Management
// deallocate: UNMAP; the reservation commands: PERSISTENT RESERVE OUT and
// IN, nvm_reservations.cc), and the unit's outcome becomes the NVMe status
// the spec names.
//
// Why through the SCSI unit, and not beside it: the unit is the engine
// both protocols share. It holds the range interlock that makes Compare
// and Write atomic against every other write, the one reservation state
// of the volume, the pieces a transfer is cut into, and, for a volume the
// partner controller serves, the forwarding over the partner link
// (controller/forwarded_unit.h). An NVMe command that went around it could
// write inside a COMPARE AND WRITE or past a SCSI reservation. A command
// costs one 16-byte CDB to build and one to decode.
//
// A command may take several unit commands in turn (a Write Zeroes longer
// than WRITE SAME's limit, a Dataset Management with more ranges than one
// UNMAP takes): `nvm_command` keeps where it is, and stops at the first
// that fails.
//
// Unit attentions are SCSI's: the unit reports one to an NVMe host's
// command as it would to an initiator (a reservation preempted, say), and
// the command is sent again (`wants_retry`); the caller may raise the
// matching asynchronous event.
//
// Nothing here does I/O; the caller runs the task on the unit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "target/nvme/command.h"
#include "target/nvme/status.h"
#include "target/scsi/task.h"

namespace strata::scsi {
class unit_interface;
}

namespace strata::nvme {

// A namespace a subsystem presents: a Strata volume, through its unit.
struct namespace_config {
  std::uint32_t nsid = 1;
  scsi::unit_interface* unit = nullptr;
  std::uint32_t block_bytes = 4096;  // 512 or 4096: the unit's logical block
  // The volume's serial, the same on both controllers: the NGUID and UUID
  // derive from it, so that a host sees one namespace through both.
  std::string serial;
  std::uint32_t ana_group = 1;
  // The volume's size as its record says (0: not known): what Identify
  // answers while the unit cannot give its own and has never been asked
  // here (a forwarded unit as the pool changes controller, right after
  // this controller started).
  std::uint64_t recorded_bytes = 0;
};

// The namespace's NGUID (an IEEE-less, vendor-assigned 16 bytes) and UUID
// (RFC 4122 version 8, vendor-specific), both hashed from its serial.
std::array<std::uint8_t, 16> namespace_nguid(std::string_view serial) noexcept;
std::array<std::uint8_t, 16> namespace_uuid(std::string_view serial) noexcept;

// How much data a command moves, known from its SQE before anything runs:
// what the host sends (a write's blocks, a Dataset Management range list)
// or what it receives (a read's blocks, a reservation report). The SGL
// must describe exactly this much (or, for reads, at least it).
struct nvm_transfer {
  std::uint32_t to_controller_bytes = 0;
  std::uint32_t to_host_bytes = 0;
  // The host may send more, up to this (Dataset Management: Linux sends
  // room for 256 ranges whatever NR says, "some devices" reading that
  // much; nvmet takes it too). Only the first to_controller_bytes count.
  std::uint32_t to_controller_most_bytes = 0;
};
// The transfer, or the status to answer at once: an opcode Strata does
// not know, a length past `max_transfer_bytes` (MDTS), fields the
// command may not carry.
std::expected<nvm_transfer, status> nvm_transfer_of(const command_view& c,
                                                    std::uint32_t block_bytes,
                                                    std::uint32_t max_transfer_bytes) noexcept;

// One NVM command on its way through a unit.
class nvm_command {
 public:
  // Prepares the first unit command in `t` (cdb, expected transfer,
  // data_out) for `c` on `ns`, whose host data is `data` (to_controller_bytes,
  // aligned). `compare_and_write`: c is a fused Compare whose Write's
  // data follows its own in `data` (2N blocks). Or the status to answer
  // at once.
  // REQUIRES: nvm_transfer_of(c) succeeded.
  std::optional<status> start(const command_view& c, const namespace_config& ns,
                              std::span<std::byte> data, scsi::task& t,
                              bool compare_and_write = false) noexcept;

  // The unit finished `t`. True: `t` holds the next unit command (or the
  // same again, after a unit attention); run it. False: the command is
  // done, with result().
  bool next(scsi::task& t) noexcept;

  status result() const noexcept { return result_; }
  // A unit attention the last unit command met (its sense), for the
  // caller's asynchronous events. Cleared by next().
  std::optional<scsi::sense> attention() const noexcept { return attention_; }
  // The data for the host once done (a read's blocks, in t.data_in; a
  // Reservation Report, built here); its length.
  std::span<const std::uint8_t> to_host(const scsi::task& t) const noexcept;
  std::uint32_t to_host_bytes() const noexcept { return to_host_bytes_; }

 private:
  // Prepares the unit command for the next piece of a multi-step command;
  // false when nothing is left.
  bool prepare(scsi::task& t) noexcept;
  // The reservation commands (nvm_reservations.cc): the PERSISTENT RESERVE
  // OUT or IN `c` becomes, or the status to answer at once.
  std::optional<status> start_reservation(const command_view& c, scsi::task& t) noexcept;
  // Reservation Report, after REPORT CAPABILITIES (step 0) and READ FULL
  // STATUS (step 1): the next step, or false once report_ is built.
  bool report_step(scsi::task& t) noexcept;

  std::uint8_t opcode_ = 0;
  bool compare_and_write_ = false;
  std::uint32_t block_bytes_ = 4096;
  std::uint64_t lba_ = 0;
  std::uint64_t blocks_left_ = 0;  // Write Zeroes: still to zero
  bool deallocate_ = false;        // Write Zeroes: DEAC
  bool fua_ = false;
  std::span<std::byte> data_;
  std::size_t ranges_done_ = 0;  // Dataset Management: ranges sent whole
  std::size_t range_count_ = 0;
  std::uint64_t range_sent_blocks_ = 0;   // of the range cut between two UNMAPs
  std::vector<std::uint8_t> parameters_;  // an UNMAP's parameter list
  unsigned retries_ = 0;
  status result_ = success;
  std::uint32_t to_host_bytes_ = 0;
  std::optional<scsi::sense> attention_;
  // Reservation Report: its step, what the host asked for (extended data
  // structure, bytes), PTPL as REPORT CAPABILITIES says, the report.
  unsigned report_step_ = 0;
  bool extended_report_ = false;
  std::uint32_t report_bytes_ = 0;
  bool persist_through_power_loss_ = false;
  std::vector<std::uint8_t> report_;
};

// The NVMe status of a SCSI outcome (status and sense): the one mapping
// from the SCSI layer's answers to NVMe's, as status_for() is for
// Strata's errors.
status status_of(scsi::status result, const scsi::sense& s) noexcept;

}  // namespace strata::nvme
