#include "target/nvme/registers.h"

#include <algorithm>

namespace strata::nvme {

namespace {

// CC's fields.
constexpr std::uint32_t cc_enable = 0x1;
constexpr std::uint32_t css(std::uint32_t cc) noexcept {
  return (cc >> 4) & 0x7;
}
constexpr std::uint32_t mps(std::uint32_t cc) noexcept {
  return (cc >> 7) & 0xf;
}
constexpr std::uint32_t ams(std::uint32_t cc) noexcept {
  return (cc >> 11) & 0x7;
}
constexpr std::uint32_t shn(std::uint32_t cc) noexcept {
  return (cc >> 14) & 0x3;
}
constexpr std::uint32_t iosqes(std::uint32_t cc) noexcept {
  return (cc >> 16) & 0xf;
}
constexpr std::uint32_t iocqes(std::uint32_t cc) noexcept {
  return (cc >> 20) & 0xf;
}

}  // namespace

controller_registers::controller_registers(std::uint32_t max_queue_entries,
                                           std::uint32_t ready_timeout_ms) noexcept {
  const std::uint64_t mqes = std::clamp<std::uint32_t>(max_queue_entries, 2, 65536) - 1;
  const std::uint64_t to = std::clamp<std::uint32_t>((ready_timeout_ms + 499) / 500, 1, 255);
  // CQR 1 (queues are physically contiguous: always, over a fabric), CSS
  // bit 0 (the NVM command set), MPSMIN and MPSMAX 0 (4 KiB pages).
  cap_ = mqes | std::uint64_t{1} << 16 | to << 24 | std::uint64_t{1} << 37;
}

std::expected<std::uint64_t, status> controller_registers::get(std::uint32_t offset,
                                                               unsigned size_bytes) const noexcept {
  const status invalid = generic(code::invalid_field);
  switch (offset) {
    case property::cap:
      return size_bytes == 8 ? std::expected<std::uint64_t, status>(cap_)
                             : std::unexpected(invalid);
    case property::vs:
      return size_bytes == 4 ? std::expected<std::uint64_t, status>(version)
                             : std::unexpected(invalid);
    case property::cc:
      return size_bytes == 4 ? std::expected<std::uint64_t, status>(cc_) : std::unexpected(invalid);
    case property::csts:
      return size_bytes == 4 ? std::expected<std::uint64_t, status>(csts_)
                             : std::unexpected(invalid);
    default:
      return std::unexpected(invalid);
  }
}

std::expected<controller_registers::change, status> controller_registers::set(
    std::uint32_t offset, unsigned size_bytes, std::uint64_t value) noexcept {
  if (offset != property::cc || size_bytes != 4)
    return std::unexpected(generic(code::invalid_field));
  const auto next = static_cast<std::uint32_t>(value);
  const std::uint32_t before = cc_;
  cc_ = next;
  change what = change::none;
  if ((next & cc_enable) != 0 && (before & cc_enable) == 0) {
    // 64-byte submission and 16-byte completion entries, 4 KiB pages, the
    // NVM command set, round robin: anything else is a configuration this
    // controller cannot run.
    if (iosqes(next) != 6 || iocqes(next) != 4 || mps(next) != 0 || css(next) != 0 ||
        ams(next) != 0) {
      csts_ |= csts_fatal;
    } else {
      csts_ = csts_ready;  // a shutdown's SHST ends here too
      what = change::enabled;
    }
  } else if ((next & cc_enable) == 0 && (before & cc_enable) != 0) {
    csts_ &= ~(csts_ready | csts_fatal);
    what = change::reset;
  }
  if (shn(next) != 0 && shn(before) == 0) {
    // Nothing volatile to write out here (the volumes' caches are the
    // array's, not this controller's): complete at once. Not ready, and CC
    // cleared, as nvmet does: the host enables it again from scratch.
    csts_ = (csts_ & ~csts_ready) | csts_shutdown_complete;
    cc_ = 0;
    what = change::shut_down;
  } else if (shn(next) == 0 && shn(before) != 0) {
    csts_ &= ~csts_shutdown_complete;
  }
  return what;
}

}  // namespace strata::nvme
