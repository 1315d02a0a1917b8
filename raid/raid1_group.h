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
//            write succeeds if one member took it. A write that overlaps
//            one in flight waits for it, so that both members apply
//            overlapping writes in the same order.
//   flush    every working member.
//   discard  every working member (Strata's devices read discarded blocks
//            as zeros).
// With no working member left, every request gets device_failed.
//
// Superblocks and the write hole, as for RAID-6 (docs/raid-superblock.md,
// docs/raid-write-hole.md): format() and assemble(); every membership
// change recorded before acknowledgements go out; a write-intent bitmap,
// and after an unclean shutdown a resync of the marked regions that copies
// one member (the source) over the others. Until a region is resynced,
// reads of it go to the source only, so two reads never disagree.
//
// A failed member is rebuilt onto a spare (replace_member()), chunk by
// chunk, at background priority and at most options.sync_mb_per_s. Reads
// use the new member only below the rebuilt mark; writes go to it
// everywhere. A write never overlaps the chunk being copied: it waits for
// the copy, and the copy waits for the writes already in flight over it.
//
// A member whose backing store is full (no_space: a file-backed drive on a
// full filesystem) is not failed: nothing is wrong with the disk. The
// write fails with no_space, even if another member took it, and the
// regions it touched are torn (the members may differ there): reads of
// them go to one member only, and their bitmap bits stay set until the
// next assembly resyncs them.
//
// Members that fail a write or flush, keep failing reads
// (options.member_read_error_limit), or leave a write or flush unanswered
// past options.member_timeout are failed out; health() and
// on_member_event say why. Reads are not timed: an abandoned read could
// still land in the caller's buffer after its completion; a hung read
// waits for the device's own error handling.
//
// Threads and lifetime: as block_device; the members live on the same loop
// and outlive the group.
#pragma once

#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "raid/assembly.h"
#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/device/clock.h"
#include "raid/device/range_lock.h"
#include "raid/device/request_queue.h"
#include "raid/device/timing.h"
#include "raid/member_health.h"
#include "raid/member_replacement.h"
#include "raid/members.h"
#include "raid/new_member.h"
#include "raid/progress.h"
#include "raid/write_intent.h"

namespace strata::raid {

struct raid1_options {
  // Reserved at the start of every member for the superblock and bitmap.
  std::uint64_t reserved_bytes = 1 << 20;
  // For timeouts, pacing and ETAs; none: no timeouts, unpaced, no ETA.
  device::clock* clock = nullptr;
  // A write or flush unanswered for this long fails the member (zero: none).
  device::duration member_timeout{};
  unsigned member_read_error_limit = 20;
  member_event_fn on_member_event;
  // Member bytes one bit of the write-intent bitmap covers (grown until
  // the bitmap fits the reserved area).
  std::uint64_t bitmap_region_bytes = 64ull << 20;
  // Rebuild and resync: bytes copied at a time, and a ceiling in 10^6
  // bytes/s of copied data (0: none).
  std::uint64_t sync_chunk_bytes = 1 << 20;
  double sync_mb_per_s = 0;
};

class raid1_group final : public device::block_device, public member_replacement {
 public:
  using assembled = std::expected<std::unique_ptr<raid1_group>, error>;

  // Clear errors, nothing touched on any member, for: no members or more
  // than 255, members of different block sizes or sizes, on different
  // loops, listed twice, or too small for the reserved area.
  static std::expected<std::unique_ptr<raid1_group>, error> create(
      std::vector<device::block_device*> members, const raid1_options& options);
  // As raid6_group::format: a superblock and a clear bitmap on every
  // member, refused with nothing written if one belongs to a group.
  void format(std::function<void(std::optional<error>)> done);
  // As raid6_group::assemble; a RAID-1 group needs one current member.
  // After an unclean shutdown the resync starts in the background.
  static void assemble(std::vector<device::block_device*> devices, const raid1_options& options,
                       std::function<void(assembled)> done);
  ~raid1_group() override;

  const device::block_geometry& geometry() const noexcept override { return geometry_; }
  boost::asio::any_io_executor executor() const noexcept override {
    return members_[0]->executor();
  }
  void submit(device::request& req) noexcept override;

