// The drives of the shelf: model drives (HDD and SSD timing,
// raid/device/hdd_model.h, ssd_model.h) over sparse files in the state
// directory, so that a whole array runs on one machine and keeps its data
// across restarts; or real block devices and files, used as they are (or,
// for a file, behind a timing model if one is named).
//
// A simulated drive's file is created sparse on first open and reopened as
// it is afterwards: the same specs give the same drives, with their data. A
// drive at a path of its own is never created: it must be there. What a
// drive holds (RAID superblocks, data) is the layers above's business.
//
// Threads: open() blocks (file creation, open, statx, ioctl): call it at
// start-up. The drives then live on the ring's loop, like any device.
// Lifetime: the ring and the clock outlive the shelf; the shelf outlives
// everything built on its drives.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/device/clock.h"
#include "raid/device/file_device.h"
#include "raid/device/gate_device.h"
#include "raid/device/io_ring.h"
#include "raid/device/reservations.h"
#include "raid/device/status.h"

namespace strata::controller {

enum class drive_kind : std::uint8_t { hdd, ssd };

struct drive_spec {
  std::string name;  // "hdd-00": the slot's name, and a simulated drive's file's (name + ".img")
  drive_kind kind = drive_kind::hdd;
  // A simulated drive (empty path): its file's size, a whole number of
  // 4 KiB blocks. A drive at a path: how much of it to use, from its
  // start (0: all of it, in whole 4 KiB blocks).
  std::uint64_t bytes = 0;
  // Empty: a simulated drive, the sparse file NAME.img in the shelf's
  // directory, created if missing. Otherwise a block device or a file that
  // must exist, used as it is.
  std::filesystem::path path{};
  // The timing model in front of the drive, by name (timing_models()), or
  // empty: for a simulated drive, its kind's model (a simulated drive
  // always has one); for a drive at a path, none.
  std::string timing_model{};
  bool operator==(const drive_spec&) const = default;
};

// A timing model a drive may be put behind (raid/device/hdd_model.h,
// ssd_model.h): its name in records and the configuration file, the kind
// of drive it models, and the model name a Disk record shows.
struct timing_model_info {
  std::string_view name;  // "nl_sas_7k2"
  drive_kind kind;
  std::string_view description;  // "model NL-SAS 7.2k"
  std::uint64_t
      nominal_bytes;  // a simulated drive's size when none is given, in whole 4 KiB blocks
};
// Every model: "nl_sas_7k2" and "sas_10k" (HDDs), "sas_12g" (SSDs).
std::span<const timing_model_info> timing_models();
// The model named `name`; null if there is none.
const timing_model_info* find_timing_model(std::string_view name);
// What a simulated drive of `kind` is behind when its spec names no model.
const timing_model_info& default_timing_model(drive_kind kind);

// The embedded default's shelf: 20 nearline HDDs (two RAID-6 8+2 groups),
// and 3 SSDs (a RAID-1 pair for the performance tier, one for the read
// cache). Sizes are the profiles' nominal ones, except the read-cache
// SSD's, which is kept small: the cache's index and admission sketch grow
// with its lines (about 500 MiB of memory for a whole 1.92 TB drive).
std::vector<drive_spec> default_shelf();
// The two controllers' embedded default (config_file.h, dual_plan()): the
// same, and five more SSDs for the second pool (ssd-05 to ssd-09: two
// for its RAID-1, a read cache, two for its write log).
std::vector<drive_spec> dual_shelf();

struct shelf_options {
  // A test and torture mode (stratad --volatile-drive-caches): every drive
  // behind a device::fault_device with a volatile write cache, which holds
  // each write in this process's memory until a flush puts it on the
  // drive. A kill -9 of the process then loses exactly what a power cut
  // would lose on drives with volatile caches: every write not yet
  // flushed. Without it a write reaches the file (the page cache) at once,
  // and a kill -9 loses nothing, which would hide a missing flush.
  bool volatile_write_caches = false;
};

class shelf {
 public:
  // Opens every drive: the simulated ones under `directory` (created if
  // missing), the others at their paths; each behind its timing model, if
  // it has one. Fails naming the drive and the reason (an unknown model, a
  // model of the other kind, a missing or too small device).
  static std::expected<std::unique_ptr<shelf>, error> open(device::io_ring& ring,
                                                           device::clock& clock,
                                                           const std::filesystem::path& directory,
                                                           const std::vector<drive_spec>& drives,
                                                           const shelf_options& options = {});
  // Opens one more drive (a slot filled while the array runs), as open()
  // opens each; it becomes drive size() - 1. Blocks like open(): call it
  // where a blocking call is allowed (not a busy loop).
  std::expected<std::size_t, error> add(const drive_spec& drive);
  ~shelf();
  shelf(const shelf&) = delete;
  shelf& operator=(const shelf&) = delete;

