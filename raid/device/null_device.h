// A device that stores nothing: every valid request completes at once (from
// the loop), and reads leave the caller's buffer as it was. The backing of
// the timing models where only time matters: the RAID engine alone in
// raidperf, and the shelf of the trace replayer, whose volumes are larger
// than this machine's memory.
#pragma once

#include "raid/device/block_device.h"
#include "raid/device/request_queue.h"

namespace strata::device {

class null_device final : public block_device {
 public:
  null_device(boost::asio::any_io_executor executor, std::uint32_t block_size_bytes,
              std::uint64_t block_count)
      : executor_(executor), queue_(executor) {
    geometry_.logical_block_size_bytes = block_size_bytes;
    geometry_.block_count = block_count;
    geometry_.buffer_alignment_bytes = block_size_bytes;
  }
  const block_geometry& geometry() const noexcept override { return geometry_; }
  boost::asio::any_io_executor executor() const noexcept override { return executor_; }
  void submit(request& req) noexcept override {
    queue_.complete_later(req, validate(geometry_, req));
  }

 private:
  boost::asio::any_io_executor executor_;
  block_geometry geometry_;
  completion_queue queue_;
};

}  // namespace strata::device