  void fail_member(unsigned member) { members_.fail(member, member_failure::administrator); }
  unsigned member_count() const noexcept override { return members_.size(); }
  bool member_failed(unsigned member) const noexcept override { return members_.failed(member); }
  // As raid6_group::member_device.
  const device::block_device* member_device(unsigned member) const noexcept {
    return members_[member];
  }
  // Members that hold the group's data: neither failed nor being rebuilt.
  unsigned working_members() const noexcept { return members_.whole_count(); }
  const member_health& health(unsigned member) const noexcept { return members_.health(member); }
  std::uint64_t reads_served(unsigned member) const noexcept { return reads_served_[member]; }
  std::uint64_t repaired_blocks() const noexcept { return repaired_blocks_; }
  // Bitmap regions torn by writes a full backing store refused.
  std::uint64_t torn_regions() const noexcept { return torn_regions_; }
  std::uint64_t events() const noexcept { return members_.log().events(); }

  // Puts `spare` in the place of failed member `member` and copies the
  // group onto it in the background. A clear error, nothing changed, if
  // the member is working or the spare does not fit (invalid_argument), a
  // rebuild or resync runs (busy), or no member works (device_failed).
  // `done` gets the outcome once recorded.
  std::optional<error> replace_member(unsigned member, device::block_device* spare,
                                      std::function<void(std::error_code)> done) override;
  rebuild_progress rebuild_status() const;
  // As raid6_group::cancel_rebuild.
  void cancel_rebuild();
  // The resync after an unclean shutdown: bytes of the marked regions.
  rebuild_progress resync_status() const;
  // As raid6_group::mark_clean: a resync still running pauses after the
  // chunk it is copying, and the next assembly resyncs what it left.
  void mark_clean(std::function<void(std::error_code)> done);
  std::uint64_t intent_regions_set() const noexcept { return intent_.regions_set(); }
  // No background work, metadata write or abandoned I/O in flight.
  bool idle() const noexcept {
    return !members_.log().updating() && !intent_.writing() &&
           !(sync_.running && !(sync_.paused && !sync_.chunk_locked)) && !intent_.cleaning() &&
           members_.abandoned_ios() == 0;
  }

 private:
  struct mirror_op {
    raid1_group* group = nullptr;
    device::request* outer = nullptr;
    std::vector<device::request> reqs;  // one per member
    std::vector<watched_io> watches;    // one per member
    unsigned pending = 0;
    unsigned succeeded = 0;
    unsigned abandoned = 0;  // member I/Os timed out, not yet answered
    bool finished = false;   // done, but held for its abandoned I/Os
    std::error_code last_error;
    bool out_of_space = false;  // a member's backing store refused a write, discard or flush
    // Reads: the range being read now -- the whole request, or one block of
    // it in the block-by-block retry -- and who has tried it.
    std::uint64_t range_lba = 0;  // of the group
    std::uint64_t range_blocks = 0;
    std::span<const iovec> range_buffers;
    iovec block_segment{};  // the range's buffer in the retry
    std::vector<bool> tried;
    std::vector<unsigned> bad;        // members that could not read the range
    bool narrow = false;              // in the block-by-block retry
    std::uint64_t writes_before = 0;  // writes_started_ when this read began
    // Writes: counted in the bitmap, and in the list of writes in flight.
    bool intent = false;
    mirror_op* write_prev = nullptr;
    mirror_op* write_next = nullptr;
    bool in_write_list = false;
    device::range_lock_entry lock_entry;  // in overlapping_writes_
  };

  raid1_group(std::vector<device::block_device*> members, std::uint64_t data_offset_blocks,
              const raid1_options& options);
  static assembled from_plan(assembly_plan plan, const raid1_options& options);
  // Reads: the range from the least busy member that may serve it and has
  // not tried it; its bad copies rewritten from the good one; then the
  // next range.
  void read_range(mirror_op& o);
  bool may_read(unsigned member, std::uint64_t lba, std::uint64_t blocks) const noexcept;
  static void on_read_done(device::request& r) noexcept;
  static void on_repair_done(device::request& r) noexcept;
  void range_done(mirror_op& o);
  void range_unreadable(mirror_op& o);
  void set_range(mirror_op& o, std::uint64_t block);  // one block of the request, for the retry
  // Writes and discards: the bitmap, then the sync chunk, then every member.
  // (Flushes go to members_.flush.)
  void start_write(mirror_op& o);
  void fan_out(mirror_op& o, device::op operation);
  static void on_fan_out_done(device::request& r) noexcept;
  void fan_out_done(mirror_op& o, unsigned member, std::error_code result);
  static void expire_fan_out(watched_io& w);
  void prepare(mirror_op& o, unsigned member, device::op operation, device::completion_fn done);
  void finish(mirror_op& o, std::error_code result);
  // A member failed out: a resync reading from it picks another source.
  void source_failed(unsigned member);
  superblock describe(unsigned member) const;
  std::pair<std::uint64_t, std::uint64_t> regions_of(const mirror_op& o) const noexcept;

