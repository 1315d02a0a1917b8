// A thin volume: a block device whose extents are allocated from its pool
// on first write and returned on discard.
//
// Requests arrive from the targets (the one request type of
// raid/device/block_device.h) on the pool's loop and are cut at extent
// boundaries; each piece goes to the group that holds its extent:
//   read     mapped: the group; never written: zeros, no disk touched
//   write    mapped: the group; new: the whole extent is written (the data,
//            zeros around it) to a fresh extent, then the mapping is
//            committed (synced) to the metadata store, then acknowledged
//   discard  whole extents are unmapped (committed, then freed once no I/O
//            can touch them); the rest of the range is written with zeros,
//            so a later read returns zeros either way. Write-zeroes from the
//            targets is the same request.
//   flush    every group of the pool
// A piece that meets an extent in transition (being allocated or unmapped)
// waits for it and then runs against the new state.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/device/request_queue.h"
#include "raid/device/timing.h"
#include "tiering/extent_move.h"
#include "tiering/heat.h"
#include "tiering/read_cache.h"
#include "tiering/records.h"

namespace strata::tiering {

class pool;

// What served a volume's requests, piece by piece: a request that crosses
// an extent boundary counts once for each extent it touches.
enum class source : std::uint8_t {
  performance = 0,  // the performance tier
  capacity = 1,     // the capacity tier
  cache = 2,        // the read cache (a copy of capacity- or cold-tier data)
  unmapped = 3,     // a read of a never-written extent: zeros, no disk
  cold = 4,         // the cold tier (a Ceph RBD image)
};
constexpr int source_count = 5;
struct volume_counters {
  struct served {
    std::uint64_t ios = 0;
    std::uint64_t bytes = 0;
  };
  // [source][0: read, 1: write or discard]
  served by_source[source_count][2]{};
  // Whole reads [0], writes [1] and flushes [2] as the targets sent them:
  // how many, their bytes, their summed latency (submit to completion) and
  // its histogram, for the statistics and metrics the controller reports.
  // Bucket i counts latencies in (bound[i-1], bound[i]]; the last, those
  // beyond every bound. The bounds follow Prometheus's client default,
  // stretched down to 100 us for SSD hits.
  static constexpr std::array<double, 15> latency_bucket_bounds_seconds{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};
  struct requests {
    std::uint64_t count = 0;
    std::uint64_t bytes = 0;
    device::duration latency{};
    std::array<std::uint64_t, latency_bucket_bounds_seconds.size() + 1> latency_buckets{};
    void add(std::uint64_t request_bytes, device::duration took) noexcept;
  };
  requests whole[3]{};
  // Read pieces by what served them, from their dispatch there to their
  // completion (a piece that waited on a move waits outside this): the
  // latency of each tier as the volume sees it. Failed reads are not in it.
  requests read_latency[source_count]{};
  const served& reads(source s) const noexcept { return by_source[static_cast<int>(s)][0]; }
  const served& writes(source s) const noexcept { return by_source[static_cast<int>(s)][1]; }
};

class volume final : public device::block_device {
 public:
  // Built by the pool (create_volume, or open with the extents it loaded).
  volume(pool& owner, const volume_record& record, const device::block_geometry& geometry);
  ~volume() override;

  const device::block_geometry& geometry() const noexcept override { return geometry_; }
  boost::asio::any_io_executor executor() const noexcept override;
  void submit(device::request& req) noexcept override;
  // From the extent map in memory: an extent never written, or unmapped by
  // a whole-extent discard, is deallocated (it reads as zeros); a mapped
  // one is mapped throughout. A run goes on across extents in one state.
  device::allocation_run allocation_at(std::uint64_t lba,
                                       std::uint64_t max_blocks) const noexcept override;

  const volume_record& record() const noexcept { return record_; }
  std::uint64_t extent_count() const noexcept { return map_.size(); }
  std::uint64_t extent_blocks() const noexcept { return extent_blocks_; }
  std::optional<extent_location> location(std::uint64_t volume_extent) const noexcept;
  std::uint64_t mapped_extents() const noexcept { return mapped_; }
  // The mapped extents that live on tier `t` (what "bytes per tier"
  // reports, times the extent size). Kept as mappings change: O(1).
  std::uint64_t mapped_extents_on(tier t) const noexcept { return mapped_on_[static_cast<int>(t)]; }
  const volume_counters& counters() const noexcept { return counters_; }
  heat_map& heat() noexcept { return heat_; }
  const heat_map& heat() const noexcept { return heat_; }
  // No request or extent transition in flight.
  bool idle() const noexcept { return in_flight_ == 0 && transitions_.empty() && moves_.empty(); }

