// A SCSI logical unit over a volume: the SPC-4/SBC-3 direct-access block
// device command set, emulated on the one request type of
// raid/device/block_device.h. Protocol-independent: a transport (iSCSI
// today) builds a `task` (task.h) and calls execute(); the unit answers
// through task::on_complete. It never sees PDUs; the volume never sees CDBs.
//
// Commands (see README.md for the bits each one honours):
//   TEST UNIT READY, REQUEST SENSE, INQUIRY (standard data; VPD 00h, 80h,
//   83h, 86h, B0h, B1h, B2h), READ CAPACITY(10), READ CAPACITY(16),
//   READ(6/10/12/16), WRITE(6/10/12/16), WRITE AND VERIFY(10/16),
//   VERIFY(10/12/16), SYNCHRONIZE CACHE(10/16), UNMAP, WRITE SAME(10/16),
//   MODE SENSE(6/10), MODE SELECT(6/10), START STOP UNIT,
//   REPORT SUPPORTED OPERATION CODES, REPORT TARGET PORT GROUPS.
// REPORT LUNS and absent LUNs are the LUN map's (lun_map.h). Anything else
// ends in CHECK CONDITION, ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE.
// Device errors become sense data in one place: sense_for() (sense.h).
//
// Data: writes take their data from task::data_out (which the transport
// has received whole before execute()); reads and every other command with
// data for the initiator fill task::data_in, which the unit sizes (reusing
// the buffer the task already holds when it is big enough and aligned) and
// task::data_in_bytes. A command needing more data_out than the transport
// delivered (the CDB asks for N blocks or a parameter list of N bytes, fewer
// arrived) fails with ILLEGAL REQUEST 0E/03 INVALID FIELD IN COMMAND
// INFORMATION UNIT, as Linux-IO does; extra data_out is ignored.
//
// A read that fails part-way reports in data_in_bytes how many bytes from
// the start are good (all blocks before the first failed LBA, which is also
// in the sense INFORMATION field). The transport may send them with the
// CHECK CONDITION, as a disk does; either way it must report what it did
// not send as residual underflow (task.h says why).
//
// Threads: a logical unit lives on its volume's loop (executor()). execute()
// is called there only, and every task completes there, never inside
// execute(). Any number of tasks may be in flight; they run concurrently
// and may complete in any order (the control mode page says QUEUE
// ALGORITHM MODIFIER 1: unrestricted reordering). Task attributes (ORDERED,
// HEAD OF QUEUE) are not carried by `task`: a transport that honours them
// holds back tasks itself.
// Lifetime: the volume outlives the unit; the unit must not be destroyed
// while commands_in_flight() > 0, and a task must stay valid until its
// on_complete. There is no abort: a transport handling ABORT TASK or LUN
// RESET waits for the on_complete of each task it aborts.
#pragma once

#include <array>
#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "raid/device/block_device.h"
#include "target/scsi/sense.h"
#include "target/scsi/task.h"

namespace strata::scsi {

// What a logical unit says about itself: INQUIRY, its VPD pages, READ
// CAPACITY(16) and REPORT TARGET PORT GROUPS.
struct unit_identity {
  std::string vendor =
      "STRATA";  // T10 vendor identification: at most 8 ASCII characters, padded with spaces
  std::string product = "VOLUME";  // at most 16 ASCII characters
  std::string revision = "0001";   // at most 4 ASCII characters
  // Unit serial number (VPD 80h) and the T10 vendor ID designator (VPD 83h).
  // Printable ASCII, at most 64 characters. It should be unique across
  // every array an initiator sees (an array id with the volume id), since
  // the NAA designator is derived from it when unit_id is not given.
  std::string serial;
  // The low 64 bits (vendor specific identifier extension) of the NAA 6
  // designator; derived from `serial` (FNV-1a) when absent.
  std::optional<std::uint64_t> unit_id;
  // The IEEE company id (OUI, 24 bits) in the NAA 6 designator. Strata has
  // none registered; set it to the operator's to make the designator
  // globally unique, and not only unique among this array's units.
  std::uint32_t ieee_company_id = 0;
  // Thin-provisioned: VPD B2h (LBPU, LBPWS, LBPWS10, LBPRZ), LBPME and
  // LBPRZ in READ CAPACITY(16), and UNMAP. Off: the unit reports full
  // provisioning, rejects UNMAP, and WRITE SAME writes even with UNMAP set.
  bool thin_provisioned = true;
  // VPD B1h MEDIUM ROTATION RATE: 1 (non-rotating) when set, else 0 (not reported).
  bool non_rotating = true;
  // The port through which this unit is reached, for VPD 83h and REPORT
  // TARGET PORT GROUPS (implicit ALUA, one group, active/optimized). Both nonzero.
  std::uint16_t relative_port = 1;
  std::uint16_t port_group = 1;
};

class logical_unit {
 public:
  // Limits, reported in VPD B0h and enforced (ILLEGAL REQUEST 24/00 beyond).
  // The transfer cap bounds the memory one command may pin.
  static constexpr std::uint32_t max_transfer_bytes = 8u << 20;
  // WRITE SAME no longer than a transfer: initiators (libiscsi's tests
  // among them) write and read back a whole WRITE SAME range in one command.
  static constexpr std::uint64_t max_write_same_bytes = max_transfer_bytes;
  // At most 2^20 512-byte blocks, the bound libiscsi's block limits test
  // holds a target to.
  static constexpr std::uint64_t max_unmap_bytes = 512u << 20;
  static constexpr std::uint32_t max_unmap_descriptors = 256;
  // Transfers are cut into device requests of at most this size, and a
  // command keeps at most this many of them in flight.
  static constexpr std::uint32_t piece_bytes = 1u << 20;
  static constexpr unsigned max_pieces_in_flight = 8;

