// Reservations of one logical unit: SPC-4 persistent reservations
// (PERSISTENT RESERVE IN/OUT), SPC-2 reservations (RESERVE/RELEASE(6) and
// (10)), and the access check every command passes while a reservation
// exists. Clustered servers (Windows failover clusters, Pacemaker's
// fence_scsi, Oracle RAC, VMware) fence each other with these.
//
// PERSISTENT RESERVE IN: READ KEYS, READ RESERVATION, REPORT CAPABILITIES,
// READ FULL STATUS (iSCSI TransportIDs, format 01b: the initiator port name
// with its ISID). PERSISTENT RESERVE OUT: REGISTER, REGISTER AND IGNORE
// EXISTING KEY, RESERVE, RELEASE, CLEAR, PREEMPT, PREEMPT AND ABORT,
// REGISTER AND MOVE; the six types; SPEC_I_PT, ALL_TG_PT, APTPL; the
// PRgeneration counter. Scope is always LU_SCOPE.
//
// Choices where SPC-4 leaves room, or this unit narrows it:
// - Registrations are per I_T nexus (initiator port name and relative
//   target port). ALL_TG_PT=1 makes one registration for the initiator port
//   on every target port; READ KEYS lists it once, READ FULL STATUS with
//   ALL_TG_PT set. Such a registration is refused (RESERVATION CONFLICT)
//   while the initiator port holds a registration through one target port.
// - TransportIDs (SPEC_I_PT, REGISTER AND MOVE): iSCSI, format 01b only.
//   Format 00b names every port of an initiator, present and future, which
//   a registration per nexus cannot hold: INVALID FIELD IN PARAMETER LIST.
//   So is a TransportID naming a nexus already registered (or twice).
// - PREEMPT AND ABORT preempts as PREEMPT does and establishes the same
//   unit attentions. The unit has no abort: commands of the preempted
//   nexuses already in flight complete normally; the ones after it are
//   checked against the new reservation.
// - APTPL=1 needs a state store (unit_state_store.h); without one, REPORT
//   CAPABILITIES says PTPL_C 0 and APTPL=1 is INVALID FIELD IN PARAMETER LIST.
// - REGISTER AND MOVE gives the destination the SERVICE ACTION RESERVATION
//   KEY, registered or not, and keeps the reservation's type (the CDB's
//   SCOPE and TYPE are ignored, as SPC-4 says); any nonzero relative target
//   port is accepted, since a unit does not know every port it is reached by.
// - REPORT CAPABILITIES: CRH 1, SIP_C 1, ATP_C 1, PTPL_C (with a store),
//   TMV 1 with every type, ALLOW COMMANDS 001b.
//
// Access while a persistent reservation exists (SPC-4's table "SPC commands
// that are allowed in the presence of various reservations" and SBC-3's
// for its commands, by opcode: classify_access()): the holder (for the
// all-registrants types, every registered nexus) and, for the
// registrants-only and all-registrants types, every registered nexus may
// do anything. Any other nexus may run the commands that are always
// allowed (INQUIRY, REQUEST SENSE, REPORT LUNS, TEST UNIT READY, READ
// CAPACITY, PERSISTENT RESERVE IN, REPORT TARGET PORT GROUPS, LOG SENSE,
// START STOP UNIT with START=1, ...), and under a Write Exclusive type the
// reading ones (READ, VERIFY, PRE-FETCH, GET LBA STATUS, MODE SENSE, ...);
// anything else is RESERVATION CONFLICT. PERSISTENT RESERVE OUT is decided
// by its service action (SPC-4's table for its service actions follows
// from the checks prepare() makes).
//
// SPC-2 reservations, with SPC-4's "Exceptions to SPC-2 RESERVE and
// RELEASE behavior" (CRH=1): RESERVE or RELEASE from the persistent
// reservation holder, or from a registered nexus under a registrants-only
// or all-registrants reservation, is GOOD and changes nothing; otherwise,
// while any registration exists, it is RESERVATION CONFLICT. Without registrations: SPC-2. While
// one nexus holds the unit, the others may run only INQUIRY, REQUEST SENSE, REPORT LUNS, RELEASE
// (GOOD, nothing happens) and REPORT TARGET PORT GROUPS (not in SPC-2, which predates ALUA; a
// multipath path checker must not see a reserved path as failed); every PERSISTENT RESERVE IN/OUT
// is RESERVATION CONFLICT (SPC-2 5.5.1). A LOGICAL UNIT RESET and the holder's I_T nexus loss
// release it; it is not saved.
//
// Persistence. After every PERSISTENT RESERVE OUT that changes the state,
// the whole state is encoded (encode_reservation_state) and saved before the
// command completes. If the save fails, the command fails with the sense of
// the error (sense_for) and the state is as before. PERSISTENT RESERVE OUT
// commands run one at a time: one that arrives while a save is in flight
// waits. restore() loads the state: after a power loss (state_origin::
// power_loss) only a state saved with APTPL=1 survives, and a state without
// is erased from the store too (a later takeover must not bring it back;
// should that save fail, the next PERSISTENT RESERVE OUT that changes
// anything overwrites it); after a controller takeover (failover) all of
// it does.
//
// Encoding, version 1 (all integers big-endian):
//   0   4  magic "SPRS"
//   4   2  version (1)
//   6   1  flags: bit 0 APTPL
//   7   1  reservation type: 0 none, else the SPC-4 type code (1, 3, 5, 6, 7, 8)
//   8   4  PRgeneration
//   12  2  registration count N (at most max_registrations)
//   14  N  registrations, each:
//           8  reservation key (nonzero)
//           2  relative target port (0 with ALL_TG_PT)
//           1  flags: bit 0 ALL_TG_PT, bit 1 reservation holder
//           1  initiator port name length L (0..255; 0 when the transport
//              names no nexus)
//           L  initiator port name
//   end 4  CRC32C of every byte before it
// decode_reservation_state() refuses, with a message, anything else: a
// short or long buffer, another magic or version, a bad CRC, unknown flags
// or type, a zero key, a relative target port with ALL_TG_PT, a holder flag
// that does not match the type (exactly one holder for the types that are
// not all-registrants, none otherwise, and none without a reservation), a
// reservation without registrations, and two registrations of one nexus.
// A later version adds fields behind a new version number; this one then
// refuses it rather than guess.
//
// Threads: the unit's loop only. Lifetime: the unit's member; it must not
// be destroyed while operations_in_flight() > 0.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "raid/device/status.h"
#include "target/scsi/sense.h"
#include "target/scsi/task.h"
#include "target/scsi/unit_attentions.h"
#include "target/scsi/unit_state_store.h"

