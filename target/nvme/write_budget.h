// The write data one host may hold in a port's memory at once, across all
// its controllers and queues: what a write that needs an R2T reserves
// before its buffer is allocated and its R2T sent. A host that asks for
// more waits (its R2Ts go out as others finish), as SPDK's transports wait
// for a shared data buffer: no host can take the daemon's memory, however
// many controllers, queues and commands it opens.
//
// Threads: a host's queues live on any loop; the budget is under its own
// short lock, off everything but the taking and giving back.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace strata::nvme {

class write_budget {
 public:
  explicit write_budget(std::uint64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // Takes `bytes` if they are free, and says so; if not, `wake` (unless
  // empty) is kept, and called once, on the thread that gives bytes back,
  // when some are. A queue keeps at most one wake here at a time.
  bool take(std::uint64_t bytes, std::function<void()> wake) {
    std::lock_guard hold(mutex_);
    if (used_bytes_ + bytes <= capacity_bytes_) {
      used_bytes_ += bytes;
      return true;
    }
    if (wake) waiting_.push_back(std::move(wake));
    return false;
  }
  void give_back(std::uint64_t bytes) {
    std::vector<std::function<void()>> wake;
    {
      std::lock_guard hold(mutex_);
      used_bytes_ -= std::min(bytes, used_bytes_);
      wake.swap(waiting_);
    }
    for (auto& w : wake) w();
  }
  std::uint64_t used_bytes() const {
    std::lock_guard hold(mutex_);
    return used_bytes_;
  }
  std::uint64_t capacity_bytes() const noexcept { return capacity_bytes_; }

 private:
  const std::uint64_t capacity_bytes_;
  mutable std::mutex mutex_;
  std::uint64_t used_bytes_ = 0;
  std::vector<std::function<void()>> waiting_;
};

}  // namespace strata::nvme
