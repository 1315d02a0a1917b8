// The simulated array: the real code of Strata's data path, from thin
// volumes down to RAID groups, over memory disks behind fault devices, in
// virtual time, every random choice drawn from one seed.
//
//   pool: two volumes, a read cache, the metadata store (real RocksDB
//         through a file system that can fail syncs)
//   performance tier: RAID-1 of two SSDs
//   capacity tier: RAID-6 of six HDDs (4+2)
//   read cache group: RAID-1 of one SSD
//   cold tier: one durable device, the Ceph image's stand-in
//
// Every disk has a volatile write cache, reorders its queue and is slow at
// random (fault_device). The world can cut the power: every disk loses what
// it had not flushed (or keeps part of it: torn), the metadata store keeps
// what it had applied, and a new controller assembles the groups from
// their superblocks and opens the pool again.
//
// Two controllers: the one that serves the pool mirrors its metadata to
// the other (controller/metadata_mirror.h, the real code of both sides)
// over a link that can go down, lose requests and answers, or find the
// partner restarted (answered at once, on the store's thread). A power
// cut of the owner may end in a takeover: the partner opens the pool from
// its copy, if the pool's drives say the copy is current, and serves it;
// the old owner becomes the partner. A planned move hands the pool over
// cleanly, and the receiver may die before it serves.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "controller/metadata_mirror.h"
#include "raid/device/fault_device.h"
#include "raid/device/io_scheduler.h"
#include "raid/device/memory_device.h"
#include "raid/raid1_group.h"
#include "raid/raid6_group.h"
#include "raid/write_back.h"
#include "tests/raid/device/harness.h"
#include "tests/tiering/fault_fs.h"
#include "tiering/pool.h"
#include "tiering/volume.h"

namespace strata::sim {

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t extent_bytes = 64 * 1024;
constexpr std::uint64_t extent_blocks = extent_bytes / block_size;
constexpr std::uint64_t reserved_bytes = 1 << 20;

// One disk: its platters (memory) and, while powered, its electronics.
struct disk {
  std::unique_ptr<device::memory_device> platters;
  std::unique_ptr<device::fault_device> drive;
  // Over the drive, as on stratad's shelf: what the groups see. Gone with
  // the drive (declared after it, so destroyed first).
  std::unique_ptr<device::io_scheduler> scheduler;
  // Writes are on the medium once they complete (no volatile cache): the
  // cold tier's Ceph image, whose OSDs acknowledge what they journaled.
  bool durable = false;
  bool dead = false;           // failed for good: stays failed across restarts
  bool latent_errors = false;  // has had latent sector errors injected
  // The blocks its backing store holds (a sparse file's): what a full
  // store still lets be overwritten, across power cycles too.
  std::shared_ptr<device::block_range_set> allocation = std::make_shared<device::block_range_set>();
};

// What the write-back caches of every world so far did, summed (the run's
// summary line: the cache's paths were taken).
raid::write_back_counters& write_back_totals();

// An executor that runs what is posted to it at once, on the poster's
// thread: the simulated link's. The mirror posts its calls and the
// ownership records' writes to it from the store's thread, which runs only
// while the loop waits for it (step mode), so the partner answers within
// the same drain, in order, and a seed replays exactly. (It says
// blocking.never and blocks: what the mirror posts never waits for the
// poster.)
struct inline_executor {
  boost::asio::execution_context* context = nullptr;
  template <class F>
  void execute(F&& f) const {
    std::forward<F>(f)();
  }
  bool operator==(const inline_executor&) const noexcept = default;
  boost::asio::execution_context& query(boost::asio::execution::context_t) const noexcept {
    return *context;
  }
  static constexpr boost::asio::execution::blocking_t query(
      boost::asio::execution::blocking_t) noexcept {
    return boost::asio::execution::blocking.never;
  }
  inline_executor require(boost::asio::execution::blocking_t::never_t) const noexcept {
    return *this;
  }
};

// The partner link as the mirror sees it, and what the pool's drives say
// of the partner's copy.
struct sim_link {
  explicit sim_link(std::uint64_t seed) : random(seed) {}
  boost::asio::any_io_executor executor() { return inline_executor{&context}; }

  boost::asio::io_context context;  // never run: the executor's context
  std::mt19937_64 random;           // drawn from on the store's thread only
  // Set between steps, read on the store's thread.
  bool down = false;
  unsigned loss_percent = 0;  // each request or its answer lost at random
  bool records_fail = false;  // the next write of the ownership records fails
  // The owner's power fails at its mirror's `die_after_calls`th call from
  // now (0: not): from that call on, the partner hears nothing more and
  // the ownership records are never written again (the world cuts the
  // disks' power at the next step boundary).
  std::uint64_t die_after_calls = 0;
  bool owner_dead = false;
  // What the pool's drives say of the partner's copy (pool_ownership::
  // partner_copy): written by the owner's mirror, read by a takeover.
  bool drives_say_current = false;
  std::uint64_t calls_lost = 0, records_written = 0;
};

struct world {
  explicit world(std::uint64_t seed);
  ~world();

