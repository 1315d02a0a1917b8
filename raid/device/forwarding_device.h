// A decorator's base, as leveldb's EnvWrapper is an Env's: geometry,
// executor and allocation_at go to the device below unless the decorator
// overrides them. A decorator writes only what it changes -- submit(),
// always -- and a query added to block_device later reaches the device
// below through every decorator that does not know it.
//
// A decorator that holds writes the device below has not seen (a volatile
// write cache) must override allocation_at: the device below could report
// deallocated blocks the decorator holds data for.
//
// Threads, lifetime: as block_device. The device below outlives this one.
#pragma once

#include "raid/device/block_device.h"

namespace strata::device {

class forwarding_device : public block_device {
 public:
  const block_geometry& geometry() const noexcept override { return backing_.geometry(); }
  boost::asio::any_io_executor executor() const noexcept override { return backing_.executor(); }
  allocation_run allocation_at(std::uint64_t lba,
                               std::uint64_t max_blocks) const noexcept override {
    return backing_.allocation_at(lba, max_blocks);
  }

 protected:
  explicit forwarding_device(block_device& backing) : backing_(backing) {}
  block_device& backing() const noexcept { return backing_; }

 private:
  block_device& backing_;
};

}  // namespace strata::device
