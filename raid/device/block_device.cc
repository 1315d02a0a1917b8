#include "raid/device/block_device.h"

namespace strata::device {

std::error_code validate(const block_geometry& geometry, const request& req) noexcept {
  switch (req.operation) {
    case op::flush:
      if (req.block_count != 0 || req.lba != 0 || !req.buffers.empty()) {
        return errc::invalid_argument;
      }
      return {};
    case op::discard:
      if (!req.buffers.empty()) return errc::invalid_argument;
      break;
    case op::read:
    case op::write:
      break;
    default:
      return errc::invalid_argument;
  }

  if (req.block_count == 0) return errc::invalid_argument;
  // Written so that a huge lba or block_count cannot overflow the sum.
  if (req.lba >= geometry.block_count || req.block_count > geometry.block_count - req.lba) {
    return errc::out_of_range;
  }
  if (req.operation == op::discard) return {};

  if (req.buffers.empty() || req.buffers.size() > geometry.max_segments) {
    return errc::invalid_argument;
  }
  const std::uint64_t expected_bytes = transfer_bytes(geometry, req);
  std::uint64_t total_bytes = 0;
  for (const iovec& segment : req.buffers) {
    const auto address = reinterpret_cast<std::uintptr_t>(segment.iov_base);
    if (segment.iov_base == nullptr || segment.iov_len == 0 ||
        address % geometry.buffer_alignment_bytes != 0 ||
        segment.iov_len % geometry.logical_block_size_bytes != 0) {
      return errc::misaligned;
    }
    // Compared before adding, so that huge segments cannot wrap the sum.
    if (segment.iov_len > expected_bytes - total_bytes) return errc::invalid_argument;
    total_bytes += segment.iov_len;
  }
  if (total_bytes != expected_bytes) return errc::invalid_argument;
  return {};
}

}  // namespace strata::device
