#include "raid/device/memory_device.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

namespace strata::device {

std::expected<std::unique_ptr<memory_device>, error> memory_device::create(
    boost::asio::any_io_executor executor, const memory_options& options) {
  const std::uint32_t block_size = options.logical_block_size_bytes;
  if (block_size != 512 && block_size != 4096) {
    return std::unexpected(make_error(
        errc::invalid_argument, "memory device: logical block size must be 512 or 4096, not " +
                                    std::to_string(block_size)));
  }
  if (options.block_count == 0 ||
      options.block_count > std::numeric_limits<std::uint64_t>::max() / block_size) {
    return std::unexpected(make_error(
        errc::invalid_argument,
        "memory device: block count " + std::to_string(options.block_count) + " is out of range"));
  }
  block_geometry geometry;
  geometry.logical_block_size_bytes = block_size;
  geometry.block_count = options.block_count;
  geometry.buffer_alignment_bytes = block_size;
  return std::unique_ptr<memory_device>(new memory_device(std::move(executor), geometry));
}

memory_device::memory_device(boost::asio::any_io_executor executor, const block_geometry& geometry)
    : executor_(executor),
      geometry_(geometry),
      chunks_((geometry.size_bytes() + chunk_size_bytes - 1) / chunk_size_bytes),
      queue_(executor, [this](request& req) { return execute(req); }) {}

void memory_device::submit(request& req) noexcept {
  // Validation now, execution later: both results travel through the queue.
  queue_.complete_later(req, validate(geometry_, req));
}

std::error_code memory_device::execute(request& req) {
  const std::uint64_t offset_bytes = req.lba * geometry_.logical_block_size_bytes;
  std::uint64_t position = offset_bytes;
  switch (req.operation) {
    case op::read:
      for (const iovec& segment : req.buffers) {
        copy_out(position, static_cast<std::byte*>(segment.iov_base), segment.iov_len);
        position += segment.iov_len;
      }
      break;
    case op::write:
      for (const iovec& segment : req.buffers) {
        copy_in(position, static_cast<const std::byte*>(segment.iov_base), segment.iov_len);
        position += segment.iov_len;
      }
      break;
    case op::discard:
      zero(offset_bytes, transfer_bytes(geometry_, req));
      break;
    case op::flush:
      break;  // RAM is as durable as this device gets.
  }
  return {};
}

namespace {

// Calls fn(chunk_index, offset_within_chunk, length_bytes) for each piece of
// [offset_bytes, offset_bytes + length_bytes) that falls in one chunk.
template <class Fn>
void for_each_chunk(std::uint64_t offset_bytes, std::uint64_t length_bytes, Fn fn) {
  while (length_bytes > 0) {
    const std::uint64_t within = offset_bytes % memory_device::chunk_size_bytes;
    const std::uint64_t n = std::min(length_bytes, memory_device::chunk_size_bytes - within);
    fn(offset_bytes / memory_device::chunk_size_bytes, within, n);
    offset_bytes += n;
    length_bytes -= n;
  }
}

}  // namespace

void memory_device::copy_out(std::uint64_t offset_bytes, std::byte* destination,
                             std::uint64_t length_bytes) const {
  for_each_chunk(offset_bytes, length_bytes,
                 [&](std::uint64_t index, std::uint64_t within, std::uint64_t n) {
                   if (chunks_[index]) {
                     std::memcpy(destination, chunks_[index].get() + within, n);
                   } else {
                     std::memset(destination, 0, n);
                   }
                   destination += n;
                 });
}

void memory_device::copy_in(std::uint64_t offset_bytes, const std::byte* source,
                            std::uint64_t length_bytes) {
  for_each_chunk(offset_bytes, length_bytes,
                 [&](std::uint64_t index, std::uint64_t within, std::uint64_t n) {
                   if (!chunks_[index]) {
                     // Value-initialised: a fresh chunk reads as zeros outside this write.
                     chunks_[index] = std::make_unique<std::byte[]>(chunk_size_bytes);
                     ++resident_chunks_;
                   }
                   std::memcpy(chunks_[index].get() + within, source, n);
                   source += n;
                 });
}

void memory_device::zero(std::uint64_t offset_bytes, std::uint64_t length_bytes) {
  for_each_chunk(offset_bytes, length_bytes,
                 [&](std::uint64_t index, std::uint64_t within, std::uint64_t n) {
                   if (!chunks_[index]) return;
                   if (n == chunk_size_bytes) {
                     chunks_[index].reset();
                     --resident_chunks_;
                   } else {
                     std::memset(chunks_[index].get() + within, 0, n);
                   }
                 });
}

}  // namespace strata::device
