// A RAID-1 group: every member holds the same data; itself a block_device.
// With two or more members it is the performance tier's SSD mirror; with
// one it is a single-disk group (a controller's read-cache SSD), the same
// code with no redundancy.
//
//   read     one working member, the one with the fewest requests in flight
//            (ties rotate), so a mirror serves reads from all its SSDs. A
//            read error moves on to the next member; the good data is then
//            written back over the unreadable blocks (repaired_blocks()),
//            unless a write started meanwhile (it may cover them with newer
//            data; the next read finds any block still bad). If
//            every member fails the whole read, it is retried block by
//            block, so bad blocks in different places on each member still
//            read; only a block no member can read is a media error.
//   write    every working member at once; complete when all have answered.
//            A member that fails a write is failed out of the group; the
//            write succeeds if one member took it.
//   flush    every working member.
//   discard  every working member (Strata's devices read discarded blocks
//            as zeros).
// With no working member left, every request gets device_failed.
//
// Not yet: superblocks and assembly, resync of a member that missed writes,
// rebuild onto a spare.
//
// Threads and lifetime: as block_device; the members live on the same loop
// and outlive the group.
#pragma once

#include <expected>
#include <memory>
#include <span>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/device/request_queue.h"
#include "raid/device/timing.h"

namespace strata::raid {

struct raid1_options {
  // Reserved at the start of every member for the superblock.
  std::uint64_t reserved_bytes = 1 << 20;
};

class raid1_group final : public device::block_device {
 public:
  // Clear errors, nothing touched on any member, for: no members or more
  // than 255, members of different block sizes or sizes, on different
  // loops, listed twice, or too small for the reserved area.
  static std::expected<std::unique_ptr<raid1_group>, error> create(
      std::vector<device::block_device*> members, const raid1_options& options);

  const device::block_geometry& geometry() const noexcept override { return geometry_; }
  boost::asio::any_io_executor executor() const noexcept override { return members_[0]->executor(); }
  void submit(device::request& req) noexcept override;

  void fail_member(unsigned member);
  bool member_failed(unsigned member) const noexcept { return failed_[member]; }
  unsigned working_members() const noexcept;
  std::uint64_t reads_served(unsigned member) const noexcept { return reads_served_[member]; }
  std::uint64_t repaired_blocks() const noexcept { return repaired_blocks_; }

 private:
  struct mirror_op {
    raid1_group* group = nullptr;
    device::request* outer = nullptr;
    std::vector<device::request> reqs;  // one per member
    unsigned pending = 0;
    unsigned succeeded = 0;
    std::error_code last_error;
    // Reads: the range being read now -- the whole request, or one block of
    // it in the block-by-block retry -- and who has tried it.
    std::uint64_t range_lba = 0;  // of the group
    std::uint64_t range_blocks = 0;
    std::span<const iovec> range_buffers;
    iovec block_segment{};        // the range's buffer in the retry
    std::vector<bool> tried;
    std::vector<unsigned> bad;    // members that could not read the range
    bool narrow = false;          // in the block-by-block retry
    std::uint64_t writes_before = 0;  // writes_started_ when this read began
  };

  raid1_group(std::vector<device::block_device*> members, std::uint64_t data_offset_blocks);
  // Reads: the range from the least busy working member that has not tried
  // it; its bad copies rewritten from the good one; then the next range.
  void read_range(mirror_op& o);
  static void on_read_done(device::request& r) noexcept;
  static void on_repair_done(device::request& r) noexcept;
  void range_done(mirror_op& o);
  void range_unreadable(mirror_op& o);
  void set_range(mirror_op& o, std::uint64_t block);  // one block of the request, for the retry
  void fan_out(mirror_op& o, device::op operation);
  static void on_fan_out_done(device::request& r) noexcept;
  void prepare(mirror_op& o, unsigned member, device::op operation, device::completion_fn done);
  void finish(mirror_op& o, std::error_code result);

  std::vector<device::block_device*> members_;
  std::uint64_t data_offset_blocks_;
  device::block_geometry geometry_;
  std::vector<bool> failed_;
  std::vector<unsigned> in_flight_;
  std::vector<std::uint64_t> reads_served_;
  unsigned next_read_ = 0;
  // Writes and discards started: a read's repair goes ahead only if none
  // started since the read began, so it cannot put old data over new.
  std::uint64_t writes_started_ = 0;
  std::uint64_t repaired_blocks_ = 0;
  device::slot_pool<mirror_op> ops_;
  device::completion_queue rejected_;
};

}  // namespace strata::raid