  // Moves a mapped extent's data to a new extent on tier `to`: copy, then
  // one synced commit of the new mapping, then the old extent is freed
  // once no I/O can still touch it (extent_move.h has the protocol). Reads
  // go to the old place until the commit. Writes go there too, and what
  // they touched is copied again once they complete; for the last pass,
  // new requests wait and the writes in flight drain, so the commit
  // follows every write.
  // `done` gets the outcome from the loop: invalid_argument if the extent
  // is unmapped or already moving or on `to`, no_space if `to` is full,
  // io_error once the metadata store has failed, or the first error of the
  // copy (the old mapping stands) or of the commit (either may stand; the
  // pool then takes no more writes).
  void move_extent(std::uint64_t volume_extent, tier to, std::function<void(std::error_code)> done);
  bool moving(std::uint64_t volume_extent) const noexcept { return moves_.contains(volume_extent); }
  std::size_t moves_in_flight() const noexcept { return moves_.size(); }

  // Online, or offline because a group it has extents on was lost beyond
  // its redundancy (pool::group_failed): from then on every request fails
  // with device_failed, and offline_reason() says which group and why.
  bool online() const noexcept { return offline_reason_.empty(); }
  const std::string& offline_reason() const noexcept { return offline_reason_; }
  bool has_extent_on(std::uint16_t group) const noexcept;
  // An empty reason brings it back online: only a failed
  // pool::delete_volume does that, putting back the status it had.
  void take_offline(std::string reason);

  // For the pool's resize_volume, once the bigger record is durable: the
  // volume now has `block_count` blocks (at least as many as before). The
  // blocks past the old end read as zeros: unmapped, or, in the old last
  // extent, the zeros its allocation wrote around the data.
  void grow(std::uint64_t block_count);
  // For the pool's set_placement, once the record is durable: new extents
  // and the migrator's next plan follow `placement`.
  void set_placement(affinity placement) noexcept { record_.placement = placement; }
  // Whether its writes must reach the groups before they complete, past
  // any write-back cache (request::write_through): the volume's
  // write_cache mode, which the controller keeps; false (write-back) at
  // first. Applies to writes submitted from then on.
  void set_write_through(bool on) noexcept { write_through_ = on; }
  bool write_through() const noexcept { return write_through_; }

  // For the pool's load: the extent map as committed.
  void load_mapping(std::uint64_t volume_extent, extent_location where) noexcept;

 private:
  // One request from above, split into pieces.
  struct outer_io {
    volume* vol = nullptr;
    device::request* outer = nullptr;
    unsigned pending = 0;
    std::error_code result;
    std::uint64_t epoch = 0;
    bool sequential = false;       // part of a stream: the read cache does not admit it
    device::time_point started{};  // for the pool's foreground latency
    std::vector<device::request> flushes;
  };
  // The part of a request within one extent.
  struct piece {
    outer_io* owner = nullptr;
    volume* vol = nullptr;
    std::uint64_t extent = 0;       // the volume extent
    std::uint64_t first_block = 0;  // within the extent, in volume blocks
    std::uint64_t block_count = 0;
    std::uint64_t buffer_offset_bytes = 0;  // into the outer request's buffers
    device::request req;
    std::vector<iovec> segments;
    std::uint16_t group = 0;                   // the group its last request went to
    std::optional<extent_location> allocated;  // a new extent this piece fills
    bool counted_write = false;       // counted in writes_in_flight_ (a write to a mapped extent)
    bool from_cache = false;          // a read sent to the read cache
    bool skip_cache = false;          // the cache failed it: read the capacity tier
    bool cache_write = false;         // holds the read cache's lines (end_write when done)
    std::optional<source> read_from;  // a read: what it was last sent to, and when
    device::time_point read_sent{};
    // A capacity write's copies to the read cache's lines it updates: the
    // piece completes when the capacity write and these have.
    struct cache_update {
      piece* owner = nullptr;
      device::request req;
      std::vector<iovec> segments;
    };
    std::vector<cache_update> updates;  // sized before any is submitted
    unsigned updates_pending = 0;
    bool capacity_done = false;  // the capacity write completed, its result in req
  };
  struct transition;
  friend class extent_move;

