// A pool's write-back cache as the controller composes it (issue 18;
// raid/write_back.h is the cache itself, docs/write-log.md its format).
//
// The pool's write-log group, a mirrored SSD group (WRITE_LOG), is cut into
// four equal slices; the pool's RAID-6 groups, in pool order, log to one
// each (a fifth and later group writes through). Over each such group a
// raid::write_back_device on its slice stands in for the group: the pool
// reads and writes it, not the group. Opening it replays the slice's log
// -- after a crash, or for a controller taking the pool over: nothing but
// the drives and the pool's metadata is needed. A blank slice is
// formatted. A slice whose log failed and was retired (its record in the
// pool's metadata store, which the partner's copy holds too) is formatted
// anew rather than replayed; the blocks lost with a failed log are listed
// there as well (docs/write-log.md, "Retirement").
//
// The cache writes through, with an event, while the log group is
// degraded (redundancy_changed), after the log failed, or when asked to
// (set_mode).
//
// Threads: open() and stop() drive the loop through `wait` (start-up and
// shutdown); the rest runs on the loop.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "controller/config_store.h"
#include "controller/disk_group.h"
#include "controller/event_log.h"
#include "raid/device/slice_device.h"
#include "raid/write_back.h"
#include "tiering/metadata_store.h"

namespace strata::v1 {
class PoolStatistics;
}

namespace strata::controller {

struct write_cache_options {
  device::clock* clock = nullptr;
  // The pool's metadata store: its logs' retirement and lost blocks, synced
  // there (so mirrored to the partner) before the writes waiting on them
  // go on. Whichever controller serves the pool reads them.
  tiering::metadata_store* pool_store = nullptr;
  // This controller's own store, where an older version kept them
  // (write_logs/GROUP/...): moved into the pool's store at open.
  config_store* config = nullptr;
  boost::asio::any_io_executor loop;
  event_log* events = nullptr;
};

class write_cache {
 public:
  static constexpr unsigned slices = 4;
  struct cached_group {
    disk_group* group = nullptr;
    std::string name;  // "groups/g1"
  };
  using waiter = std::function<void(const std::function<bool()>&)>;

  // Opens (replays) or formats the log of each RAID-6 group in `groups`
  // (the pool's, in order; other kinds are skipped) on its slice of `log`.
  // Errors: a slice holding another group's log, an unreadable log.
  static std::expected<std::unique_ptr<write_cache>, error> open(
      disk_group& log, const std::string& log_name, const std::vector<cached_group>& groups,
      const write_cache_options& options, const waiter& wait);
  ~write_cache();

  // The device the pool uses for `g`: its write-back device, or the group
  // itself when it has no slice.
  device::block_device& device_for(const disk_group& g) const noexcept;
  // An administrator's choice for the whole pool.
  void set_mode(raid::cache_mode m);
  // The write-back device standing in for `g`, or null (no slice).
  const raid::write_back_device* cache_of(const disk_group& g) const noexcept;
  // The log group lost or regained a member.
  void redundancy_changed();
  // Stops destaging (what is dirty stays in the log for the next start).
  void stop(const waiter& wait);
  // The pool is the partner's now (this controller stepped down): what
  // its logs still do here (failing at the gates held for good) is not
  // the pool's news. Nothing is recorded from now on (no lost blocks, no
  // retirement: the new owner's log and lists are the pool's) and no
  // event is raised. stop() still runs before it goes.
  void abandon() noexcept { *abandoned_ = true; }
  // Takes a sample of the destage rate over the last `seconds`.
  void sample(double seconds);
  // Adds the cache's figures to a pool's statistics.
  void statistics(v1::PoolStatistics& out) const;

 private:
  struct cached {
    disk_group* group = nullptr;
    std::string name;
    std::unique_ptr<device::slice_device> slice;
    std::unique_ptr<raid::write_back_device> device;
    std::uint64_t destaged_blocks_seen = 0;
  };
  write_cache(disk_group& log, const write_cache_options& options) : log_(log), options_(options) {}
  raid::write_back_options device_options(const cached& c);

  disk_group& log_;
  write_cache_options options_;
  std::vector<std::unique_ptr<cached>> cached_;
  double destage_mb_per_second_ = 0;
  std::shared_ptr<bool> abandoned_ = std::make_shared<bool>(false);  // read by the devices' hooks
};

}  // namespace strata::controller
