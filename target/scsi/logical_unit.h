// A SCSI logical unit over a volume: the SPC-4/SBC-3 direct-access block
// device command set, emulated on the one request type of
// raid/device/block_device.h. Protocol-independent: a transport (iSCSI
// today) builds a `task` (task.h) and calls execute(); the unit answers
// through task::on_complete. It never sees PDUs; the volume never sees CDBs.
//
// Commands (see README.md for the bits each one honours):
//   TEST UNIT READY, REQUEST SENSE, INQUIRY (standard data with 3PC; VPD
//   00h, 80h, 83h, 86h, 8Fh, B0h, B1h, B2h), READ CAPACITY(10), READ
//   CAPACITY(16), READ(6/10/12/16), WRITE(6/10/12/16), WRITE AND
//   VERIFY(10/12/16), VERIFY(10/12/16), COMPARE AND WRITE, ORWRITE(16),
//   WRITE ATOMIC(16), PRE-FETCH(10/16), GET LBA STATUS, READ DEFECT
//   DATA(10/12), SYNCHRONIZE CACHE(10/16), UNMAP, WRITE SAME(10/16) (0
//   blocks: to the last LBA), MODE SENSE(6/10), MODE SELECT(6/10), START
//   STOP UNIT, REPORT SUPPORTED OPERATION CODES, REPORT TARGET PORT GROUPS,
//   PERSISTENT RESERVE IN/OUT, RESERVE(6/10), RELEASE(6/10), EXTENDED
//   COPY(LID1), RECEIVE COPY RESULTS (COPY STATUS, RECEIVE DATA, OPERATING
//   PARAMETERS, FAILED SEGMENT DETAILS).
// Before a command runs it passes unit attentions (unit_attentions.h) and
// reservations (reservations.h), per I_T nexus (task::nexus); on a unit with
// neither a reservation nor a unit attention pending that costs two flag
// tests, and no lookup.
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
// INFORMATION UNIT, as Linux-IO does; extra data_out is ignored, except
// by COMPARE AND WRITE and WRITE SAME, whose Data-Out has one right size
// (2N blocks, one block): more is refused the same way.
//
// A read that fails part-way reports in data_in_bytes how many bytes from
// the start are good (all blocks before the first failed LBA, which is also
// in the sense INFORMATION field). The transport may send them with the
// CHECK CONDITION, as a disk does; either way it must report what it did
// not send as residual underflow (task.h says why).
//
// Threads: a logical unit lives on its volume's loop (executor()). execute()
// is called there only, and every task completes there, never inside
// execute(). Any number of tasks may be in flight; SIMPLE ones run
// concurrently and may complete in any order (the control mode page says
// QUEUE ALGORITHM MODIFIER 1: unrestricted reordering). Task attributes are
// honoured (task_set.h, SAM-5 8.6): an ORDERED task waits for every older
// one and holds back every newer one; HEAD OF QUEUE runs at once. The
// transport hands tasks to execute() in the order they entered the task
// set (for iSCSI, CmdSN order around an ORDERED task). The range interlock:
// COMPARE AND WRITE and ORWRITE read, modify and write their range as one
// operation, and WRITE ATOMIC writes it as one, so while one is in flight
// no other command writes any block of its range (a write that overlaps
// waits for it, and it waits for overlapping writes already running).
// Reads are held back only by an overlapping WRITE ATOMIC (and hold it back
// while they run), so that they see its blocks all old or all new.
//
// EXTENDED COPY (extended_copy.h) copies within this unit, or between it and
// units the composer names through set_copy_targets(), on the same loop.
// Lifetime: the volume outlives the unit; the unit must not be destroyed
// while commands_in_flight() > 0, and a task must stay valid until its
// on_complete. There is no abort: a transport handling ABORT TASK or LUN
// RESET waits for the on_complete of each task it aborts.
#pragma once

#include <algorithm>
#include <array>
#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/device/wait_queue.h"
#include "target/scsi/extended_copy.h"
#include "target/scsi/reservations.h"
#include "target/scsi/sense.h"
#include "target/scsi/task.h"
#include "target/scsi/task_set.h"
#include "target/scsi/unit_attentions.h"
#include "target/scsi/unit_interface.h"
#include "target/scsi/unit_state_store.h"

