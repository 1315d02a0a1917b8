// A block device in RAM: for tests, for benchmarks of the layers above, and
// as the backing store of model devices that simulate large drives.
//
// Sparse: memory is taken in 1 MiB chunks on first write, so a 10 TB model
// drive that sees a few GiB of writes costs a few GiB (plus 8 bytes of index
// per chunk). Reads of never-written blocks return zeros; discard zeroes its
// range and gives whole chunks back.
//
// Requests execute after submit() returns, in submission order, each in one
// piece; their completions follow on the executor.
#pragma once

#include <expected>
#include <memory>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/device/request_queue.h"

namespace strata::device {

struct memory_options {
  std::uint32_t logical_block_size_bytes = 4096;  // 512 or 4096
  std::uint64_t block_count = 0;
};

class memory_device final : public block_device {
 public:
  static constexpr std::uint64_t chunk_size_bytes = 1 << 20;

  // Fails with invalid_argument for a block size other than 512 or 4096 or a
  // zero block count.
  static std::expected<std::unique_ptr<memory_device>, error> create(
      boost::asio::any_io_executor executor, const memory_options& options);

  const block_geometry& geometry() const noexcept override { return geometry_; }
  boost::asio::any_io_executor executor() const noexcept override { return executor_; }
  void submit(request& req) noexcept override;

  // Bytes of RAM holding data (whole chunks).
  std::uint64_t resident_bytes() const noexcept { return resident_chunks_ * chunk_size_bytes; }

 private:
  memory_device(boost::asio::any_io_executor executor, const block_geometry& geometry);
  std::error_code execute(request& req);
  void copy_out(std::uint64_t offset_bytes, std::byte* destination,
                std::uint64_t length_bytes) const;
  void copy_in(std::uint64_t offset_bytes, const std::byte* source, std::uint64_t length_bytes);
  void zero(std::uint64_t offset_bytes, std::uint64_t length_bytes);

  boost::asio::any_io_executor executor_;
  block_geometry geometry_;
  std::vector<std::unique_ptr<std::byte[]>> chunks_;
  std::uint64_t resident_chunks_ = 0;
  completion_queue queue_;
};

}  // namespace strata::device
