// A decorator that injects faults into any block device, through the same
// interface, so that tests of RAID, tiering and crash recovery need no
// test-only paths in the code they test.
//
// Faults, each switchable at any moment:
//   fail()               the device is gone: every request from now on, and
//                        every one still in flight, fails with device_failed
//   add_latent_error()   reads touching these blocks fail with media_error
//                        until the blocks are written again
//   fail_writes()        writes touching these blocks fail with media_error
//   set_full()           the backing store is full, as a sparse file on a
//                        full filesystem: a write that touches a block
//                        never written through this device (or discarded
//                        since: a punched hole) fails with no_space until
//                        set_full(false); overwrites, reads, discards and
//                        flushes go on
//   set_delay()          slow I/O: a seeded fraction of requests completes
//                        `extra` later
//   set_reorder()        command queueing: a seeded fraction of reads,
//                        writes and discards is held back, each for a random
//                        time in (0, max_hold], before it reaches the medium,
//                        so later requests overtake it (in application order
//                        as well as in completion order, as a drive with
//                        NCQ/TCQ reorders SIMPLE commands). Flushes are never
//                        held: a flush covers only writes completed before it.
//   corrupt()            silent corruption (bit rot): reads of these blocks
//                        return them with bits flipped, and no error, until
//                        they are written again
//   misdirect_next_write()
//                        the next write lands `offset` blocks from where it
//                        was sent (a misdirected write, as a drive's firmware
//                        or a cable can cause): it succeeds, the blocks it was
//                        meant for keep their old data, and others are
//                        overwritten
//   hang()/resume()      the device stops answering: requests are held, not
//                        lost, until resume() (or fail())
//   set_shuffle()        reads, writes and discards submitted in one turn of
//                        the loop reach the backing device -- so land and
//                        complete -- in a seeded random order, as a drive's
//                        queue reorders them (flushes keep their place: they
//                        cover only writes completed before them)
//   power_cut()          with volatile_write_cache: the power goes; each
//                        block written since the last completed flush is
//                        lost (drop) or, at random, kept or lost (tear: a
//                        multi-block write can land in part)
//
// With volatile_write_cache the device behaves like a drive with a write
// cache: writes (and discards, as writes of zeros) complete into memory, reads
// see them, and only a flush puts them on the backing device. Without it,
// writes pass straight through and power_cut() only switches the device off.
//
// Random choices come from `seed`, so a failing test reproduces; tests print
// it. Threads and lifetime: as block_device; backing device and clock outlive
// this one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/device/block_range_set.h"
#include "raid/device/clock.h"
#include "raid/device/forwarding_device.h"
#include "raid/device/request_queue.h"
#include "raid/device/timing.h"

namespace strata::device {

struct fault_options {
  std::uint64_t seed = 1;
  bool volatile_write_cache = false;
};

enum class power_loss { drop, tear };

struct fault_counters {
  std::uint64_t read_errors_injected = 0;
  std::uint64_t write_errors_injected = 0;
  std::uint64_t writes_refused_full = 0;  // set_full
  std::uint64_t writes_misdirected = 0;   // misdirect_next_write
  std::uint64_t corrupt_blocks_read = 0;  // corrupt
  std::uint64_t requests_failed_device_gone = 0;
  std::uint64_t requests_delayed = 0;
  std::uint64_t requests_reordered = 0;  // held back by set_reorder
  std::uint64_t blocks_lost_at_power_cut = 0;
  std::uint64_t blocks_kept_at_power_cut = 0;
};

class fault_device final : public forwarding_device {
 public:
  fault_device(block_device& backing, clock& c, const fault_options& options);
  ~fault_device() override;

  // With a volatile write cache, "mapped" throughout: the device below has
  // not seen the cached writes. Without one, the device below's answer.
  allocation_run allocation_at(std::uint64_t lba, std::uint64_t max_blocks) const noexcept override;
  void submit(request& req) noexcept override;

  void fail();
  bool failed() const noexcept { return failed_; }
  void add_latent_error(std::uint64_t lba, std::uint64_t block_count);
  std::uint64_t latent_error_blocks() const { return latent_errors_.block_count(); }
  void fail_writes(std::uint64_t lba, std::uint64_t block_count);
  void clear_write_failures();
  void set_full(bool full) noexcept { full_ = full; }
  void corrupt(std::uint64_t lba, std::uint64_t block_count);
  // Off the device's end (or 0): the write lands where it was sent.
  void misdirect_next_write(std::int64_t offset_blocks) noexcept {
    misdirect_offset_blocks_ = offset_blocks;
  }
  // The backing store's blocks ever written (what set_full lets be
  // overwritten), from now on kept in `blocks`: a sparse file keeps its
  // blocks across power cycles, so a caller that powers new electronics
  // over the same medium passes the same set. Until then: our own, empty.
  void keep_allocation_in(std::shared_ptr<block_range_set> blocks) noexcept {
    allocated_ = std::move(blocks);
  }
  // probability 0 turns delays off.
  void set_delay(duration extra, double probability);
  // probability 0 turns reordering off (requests already held stay held).
  void set_reorder(duration max_hold, double probability);
  // Requests taken and not yet answered (held back by set_reorder, late by
  // set_delay, or at the backing device): each completes later. A caller
  // that stopped waiting for this device (a group that failed it out)
  // must outlive them.
  std::size_t requests_pending() const noexcept {
    return reordered_.size() + delayed_.size() + backing_in_flight_;
  }
  void hang();
  void resume();
  void set_shuffle(bool on) noexcept { shuffle_ = on; }

