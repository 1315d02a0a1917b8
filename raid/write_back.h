// Write-back caching in front of a slow group (RAID-6 HDDs): a write is
// acknowledged once it is in a durable log on a mirrored SSD group, and is
// written to the group later, coalesced by stripe ("destage"). The format
// of the log is in docs/write-log.md.
//
//   write    appended to the log as one record (or several, if long): its
//            header and data in one write, then a flush of the log device
//            that covers every record written meanwhile (group commit).
//            Records are acknowledged in log order, so a replay that stops
//            at the first torn record loses nothing acknowledged. Then the
//            dirty index (memory) points the blocks at the log.
//            A long write over blocks the log holds nothing of goes to
//            the group directly (bypass_min_blocks), as does any write
//            marked request::write_through (its volume writes through).
//   read     blocks the index holds dirty are read from the log; the rest
//            from the group. Always the newest acknowledged data.
//   destage  in the background, oldest first: every dirty block of one
//            full stripe of the group is read from the log and written to
//            the group (one full-stripe write when the stripe is all dirty:
//            no read-modify-write), under a lock on that stripe.
//   reclaim  once the oldest records' blocks are all destaged (or written
//            over), the group is flushed and the superblock's checkpoint
//            moves past them: their log space is free.
//   flush    what was acknowledged is durable already; a flush reaches the
//            group only if writes went to it directly since the last one.
//   full     a write that finds no room waits, in arrival order, for
//            destage to make some (back-pressure, never an error).
//
// Opening a log replays it: every record after the checkpoint, up to the
// first that is torn or stale, goes back into the dirty index, and a marker
// record is appended before anything else. A controller that never wrote
// the log replays it the same way (takeover): nothing but the log device
// and the group is needed.
//
// Write-through: when an administrator asks for it, or the log's group has
// lost its redundancy (set_log_degraded), or the log cannot be written,
// writes go to the group directly, and destage drains the log. A write over
// blocks the log still holds goes to the log while it can be written (a
// replay must not bring older data back over it); once the log has failed,
// writes go direct and the dirty blocks are destaged from the log if it
// still reads. Dirty blocks the log can no longer give back are lost: they
// read as media errors until written again, and are counted and reported.
//
// Threads: the group's loop. The group and the log device outlive this.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/device/block_range_set.h"
#include "raid/device/clock.h"
#include "raid/device/forwarding_device.h"
#include "raid/device/range_lock.h"
#include "raid/device/request_queue.h"
#include "raid/device/status.h"
#include "raid/device/timing.h"
#include "raid/write_log_format.h"