namespace strata::scsi {

// Persistent reservation types: the TYPE field of PERSISTENT RESERVE IN/OUT.
enum class pr_type : std::uint8_t {
  write_exclusive = 0x1,
  exclusive_access = 0x3,
  write_exclusive_registrants_only = 0x5,
  exclusive_access_registrants_only = 0x6,
  write_exclusive_all_registrants = 0x7,
  exclusive_access_all_registrants = 0x8,
};

// One registered I_T nexus (or, with all_target_ports, one initiator port
// on every target port).
struct registration {
  std::string initiator_port;
  std::uint16_t relative_port = 1;  // 0 when all_target_ports
  bool all_target_ports = false;
  std::uint64_t key = 0;
  bool holder = false;  // holds the reservation (types other than all-registrants)

  friend bool operator==(const registration&, const registration&) = default;
};

// Everything about persistent reservations that is saved.
struct reservation_state {
  std::uint32_t generation = 0;  // PRgeneration
  bool aptpl = false;            // from the last REGISTER, REGISTER AND IGNORE, REGISTER AND MOVE
  std::vector<registration> registrations;
  std::optional<pr_type> reservation;

  friend bool operator==(const reservation_state&, const reservation_state&) = default;
};

std::vector<std::uint8_t> encode_reservation_state(const reservation_state& s);
std::expected<reservation_state, error> decode_reservation_state(
    std::span<const std::uint8_t> bytes);

// Why the unit is loading its state (restore()).
enum class state_origin : std::uint8_t {
  power_loss,  // the array restarted: only APTPL=1 state survives (SPC-4)
  failover,    // another controller took the unit over: everything survives
};

// What a command is to the access check while a persistent reservation
// exists (tables in the header comment).
enum class access_class : std::uint8_t {
  any,                     // allowed from any nexus
  read,                    // allowed under Write Exclusive types; conflict under Exclusive Access
  write,                   // holders (and registrants under RO/AR types) only
  persistent_reserve_out,  // decided by the service action
  spc2_reservation,        // RESERVE/RELEASE: the SPC-2 exceptions, in reserve()/release()
};
access_class classify_access(const std::array<std::uint8_t, 16>& cdb) noexcept;

class reservations {
 public:
  // INSUFFICIENT REGISTRATION RESOURCES beyond this many registrations.
  static constexpr std::size_t max_registrations = 256;
  // An iSCSI name is at most 223 bytes, ",i,0x" and the ISID add 17.
  static constexpr std::size_t max_initiator_port_bytes = 255;

