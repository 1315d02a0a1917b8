// One initiator's view of the logical units behind a target: LUN numbers to
// logical units. It answers what belongs to the target rather than to a
// unit (REPORT LUNS, SPC-4 6.33) and what is addressed to a LUN with no unit
// behind it (SPC-4 4.6.3), and forwards everything else to the unit.
//
//   REPORT LUNS, any LUN    the mapped LUNs, ascending, 8-byte single-level
//                           entries (SELECT REPORT 00h, 02h; 01h: none)
//   absent LUN, INQUIRY     standard data, peripheral qualifier 011b, type 1Fh;
//                           with EVPD: CHECK CONDITION 05/25/00
//   absent LUN, REQUEST SENSE   GOOD, sense data ILLEGAL REQUEST 25/00
//   absent LUN, anything else   CHECK CONDITION, ILLEGAL REQUEST 25/00
//                           LOGICAL UNIT NOT SUPPORTED
//
// LUNs are single-level (SAM-5 4.7): 0..255 in peripheral device addressing,
// 256..16383 in flat space addressing. decode_lun()/encode_lun() convert
// the 8-byte LUN field of a transport's PDU.
//
// Threads: a map lives on one loop (its executor, the units' loop): add,
// remove, replace, find, luns and execute are called there; mapped() from
// any loop (a transport's task management, on its connection's loop). Tasks the map answers
// itself complete there, never inside execute(). A task for a unit is handed
// to the unit on the unit's loop (at once when that is this loop, else
// posted) and completes on the unit's loop: a transport on another loop
// posts its completion back.
// Lifetime: units outlive the map's references to them (remove first);
// the map must not be destroyed while answers_in_flight() > 0.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

#include "target/scsi/logical_unit.h"
#include "target/scsi/task.h"
#include "target/scsi/unit_interface.h"

namespace strata::scsi {

// Single-level LUNs: 14 bits of flat space.
inline constexpr std::uint32_t lun_count = 16384;
// For task::lun when the PDU's LUN field cannot be decoded: no unit has it,
// so the map answers as for an absent LUN.
inline constexpr std::uint64_t unaddressable_lun = ~std::uint64_t{0};

// The LUN of an 8-byte LUN field: peripheral device addressing (method 00b,
// bus 0) or flat space addressing (method 01b), with the second to fourth
// levels zero. Empty for any other form (extended, logical unit
// addressing, a nonzero bus, multi-level): the transport then sets
// task::lun to unaddressable_lun.
std::optional<std::uint16_t> decode_lun(std::span<const std::uint8_t, 8> field) noexcept;

// The 8-byte LUN field for `lun`: peripheral device addressing below 256,
// flat space addressing (40h | lun >> 8, lun & FFh) from 256.
// REQUIRES: lun < lun_count.
std::array<std::uint8_t, 8> encode_lun(std::uint16_t lun) noexcept;

class lun_map {
 public:
  explicit lun_map(boost::asio::any_io_executor executor);
  // REQUIRES: answers_in_flight() == 0.
  ~lun_map();
  lun_map(const lun_map&) = delete;
  lun_map& operator=(const lun_map&) = delete;

  // Maps `lun` to `unit`. invalid_argument if lun >= lun_count or already mapped.
  std::error_code add(std::uint16_t lun, unit_interface& unit);
  // False if `lun` was not mapped. Tasks already handed to the unit go on.
  bool remove(std::uint16_t lun);
  // Puts `by` where `lun`'s unit was (the same volume, now reached another
  // way: served here after a takeover, or forwarded after a hand-over);
  // the unit it replaced, or null if `lun` was not mapped (then nothing
  // changes). Tasks already handed to the old unit go on there.
  unit_interface* replace(std::uint16_t lun, unit_interface& by);
  unit_interface* find(std::uint64_t lun) const noexcept;
  // Whether `lun` has a unit now, read from any thread: a transport on
  // another loop answers "LUN does not exist" with it, and hands what
  // needs the unit itself to executor().
  bool mapped(std::uint64_t lun) const noexcept;
  std::vector<std::uint16_t> luns() const;

  // Runs t for t.lun: answers it here, or hands it to the unit (above).
  // REQUIRES: on executor()'s thread; t.on_complete set; t not in flight.
  void execute(task& t) noexcept;

  boost::asio::any_io_executor executor() const noexcept { return executor_; }
  std::size_t answers_in_flight() const noexcept { return in_flight_; }

 private:
  void report_luns(task& t);
  void absent_lun(task& t);
  void complete_later(task& t);

  boost::asio::any_io_executor executor_;
  std::map<std::uint16_t, unit_interface*> units_;  // ordered: REPORT LUNS lists them ascending
  std::size_t in_flight_ = 0;
  // One bit per LUN with a unit: units_'s keys, for mapped().
  std::array<std::atomic<std::uint64_t>, lun_count / 64> mapped_{};
};

}  // namespace strata::scsi