  // REQUIRES: identity.relative_port and identity.port_group nonzero.
  logical_unit(device::block_device& volume, unit_identity identity);
  // REQUIRES: commands_in_flight() == 0.
  ~logical_unit();
  logical_unit(const logical_unit&) = delete;
  logical_unit& operator=(const logical_unit&) = delete;

  // Runs one command. Sets t.result, t.sense_data (on CHECK CONDITION),
  // t.data_in and t.data_in_bytes, then calls t.on_complete(t) once, later,
  // on executor().
  // REQUIRES: on executor()'s thread; t.on_complete set; t not in flight.
  void execute(task& t) noexcept;

  boost::asio::any_io_executor executor() const noexcept { return volume_.executor(); }
  const unit_identity& identity() const noexcept { return identity_; }
  device::block_device& volume() const noexcept { return volume_; }
  std::size_t commands_in_flight() const noexcept { return in_flight_; }

  std::uint32_t block_size_bytes() const noexcept {
    return volume_.geometry().logical_block_size_bytes;
  }
  std::uint64_t block_count() const noexcept { return volume_.geometry().block_count; }
  std::uint32_t max_transfer_blocks() const noexcept {
    return max_transfer_bytes / block_size_bytes();
  }
  // The 16-byte NAA 6 designator of VPD 83h.
  std::array<std::uint8_t, 16> naa_designator() const noexcept;

 private:
  struct command;  // per-command state of commands that do device I/O (logical_unit.cc)

  void dispatch(task& t);
  // Immediate answers: t's outcome is set; complete it from the loop.
  void complete_later(task& t);
  void fail_later(task& t, const sense& s);

  void inquiry(task& t);
  void request_sense(task& t);
  void read_capacity_10(task& t);
  void read_capacity_16(task& t);
  void mode_sense(task& t, bool ten);
  void mode_select(task& t, bool ten);
  void report_supported_operation_codes(task& t);
  void report_target_port_groups(task& t);
  void read_write(task& t, bool write, std::uint64_t lba, std::uint64_t blocks, bool fua);
  void verify(task& t, bool write, std::uint64_t lba, std::uint64_t blocks, std::uint8_t bytchk);
  void synchronize_cache(task& t, std::uint64_t lba, std::uint64_t blocks);
  void unmap(task& t);
  void write_same(task& t, std::uint64_t lba, std::uint64_t blocks, bool unmap_bit, bool ndob);

  // The mode pages as they are (current, default and saved values are the same).
  std::vector<std::uint8_t> mode_page(std::uint8_t page_code, bool changeable) const;

  command& acquire();
  void release(command& c) noexcept;
  void start(command& c);
  void issue(command& c);
  void on_piece_done(device::request& req) noexcept;
  void step_done(command& c);
  void finish(command& c) noexcept;

  device::block_device& volume_;
  const unit_identity identity_;
  // Blocks per device request (piece_bytes, kept a multiple of the buffer
  // alignment), and the fewest blocks a request may carry for its buffer
  // to stay aligned.
  std::uint64_t piece_blocks_ = 1;
  std::uint64_t align_blocks_ = 1;
  // Per-command state, reused: a steady load allocates no command state.
  std::vector<std::unique_ptr<command>> commands_;
  std::vector<command*> free_commands_;
  std::size_t in_flight_ = 0;
};

// Helpers for whoever answers a task: this unit, or the LUN map for what it
// answers itself.
//
// Copies the first `allocation_length_bytes` of `payload` (all of it if
// shorter) into t.data_in and sets t.data_in_bytes, reusing t.data_in when
// it is large enough. False if memory for it ran out.
bool set_data_in(task& t, std::span<const std::uint8_t> payload,
                 std::uint32_t allocation_length_bytes) noexcept;
// Standard INQUIRY data for `identity`, with `peripheral` as byte 0: 0x00
// for a unit (qualifier 000b, direct-access block device), 0x7f for a LUN
// with no unit behind it (qualifier 011b, type 1Fh).
inline constexpr std::size_t standard_inquiry_bytes = 96;
std::array<std::uint8_t, standard_inquiry_bytes> standard_inquiry(const unit_identity& identity,
                                                                  std::uint8_t peripheral) noexcept;

}  // namespace strata::scsi
