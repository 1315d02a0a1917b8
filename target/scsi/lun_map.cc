#include "target/scsi/lun_map.h"

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <cassert>
#include <new>
#include <utility>

#include "raid/device/status.h"
#include "target/scsi/sense.h"

namespace strata::scsi {

std::optional<std::uint16_t> decode_lun(std::span<const std::uint8_t, 8> field) noexcept {
  // Single level: the second, third and fourth levels are zero.
  if (std::any_of(field.begin() + 2, field.end(), [](std::uint8_t b) { return b != 0; }))
    return std::nullopt;
  switch (field[0] >> 6) {
    case 0:  // peripheral device addressing; a bus other than 0 is a hierarchy we do not have
      if ((field[0] & 0x3f) != 0) return std::nullopt;
      return field[1];
    case 1:  // flat space addressing
      return static_cast<std::uint16_t>(((field[0] & 0x3f) << 8) | field[1]);
    default:  // logical unit addressing, extended addressing
      return std::nullopt;
  }
}

std::array<std::uint8_t, 8> encode_lun(std::uint16_t lun) noexcept {
  assert(lun < lun_count);
  std::array<std::uint8_t, 8> field{};
  if (lun < 256) {
    field[1] = static_cast<std::uint8_t>(lun);
  } else {
    field[0] = static_cast<std::uint8_t>(0x40 | ((lun >> 8) & 0x3f));
    field[1] = static_cast<std::uint8_t>(lun & 0xff);
  }
  return field;
}

lun_map::lun_map(boost::asio::any_io_executor executor) : executor_(std::move(executor)) {}

lun_map::~lun_map() {
  assert(in_flight_ == 0 && "lun_map destroyed with answers in flight");
}

std::error_code lun_map::add(std::uint16_t lun, unit_interface& unit) {
  if (lun >= lun_count || units_.contains(lun)) return errc::invalid_argument;
  units_.emplace(lun, &unit);
  mapped_[lun / 64].fetch_or(std::uint64_t{1} << (lun % 64), std::memory_order_release);
  return {};
}

bool lun_map::remove(std::uint16_t lun) {
  if (units_.erase(lun) == 0) return false;
  mapped_[lun / 64].fetch_and(~(std::uint64_t{1} << (lun % 64)), std::memory_order_release);
  return true;
}

bool lun_map::mapped(std::uint64_t lun) const noexcept {
  return lun < lun_count &&
         (mapped_[lun / 64].load(std::memory_order_acquire) >> (lun % 64) & 1) != 0;
}

unit_interface* lun_map::replace(std::uint16_t lun, unit_interface& by) {
  const auto it = units_.find(lun);
  if (it == units_.end()) return nullptr;
  return std::exchange(it->second, &by);
}

unit_interface* lun_map::find(std::uint64_t lun) const noexcept {
  if (lun >= lun_count) return nullptr;
  const auto it = units_.find(static_cast<std::uint16_t>(lun));
  return it == units_.end() ? nullptr : it->second;
}

std::vector<std::uint16_t> lun_map::luns() const {
  std::vector<std::uint16_t> out;
  out.reserve(units_.size());
  for (const auto& [lun, unit] : units_) out.push_back(lun);
  return out;
}

void lun_map::execute(task& t) noexcept {
  try {
    // REPORT LUNS is the target's, whatever LUN it is addressed to (SPC-4
    // 6.33: LUN 0, or any, for a target with no LUN 0).
    if (t.cdb[0] == 0xa0) return report_luns(t);
    unit_interface* unit = find(t.lun);
    if (unit == nullptr) return absent_lun(t);
    // On the unit's loop: inline when that is this thread, else posted.
    boost::asio::dispatch(unit->executor(), [unit, &t] { unit->execute(t); });
  } catch (const std::bad_alloc&) {
    // Thrown before anything was posted or handed to a unit.
    t.result = status::busy;
    t.data_in_bytes = 0;
    complete_later(t);
  }
}

void lun_map::report_luns(task& t) {
  t.result = status::good;
  t.sense_data = sense{};
  const std::uint8_t select_report = t.cdb[2];
  const std::uint32_t allocation_length = (std::uint32_t{t.cdb[6]} << 24) |
                                          (std::uint32_t{t.cdb[7]} << 16) |
                                          (std::uint32_t{t.cdb[8]} << 8) | t.cdb[9];
  // 00h: logical units; 02h: all, including well-known ones (we have none);
  // 01h: well-known logical units only: an empty list.
  if (select_report > 0x02) {
    set_check_condition(t, illegal_request(asc::invalid_field_in_cdb));
    t.data_in_bytes = 0;
    return complete_later(t);
  }
  // The initiator now knows the inventory: a pending REPORTED LUNS DATA
  // HAS CHANGED is cleared on every unit it sees (SPC-4 6.33).
  for (const auto& [lun, unit] : units_) {
    // The port's name is copied: a posted clear may outlive the task.
    boost::asio::dispatch(unit->executor(), [unit, port = std::string(t.nexus.initiator_port),
                                             at = t.nexus.relative_target_port] {
      unit->clear_unit_attention(i_t_nexus{port, at}, asc::reported_luns_data_has_changed);
    });
  }
  const std::size_t count = select_report == 0x01 ? 0 : units_.size();
  std::vector<std::uint8_t> data(8 + 8 * count, 0);
  const std::uint32_t list_bytes = static_cast<std::uint32_t>(8 * count);
  data[0] = static_cast<std::uint8_t>(list_bytes >> 24);
  data[1] = static_cast<std::uint8_t>(list_bytes >> 16);
  data[2] = static_cast<std::uint8_t>(list_bytes >> 8);
  data[3] = static_cast<std::uint8_t>(list_bytes);
  if (count > 0) {
    std::size_t at = 8;
    for (const auto& [lun, unit] : units_) {
      const auto field = encode_lun(lun);
      std::copy(field.begin(), field.end(), data.begin() + at);
      at += 8;
    }
  }
  if (!set_data_in(t, data, allocation_length)) t.result = status::busy;
  complete_later(t);
}

void lun_map::absent_lun(task& t) {
  t.result = status::good;
  t.sense_data = sense{};
  t.data_in_bytes = 0;
  const sense not_supported = illegal_request(asc::lu_not_supported);
  switch (t.cdb[0]) {
    case 0x12: {                                      // INQUIRY
      if ((t.cdb[1] & 0x03) != 0 || t.cdb[2] != 0) {  // EVPD or CmdDt: no pages for no unit
        set_check_condition(t, not_supported);
        break;
      }
      const std::uint32_t allocation_length = (std::uint32_t{t.cdb[3]} << 8) | t.cdb[4];
      // SPC-4 6.6.2: qualifier 011b, device type 1Fh; the rest as any unit's.
      const auto data = standard_inquiry(unit_identity{}, 0x7f);
      if (!set_data_in(t, data, allocation_length)) t.result = status::busy;
      break;
    }
    case 0x03: {  // REQUEST SENSE: the answer is the sense data, with GOOD (SPC-4 6.39)
      std::array<std::uint8_t, descriptor_sense_max_bytes> data{};
      std::size_t n = 0;
      if ((t.cdb[1] & 0x01) != 0) {
        n = encode_descriptor_sense(not_supported, data);
      } else {
        n = encode_fixed_sense(not_supported, std::span<std::uint8_t, fixed_sense_bytes>(
                                                  data.data(), fixed_sense_bytes));
      }
      if (!set_data_in(t, std::span(data.data(), n), t.cdb[4])) t.result = status::busy;
      break;
    }
    default:
      set_check_condition(t, not_supported);
      break;
  }
  complete_later(t);
}

void lun_map::complete_later(task& t) {
  ++in_flight_;
  boost::asio::post(executor_, [this, &t] {
    --in_flight_;  // first: the completion may destroy this map
    t.on_complete(t);
  });
}

}  // namespace strata::scsi
