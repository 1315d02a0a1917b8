// A pool: the groups of its tiers (performance, capacity, cold), the extents they are cut into, the
// thin volumes carved from them, and the pool's metadata store.
//
// A pool lives on one loop and is used from that loop's thread only; its
// metadata store's outcomes are posted to the same loop. It hands out
// extents to its volumes, takes them back once no I/O can still touch them
// (free_after_io), and knows the pool-wide policies: where new extents land,
// the performance tier's reserve, the overcommit limit.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/device/clock.h"
#include "raid/device/status.h"
#include "tiering/extent_allocator.h"
#include "tiering/heat.h"
#include "tiering/heat_history.h"
#include "tiering/metadata_store.h"
#include "tiering/read_cache.h"
#include "tiering/records.h"

namespace strata::tiering {

class volume;

// One of the pool's groups, given in the same order at every open.
struct pool_group {
  device::block_device* device = nullptr;
  tier where = tier::capacity;
};

// Where a volume's first write to an extent puts it.
enum class new_extent_tier : std::uint8_t {
  performance_first,  // the performance tier while it has room above its reserve (RealTier's way)
  capacity,           // always the capacity tier; the migrator promotes what turns hot
};

struct pool_options {
  device::clock* clock = nullptr;  // required: heat decay, persistence and migration run on it
  std::uint64_t extent_size_bytes = 4 << 20;
  // Thin volumes may add up to this many times the pool's capacity.
  double overcommit = 2.0;
  new_extent_tier new_extents = new_extent_tier::performance_first;
  // Fraction of the performance tier that new extents and promotions leave
  // free for bursts of new writes, when new extents go there first (with
  // new_extent_tier::capacity no new write needs it, and there is none).
  double performance_reserve = 0.10;
  heat_options heat;
  // How often the heat that changed is written to the store (unsynced).
  device::duration heat_persist_interval = std::chrono::seconds(60);
  // Snapshots of the hottest extents, kept for the diagnostics.
  heat_history_options heat_history;
  // The read cache's group (none: no read cache), and its settings. Its
  // line size must divide the extent size.
  device::block_device* read_cache_device = nullptr;
  read_cache_options read_cache;
  // A group's backing store full (stop_writes): how long the pool refuses
  // writes before it lets them try again (space may have been freed).
  device::duration no_space_retry_interval = std::chrono::seconds(30);
  // Told, from the loop, when the pool stops taking writes (the reason)
  // and when it takes them again (empty). For the event log.
  std::function<void(const std::string&)> on_writes_stopped;
  // A paused group (pause_group: its store is out of reach for now) takes
  // no new extents and no moves for this long after its last failure.
  device::duration pause_interval = std::chrono::seconds(30);
  // Told, from the loop, when a group pauses (the reason) and when it
  // takes extents again (empty). For the event log.
  std::function<void(std::uint16_t group, const std::string&)> on_group_paused;
};

struct volume_spec {
  std::string name;
  std::uint32_t block_size_bytes = 4096;
  std::uint64_t block_count = 0;
  affinity placement = affinity::automatic;
};

class pool {
 public:
  using opened = std::expected<std::unique_ptr<pool>, error>;
  // Opens the pool kept in `store`, or creates it there if the store is
  // empty, over `groups`. Blocking (reads the store): call at start-up,
  // before the loop serves I/O. Clear errors for: no group, a group whose
  // block size does not divide the extent, groups that differ from the
  // ones recorded, an extent map that names extents no group has.
  static opened open(boost::asio::any_io_executor loop, metadata_store& store,
                     std::vector<pool_group> groups, const pool_options& options);
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;
  ~pool();

  // Creates a thin volume: its record is durable before `done` gets it.
  // Clear errors (invalid_argument) for: an empty or duplicate name, a
  // block size other than 512 or 4096 or smaller than a group's, zero
  // blocks; no_space for a size that takes the pool's volumes past
  // overcommit x its capacity.
  void create_volume(const volume_spec& spec,
                     std::function<void(std::expected<volume*, error>)> done);
  volume* find_volume(std::string_view name) const noexcept;
  std::vector<volume*> volumes() const;