namespace strata::scsi {

// Asymmetric access states (SPC-4 5.16.2.1), as REPORT TARGET PORT GROUPS
// codes them.
enum class alua_state : std::uint8_t {
  active_optimized = 0x0,
  active_non_optimized = 0x1,
  standby = 0x2,
  unavailable = 0x3,
  transitioning = 0xf,
};

// One target port group: its id, its state, its ports' relative target
// port identifiers. All nonzero.
struct target_port_group {
  std::uint16_t id = 1;
  alua_state state = alua_state::active_optimized;
  std::vector<std::uint16_t> relative_ports;
};

// The REPORT TARGET PORT GROUPS parameter data for `groups` (SPC-4
// 6.37), for the allocation length of `cdb`: whoever answers it (a unit,
// or a controller whose path to the unit is down) answers the same way.
// Empty when the CDB asks for a format other than 000b or 001b.
// `implicit_transition_seconds`: how long a transition may take (the
// extended header's IMPLICIT TRANSITION TIME; Linux waits that long).
std::vector<std::uint8_t> report_target_port_groups_data(std::span<const target_port_group> groups,
                                                         std::uint8_t format,
                                                         std::uint8_t implicit_transition_seconds);

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
  // Part of the volume's cache is non-volatile (a write-back cache's log:
  // what it acknowledged survives a power loss; VPD 86h NV_SUP). Its
  // volatile part (drive caches) still needs SYNCHRONIZE CACHE.
  bool non_volatile_cache = false;
  // Write-protected (a snapshot, a replica): every command that would change
  // the medium ends in DATA PROTECT 27/00 WRITE PROTECTED, and MODE SENSE
  // sets WP.
  bool write_protected = false;
  // The smallest write that costs no read-modify-write below the volume
  // (4 KiB disk sectors under 512-byte blocks): READ CAPACITY(16) reports
  // it as LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT, so that initiators
  // align their I/O. A power of two; 0, or at most the logical block size,
  // means one logical block per physical block.
  std::uint32_t physical_block_bytes = 0;
  // The largest write that lands whole or not at all across a power cut,
  // when aligned to its own size: what WRITE ATOMIC(16) may promise, since
  // a database skips its torn-page protection on the strength of it. The
  // composer knows it from the layers below; for a Strata volume it is one
  // 4096-byte block, which every layer writes as one member request
  // (docs/atomic-writes.md). Advertised in VPD B0h as MAXIMUM ATOMIC
  // TRANSFER LENGTH, ATOMIC ALIGNMENT and ATOMIC TRANSFER LENGTH
  // GRANULARITY, all this size in blocks. Less than a logical block: no
  // atomic write is promised (all three 0), and WRITE ATOMIC of any blocks
  // is refused.
  std::uint32_t atomic_write_bytes = 4096;
  // The port through which this unit is reached, for VPD 83h and REPORT
  // TARGET PORT GROUPS, when `port_groups` is empty: one group,
  // active/optimized, with this one port. Both nonzero.
  std::uint16_t relative_port = 1;
  std::uint16_t port_group = 1;
  // Implicit ALUA over several target ports (a dual-controller array: each
  // controller's ports one group, active/optimized on the controller that
  // serves the volume, active/non-optimized on the one that forwards to
  // it). VPD 83h reports the port a command came through
  // (task::nexus.relative_target_port) and the group holding it; REPORT
  // TARGET PORT GROUPS lists every group. Empty: the one group above.
  std::vector<target_port_group> port_groups;
};

