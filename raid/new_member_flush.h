// A rebuild's last step, the same for RAID-1 and RAID-6: the new member is
// flushed before its superblock calls it whole. Its copies may still sit
// in its write cache; a power cut could then keep the superblock and drop
// the copies, and assembly would trust a member holding data it never had.
//
// Threads: the group's loop.
#pragma once

#include <system_error>

#include "raid/device/block_device.h"

namespace strata::raid {

class new_member_flush {
 public:
  // Called back, from the flush's completion, with its outcome.
  using resume_fn = void (*)(void* group, std::error_code flushed);

  // Whether a rebuild ending with `result` may end now: yes if it failed,
  // or if the flush has completed since the last end. Otherwise the flush
  // of `member` starts (or is in flight already) and `resume(group, its
  // outcome)` runs when it completes, to end the rebuild again: the
  // rebuild runs until then.
  bool ready(std::error_code result, device::block_device& member, void* group, resume_fn resume) {
    if (in_flight_) return false;
    if (result || flushed_) {
      flushed_ = false;
      return true;
    }
    req_ = device::request{};
    req_.operation = device::op::flush;
    req_.priority = device::io_class::background;
    req_.context = this;
    req_.on_complete = [](device::request& r) noexcept {
      auto& f = *static_cast<new_member_flush*>(r.context);
      f.in_flight_ = false;
      f.flushed_ = true;
      f.resume_(f.group_, r.result);
    };
    group_ = group;
    resume_ = resume;
    in_flight_ = true;
    member.submit(req_);
    return false;
  }

 private:
  device::request req_;
  bool in_flight_ = false;
  bool flushed_ = false;
  void* group_ = nullptr;
  resume_fn resume_ = nullptr;
};

}  // namespace strata::raid