  // Management of existing volumes. Each writes the volume's records,
  // synced, before `done` (from the loop) gets the outcome; a refusal or a
  // failed write changes nothing. While one of them runs on a volume, the
  // others refuse it with busy.

  // Deletes volume `name` for good. Its volume record, its extent map,
  // its heat and its read cache index entries go in one atomic batch,
  // synced. Then its extents are freed once no I/O begun before can touch
  // them (free_after_io), its size leaves the overcommit sum, and the
  // migrator's plan (which may name it) is dropped (volume_changes()).
  // While the batch is written the volume is out of volumes() and refuses
  // every request, as an offline one does.
  // The caller (the controller) must have stopped serving the volume
  // first: after a successful delete its volume* is dangling (the object
  // is destroyed from a later loop turn, once `done` has returned).
  // Errors: not_found if there is no such volume; busy if it has requests,
  // extent transitions or moves in flight (it must be idle()), or another
  // change of it is being recorded; the store's error if the write fails.
  void delete_volume(std::string_view name, std::function<void(std::expected<void, error>)> done);
  // Grows the pool by group `g`, as group group_count(): its extents are
  // free at once, and `done` gets its index once the pool record names it
  // (synced). The owner records the group before it calls this, and gives
  // it to the next open(), which finishes an add a crash cut short. A
  // clear error, nothing changed: other block sizes, smaller than one
  // extent, or 32767 groups already.
  void add_group(pool_group g, std::function<void(std::expected<std::uint16_t, error>)> done);
  // Grows volume `name` to `block_count` blocks, as create_volume sizes
  // one: the record first, then the volume's geometry and extent map. The
  // new blocks read as zeros. Requests may run meanwhile; telling the
  // hosts that the capacity changed is the controller's business.
  // Errors: not_found; invalid_argument for fewer blocks than it has
  // (shrinking would lose the data past the new end); no_space past the
  // overcommit limit, as create_volume; busy as above. The same size
  // succeeds without a write.
  void resize_volume(std::string_view name, std::uint64_t block_count,
                     std::function<void(std::expected<void, error>)> done);
  // Changes volume `name`'s affinity. Once its record is durable, new
  // extents follow it, and the migrator's plan is dropped and made again
  // with it (volume_changes()). Errors: not_found; busy as above.
  void set_placement(std::string_view name, affinity placement,
                     std::function<void(std::expected<void, error>)> done);
  // Changes whenever a volume is deleted or its placement changes. What
  // keeps volume pointers or placement decisions across loop turns (the
  // migrator's plan) checks it before acting on them.
  std::uint64_t volume_changes() const noexcept { return volume_changes_; }

  const pool_options& options() const noexcept { return options_; }
  boost::asio::any_io_executor executor() const noexcept { return loop_; }
  metadata_store& store() noexcept { return store_; }
  std::uint64_t extent_size_bytes() const noexcept { return options_.extent_size_bytes; }

  std::size_t group_count() const noexcept { return groups_.size(); }
  device::block_device& group(std::uint16_t g) noexcept { return *groups_[g].device; }
  tier tier_of(std::uint16_t g) const noexcept { return groups_[g].where; }
  std::uint64_t capacity_extents(tier t) const noexcept;
  // The sum of its volumes' sizes (what overcommit limits).
  std::uint64_t committed_bytes() const noexcept { return committed_bytes_; }
  // Free extents on the usable groups of tier `t`.
  std::uint64_t free_extents(tier t) const noexcept;
  // Extents freed but waiting for the I/O that might still touch them.
  std::uint64_t quarantined_extents() const noexcept { return quarantine_.size(); }