class logical_unit final : public unit_interface {
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
  // MAXIMUM COMPARE AND WRITE LENGTH (VPD B0h): the most the 1-byte NUMBER
  // OF LOGICAL BLOCKS field can ask for. The range is held against writes
  // only from the read to the write, both a single device request up to
  // 1 MiB (255 blocks of 4 KiB), so a long compare costs overlapping
  // writers one read and one write of wait; ESXi's ATS uses one block.
  static constexpr std::uint32_t max_compare_and_write_blocks = 255;
  // GET LBA STATUS returns at most this many descriptors (fewer if the
  // allocation length holds fewer); the initiator asks again from where the
  // last one ends. Bounds the work of one command.
  static constexpr std::size_t max_lba_status_descriptors = 128;
  // REPORT TARGET PORT GROUPS' IMPLICIT TRANSITION TIME: the longest a
  // controller takeover may keep a path transitioning (the goal is 10 s
  // p99; Linux's ALUA handler waits this long before giving up on it).
  static constexpr std::uint8_t implicit_transition_seconds = 30;

  // REQUIRES: identity.relative_port and identity.port_group nonzero.
  // `state_store`, if given, keeps the persistent reservation state across
  // restarts and takeovers (restore_state()); it outlives the unit.
  logical_unit(device::block_device& volume, unit_identity identity,
               unit_state_store* state_store = nullptr);
  // REQUIRES: commands_in_flight() == 0.
  ~logical_unit();
  logical_unit(const logical_unit&) = delete;
  logical_unit& operator=(const logical_unit&) = delete;

  // Runs one command. Sets t.result, t.sense_data (on CHECK CONDITION),
  // t.data_in and t.data_in_bytes, then calls t.on_complete(t) once, later,
  // on executor().
  // REQUIRES: on executor()'s thread; t.on_complete set; t not in flight.
  void execute(task& t) noexcept override;

  boost::asio::any_io_executor executor() const noexcept override { return volume_.executor(); }
  const unit_identity& identity() const noexcept { return identity_; }
  device::block_device& volume() const noexcept { return volume_; }
  std::size_t commands_in_flight() const noexcept override {
    return in_flight_ + reservations_.operations_in_flight() + tasks_.held();
  }

  std::uint32_t block_size_bytes() const noexcept {
    return volume_.geometry().logical_block_size_bytes;
  }
  std::uint64_t block_count() const noexcept { return volume_.geometry().block_count; }
  std::uint32_t max_transfer_blocks() const noexcept {
    return max_transfer_bytes / block_size_bytes();
  }
  // WRITE ATOMIC(16): what survives a power cut whole (unit_identity::
  // atomic_write_bytes), in blocks. It is also the ATOMIC ALIGNMENT and
  // the ATOMIC TRANSFER LENGTH GRANULARITY (VPD B0h): a WRITE ATOMIC is
  // exactly that one aligned unit or nothing. Atomic boundaries are not
  // supported (their B0h fields 0; a nonzero ATOMIC BOUNDARY is refused).
  std::uint32_t max_atomic_transfer_blocks() const noexcept {
    return identity_.atomic_write_bytes / block_size_bytes();
  }
  // The 16-byte NAA 6 designator of VPD 83h.
  std::array<std::uint8_t, 16> naa_designator() const noexcept;

  // Copying between units. EXTENDED COPY names its source and destination
  // by NAA designator (identification CSCD descriptors, E4h). This unit is
  // always found; any other is asked of `lookup`, which the composer (who
  // knows the units) gives: it returns the unit with that designator, or
  // null. A unit found on another executor is not used: the copy runs on
  // this unit's loop and calls into the other unit directly, which only its
  // own loop may do. A unit not found ends the copy in COPY ABORTED 0D/02
  // COPY TARGET DEVICE NOT REACHABLE. The lookup is called on this unit's
  // loop, before each piece's read and again before its write (pieces of
  // at most max_transfer_bytes, so a unit removed meanwhile is noticed),
  // and must not throw; a unit it returns must stay alive while it has
  // commands in flight (commands_in_flight(): the copy's reads and writes
  // count there).
  using copy_target_lookup = std::function<logical_unit*(std::span<const std::uint8_t, 16> naa)>;
  void set_copy_targets(copy_target_lookup lookup) { copy_targets_ = std::move(lookup); }

