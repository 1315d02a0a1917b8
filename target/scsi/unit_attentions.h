// Unit attention conditions (SAM-5, SPC-4): per I_T nexus, a
// queue of events the initiator has not been told about yet. A command
// other than INQUIRY, REPORT LUNS and REQUEST SENSE on a nexus with one
// pending ends in CHECK CONDITION, UNIT ATTENTION, with the oldest, which is
// then cleared (UA_INTLCK_CTRL 00b); REQUEST SENSE returns it as its
// sense data with GOOD and clears it; INQUIRY and REPORT LUNS leave it.
//
// Which nexuses exist: the transport announces each one to each unit it
// can reach (nexus_created: an iSCSI login, or a LUN mapped into a live
// session) and says when it ends (nexus_lost: a logout, a dropped
// connection not reinstated). The unit does not learn nexuses from the
// commands themselves: that would cost every command a lookup, and a unit
// with nothing pending must not pay one (quiet()). A nexus this unit was
// never told about therefore gets no unit attention that is established for
// "every nexus" (a reset, a capacity change); the transport is the one to
// announce. Conditions for one named nexus (a preempted registration) are
// kept for it whether it was announced or not.
//
//   event                          established for          ASC/ASCQ
//   nexus first announced          that nexus               29/00 POWER ON, RESET, OR
//                                                           BUS DEVICE RESET OCCURRED
//   nexus announced again after    that nexus               29/07 I_T NEXUS LOSS OCCURRED
//     it was lost
//   LOGICAL UNIT RESET             every nexus              29/03 BUS DEVICE RESET FUNCTION
//                                                           OCCURRED
//   MODE SELECT changing a page    every other nexus        2A/01
//   persistent reservations        as SPC-4 says (reservations.h)  2A/03, 2A/04, 2A/05
//   ALUA state change              every nexus              2A/06
//   capacity change                every nexus              2A/09
//   LUN map changed (transport)    that nexus, each unit    3F/0E REPORTED LUNS DATA
//                                  it sees                  HAS CHANGED; REPORT LUNS
//                                                           clears it on every unit
//
// 29/00 for a nexus first announced: this is what a disk does after power
// on, what tgt does at each login, and what libiscsi expects ("the normal
// unit attention you always get just after a fresh login": its connect
// sends TEST UNIT READY until one is GOOD, so iscsi-test-cu never sees it).
// Linux and Windows retry a command that meets it. LIO sends none; we do,
// because after a power loss it is how an initiator learns that its
// registrations without APTPL are gone.
//
// Bounds. Each nexus queues at most max_conditions_per_nexus conditions,
// oldest first, and a condition already pending is not queued twice. A
// reset-class condition (29h) replaces every condition pending, since the
// initiator must rediscover everything anyway, unless one is pending
// already. When the queue is full the new condition is dropped and the
// next one reported says OVERFLOW (SPC-4 4.5.2.4.6, sense key specific
// data; UASK_SUP is set in VPD 86h): the initiator then re-reads what it
// cares about. At most max_nexuses nexuses are tracked; past that, the
// least recently used one that is not connected is forgotten (a connected
// one never is: a condition for a new nexus is then dropped).
//
// Threads: the unit's loop only. Lifetime: the unit's member.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "target/scsi/sense.h"
#include "target/scsi/task.h"

namespace strata::scsi {

class unit_attentions {
 public:
  static constexpr std::size_t max_conditions_per_nexus = 8;
  static constexpr std::size_t max_nexuses = 1024;

  // True when no connected nexus has a condition pending: the unit then
  // checks nothing per command (no lookup, no string compare).
  bool quiet() const noexcept { return reportable_ == 0; }

  void nexus_created(const i_t_nexus& n);
  void nexus_lost(const i_t_nexus& n);

  // Establishes `code` for nexus `n` (announced or not).
  void establish(const i_t_nexus& n, additional_sense code);
  // For every nexus this unit knows, except `except` if given.
  void establish_all(additional_sense code, const std::optional<i_t_nexus>& except = std::nullopt);
  // For every nexus of initiator port `initiator_port` this unit knows, on
  // any target port, except `except`; for (initiator_port, fallback_port) if
  // it knows none.
  void establish_all_ports(std::string_view initiator_port, std::uint16_t fallback_port,
                           additional_sense code,
                           const std::optional<i_t_nexus>& except = std::nullopt);

  // The gate for a command: when `t` must not run because its nexus has a
  // condition pending, sets t's outcome to CHECK CONDITION, UNIT ATTENTION
  // with the oldest, clears it and returns true. INQUIRY and REQUEST SENSE
  // pass (REQUEST SENSE takes the condition itself: take()).
  bool report(task& t);
  // The oldest condition pending for `n`, removed, as sense data.
  std::optional<sense> take(const i_t_nexus& n);
  // Removes `code` from what is pending for `n`, wherever it is queued
  // (REPORT LUNS clears 3F/0E: SPC-4 6.33).
  void clear(const i_t_nexus& n, additional_sense code);

  std::size_t pending(const i_t_nexus& n) const;
  std::size_t nexus_count() const noexcept { return records_.size(); }
  // How many commands report() has looked up: none while quiet() (tests
  // check the fast path with it).
  std::uint64_t lookups() const noexcept { return lookups_; }

 private:
  struct record {
    std::array<additional_sense, max_conditions_per_nexus> queue{};
    std::size_t count = 0;  // queue[0] is the oldest
    bool overflow = false;
    bool connected = false;  // announced and not lost since
    bool announced = false;  // announced at least once
    std::uint64_t last_used = 0;
  };
  using key = std::pair<std::string, std::uint16_t>;
  struct key_less {
    using is_transparent = void;
    static std::tuple<std::string_view, std::uint16_t> view(const key& k) noexcept {
      return {k.first, k.second};
    }
    static std::tuple<std::string_view, std::uint16_t> view(const i_t_nexus& n) noexcept {
      return {n.initiator_port, n.relative_target_port};
    }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const noexcept {
      return view(a) < view(b);
    }
  };
  using map = std::map<key, record, key_less>;

  // The record of `n`, made if there is none (nullptr when the table is
  // full of connected nexuses).
  record* find_or_make(const i_t_nexus& n);
  static bool reportable(const record& r) noexcept { return r.connected && r.count > 0; }
  // Applies `change` to r, keeping reportable_ right.
  template <class Change>
  void update(record& r, Change change);
  static void push(record& r, additional_sense code) noexcept;
  static sense pop(record& r) noexcept;

  map records_;
  std::size_t reportable_ = 0;  // records that are connected with a condition pending
  std::uint64_t clock_ = 0;     // for last_used
  std::uint64_t lookups_ = 0;
};

}  // namespace strata::scsi
