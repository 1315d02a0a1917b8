// CRC32C (Castagnoli), computed by ISA-L: iSCSI's header and data digests
// (RFC 7143 section 13.1, RFC 3385), NVMe/TCP's (NVMe/TCP 1.0 section
// 3.6.1), the partner link's frame headers and the saved reservation
// state's checksum. On the wire a digest goes least significant byte first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace strata {

// CRC32C of `bytes`, continuing from `running` (the result of a previous
// call over the bytes before these, or 0 to start).
std::uint32_t crc32c(std::span<const std::uint8_t> bytes, std::uint32_t running = 0) noexcept;

inline void put_digest(std::uint32_t d, std::uint8_t out[4]) noexcept {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::uint8_t>(d >> (8 * i));
}
inline std::uint32_t get_digest(const std::uint8_t in[4]) noexcept {
  return std::uint32_t{in[0]} | std::uint32_t{in[1]} << 8 | std::uint32_t{in[2]} << 16 |
         std::uint32_t{in[3]} << 24;
}

}  // namespace strata