  // Cuts the power (see above). `settled` is called, on the executor, once
  // in-flight backing I/O has finished and what survives is on the backing
  // device; from then on the backing device holds the crash image. Requests
  // fail with device_failed until power_on().
  void power_cut(power_loss mode, std::function<void()> settled);
  void power_on();

  // Blocks written but not yet flushed (volatile_write_cache only).
  std::size_t dirty_blocks() const noexcept { return dirty_.size(); }
  const fault_counters& counters() const noexcept { return counters_; }
  std::uint64_t seed() const noexcept { return options_.seed; }

 private:
  // A request passed on to the backing device.
  struct slot {
    fault_device* owner = nullptr;
    request* outer = nullptr;
    request inner;
    std::error_code result;         // final, once known
    std::uint64_t power_cycle = 0;  // set_reorder: power_cuts_ when it was held back
  };
  struct cached_block {
    aligned_buffer data;
    std::uint64_t version = 0;
  };
  using block_version = std::pair<std::uint64_t, std::uint64_t>;  // lba, version
  struct destage_write {
    fault_device* owner = nullptr;
    request req;
    iovec segment{};
    aligned_buffer data;
    std::vector<block_version> covered;  // the cached blocks it writes out
  };
  // One flush's work: write the dirty blocks out, then flush the backing device.
  struct destage {
    std::vector<std::unique_ptr<destage_write>> writes;
    request_list flushes;  // the flush requests it answers
    std::size_t outstanding = 0;
    std::error_code error;
    request backing_flush;
  };

  bool powered() const noexcept { return !power_off_; }
  void start(request& req);
  // Where a write lands: where it was sent, unless misdirected (once).
  std::uint64_t landing_lba(const request& req);
  void forward(request& req, std::optional<std::uint64_t> lba = std::nullopt);
  void rot(const request& req);  // corrupt(): flips bits of a read's corrupted blocks
  static void on_forwarded(request& inner) noexcept;
  void finish(request& req, std::error_code result);
  void deliver(slot& s);
  void release_reordered(slot& s);
  void write_to_cache(request& req, std::uint64_t lba);
  void overlay_cache(const request& req);
  // These cached blocks are on the backing device now: drop them from the
  // cache (unless rewritten since), or later, once no read that may have
  // fetched the older contents beneath them is still in flight.
  void mark_written_out(const std::vector<block_version>& blocks);
  void start_destage();
  static void on_destage_write(request& req) noexcept;
  static void on_destage_flush(request& req) noexcept;
  void end_destage();
  void backing_done();
  void fail_waiting();    // held and queued requests complete with device_failed
  void start_shuffled();  // the requests held for shuffling, in a random order
  void apply_power_cut();

  clock& clock_;
  fault_options options_;
  std::mt19937_64 random_;
  fault_counters counters_;

  bool failed_ = false;
  bool hung_ = false;
  bool power_off_ = false;
  bool full_ = false;
  std::uint64_t power_cuts_ = 0;
  block_range_set latent_errors_;
  block_range_set failing_writes_;
  block_range_set corrupted_;
  std::int64_t misdirect_offset_blocks_ = 0;
  std::shared_ptr<block_range_set> allocated_ =
      std::make_shared<block_range_set>();  // see keep_allocation_in
  duration delay_{};
  double delay_probability_ = 0;
  duration reorder_hold_max_{};
  double reorder_probability_ = 0;

  slot_pool<slot> slots_;
  deadline_queue<slot> delayed_;
  deadline_queue<slot> reordered_;  // held back before start()
  completion_queue answers_;
  request_list held_;  // while hung
  bool shuffle_ = false;
  std::vector<request*> shuffling_;  // submitted this turn, to start in a random order
  std::uint64_t backing_in_flight_ = 0;

  // volatile_write_cache
  std::map<std::uint64_t, cached_block> dirty_;  // lba -> newest unflushed data
  std::uint64_t next_version_ = 1;
  std::uint64_t cache_reads_in_flight_ = 0;  // reads that will overlay the cache
  std::vector<block_version> written_out_;   // to drop once those reads are done
  std::unique_ptr<destage> destaging_;
  request_list flushes_waiting_;  // arrived while a destage was running

  std::function<void()> on_power_settled_;
  power_loss power_loss_mode_ = power_loss::drop;
  bool power_cut_pending_ = false;
  std::vector<std::unique_ptr<destage_write>> crash_writes_;
  std::size_t crash_writes_outstanding_ = 0;
};

}  // namespace strata::device