namespace strata::raid {

enum class cache_mode : std::uint8_t { write_back, write_through };
const char* to_string(cache_mode m) noexcept;

struct write_back_options {
  device::clock* clock = nullptr;  // required
  // The group's full stripe, in its blocks: destage's unit.
  std::uint64_t stripe_blocks = 1;
  // Destage runs while the log holds more than this fraction, or its
  // oldest dirty data is older than destage_age, or the cache writes
  // through; below both it waits, so that rewrites of hot blocks coalesce.
  double destage_above_fraction = 0.10;
  device::duration destage_age = std::chrono::seconds(2);
  unsigned destage_stripes_in_flight = 16;
  // A longer write is logged as several records.
  std::uint32_t max_record_blocks = 256;
  // A write of at least this many blocks over blocks the log holds
  // nothing of goes straight to the group, as bcache's sequential cutoff
  // sends streams past the cache: its full stripes cost the group no
  // read-modify-write, and logging it would only copy it twice. 0: the
  // larger of 1 MiB and one full stripe.
  std::uint64_t bypass_min_blocks = 0;
  // The log failed and its last checkpoint could not be written: the
  // owner records durably, elsewhere, that this log must not be replayed
  // (and formats it anew rather than open it), then calls back. The
  // generation given is the newest superblock's the log wrote: a log
  // whose superblocks are still at most one past it (a checkpoint may
  // have landed on one mirror) is the retired one; a newer one was
  // formatted since (format's after_generation). Writes over blocks the
  // log holds wait until then. None: they go on at once, and a log that
  // reads again at the next start could bring older data back over them.
  std::function<void(std::uint64_t generation, std::function<void(std::error_code)>)>
      persist_retirement;
  // Blocks lost with an earlier log (persist_lost's last set): they read
  // as media errors until written, as blocks lost here do.
  device::block_range_set lost_at_open;
  // The lost blocks changed (some lost, or lost ones written again): the
  // owner keeps the set durably, elsewhere (the log may be what failed),
  // and gives it back as lost_at_open at the next open, so that a restart
  // never serves the group's older data for them. On the loop; only the
  // last call's set matters.
  std::function<void(const device::block_range_set&)> persist_lost;
  // Mode changes and lost data, in words, from the loop.
  std::function<void(const std::string&)> on_event;
};

struct write_back_counters {
  std::uint64_t writes_logged = 0;   // host writes acknowledged from the log
  std::uint64_t writes_direct = 0;   // host writes sent to the group (write-through, long ones)
  std::uint64_t reads_from_log = 0;  // read pieces served from dirty data
  std::uint64_t log_flushes = 0;     // group commits
  std::uint64_t records = 0;
  std::uint64_t stripes_destaged = 0;
  std::uint64_t full_stripe_writes = 0;  // destage writes of a whole stripe
  std::uint64_t blocks_destaged = 0;
  std::uint64_t checkpoints = 0;
  std::uint64_t writes_waited_for_space = 0;
  std::uint64_t blocks_lost = 0;  // dirty blocks the failed log could not give back
  std::uint64_t records_replayed = 0;
  // Records whose data failed its checksum with whole records after them
  // (media damage): their blocks are lost, the records after them replayed.
  std::uint64_t records_damaged = 0;
};

class write_back_device final : public device::forwarding_device {
  // What takes the lock over the group's blocks: direct writes, destages.
  struct lock_user {
    device::range_lock_entry lock_entry;
    void (*granted)(write_back_device&, lock_user&) noexcept = nullptr;
  };

 public:
  using opened = std::expected<std::unique_ptr<write_back_device>, error>;

  // Writes an empty log for `group` on `log` (whatever it held), synced.
  // Refused (invalid_argument): block sizes other than 4096, a log of
  // fewer than 64 blocks past its superblocks.
  // Its superblocks' generations are after_generation + 1 and + 2: a log
  // formatted over a retired one is told from it by them.
  static void format(device::block_device& log, const device::block_geometry& group,
                     const wlog::log_id& id, std::function<void(std::error_code)> done,
                     std::uint64_t after_generation = 0);
  // The newest valid superblock's generation on `log` for the group `id`
  // (0: none), or the read's error.
  static void newest_generation(
      device::block_device& log, const wlog::log_id& id,
      std::function<void(std::expected<std::uint64_t, std::error_code>)> done);
  // Opens the log on `log` for `group`, replays it, appends the restart
  // marker (synced), and hands over the device, serving. Errors: no valid
  // superblock, or one written for another group (invalid_argument); the
  // log device's read or write error.
  static void open(device::block_device& group, device::block_device& log, const wlog::log_id& id,
                   const write_back_options& options, std::function<void(opened)> done);
  ~write_back_device() override;

  const device::block_geometry& geometry() const noexcept override { return geometry_; }
  // Mapped throughout: the group below has not seen the dirty blocks.
  device::allocation_run allocation_at(std::uint64_t,
                                       std::uint64_t max_blocks) const noexcept override {
    return {device::allocation::mapped, max_blocks};
  }
  void submit(device::request& req) noexcept override;

  // What an administrator asked for (write_through drains the log).
  void set_mode(cache_mode m);
  // The log's group lost (true) or regained (false) its redundancy.
  void set_log_degraded(bool degraded);
  cache_mode requested_mode() const noexcept { return requested_; }
  // What writes get now, and why not write-back ("" when it is).
  cache_mode mode() const noexcept {
    return write_through_reason().empty() ? cache_mode::write_back : cache_mode::write_through;
  }
  std::string write_through_reason() const;
  bool log_failed() const noexcept { return log_failed_; }