  // Rebuild and resync: copying chunks from a source member to targets.
  struct sync_state {
    // A finished rebuild's new member is flushed before the rebuild ends.
    new_member target_steps;  // the new member claimed first, flushed last
    bool running = false;
    bool rebuild = false;         // else a resync
    bool paused = false;          // a resync stopped by mark_clean: no chunk starts any more
    unsigned source = ~0u;        // a resync's source (reads of unsynced regions go there)
    std::vector<bool> regions;    // a resync's marked regions, not yet done
    std::uint64_t next_lba = 0;   // everything below is in sync
    std::uint64_t chunk_end = 0;  // the chunk [next_lba, chunk_end) being copied
    bool chunk_locked = false;
    unsigned chunk_waiting = 0;  // writes in flight over the chunk, to wait for
    std::vector<bool> tried;     // sources tried for the chunk
    unsigned reading_from = 0;   // the chunk's source now
    device::aligned_buffer buffer;
    iovec segment{};
    device::request read;
    std::vector<device::request> writes;
    unsigned pending = 0;
    std::vector<mirror_op*> blocked;  // writes waiting for the chunk
    std::uint64_t bytes_done = 0;
    std::uint64_t bytes_total = 0;
    device::time_point started{};
    std::error_code error;
    std::function<void(std::error_code)> done;
    std::unique_ptr<device::timer> pacing;
  };
  void start_sync();
  void sync_next();
  void copy_chunk();
  static void on_sync_read(device::request& r) noexcept;
  static void on_sync_written(device::request& r) noexcept;
  void chunk_done();
  void end_sync(std::error_code result);
  bool overlaps_chunk(const mirror_op& o) const noexcept;
  bool unsynced(std::uint64_t lba, std::uint64_t blocks) const noexcept;
  // A write of these group blocks reached some members only, for want of
  // space: their regions stay marked until the next assembly resyncs them.
  void tear(std::uint64_t lba, std::uint64_t blocks);
  bool torn(std::uint64_t lba, std::uint64_t blocks) const noexcept;
  // The one member that answers reads of regions whose members may differ.
  unsigned divergent_reader() const noexcept;

  // Which device is each member, their failures (all but one survived;
  // a rebuild's new member counts as lost until it ends), timeouts,
  // flushes, acknowledgements and the superblocks that record membership.
  // A rebuild's new member is members_.rebuilding().
  member_set members_;
  std::uint64_t data_offset_blocks_;
  device::block_geometry geometry_;
  std::vector<unsigned> in_flight_;
  std::vector<std::uint64_t> reads_served_;
  unsigned next_read_ = 0;
  // Writes and discards started: a read's repair goes ahead only if none
  // started since the read began, so it cannot put old data over new.
  std::uint64_t writes_started_ = 0;
  std::uint64_t repaired_blocks_ = 0;
  device::slot_pool<mirror_op> ops_;
  device::completion_queue rejected_;
  mirror_op* writes_head_ = nullptr;  // writes in flight on the members
  // Reads writing good data back over bad blocks, and the writes that wait
  // for them: a repair and a newer write to the same blocks never race on
  // a member.
  std::vector<mirror_op*> repairing_;
  std::vector<mirror_op*> repair_blocked_;
  bool overlaps_write(std::uint64_t lba, std::uint64_t blocks) const noexcept;
  // Overlapping writes, one at a time: a write (or discard) that overlaps
  // one holding the lock waits for it, and for older waiters it overlaps,
  // so every member applies them in the same order and the mirrors never
  // diverge (md serializes overlapping writes for the same reason). Reads
  // do not take it. A write takes it last, after the bitmap, repairs and
  // the sync chunk, and holds it until it ends (one woken from it that a
  // repair or the chunk then stops lets go of it meanwhile).
  device::range_lock<mirror_op, &mirror_op::lock_entry> overlapping_writes_;
  void leave_overlap_lock(mirror_op& o);
  device::clock* clock_;
  std::uint64_t sync_chunk_blocks_;
  double sync_mb_per_s_;
  sync_state sync_;
  std::vector<bool> torn_;  // per bitmap region: torn by a full backing store
  std::uint64_t torn_regions_ = 0;
  write_intent intent_;
  std::uint64_t intent_region_blocks_ = 0;
};

}  // namespace strata::raid
