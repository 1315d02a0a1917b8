// The SSD read cache: copies of hot capacity-tier data, in lines of 64 KiB
// (configurable), on a cache group (a one-SSD RAID-1 in the seed array).
//
// A line is a line_bytes piece of a volume, keyed (volume id << 40 |
// offset / line_bytes). Which lines the cache holds is the replacement
// policy's decision (cache_policy.h); this class holds their data:
//   lookup      a read that lies within one valid line is served from the
//               cache device;
//   note_read   every random capacity-tier read is shown to the policy,
//               which may admit its line: the line is then read from the
//               capacity group and written to a free slot (a fill);
//   begin_write a write (or discard, unmap, or move off the capacity tier)
//               over lines. A write of new data keeps the lines the cache
//               holds, and the volume writes the data to their slots too
//               (update_target), beside the capacity tier: the line stays
//               a hit. Anything else drops them, and so does a write
//               over a line another write is still updating (the cache
//               device could apply the two copies in either order). Either
//               way, if the index
//               on disk names any of them, its entries are deleted (synced)
//               before the write may start, and an updated line is indexed
//               again only after flushes (of the cache device and the
//               capacity groups) that follow the update.
//               Fills of those lines are cancelled, and none starts until
//               end_write, so no fill can copy data older than a write it
//               overlapped.
// So a read after an acknowledged write never sees older data, in memory
// or after a crash.
//
// The index (line -> slot) is persisted in the pool's cache_index column so
// that a restart starts warm. Its rules (docs/tiering-keys.md):
//   - an entry is written only after its data is on the cache device and a
//     flush of the device, and of the groups the lines copy, has completed
//     (entries go in unsynced batches, every persist_interval). The source
//     matters as much as the slot: a fill or an update copies data the
//     capacity tier may hold only in its disks' write caches. Indexed
//     before that is flushed, a power cut could leave the slot newer than
//     the capacity tier: the cache would answer the new data, and once the
//     line is evicted the capacity tier the old -- a read going back in
//     time (the simulation's seed 3129);
//   - an entry is deleted, synced, before its line is written over on the
//     capacity tier, and before its slot is reused;
// so every entry on disk names a slot whose data is the line's current
// contents, and reopening after a crash may trust the whole index.
//
// A failed cache device (any I/O error) disables the cache: lookups miss,
// nothing is admitted, and reads go on from the capacity tier. A read
// already sent to the cache is retried there by the volume.
//
// Loop thread only, like the pool that owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/device/clock.h"
#include "raid/device/status.h"
#include "tiering/cache_policy.h"
#include "tiering/metadata_store.h"

namespace strata::tiering {

struct read_cache_options {
  std::uint64_t line_bytes = 64 << 10;
  // W-TinyLFU: a line enters the main cache only if it is read more often
  // than the line it would evict. Lowest miss ratio on the traces
  // (tiering/README.md).
  std::string policy = "tinylfu";
  device::duration persist_interval = std::chrono::seconds(10);
  unsigned fills_in_flight = 4;
};

struct read_cache_counters {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;  // reads shown to the policy that it did not hold
  std::uint64_t fills = 0;   // lines copied in
  std::uint64_t cancelled_fills = 0;
  std::uint64_t invalidations = 0;  // lines dropped by writes
  std::uint64_t updates = 0;        // lines kept and written with a write's data
  std::uint64_t device_errors = 0;
};

class read_cache {
 public:
  using line_key = std::uint64_t;
  static line_key key(std::uint32_t volume, std::uint64_t line) noexcept {
    return (std::uint64_t{volume} << 40) | line;
  }

  // Opens the cache on `device`, loading the index persisted in `store`
  // (blocking: at start-up). Clear errors for an unknown policy or a line
  // size that is not a power-of-two multiple of the device's block size.
  static std::expected<std::unique_ptr<read_cache>, error> open(boost::asio::any_io_executor loop,
                                                                device::block_device& device,
                                                                metadata_store& store,
                                                                device::clock& c,
                                                                const read_cache_options& options);
  ~read_cache();
  read_cache(const read_cache&) = delete;
  read_cache& operator=(const read_cache&) = delete;

  // A group whose data lines may copy (each capacity-tier group): flushed
  // with the cache device before entries are written (above).
  void add_source(device::block_device& group) { sources_.push_back(&group); }

  std::uint64_t line_bytes() const noexcept { return options_.line_bytes; }
  bool enabled() const noexcept { return !failed_; }
  device::block_device& device() noexcept { return device_; }

  // The cache device's block address of `offset_bytes` within a valid line,
  // or nothing (a miss, or the cache is disabled). A hit's read must be
  // followed by slot_io_done(that address) when it completes: until then
  // the line's slot is not reused, even if the line is dropped.
  std::optional<std::uint64_t> lookup(line_key line, std::uint64_t offset_bytes);
  // Between begin_write(keep) and end_write: where to write the new data
  // at `offset_bytes` of `line`, if the cache holds it; the write must be
  // followed by slot_io_done, as a read is.
  std::optional<std::uint64_t> update_target(line_key line, std::uint64_t offset_bytes);
  void slot_io_done(std::uint64_t cache_lba);
  // Every line of [first, last] is valid (a read spanning them can be
  // served from the cache, one lookup per line).
  bool holds(line_key first, line_key last) const noexcept;
  // Shows a random read of `line` to the policy; if admitted, fills it from
  // `source` at `source_lba` (line_bytes from there).
  void note_read(line_key line, device::block_device& source, std::uint64_t source_lba);
  // Lines [first, last] are about to be written over. Their fills are
  // cancelled at once; with `keep` (a write of new data) the lines the
  // cache holds stay, to be updated; otherwise they are dropped. true: the
  // write may start now; false: the index on disk names some of them, and
  // `ready` runs (from the loop) once their deletion is synced, or with
  // the store's error.
  bool begin_write(line_key first, line_key last, bool keep,
                   std::function<void(std::error_code)> ready);
  // `written`: false if the write failed, and the lines must go too.
  void end_write(line_key first, line_key last, bool written);
  // A cache device I/O failed: the cache is disabled from now on.
  void device_failed();