  // An extent for a new write of a volume with this affinity: the
  // performance tier first if the policy says so and it has room above its
  // reserve, else the capacity tier (either tier before failing). The
  // group with the most free extents in the tier gets it.
  std::optional<extent_location> allocate(affinity placement);
  // An extent on tier `t` only (for migration), with the reserve ignored.
  std::optional<extent_location> allocate_on(tier t);
  // Frees `l` once every I/O started before this call has finished: a
  // read in flight to the old place must not see another volume's data.
  void free_after_io(extent_location l);
  // The same for many extents at once (a deleted volume's).
  void free_after_io(const std::vector<extent_location>& extents);

  // Every volume I/O is counted from start to end, so that frees can wait
  // for the I/O that was in flight when they were made.
  std::uint64_t begin_io() noexcept;
  void end_io(std::uint64_t epoch) noexcept;

  // extent_size_bytes of zeros, for writing around new data and for
  // discards of part of an extent. Never written.
  std::byte* zeros() noexcept { return zeros_.data(); }

  // Writes the heat changed since the last time to the store now; `done`
  // gets the store's outcome. The pool does this every
  // heat_persist_interval by itself.
  void persist_heat(std::function<void(std::error_code)> done);
  device::clock& clock() noexcept { return *options_.clock; }
  // Writes a snapshot of the hottest extents to the heat history now;
  // `done` gets the store's outcome. The pool does this every
  // heat_history.interval by itself. Read them with heat_history::read.
  void snapshot_heat(std::function<void(std::error_code)> done);
  // The read cache, if the pool has one (enabled or not).
  tiering::read_cache* cache() noexcept { return cache_.get(); }

  // Foreground latency (volume reads and writes, from submit to
  // completion), summed since the last take: what the migrator paces by.
  struct latency_window {
    std::uint64_t ios = 0;
    device::duration total{};
    double mean_seconds() const noexcept {
      return ios == 0 ? 0.0
                      : std::chrono::duration<double>(total).count() / static_cast<double>(ios);
    }
  };
  void note_foreground_latency(device::duration d) noexcept {
    ++latency_.ios;
    latency_.total += d;
  }
  latency_window take_latency_window() noexcept { return std::exchange(latency_, {}); }

  // The performance tier's extents that new writes leave free, and that
  // promotions leave free too: none when new extents go to capacity.
  std::uint64_t performance_reserve_extents() const noexcept;

  // Group `g` is lost beyond its redundancy (its I/O fails with
  // device_failed): nothing more is allocated or moved there, and every
  // volume with an extent on it goes offline, `reason` in its status; the
  // other volumes go on. Volumes call this when a group's I/O fails so;
  // the controller, on its RAID events, and at start-up for a group it
  // could not assemble (given as a stand-in that fails every request).
  // Kept in memory only: a group that comes back at the next start brings
  // its volumes back. Calls after the first for a group change nothing.
  void group_failed(std::uint16_t g, const std::string& reason);
  // Group `g`'s store is out of reach for now (a cold-tier group whose
  // cluster timed out, is full or down): its extents' I/O fails as it
  // comes, but the group is not lost and its volumes stay online. It
  // takes no new extents and no moves until options.pause_interval has
  // passed without another pause. Calls while paused extend it.
  void pause_group(std::uint16_t g, const std::string& reason);
  // Ends group `g`'s pause now (its owner knows the store is back).
  void resume_group(std::uint16_t g);
  // Why group `g` is paused, or empty.
  const std::string& group_pause(std::uint16_t g) const noexcept { return group_pauses_[g].reason; }
  // Whether extents may be allocated on, or moved to or from, group `g`.
  bool takes_extents(std::uint16_t g) const noexcept {
    return group_usable(g) && group_pauses_[g].reason.empty();
  }
  // The pool's age: the seconds it has been served, over restarts (it is
  // written with the heat). Cold-tier cooling counts in it.
  std::uint64_t age_seconds() const noexcept;

  // Why group `g` was given up, or empty while it serves I/O.
  const std::string& group_failure(std::uint16_t g) const noexcept { return group_failures_[g]; }
  bool group_usable(std::uint16_t g) const noexcept { return group_failures_[g].empty(); }
  // What an offline volume's status says of lost group `g`.
  std::string lost_group_status(std::uint16_t g) const;

