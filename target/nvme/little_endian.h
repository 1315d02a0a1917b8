// NVMe's fields in wire bytes: numbers little-endian, text ASCII padded
// with spaces (never NUL).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace strata::nvme {

inline std::uint16_t get16(std::span<const std::uint8_t> b, std::size_t at) noexcept {
  return static_cast<std::uint16_t>(b[at] | b[at + 1] << 8);
}
inline std::uint32_t get32(std::span<const std::uint8_t> b, std::size_t at) noexcept {
  return std::uint32_t{b[at]} | std::uint32_t{b[at + 1]} << 8 | std::uint32_t{b[at + 2]} << 16 |
         std::uint32_t{b[at + 3]} << 24;
}
inline std::uint64_t get64(std::span<const std::uint8_t> b, std::size_t at) noexcept {
  return get32(b, at) | std::uint64_t{get32(b, at + 4)} << 32;
}
inline void put16(std::uint8_t* at, std::uint16_t v) noexcept {
  at[0] = static_cast<std::uint8_t>(v);
  at[1] = static_cast<std::uint8_t>(v >> 8);
}
inline void put32(std::uint8_t* at, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
inline void put64(std::uint8_t* at, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

inline void put_ascii(std::uint8_t* at, std::size_t field_bytes, std::string_view text) noexcept {
  std::fill_n(at, field_bytes, std::uint8_t{' '});
  std::memcpy(at, text.data(), std::min(field_bytes, text.size()));
}

}  // namespace strata::nvme