  // Volume `volume` is being deleted (pool::delete_volume): its lines are
  // dropped now, so no lookup hits them; its fills are cancelled, and none
  // starts again (the extents they would read are about to be freed, and
  // reused by other volumes). The deletes of their index entries are added
  // to `batch`, which the caller writes, synced, with the volume's own
  // records: an index on disk must never name a line of a volume whose id
  // the next start could give to a new volume. Call the function returned
  // with that write's outcome: it frees the lines' slots then, or on
  // failure keeps them for good, as a failed delete of entries does.
  // REQUIRES: no write of the volume's between begin_write and end_write
  // (the volume is idle).
  std::function<void(std::error_code)> forget_volume(std::uint32_t volume, metadata_batch& batch);

  // Writes the pending index entries now (after a flush of the device);
  // also done every persist_interval.
  void persist(std::function<void(std::error_code)> done);
  // No fill or persist in flight.
  bool idle() const noexcept { return fills_running_ == 0 && !persisting_; }

  std::size_t size_lines() const noexcept { return lines_.size(); }
  const read_cache_counters& counters() const noexcept { return counters_; }
  const cache_policy& policy() const noexcept { return *policy_; }

 private:
  struct line_state {
    std::uint64_t slot = 0;
    bool valid = false;      // the data is in the slot
    bool persisted = false;  // the index on disk may name it (written, or in a batch under way)
    std::uint64_t generation = 0;  // which fill put it there
  };
  struct pending {  // a filled line whose entry is not yet written
    line_key line;
    std::uint64_t generation;
  };
  struct fill;
  read_cache(boost::asio::any_io_executor loop, device::block_device& device, metadata_store& store,
             device::clock& c, const read_cache_options& options,
             std::unique_ptr<cache_policy> policy);
  // The persist's flushes (the cache device's and the sources') are done:
  // write the entries of the lines they cover.
  void flushed();
  // Forgets `line`. Its slot is free at once, or, if the index on disk may
  // name it, goes to `free_after` (free once `deletes` is synced).
  void drop(line_key line, std::vector<line_key>& deletes, std::vector<std::uint64_t>& free_after);
  // The index on disk may name the line: its entry was written, or its
  // delete is not synced yet.
  bool may_be_indexed(line_key line, const line_state& s) const noexcept;
  // Deletes the lines' entries, synced; then frees `free_after`.
  void write_deletes(std::vector<line_key> lines, std::vector<std::uint64_t> free_after,
                     std::function<void(std::error_code)> done);
  // A slot no line uses any more: free once no I/O to it is in flight.
  void release_slot(std::uint64_t slot);
  void start_fill(line_key line, std::uint64_t slot, device::block_device& source,
                  std::uint64_t source_lba);
  void fill_done(fill& f, std::error_code ec);
  void arm_persist();
  bool forgotten(line_key line) const noexcept {
    return forgotten_.contains(static_cast<std::uint32_t>(line >> 40));
  }

  boost::asio::any_io_executor loop_;
  device::block_device& device_;
  std::vector<device::block_device*> sources_;
  metadata_store& store_;
  device::clock& clock_;
  read_cache_options options_;
  std::unique_ptr<cache_policy> policy_;
  std::uint64_t device_blocks_per_line_;
  std::unordered_map<line_key, line_state> lines_;
  std::vector<std::uint64_t> free_slots_;
  std::unordered_map<std::uint64_t, unsigned> slot_users_;  // slot -> reads and updates in flight
  std::unordered_set<std::uint64_t> released_while_used_;   // slots to free when those end
  std::unordered_map<line_key, unsigned> writing_;          // lines with writes in flight
  std::unordered_map<line_key, unsigned> deleting_;  // lines whose entry deletes are not synced yet
  std::unordered_map<line_key, fill*> filling_;
  std::vector<std::unique_ptr<fill>> fills_;  // reused
  unsigned fills_running_ = 0;
  std::vector<pending> to_persist_;
  std::uint64_t generation_ = 0;
  bool persisting_ = false;
  struct {
    std::vector<device::request> reqs;  // the cache device's, then one per source
    unsigned outstanding = 0;
    bool device_error = false;  // the cache device's flush failed
    std::error_code error;      // the first flush that failed
    std::function<void(std::error_code)> done;
    std::vector<pending> lines;
  } flush_;
  bool failed_ = false;
  // Volumes deleted since the start: their lines are never filled again.
  // Ids are not reused before a restart, so this only grows (by one id per
  // delete).
  std::unordered_set<std::uint32_t> forgotten_;
  std::unique_ptr<device::timer> persist_timer_;
  read_cache_counters counters_;
  std::vector<std::uint64_t> evicted_;  // scratch for the policy
};

}  // namespace strata::tiering