  device::testing::test_loop loop;
  device::testing::temp_dir dir;
  std::mt19937_64 random;
  std::uint64_t fault_seed;
  std::vector<disk> performance_disks;  // RAID-1
  std::vector<disk> capacity_disks;     // RAID-6
  std::vector<disk> cache_disks;        // RAID-1 of one
  std::vector<disk> log_disks;          // RAID-1: the write-back cache's log
  // One: the cold tier (a Ceph RBD image in the array), used whole as the
  // pool's third group: no RAID, no superblock, durable writes, reordered
  // and late answers; it may hang for a while (a cluster that stops
  // answering) and answers everything it held once it resumes.
  std::vector<disk> cold_disks;
  std::unique_ptr<raid::raid1_group> performance;
  std::unique_ptr<raid::raid6_group> capacity;
  std::unique_ptr<raid::raid1_group> cache;
  std::unique_ptr<raid::raid1_group> log;
  // The capacity group as the pool sees it: write-back over its log.
  std::unique_ptr<raid::write_back_device> write_back;
  device::block_range_set lost_blocks;  // the controller's copy (write_back_options::persist_lost)
  std::uint64_t bypass_min_blocks = 0;  // the seed's choice: long writes past the log, or none
  tiering::testing::faulty_metadata metadata;
  // Two controllers, 0 (a) and 1 (b): the owner serves the pool, its
  // store at STATE/pools/sim; the partner holds the mirrored copy there.
  unsigned owner = 0;
  sim_link link;
  std::unique_ptr<controller::metadata_replicas> replicas;  // the partner's side
  std::unique_ptr<controller::pool_mirror> mirror;          // the owner's side
  std::unique_ptr<tiering::metadata_store> store;
  std::unique_ptr<tiering::pool> pool;
  std::uint64_t takeovers = 0, takeovers_refused = 0, hand_overs = 0;  // this world's

  std::vector<disk*> all_disks();
  // The controller's start: groups assembled (or, the first time, created
  // and formatted), the store and the pool opened.
  // Empty, or why the array could not start.
  std::string start(bool first_time);
  // Power cut and controller crash: the store keeps what it had applied,
  // each disk loses its unflushed writes (torn: some of them), the old
  // controller's objects wind down (every I/O fails), and start() again.
  // `takeover`: the partner takes the pool over instead, if the drives
  // say its copy is current and it holds one (else the owner restarts);
  // `what` says which happened.
  std::string crash_and_restart(bool torn, bool takeover, std::string& what);
  // A planned move to the partner (controller/takeover.cc hand_over_now),
  // once the hosts' requests have ended: the owner closes the pool cleanly
  // (each group flushed and marked clean; the drives stay powered) and,
  // if the partner's copy is current, adopts its closed store as its own
  // copy of the pool (metadata_replicas::adopt_now) while the drives say
  // that copy is current; the partner opens the pool from its copy.
  // `receiver_dies`: the partner dies before it serves, and the old owner
  // takes the pool back from the store it kept, as a takeover (a pool is
  // never left unserved with a controller alive). A copy that is not
  // current: the owner serves the pool again (take_back). Empty, or why
  // the pool could not be served; `what` says what happened.
  std::string hand_over(bool receiver_dies, std::string& what);
  // The partner link goes down (the partner restarted meanwhile, too:
  // its copies are gone) or comes back (the owner's mirror makes its copy
  // anew). Between steps.
  void link_down(bool partner_restarts);
  void link_back();
  static std::string controller_name(unsigned c) { return c == 0 ? "a" : "b"; }
  // Lets every request and background job end, then destroys the pool,
  // the groups and the drives (the disks stay). The destructor does it
  // too; callers whose requests' buffers die first call it before.
  void stop() { wind_down(); }
  // The groups' background work (resync, superblock updates) is done.
  bool groups_idle() const;
  // Disk faults the workload injects, within the groups' redundancy: a
  // RAID-6 group's faults touch at most two of its disks (failed, or with
  // latent errors: a read error on a third disk is a triple fault, data
  // loss no RAID-6 survives), a RAID-1 pair loses at most one. False if
  // the fault would exceed that.
  bool fail_capacity_disk(std::size_t index);
  bool fail_performance_disk(std::size_t index);
  // One of the write log's mirrored pair (the cache writes through while
  // it is degraded, and back once a spare is rebuilt).
  bool fail_log_disk(std::size_t index);
  bool add_latent_error(std::size_t capacity_disk, std::uint64_t lba, std::uint64_t blocks);
  // Hot spares: each failed member of the RAID-1 and RAID-6 groups is
  // rebuilt onto a new blank disk, under load. Call between steps; starts
  // what can start (a group refuses while it resyncs: later, then).
  void replace_failed_disks();
  std::uint64_t rebuilds_done = 0;
  // Checks once the groups are idle: RAID-1 members identical, RAID-6
  // parity consistent. Empty: fine; else what is wrong.
  std::string check_redundancy();

 private:
  std::filesystem::path state_dir(unsigned controller) const;
  std::filesystem::path store_dir() const { return state_dir(owner) / "pools" / "sim"; }
  void attach_mirror();
  void power_up();  // new electronics over every disk's platters
  // Waits until every request and background job has ended, then
  // destroys the pool, the groups and the drives; `clean`: each group
  // flushed and marked clean first (a planned hand-over, not a crash).
  void wind_down(bool clean = false);
  // Until the pool's requests and the store's batches have ended.
  void quiesce();
  void make_disks(std::vector<disk>& disks, std::size_t count, std::uint64_t blocks);
  void power_up(disk& d);
  void replace(std::vector<disk>& slots, raid::member_replacement& group);

  // A rebuild onto a spare: the spare takes its slot once it completes.
  struct rebuild {
    std::vector<disk>* slots = nullptr;
    std::size_t member = 0;
    disk spare;
    bool running = true;
  };
  std::vector<std::unique_ptr<rebuild>> rebuilds_;
  std::vector<disk>
      replaced_;  // dead disks a spare took over from: their drives live until wind-down
  // Blocks the write-back cache had lost when the power went: what it
  // "loses" after (its log unreadable, powered off) is the dead controller's view.
  std::optional<std::uint64_t> lost_at_cut_;
};

}  // namespace strata::sim