  // `complete` ends a task whose outcome is set (the unit posts it);
  // `relative_port` is the unit's target port, for the registrations of
  // ALL_TG_PT initiators it has no other port for.
  reservations(unit_attentions& attentions, unit_state_store* store, std::uint16_t relative_port,
               std::function<void(task&)> complete);
  ~reservations();
  reservations(const reservations&) = delete;
  reservations& operator=(const reservations&) = delete;

  // True when no reservation (persistent or SPC-2) exists: then every
  // command is allowed and allows() need not be asked.
  bool quiet() const noexcept { return !state_.reservation && !spc2_holder_; }

  // The access check: false, with t's outcome set to RESERVATION CONFLICT,
  // when t conflicts with a reservation.
  bool allows(task& t) const;

  // Set t's outcome; the caller completes t.
  void persistent_reserve_in(task& t);
  void reserve(task& t);  // RESERVE(6), RESERVE(10)
  void release(task& t);  // RELEASE(6), RELEASE(10)
  // Runs t (after the PERSISTENT RESERVE OUT commands before it) and ends
  // it through `complete`, after saving the state it changed.
  void persistent_reserve_out(task& t);

  // LOGICAL UNIT RESET: releases the SPC-2 reservation (persistent ones stay).
  void reset();
  // The I_T nexus `n` is gone: releases its SPC-2 reservation.
  void nexus_lost(const i_t_nexus& n);
  // Establishes `code` for every nexus the unit knows of (announced ones
  // and registered ones), except `except`.
  void notify_all(additional_sense code, const std::optional<i_t_nexus>& except = std::nullopt);

  // Loads the state from the store (nothing without one, or when it holds
  // nothing). A corrupt state is refused with invalid_argument and a message,
  // and leaves the unit without reservations.
  // REQUIRES: no command has run yet.
  std::expected<void, error> restore(state_origin origin);

  // PERSISTENT RESERVE OUT commands saving or waiting, and a restore's save.
  std::size_t operations_in_flight() const noexcept { return waiting_.size() + (saving_ ? 1 : 0); }
  const reservation_state& state() const noexcept { return state_; }
  bool spc2_reserved_by(const i_t_nexus& n) const noexcept {
    return spc2_holder_ && spc2_holder_->first == n.initiator_port &&
           spc2_holder_->second == n.relative_target_port;
  }

 private:
  struct change;

  void drain();
  void start_out(task& t) noexcept;
  void on_saved(std::error_code ec);
  // Decides a PERSISTENT RESERVE OUT against the current state: false with
  // t's outcome set when it fails or changes nothing; true with the new
  // state and the unit attentions it establishes in `c`.
  bool prepare(task& t, change& c);
  void commit(change& c);
  // The SPC-2 exceptions for RESERVE and RELEASE: false, with t's outcome set (GOOD
  // or RESERVATION CONFLICT), when persistent reservations decide them.
  bool spc2_applies(task& t) const;

  unit_attentions& attentions_;
  unit_state_store* const store_;
  const std::uint16_t relative_port_;
  const std::function<void(task&)> complete_;

  reservation_state state_;
  std::optional<std::pair<std::string, std::uint16_t>> spc2_holder_;

  std::deque<task*> waiting_;  // PERSISTENT RESERVE OUT, in arrival order
  bool saving_ = false;
  task* saving_task_ = nullptr;  // null for a restore's save
  std::unique_ptr<change> saving_change_;
  bool draining_ = false;
};

}  // namespace strata::scsi
