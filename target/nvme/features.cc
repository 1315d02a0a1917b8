#include "target/nvme/features.h"

#include <algorithm>

namespace strata::nvme {

namespace {
constexpr std::uint8_t feature_not_saveable = 0x0d;        // command specific
constexpr std::uint8_t async_event_limit_exceeded = 0x05;  // command specific
}  // namespace

controller_features::controller_features(std::uint16_t max_io_queues, std::uint32_t keep_alive_ms,
                                         bool volatile_write_cache) noexcept
    : max_io_queues_(std::max<std::uint16_t>(max_io_queues, 1)),
      default_keep_alive_ms_(keep_alive_ms),
      default_write_cache_(volatile_write_cache),
      keep_alive_ms_(keep_alive_ms),
      write_cache_(volatile_write_cache) {}

std::expected<std::uint32_t, status> controller_features::set(std::uint8_t fid, std::uint32_t cdw11,
                                                              bool save) noexcept {
  if (save)
    return std::unexpected(status{status_type::command_specific, feature_not_saveable, true});
  switch (fid) {
    case feature::number_of_queues: {
      const std::uint32_t sq = cdw11 & 0xffff, cq = cdw11 >> 16;
      if (sq == 0xffff || cq == 0xffff) return std::unexpected(generic(code::invalid_field));
      // Granted: what was asked, up to the most; the answer says it, 0's based.
      // Asked again once set, it answers what it granted (queues exist by then).
      if (!queues_set_) {
        io_queues_ = static_cast<std::uint16_t>(
            std::min<std::uint32_t>(std::max(sq, cq) + 1, max_io_queues_));
        queues_set_ = true;
      }
      const std::uint32_t granted = io_queues_ - 1u;
      return granted | granted << 16;
    }
    case feature::keep_alive_timer:
      keep_alive_ms_ = cdw11;
      return 0;
    case feature::volatile_write_cache:
      write_cache_ = (cdw11 & 1) != 0;
      return 0;
    case feature::async_event_configuration:
      async_config_ =
          cdw11 & (async_event_config::namespace_attribute | async_event_config::ana_change);
      return 0;
    case feature::arbitration:
      return 0;  // round robin only: nothing to keep
    default:
      return std::unexpected(generic(code::invalid_field));
  }
}

std::expected<std::uint32_t, status> controller_features::get(std::uint8_t fid,
                                                              std::uint8_t select) const noexcept {
  if (select > 3) return std::unexpected(generic(code::invalid_field));
  const bool current = select == 0;
  if (select == 3) {
    // Capabilities: changeable (bit 2), neither saveable nor per namespace.
    switch (fid) {
      case feature::number_of_queues:
      case feature::keep_alive_timer:
      case feature::volatile_write_cache:
      case feature::async_event_configuration:
      case feature::arbitration:
        return 0x4;
      default:
        return std::unexpected(generic(code::invalid_field));
    }
  }
  switch (fid) {
    case feature::number_of_queues: {
      const std::uint32_t q = (current ? io_queues_ : max_io_queues_) - 1u;
      return q | q << 16;
    }
    case feature::keep_alive_timer:
      return current ? keep_alive_ms_ : default_keep_alive_ms_;
    case feature::volatile_write_cache:
      return (current ? write_cache_ : default_write_cache_) ? 1 : 0;
    case feature::async_event_configuration:
      return current ? async_config_ : 0;
    case feature::arbitration:
      return 0;
    default:
      return std::unexpected(generic(code::invalid_field));
  }
}

async_event namespace_attribute_changed() noexcept {
  return {2, 0x00, 0x04};
}
async_event ana_changed() noexcept {
  return {2, 0x03, 0x0c};
}

async_events::answer async_events::request(std::uint16_t command_id) {
  if (!pending_.empty()) {
    const async_event e = pending_.front();
    pending_.pop_front();
    return {success, async_completion{command_id, e.result()}};
  }
  if (waiting_.size() >= limit_)
    return {status{status_type::command_specific, async_event_limit_exceeded, true}, std::nullopt};
  waiting_.push_back(command_id);
  return {success, std::nullopt};
}

std::optional<async_completion> async_events::raise(const async_event& e, std::uint32_t enabled) {
  const std::uint32_t needs =
      e.log_page == 0x0c ? async_event_config::ana_change : async_event_config::namespace_attribute;
  if ((enabled & needs) == 0) return std::nullopt;
  if (std::ranges::find(masked_, e.log_page) != masked_.end()) return std::nullopt;
  masked_.push_back(e.log_page);
  if (waiting_.empty()) {
    pending_.push_back(e);
    return std::nullopt;
  }
  const std::uint16_t cid = waiting_.front();
  waiting_.pop_front();
  return async_completion{cid, e.result()};
}

void async_events::page_read(std::uint8_t log_page) {
  std::erase(masked_, log_page);
}

}  // namespace strata::nvme