  std::uint64_t dirty_blocks() const noexcept { return dirty_blocks_; }
  // Of the group's blocks [lba, lba + blocks): how many are dirty, and how
  // many were lost with the log (what a volume's statistics report of the
  // extents it has here). O(log n + the index entries in the range).
  std::uint64_t dirty_blocks_in(std::uint64_t lba, std::uint64_t blocks) const;
  std::uint64_t lost_blocks_in(std::uint64_t lba, std::uint64_t blocks) const {
    return lost_.count_in(lba, blocks);
  }
  std::uint64_t log_capacity_blocks() const noexcept { return data_blocks_; }
  std::uint64_t log_used_blocks() const noexcept { return head_ - tail_; }
  const write_back_counters& counters() const noexcept { return counters_; }
  std::string debug_state() const;
  // What is wrong with the log's and the index's bookkeeping (tests), or "".
  std::string check_invariants() const;
  // Nothing in flight and nothing left to destage or reclaim.
  bool drained() const noexcept;
  // No request, destage or checkpoint in flight.
  bool idle() const noexcept;
  // Stops starting destages and checkpoints (a clean stop: the log keeps
  // what is dirty, for the next open); `done` once those in flight ended.
  void stop(std::function<void()> done);

 private:
  struct record;
  struct host_io;
  struct destage_job;
  struct checkpoint_io;
  // Blocks [lba, lba + blocks) of the group, last written by `rec`, whose
  // data starts at log block `log_block`. Dirty until destaged; then clean,
  // and kept until the checkpoint passes `rec` (a write over them must
  // go to the log too, or a replay would bring `rec` back over it).
  struct read_span {  // a piece of a read: from the log (rec set) or the group
    std::uint64_t lba, blocks, log_block;
    record* rec;
  };
  std::vector<read_span> read_spans_;
  struct extent {
    std::uint64_t blocks = 0;
    std::uint64_t log_block = 0;
    record* rec = nullptr;
    bool dirty = true;
  };

  write_back_device(device::block_device& group, device::block_device& log,
                    const wlog::superblock& sb, const write_back_options& options);
  class replayer;
  friend class replayer;

  // I/O from above.
  void start_read(host_io& h);
  void start_write(host_io& h);
  void log_next_records(host_io& h);
  bool place_record(host_io& h);
  void write_direct(host_io& h, std::uint64_t from);
  void write_after_failure(host_io& h, std::uint64_t from);
  void release_held();
  void release_orphan(record& rec);
  void append_marker();
  static void on_record_written(device::request& r) noexcept;
  static void on_read_piece(device::request& r) noexcept;
  static void on_direct_written(device::request& r) noexcept;
  void host_part_done(host_io& h, std::error_code result);
  void issue_log_flush();
  static void on_log_flush(device::request& r) noexcept;
  void acknowledge_durable();
  void fail_log(std::error_code why);
  void redo_direct(record& rec);

  // The index.
  // Takes [a, b) out of the index's entries, trimming and splitting them.
  void index_cut(std::uint64_t a, std::uint64_t b);
  void index_insert(record& rec, std::uint64_t lba, std::uint64_t blocks, std::uint64_t log_block);
  bool index_overlaps(std::uint64_t lba, std::uint64_t blocks) const;
  void mark_clean(const record* rec, std::uint64_t lba, std::uint64_t blocks);

  // Destage and reclaim.
  void maybe_destage();
  bool want_destage() const noexcept;
  void destage_locked(destage_job& j);
  static void on_destage_read(device::request& r) noexcept;
  static destage_job* destage_job_step(device::request& r) noexcept;
  static void on_gaps_read(device::request& r) noexcept;
  void write_destage(destage_job& j);
  static void on_destage_written(device::request& r) noexcept;
  void destage_done(destage_job& j);
  void maybe_checkpoint();
  void checkpoint_step(std::error_code ec);
  bool reclaimable(const record& rec) const noexcept;
  void release_record(record& rec);
  void wake_space_waiters();
  void group_unwritable(std::error_code why);
  void note_event(const std::string& what);
  // The group failed a destage or a flush: none for 5 s, then again.
  void pause_destage(const std::string& why);
  void lose(std::uint64_t lba, std::uint64_t blocks, const std::string& why);
  // Lost blocks [lba, +blocks) hold good data again (written, or
  // discarded): no longer lost.
  void forget_lost(std::uint64_t lba, std::uint64_t blocks);
  void check_idle();