  // Reservations and unit attentions (reservations.h, unit_attentions.h).
  // Called on executor()'s thread.
  //
  // Loads the persistent reservation state from the store given at
  // construction: after a power loss only what was registered with APTPL=1
  // survives, after a takeover everything. A corrupt state is refused with
  // a message, and the unit starts without reservations.
  // REQUIRES: before the first command.
  std::expected<void, error> restore_state(state_origin origin) {
    return reservations_.restore(origin);
  }
  // The transport announces each I_T nexus to each unit it can reach, and
  // says when one ends (unit_attentions.h: the unit learns of none from the
  // commands themselves). A lost nexus also loses its RESERVE(6).
  void nexus_created(const i_t_nexus& n) override { attentions_.nexus_created(n); }
  void nexus_lost(const i_t_nexus& n) override {
    reservations_.nexus_lost(n);
    attentions_.nexus_lost(n);
    forget_copy_results(&n);  // held EXTENDED COPY results die with their nexus
  }
  // A condition the transport reports for nexus `n` (3F/0E REPORTED LUNS
  // DATA HAS CHANGED when its LUN map changed): unit_attentions.h.
  void establish_unit_attention(const i_t_nexus& n, additional_sense code) override {
    attentions_.establish(n, code);
  }
  void clear_unit_attention(const i_t_nexus& n, additional_sense code) override {
    attentions_.clear(n, code);
  }
  // LOGICAL UNIT RESET, received on nexus `by`: releases the RESERVE(6)
  // reservation (persistent ones stay) and establishes 29/03 for every
  // nexus, `by` included (SAM-5 6.3.3: "every I_T nexus"; libiscsi's
  // multipath reset test checks the issuing path too). Commands in flight
  // complete normally (there is no abort).
  void reset([[maybe_unused]] const i_t_nexus& by) override {
    reservations_.reset();
    reservations_.notify_all(asc::bus_device_reset_function_occurred);
    forget_copy_results(nullptr);
  }
  // The volume grew or shrank: 2A/09 CAPACITY DATA HAS CHANGED for every nexus.
  void capacity_changed() { reservations_.notify_all(asc::capacity_data_has_changed); }
  // The ports' ALUA states changed: 2A/06 for every nexus.
  void set_port_groups(std::vector<target_port_group> groups) {
    identity_.port_groups = std::move(groups);
    reservations_.notify_all(asc::asymmetric_access_state_changed);
  }
  // A MODE SELECT on `by` changed a page: 2A/01 for every other nexus. No
  // page is changeable yet, so nothing calls it today.
  void mode_parameters_changed(const i_t_nexus& by) {
    reservations_.notify_all(asc::mode_parameters_changed, by);
  }
  const reservations& persistent_reservations() const noexcept { return reservations_; }
  const unit_attentions& attentions() const noexcept { return attentions_; }
  const copy_results& held_copy_results() const noexcept { return copy_results_; }

 private:
  struct command;         // per-command state of commands that do device I/O (unit_internal.h)
  struct copy_operation;  // one EXTENDED COPY in flight (extended_copy.cc)
  // Lets copies_ hold a type complete only in extended_copy.cc.
  struct copy_operation_deleter {
    void operator()(copy_operation* op) const noexcept;
  };

  // Runs a task the task set lets run: admission, then the command.
  void run_task(task& t) noexcept;
  // Every task's completion while it is in the task set; then the transport's.
  static void task_done(task& t) noexcept;
  void dispatch(task& t);
  // Unit attentions, then reservations: false, with t's outcome set, when
  // t must not run.
  bool admitted(task& t);
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
  // The relative target port a command came through and its group: the
  // identity's one port and group unless port_groups names the port.
  std::pair<std::uint16_t, std::uint16_t> port_and_group(
      std::uint16_t relative_port) const noexcept;
  void read_write(task& t, bool write, std::uint64_t lba, std::uint64_t blocks, bool fua);
  // The blocks of a write that lie within t.expected_transfer_bytes (all
  // of them, unless the initiator expects less than the CDB describes);
  // records what the CDB describes for the transport's residual.
  std::uint64_t within_expected_transfer(task& t, std::uint64_t blocks) const noexcept;
  void verify(task& t, bool write, std::uint64_t lba, std::uint64_t blocks, std::uint8_t bytchk);
  void synchronize_cache(task& t, std::uint64_t lba, std::uint64_t blocks);
  void unmap(task& t);
  void write_same(task& t, std::uint64_t lba, std::uint64_t blocks, bool unmap_bit, bool ndob);
  void compare_and_write(task& t);
  void orwrite(task& t);
  void write_atomic(task& t);
  void pre_fetch(task& t, std::uint64_t lba, std::uint64_t blocks);
  void get_lba_status(task& t);
  void read_defect_data(task& t, bool twelve);
  void start_stop_unit(task& t);