  // The metadata store failed a write: the pool takes no more writes.
  bool metadata_failed() const noexcept { return static_cast<bool>(store_.failure()); }

  // Group `g`'s backing store is full (a write or flush failed with
  // no_space: file-backed drives on a full filesystem). Writes and
  // discards to every volume of the pool fail with no_space from now on
  // -- SCSI's SPACE ALLOCATION FAILED WRITE PROTECT, as a thin pool out
  // of space answers -- and extent moves stop; reads and flushes go on,
  // and no disk or group is given up. After
  // options.no_space_retry_interval the pool takes writes again: if the
  // store is still full, the next write stops it again. Calls while
  // stopped change nothing.
  void stop_writes(std::uint16_t g);
  // Why the pool takes no writes now, or empty.
  const std::string& writes_stopped() const noexcept { return writes_stopped_; }
  // What a write, discard or move begun now is refused with: io_error
  // after a metadata failure, no_space while writes are stopped, or
  // nothing.
  std::error_code write_refusal() const noexcept {
    if (metadata_failed()) return make_error_code(errc::io_error);
    if (!writes_stopped_.empty()) return make_error_code(errc::no_space);
    return {};
  }

 private:
  pool(boost::asio::any_io_executor loop, metadata_store& store, std::vector<pool_group> groups,
       const pool_options& options);
  std::optional<extent_location> allocate_from(tier t, std::uint64_t keep_free);
  device::block_geometry volume_geometry(const volume_record& v) const;
  std::uint64_t capacity_bytes() const noexcept;
  // Why adding `more_bytes` of volumes would break the overcommit limit,
  // or empty if it would not. `what` names the addition.
  std::string overcommit_refusal(double more_bytes, const std::string& what) const;
  // The volume `name` for a management operation that changes it, or the
  // error to refuse with (not_found, or busy while it is being changed).
  std::expected<volume*, error> volume_to_change(std::string_view name) const;
  void post_result(std::function<void(std::expected<void, error>)> done,
                   std::expected<void, error> result);
  void release_quarantine() noexcept;
  void resume_groups();
  void arm_timers();

  boost::asio::any_io_executor loop_;
  metadata_store& store_;
  std::vector<pool_group> groups_;
  std::vector<extent_allocator> allocators_;  // one per group
  std::vector<std::string> group_failures_;   // one per group; empty: usable
  struct pause {
    std::string reason;  // empty: not paused
    device::time_point until{};
  };
  std::vector<pause> group_pauses_;  // one per group
  std::unique_ptr<device::timer> pause_timer_;
  pool_options options_;
  std::map<std::string, std::unique_ptr<volume>, std::less<>> volumes_;
  std::uint32_t next_volume_id_ = 1;
  std::uint64_t committed_bytes_ = 0;            // sum of volume sizes, for overcommit
  std::set<std::string, std::less<>> creating_;  // names whose records are being written
  // Volumes whose delete is being written: out of volumes_, and back there
  // if the write fails.
  std::map<std::string, std::unique_ptr<volume>, std::less<>> deleting_;
  std::set<std::string, std::less<>>
      changing_;  // volumes whose resize or placement is being written
  std::uint64_t volume_changes_ = 0;

  // I/O epochs: io_counts_[i] counts the I/O begun in epoch first_epoch_ + i.
  std::uint64_t epoch_ = 0;
  std::uint64_t first_epoch_ = 0;
  std::deque<std::uint64_t> io_counts_{0};
  struct quarantined {
    extent_location where;
    std::uint64_t epoch;  // freed once no I/O of this epoch or before remains
  };
  std::deque<quarantined> quarantine_;
  device::aligned_buffer zeros_;
  std::unique_ptr<device::timer> heat_timer_;
  std::unique_ptr<device::timer> history_timer_;
  std::string writes_stopped_;  // stop_writes: why; empty while writes go on
  std::unique_ptr<device::timer> retry_writes_timer_;
  std::optional<heat_history> history_;
  latency_window latency_;
  std::unique_ptr<tiering::read_cache> cache_;
};

}  // namespace strata::tiering