  void start_piece(outer_io& o, std::uint64_t volume_extent, std::uint64_t first_block,
                   std::uint64_t block_count, std::uint64_t buffer_offset_bytes);
  // A piece of `o`, counted in its pending, not yet dispatched.
  piece& new_piece(outer_io& o, std::uint64_t volume_extent, std::uint64_t first_block,
                   std::uint64_t block_count, std::uint64_t buffer_offset_bytes);
  void dispatch(piece& p);
  void read_zeros(piece& p);
  void count(source s, piece& p) noexcept;
  void submit_to_group(piece& p, device::op operation, extent_location where, bool zeros);
  // Read cache: a read served from it (true), or shown to it.
  bool read_via_cache(piece& p, extent_location where);
  // Sends `p`, which lies within `line`, a valid line, to the cache device.
  void read_line_from_cache(piece& p, read_cache::line_key line);
  // A capacity-tier write. New data also goes to the read cache's copies
  // of the lines it touches; zeros drop them.
  void write_capacity(piece& p, extent_location where, bool zeros);
  void update_cache(piece& p);
  static void on_cache_update_done(device::request& r) noexcept;
  // The read cache's lines of [first_block, +block_count) of an extent.
  std::pair<std::uint64_t, std::uint64_t> cache_lines(std::uint64_t volume_extent,
                                                      std::uint64_t first_block,
                                                      std::uint64_t block_count) const noexcept;
  void allocate_and_write(piece& p);
  void unmap(piece& p);
  void piece_done(piece& p, std::error_code result);
  void finish_transition(std::uint64_t volume_extent);
  void flush_groups(outer_io& o);
  void op_done(outer_io& o);
  // What a request that succeeded is answered instead, decided when the
  // answer is delivered (not when the request finished): io_error for a
  // write or discard once the metadata store has failed, else nothing.
  std::error_code refusal(device::op operation) const noexcept;
  static void on_group_done(device::request& r) noexcept;
  // A write counted in writes_in_flight_ completed: a move of its extent
  // copies what it touched again, and resumes once the last one drains.
  void write_completed(piece& p, std::error_code result);

  // For extent_move.
  unsigned writes_in_flight(std::uint64_t volume_extent) const noexcept;
  // New requests to the extent wait (a transition) until the move ends.
  void hold_requests(std::uint64_t volume_extent);
  // The group address of `first_block` (volume blocks) of extent `where`.
  std::uint64_t group_lba(extent_location where, std::uint64_t first_block) const noexcept;
  // What a group's answer says of the group: device_failed, lost
  // (pool::group_failed); no_space, its store full (pool::stop_writes).
  void note_group_result(std::uint16_t group, std::error_code result);
  // The new mapping is durable: the volume reads and writes `to` now.
  void move_committed(std::uint64_t volume_extent, extent_location from, extent_location to);
  // The move is over (its outcome is on its way to its caller): it is
  // destroyed, held requests go on, discards that waited for it run.
  void move_ended(std::uint64_t volume_extent);
  // mapped_on_'s entry for the tier `l` is on.
  std::uint64_t& mapped_on(extent_location l) noexcept;

  pool& pool_;
  volume_record record_;
  device::block_geometry geometry_;
  std::uint64_t extent_blocks_;           // volume blocks per extent
  std::uint32_t group_blocks_per_block_;  // group blocks per volume block (1 or 8)
  // Packed extent_location per volume extent; 0: never written.
  std::vector<std::uint64_t> map_;
  std::uint64_t mapped_ = 0;
  std::uint64_t mapped_on_[tier_count]{};  // mapped_ by tier
  // Per group: a host write to it (a cold-tier group) completed since the
  // last flush started there; flush_groups flushes only those.
  std::vector<bool> cold_written_;
  heat_map heat_;
  volume_counters counters_;
  // Extents being allocated or unmapped, with the pieces waiting on them.
  std::unordered_map<std::uint64_t, std::unique_ptr<transition>> transitions_;
  std::unordered_map<std::uint64_t, std::unique_ptr<extent_move>> moves_;
  // Whole-extent discards waiting for a move of their extent to end:
  // unmapping must not race its commit.
  std::unordered_map<std::uint64_t, std::vector<piece*>> after_move_;
  // Writes (and partial discards) dispatched to each mapped extent and not
  // yet completed, whether or not a move runs: a move that starts must wait
  // for the ones already in flight too. One counter per extent beside map_
  // (2 bytes to its 8), so the per-request path allocates nothing.
  std::vector<std::uint16_t> writes_in_flight_;
  device::slot_pool<outer_io> ios_;
  device::slot_pool<piece> pieces_;
  std::uint64_t in_flight_ = 0;
  // Answers that must not be given inside submit(): refusals, and requests
  // finished there. A success is checked against refusal() on delivery.
  device::completion_queue deferred_;
  bool submitting_ = false;     // inside submit(): completions must wait for the loop
  std::string offline_reason_;  // empty: online
  bool write_through_ = false;
};

}  // namespace strata::tiering
