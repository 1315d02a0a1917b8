// A contiguous part of another device, as a device of its own: blocks
// [first_block, first_block + block_count) of the device below, renumbered
// from 0. How one mirrored SSD group holds the write logs of several RAID-6
// groups, each in its own slice.
//
// Threads, lifetime: as block_device; the device below outlives this one.
#pragma once

#include "raid/device/forwarding_device.h"
#include "raid/device/request_queue.h"
#include "raid/device/timing.h"

namespace strata::device {

class slice_device final : public forwarding_device {
 public:
  // REQUIRES: first_block + block_count <= device.geometry().block_count.
  slice_device(block_device& device, std::uint64_t first_block, std::uint64_t block_count)
      : forwarding_device(device),
        first_block_(first_block),
        geometry_(device.geometry()),
        rejected_(device.executor()) {
    geometry_.block_count = block_count;
  }

  const block_geometry& geometry() const noexcept override { return geometry_; }
  allocation_run allocation_at(std::uint64_t lba,
                               std::uint64_t max_blocks) const noexcept override {
    return backing().allocation_at(lba + first_block_, max_blocks);
  }
  void submit(request& req) noexcept override {
    if (auto ec = validate(geometry_, req)) return rejected_.complete_later(req, ec);
    below& b = ios_.acquire();
    b.outer = &req;
    b.dev = this;
    b.req = request{};
    copy_io(req, b.req);
    if (req.operation != op::flush) b.req.lba += first_block_;
    b.req.context = &b;
    b.req.on_complete = [](request& r) noexcept {
      below& x = *static_cast<below*>(r.context);
      request& outer = *x.outer;
      x.dev->ios_.release(x);
      complete(outer, r.result);
    };
    backing().submit(b.req);
  }

 private:
  struct below {
    request req;
    request* outer = nullptr;
    slice_device* dev = nullptr;
  };
  std::uint64_t first_block_;
  block_geometry geometry_;
  completion_queue rejected_;
  slot_pool<below> ios_;
};

}  // namespace strata::device
