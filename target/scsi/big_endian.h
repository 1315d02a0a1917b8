// Big-endian fields, as every SCSI structure stores them: reading one, and
// building a structure field by field (parameter data, VPD pages, the
// saved reservation state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace strata::scsi {

inline std::uint64_t get_be(const std::uint8_t* p, int length_bytes) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < length_bytes; ++i) v = (v << 8) | p[i];
  return v;
}

inline void put_be(std::uint8_t* p, std::uint64_t v, int length_bytes) noexcept {
  for (int i = length_bytes - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<std::uint8_t>(v);
}

struct be_writer {
  std::vector<std::uint8_t> bytes;
  void u8(std::uint64_t v) { bytes.push_back(static_cast<std::uint8_t>(v)); }
  void be(std::uint64_t v, int length_bytes) {
    for (int i = length_bytes - 1; i >= 0; --i) u8(v >> (8 * i));
  }
  void zeros(std::size_t n) { bytes.resize(bytes.size() + n, 0); }
  void append(std::string_view s) { bytes.insert(bytes.end(), s.begin(), s.end()); }
  // Overwrites a field written before (a length known only at the end).
  void patch(std::size_t at, std::uint64_t v, int length_bytes) noexcept {
    put_be(bytes.data() + at, v, length_bytes);
  }
};

}  // namespace strata::scsi