  device::block_device& group_;
  device::block_device& log_;
  write_back_options options_;
  device::block_geometry geometry_;
  wlog::log_id id_;
  std::uint64_t data_blocks_ = 0;
  std::uint64_t sb_generation_ = 0;

  // The log: positions [tail_, head_) are in use (tail_ as checkpointed);
  // records_ holds every record from the checkpoint on, in seq order.
  std::uint64_t head_ = 0;
  std::uint64_t tail_ = 0;
  std::uint64_t next_seq_ = 0;
  // Every record below this seq is acknowledged (or was read back whole at
  // open): written into each header (wlog::record_header::acked_below).
  std::uint64_t acked_below_ = 0;
  std::deque<record*> records_;
  device::slot_pool<record> record_slots_;
  std::map<std::uint64_t, extent> index_;
  std::uint64_t dirty_blocks_ = 0;
  device::block_range_set lost_;

  // Group commit: flush number n covers the records written before it was
  // submitted (record::written_epoch < n).
  std::uint64_t flush_epoch_ = 0;
  bool log_flush_in_flight_ = false;
  device::request log_flush_;

  device::slot_pool<host_io> ios_;
  std::deque<host_io*> space_waiters_;  // writes waiting for log space, in arrival order
  std::uint64_t host_in_flight_ = 0;
  std::uint64_t direct_writes_since_flush_ = 0;
  std::uint64_t group_flushes_in_flight_ = 0;  // host flushes sent on to the group, not yet done
  device::completion_queue deferred_;
  // Direct writes and destages: one at a time over any block of the group,
  // in arrival order.
  device::range_lock<lock_user, &lock_user::lock_entry> group_lock_;
  void lock(lock_user& u, std::uint64_t lba, std::uint64_t blocks);
  void unlock(lock_user& u);
  std::size_t unacked_from_ = 0;  // records_[unacked_from_] is the oldest not yet acknowledged
  // records_[0, reclaimable_) are reclaimable (a record never stops being so).
  std::size_t reclaimable_ = 0;
  // Every acknowledged record before records_[first_dirty_] is destaged (a
  // record's dirty count only falls): where destage's search starts.
  mutable std::size_t first_dirty_ = 0;
  std::size_t first_dirty() const noexcept;
  std::uint64_t durable_epoch_ = 0;
  std::function<void(std::error_code)> marker_done_;  // open(): the restart marker is durable
  bool submitting_ = false;
  device::aligned_buffer zeros_;               // discards are logged as writes of zeros
  device::time_point destage_paused_until_{};  // the group failed a destage: retry then
  device::time_point
      retire_retry_at_{};  // a failed log's last checkpoint could not flush the group

  cache_mode requested_ = cache_mode::write_back;
  bool log_degraded_ = false;
  bool log_failed_ = false;
  bool retiring_elsewhere_ = false;
  bool retired_ = false;       // the failed log was emptied (or could not be): nothing held
  std::uint64_t orphans_ = 0;  // records out of records_ whose I/O still runs
  std::vector<std::function<void()>> held_;  // writes over logged blocks, after the log failed
  bool stopping_ = false;
  std::function<void()> on_stopped_;

  std::vector<std::unique_ptr<destage_job>> jobs_;  // destage_stripes_in_flight of them
  std::vector<std::uint64_t> stripes_destaging_;
  std::unique_ptr<checkpoint_io> checkpoint_;
  bool checkpoint_in_flight_ = false;
  device::time_point last_checkpoint_{};
  bool drain_announced_ = false;
  std::unique_ptr<device::timer> age_timer_;
  write_back_counters counters_;
};

}  // namespace strata::raid
