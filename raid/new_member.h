// A rebuild's first and last steps on the new member, the same for RAID-1
// and RAID-6.
//
// First (claim): the member's reserved area -- the superblock copies and
// the write-intent bitmap -- is read and written back as it is (zeros
// where it cannot be read) as the rebuild starts, before the member holds
// any of the group's metadata. Every block of its metadata is then held by
// its store, so a full backing store (a sparse file on a full filesystem
// refuses only blocks it never held) cannot refuse the bitmap or
// superblock writes that would fail it out of the group later. A claim the
// store refuses fails the rebuild instead (no_space), and no member. What
// the area held stays: a disk rebuilt in place keeps the superblock by
// which the next start finds it again (the group records it failed until
// its rebuild is recorded, so an old superblock is never trusted).
// Last (flush): the new member is flushed before its superblock calls it
// whole. Its copies may still sit in its write cache; a power cut could
// then keep the superblock and drop the copies, and assembly would trust a
// member holding data it never had.
//
// Threads: the group's loop. The group must not be destroyed while either
// step is in flight (the rebuild runs until both are done).
#pragma once

#include <cstring>
#include <system_error>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"

namespace strata::raid {

class new_member {
 public:
  // Called back, from the step's completion, with its outcome.
  using resume_fn = void (*)(void* group, std::error_code outcome);

  // The first step: blocks [0, reserved_blocks) of `member` read and
  // written back. If that fails, `failed(group, its error)` runs: the
  // rebuild is to stop.
  void claim(device::block_device& member, std::uint64_t reserved_blocks, void* group,
             resume_fn failed) {
    group_ = group;
    failed_ = failed;
    const std::uint64_t bytes = reserved_blocks * member.geometry().logical_block_size_bytes;
    area_ = device::aligned_buffer(bytes);
    segment_ = {area_.data(), bytes};
    member_ = &member;
    claim_req_ = device::request{};
    claim_req_.operation = device::op::read;
    claim_req_.priority = device::io_class::foreground;  // part of the rebuild: not deferred
    claim_req_.lba = 0;
    claim_req_.block_count = reserved_blocks;
    claim_req_.buffers = {&segment_, 1};
    claim_req_.context = this;
    claim_req_.on_complete = [](device::request& r) noexcept {
      auto& m = *static_cast<new_member*>(r.context);
      if (r.operation == device::op::read) {
        // Unreadable: zeros (what a blank area holds) take its place.
        if (r.result) std::memset(m.area_.data(), 0, m.area_.size());
        r.operation = device::op::write;
        r.result = {};
        m.member_->submit(r);
        return;
      }
      m.claiming_ = false;
      m.area_ = {};
      if (m.waiting_) {
        m.waiting_ = false;
        m.resume_(m.group_, r.result);  // the rebuild tried to end meanwhile: again
      } else if (r.result) {
        m.failed_(m.group_, r.result);
      }
    };
    claiming_ = true;
    member.submit(claim_req_);
  }

  // Whether a rebuild ending with `result` may end now: yes if the claim
  // is done and either the rebuild failed or the flush has completed since
  // the last end. Otherwise the claim is awaited, or the flush of `member`
  // starts (or is in flight already), and `resume(group, its outcome)`
  // runs when it completes, to end the rebuild again: it runs until then.
  bool ready(std::error_code result, device::block_device& member, void* group, resume_fn resume) {
    group_ = group;
    resume_ = resume;
    if (claiming_) {
      waiting_ = true;
      return false;
    }
    if (flushing_) return false;
    if (result || flushed_) {
      flushed_ = false;
      return true;
    }
    flush_req_ = device::request{};
    flush_req_.operation = device::op::flush;
    flush_req_.priority = device::io_class::foreground;
    flush_req_.context = this;
    flush_req_.on_complete = [](device::request& r) noexcept {
      auto& m = *static_cast<new_member*>(r.context);
      m.flushing_ = false;
      m.flushed_ = true;
      m.resume_(m.group_, r.result);
    };
    flushing_ = true;
    member.submit(flush_req_);
    return false;
  }

 private:
  device::aligned_buffer area_;  // the reserved area, while it is claimed
  device::block_device* member_ = nullptr;
  iovec segment_{};
  device::request claim_req_;
  device::request flush_req_;
  bool claiming_ = false;
  bool waiting_ = false;  // ready() was asked while the claim ran
  bool flushing_ = false;
  bool flushed_ = false;
  void* group_ = nullptr;
  resume_fn failed_ = nullptr;
  resume_fn resume_ = nullptr;
};

}  // namespace strata::raid