  std::size_t size() const noexcept { return drives_.size(); }
  // Drive i's spec as opened: its path (a simulated drive's file's too),
  // its size in bytes, and its timing model's name (empty: none).
  const drive_spec& spec(std::size_t i) const noexcept { return specs_[i]; }
  // The drive as the layers above see it: the model over the file, or the
  // file itself (with volatile_write_caches, behind its cache), behind the
  // scheduler that puts background I/O after the hosts' (io_scheduler.h).
  // Behind its gates (raid/device/gate_device.h): one on top, one at the
  // bottom, right above the file, where a request is handed to the kernel;
  // both held while fence()'s test fails, until open_gates().
  device::block_device& drive(std::size_t i) const noexcept { return *drives_[i]; }
  // The same drive past its gates (its requests marked fence_exempt): for
  // the drive heartbeat and for reading the ownership records, which a
  // fenced controller must still do.
  device::block_device& raw_drive(std::size_t i) const noexcept { return *raw_[i]; }
  // Fencing (controller/lease.h): each drive's gate asks `allowed` at
  // every request, and holds when it fails, calling `on_hold`; a held gate
  // opens at open_gates(), except those held for good: the drives of a
  // pool this controller lost, whose requests wait (failing them would
  // fail the members, and start rebuilds) until shut_lost() fails them
  // at shutdown. Without a fence, the gates are always open.
  void fence(std::function<bool()> allowed, std::function<void()> on_hold);
  void open_gates();
  void hold_for_good(std::size_t i);
  void shut_lost(std::error_code why);
  // Requests held at drive i's bottom gate: admitted above before a lapse,
  // stopped on their way to the kernel.
  std::size_t held_below(std::size_t i) const noexcept;

  // Persistent reservations, the fence on the medium (raid/device/
  // reservations.h): a simulated drive's in NAME.pr beside its file, a
  // block device's its driver's; a regular file at a path, or a driver
  // without them, has none and is fenced by the lease alone. A write the
  // drive refuses for its reservation is held at the bottom gate, as a
  // lapse holds it (gate_device::refused).
  //
  // Registers `key` on every drive, and takes the reservation where none
  // is held; from then on a simulated drive checks every write against
  // it. Blocks (ioctls): call it at start-up. Returns what the log says.
  std::string register_key(std::uint64_t key);
  // Removes `victim`'s key from drives `drives` (PREEMPT AND ABORT), this
  // controller's registered again there first. `done` on the loop, with
  // the first error; on a thread of its own when a real drive is among
  // them (the ioctls block), inline otherwise.
  void preempt(std::vector<std::size_t> drives, std::uint64_t victim,
               std::function<void(std::error_code)> done);
  // Registers this controller's key on every drive again: after it read
  // the records and holds every drive of a pool it lost (a preempted
  // controller may then write its heartbeat, and later take a pool back).
  void register_again(std::function<void(std::error_code)> done);
  // Drive i's reservations (null: none), for tests and diagnostics.
  device::reservations* reservations(std::size_t i) const noexcept {
    return reservations_[i].get();
  }

 private:
  void fence_file(std::size_t i);
  void run(std::vector<std::size_t> drives,
           std::function<std::error_code(device::reservations&)> op,
           std::function<void(std::error_code)> done);
  shelf(device::io_ring& ring, device::clock& clock, std::filesystem::path directory,
        const shelf_options& options)
      : ring_(ring), clock_(clock), directory_(std::move(directory)), options_(options) {}
  device::io_ring& ring_;
  device::clock& clock_;
  std::filesystem::path directory_;  // the simulated drives' files
  shelf_options options_;
  std::vector<drive_spec> specs_;
  std::vector<std::unique_ptr<device::block_device>> files_;
  std::vector<std::unique_ptr<device::gate_device>> dispatch_gates_;  // over files_
  std::vector<std::unique_ptr<device::block_device>>
      models_;  // over dispatch_gates_; null for a drive with no model
  std::vector<std::unique_ptr<device::block_device>>
      caches_;  // over models_ or dispatch_gates_; null without volatile_write_caches
  std::vector<std::unique_ptr<device::block_device>>
      schedulers_;                                           // over caches_, models_ or files_
  std::vector<std::unique_ptr<device::gate_device>> gates_;  // over schedulers_
  std::vector<std::unique_ptr<device::block_device>> raws_;  // over schedulers_: fence-exempt
  std::vector<device::block_device*> raw_;                   // raws_[i]
  std::vector<device::block_device*> drives_;                // gates_[i]: the topmost
  std::set<std::size_t> lost_;                               // held for good
  std::vector<std::unique_ptr<device::reservations>> reservations_;  // null: none
  std::vector<device::file_device*> file_devices_;                   // files_[i]
  std::uint64_t key_ = 0;                                            // register_key's
  std::vector<std::thread> jobs_;                                    // preempts on real drives
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  std::function<bool()> fence_allowed_;
  std::function<void()> fence_on_hold_;
};

}  // namespace strata::controller