  // The copy manager (extended_copy.cc).
  void extended_copy(task& t);
  void receive_copy_results(task& t);
  // Runs the copy from where it is: starts its next read, or finishes it.
  // Called from the loop, never inside execute().
  void advance(copy_operation& op) noexcept;
  void start_piece(copy_operation& op);
  static void on_copy_read(task& internal) noexcept;
  static void on_copy_write(task& internal) noexcept;
  void copy_io_failed(copy_operation& op, const task& internal, std::uint16_t field_at) noexcept;
  void finish_copy(copy_operation& op, scsi::status result, const sense& s) noexcept;
  // The unit a segment's CSCD descriptor ID names, or why not (COPY
  // ABORTED, pointing at `field_at` of the segment descriptor).
  std::expected<logical_unit*, sense> copy_unit(const copy_operation& op, std::uint16_t cscd_id,
                                                std::uint16_t field_at);
  // Runs an internal READ(16) or WRITE(16) of the copy on `unit`: through
  // its reservations (as the EXTENDED COPY's nexus) and its machinery, but
  // not its unit attentions, which are the initiator's to collect.
  bool issue_copy_io(logical_unit& unit, task& internal) noexcept;
  // Forgets the results held for `n` (every nexus if null), and those of
  // its copies still running, which then hold nothing when they end.
  void forget_copy_results(const i_t_nexus* n) noexcept;

  // The mode pages as they are (current, default and saved values are the same).
  std::vector<std::uint8_t> mode_page(std::uint8_t page_code, bool changeable) const;

  command& acquire();
  void release(command& c) noexcept;
  // start() admits a command through the range interlock; run() issues it.
  void start(command& c);
  void run(command& c);
  bool blocked(const command& c) const noexcept;
  void issue(command& c);
  void on_piece_done(device::request& req) noexcept;
  void step_done(command& c);
  void finish(command& c) noexcept;

  device::block_device& volume_;
  unit_identity identity_;  // only its port groups change (set_port_groups)
  // Blocks per device request (piece_bytes, kept a multiple of the buffer
  // alignment), and the fewest blocks a request may carry for its buffer
  // to stay aligned.
  std::uint64_t piece_blocks_ = 1;
  std::uint64_t align_blocks_ = 1;
  // Per-command state, reused: a steady load allocates no command state.
  std::vector<std::unique_ptr<command>> commands_;
  std::vector<command*> free_commands_;
  std::size_t in_flight_ = 0;
  // The range interlock: COMPARE AND WRITE and ORWRITE commands running or
  // waiting. While there are none, a write starts without looking at
  // anything else: the interlock costs ordinary I/O one comparison.
  std::size_t exclusive_commands_ = 0;
  // Commands waiting for their range, oldest first (linked through the
  // commands themselves: no allocation).
  device::wait_queue<command> waiting_;
  // WRITE ATOMIC commands running or waiting: while there are none, a
  // read starts without looking at anything else.
  std::size_t atomic_commands_ = 0;

  // The copy manager: copies in flight, results held, other units.
  std::vector<std::unique_ptr<copy_operation, copy_operation_deleter>> copies_;
  copy_results copy_results_;
  copy_target_lookup copy_targets_;
  // Task attributes: which tasks may run now.
  task_set tasks_;
  // After everything they use (identity_, and complete_later through this).
  unit_attentions attentions_;
  reservations reservations_;
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
