// A group's write-intent bitmap (docs/raid-write-hole.md): one bit per
// region of the group, on every member that holds the group's metadata.
// A region's bit is on disk before any write to it starts, and is cleared
// only after a flush has covered every write to it and it has been idle
// for a flush interval (or at once, eager, for a clean shutdown). After a
// crash, the regions whose bits are set are the ones to resync.
//
// The group says what a region is (RAID-6: stripes; RAID-1: blocks) and
// which members hold metadata; this class keeps the bits, writes them
// (each write followed by a flush, batched into rounds), and holds the
// writes that must wait for a round.
//
// Threads: the group's loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/watchdog.h"

namespace strata::raid {

class write_intent {
 public:
  struct hooks {
    const std::vector<device::block_device*>* members = nullptr;
    // Whether the member holds the group's metadata now (working, not being rebuilt).
    std::function<bool(unsigned)> holds_metadata;
    // A member could not take the bitmap: it must leave the group.
    std::function<void(unsigned)> write_failed;
    // A write that waited for its bit may go on now.
    std::function<void(void*)> resume;
  };

  // The watchdog times the bitmap writes (a hung member must not hold the
  // writes waiting for a round forever).
  write_intent(boost::asio::any_io_executor executor, member_watchdog& watchdog, hooks h);
  ~write_intent();
  write_intent(const write_intent&) = delete;
  write_intent& operator=(const write_intent&) = delete;

  // Bytes a bitmap of `regions` bits takes on disk: whole blocks.
  static std::uint64_t bytes_for(std::uint64_t regions, std::uint64_t block_size) noexcept;
  // Where the bitmap lies on every member, and its size; no regions: none.
  void configure(std::uint64_t offset_blocks, std::uint64_t regions, std::uint64_t block_size);
  bool enabled() const noexcept { return regions_ > 0; }
  std::uint64_t offset_blocks() const noexcept { return offset_blocks_; }
  std::uint64_t regions() const noexcept { return regions_; }
  // Regions whose bit is set in memory: the ones a crash now would resync.
  std::uint64_t regions_set() const noexcept { return set_.size(); }

  // A write (or anything that must not be forgotten by a crash, such as a
  // resync of the region) starts; its region stays marked until end().
  void begin(std::uint64_t region);
  void end(std::uint64_t region);
  // Whether the region's bit is on disk, so a write there may go. If not,
  // wait() queues `op` and hooks.resume(op) runs once it is.
  bool durable(std::uint64_t region) const noexcept;
  void wait(std::uint64_t region, void* op);

  // Flushes of the group: the number of this flush (flush_started), and
  // at its successful end the regions it lets go of.
  std::uint64_t flush_started() noexcept { return ++flush_epoch_; }
  void flush_done(std::uint64_t epoch, bool eager);

  // A member failed: its bitmap write is not waited for.
  void forget(unsigned member);
  // A member holds metadata now (a rebuild onto it ended): its bitmap is
  // blank, so no bit is on every metadata member any more. The image is
  // written to all of them again, and until that round ends no region
  // counts as durable: writes wait for it, as for a bit of their own.
  // (Without it, once every member had been replaced in turn, no member's
  // bitmap would name a region written since: a crash, and no resync.)
  void member_joined();
  // Writes the bitmap as it is now to every member that holds metadata;
  // `then` once it is on them (at format, and after assembly).
  void write_now(std::function<void()> then);
  // Runs `then` once no bitmap write is in flight.
  void when_settled(std::function<void()> then);
  bool writing() const noexcept { return write_in_flight_; }

  // A clean shutdown: flushes `group` (whose flush completion calls
  // flush_done eager for this request: is_clean_flush) and, once the
  // cleared bitmap is on disk, `done` gets the flush's outcome. A second
  // call while one runs gets invalid_argument.
  void mark_clean(device::block_device& group, std::function<void(std::error_code)> done);
  bool is_clean_flush(const device::request& req) const noexcept { return &req == &clean_req_; }
  bool cleaning() const noexcept { return cleaning_; }

  // At assembly: reads every metadata member's bitmap and takes the union
  // (an unreadable one counts as all set); `then` gets the regions set.
  void load(std::function<void(std::vector<std::uint64_t>)> then);

 private:
  void start_round();
  void member_written(unsigned member, std::uint64_t ticket, std::error_code ec);
  void round_done();

  boost::asio::any_io_executor executor_;
  member_watchdog& watchdog_;
  hooks hooks_;
  std::uint64_t offset_blocks_ = 0;
  std::uint64_t regions_ = 0;
  std::uint64_t bytes_ = 0;
  std::vector<std::byte> wanted_;      // set before a write, cleared after a flush covered it
  std::vector<std::byte> durable_;     // on every metadata member
  std::vector<std::byte> writing_;     // the image being written
  std::vector<std::uint64_t> set_;     // regions whose bit is set in wanted_
  std::vector<std::uint32_t> writes_;  // per region: in flight
  std::vector<std::uint64_t>
      started_epoch_;                      // per region: flushes started when its last write began
  std::vector<std::uint64_t> done_epoch_;  // ... and when its last write ended
  std::uint64_t flush_epoch_ = 0;
  std::vector<std::pair<std::uint64_t, void*>> waiters_;  // region, op
  std::vector<std::function<void()>> after_round_;
  std::vector<std::uint64_t> ticket_;  // per member: 0 none outstanding
  std::vector<watched_io> watch_;      // per member: its bitmap write
  std::uint64_t tickets_issued_ = 0;
  unsigned pending_ = 0;
  bool write_in_flight_ = false;
  bool again_ = false;
  bool round_left_member_out_ = false;  // member_joined() during the round in flight
  device::request clean_req_;
  std::function<void(std::error_code)> clean_done_;
  bool cleaning_ = false;
  // Lets a member's late answer see that this bitmap is gone.
  std::shared_ptr<write_intent*> self_;
};

}  // namespace strata::raid
