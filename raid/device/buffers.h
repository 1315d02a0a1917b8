// Copying between a request's scatter-gather list and flat memory.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace strata::device {

// Calls fn(piece, length) for each piece of [offset_bytes, offset_bytes +
// length_bytes) of the list that lies in one segment, in order.
template <class Fn>
void for_each_piece(std::span<const iovec> buffers, std::uint64_t offset_bytes,
                    std::uint64_t length_bytes, Fn fn) noexcept {
  for (const iovec& segment : buffers) {
    if (length_bytes == 0) return;
    if (offset_bytes >= segment.iov_len) {
      offset_bytes -= segment.iov_len;
      continue;
    }
    const std::uint64_t n = std::min<std::uint64_t>(segment.iov_len - offset_bytes, length_bytes);
    fn(static_cast<std::byte*>(segment.iov_base) + offset_bytes, n);
    length_bytes -= n;
    offset_bytes = 0;
  }
}

// Copies `length_bytes` from the list, starting `offset_bytes` into it, to `destination`.
inline void copy_from_buffers(std::span<const iovec> buffers, std::uint64_t offset_bytes,
                              std::byte* destination, std::uint64_t length_bytes) noexcept {
  for_each_piece(buffers, offset_bytes, length_bytes, [&](const std::byte* piece, std::uint64_t n) {
    std::memcpy(destination, piece, n);
    destination += n;
  });
}

// Copies `length_bytes` from `source` into the list, starting `offset_bytes` into it.
inline void copy_to_buffers(std::span<const iovec> buffers, std::uint64_t offset_bytes,
                            const std::byte* source, std::uint64_t length_bytes) noexcept {
  for_each_piece(buffers, offset_bytes, length_bytes, [&](std::byte* piece, std::uint64_t n) {
    std::memcpy(piece, source, n);
    source += n;
  });
}

// XORs `length_bytes` of the list, starting `offset_bytes` into it, into `destination`.
inline void xor_from_buffers(std::span<const iovec> buffers, std::uint64_t offset_bytes,
                             std::byte* destination, std::uint64_t length_bytes) noexcept {
  for_each_piece(buffers, offset_bytes, length_bytes, [&](const std::byte* piece, std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) destination[i] ^= piece[i];
    destination += n;
  });
}

// The address of [offset_bytes, offset_bytes + length_bytes) of the list if
// that range lies within one segment, else nullptr.
inline std::byte* contiguous_at(std::span<const iovec> buffers, std::uint64_t offset_bytes,
                                std::uint64_t length_bytes) noexcept {
  for (const iovec& segment : buffers) {
    if (offset_bytes < segment.iov_len) {
      return offset_bytes + length_bytes <= segment.iov_len
                 ? static_cast<std::byte*>(segment.iov_base) + offset_bytes
                 : nullptr;
    }
    offset_bytes -= segment.iov_len;
  }
  return nullptr;
}

}  // namespace strata::device
