// The simulated shelf of the embedded default: model drives (HDD and SSD
// timing, raid/device/hdd_model.h, ssd_model.h) over sparse files in the
// state directory, so that a whole array runs on one machine and keeps its
// data across restarts.
//
// A drive's file is created sparse on first open and reopened as it is
// afterwards: the same specs give the same drives, with their data. What a
// drive holds (RAID superblocks, data) is the layers above's business.
//
// Threads: open() blocks (file creation, open, statx): call it at start-up.
// The drives then live on the ring's loop, like any device.
// Lifetime: the ring and the clock outlive the shelf; the shelf outlives
// everything built on its drives.
#pragma once

#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/device/clock.h"
#include "raid/device/io_ring.h"
#include "raid/device/status.h"

namespace strata::controller {

enum class drive_kind : std::uint8_t { hdd, ssd };

struct drive_spec {
  std::string name;             // "hdd-00": the slot's name, and its file's (name + ".img")
  drive_kind kind = drive_kind::hdd;
  std::uint64_t bytes = 0;      // the file's size: a whole number of 4 KiB blocks
};

// The embedded default's shelf: 20 nearline HDDs (two RAID-6 8+2 groups),
// and 3 SSDs (a RAID-1 pair for the performance tier, one for the read
// cache). Sizes are the profiles' nominal ones, except the read-cache
// SSD's, which is kept small: the cache's index and admission sketch grow
// with its lines (about 500 MiB of memory for a whole 1.92 TB drive).
std::vector<drive_spec> default_shelf();

class shelf {
 public:
  // Opens every drive under `directory` (created if missing), each behind
  // the timing model of its kind. Fails naming the drive and the reason.
  static std::expected<std::unique_ptr<shelf>, error> open(device::io_ring& ring, device::clock& clock,
                                                           const std::filesystem::path& directory,
                                                           const std::vector<drive_spec>& drives);
  ~shelf();
  shelf(const shelf&) = delete;
  shelf& operator=(const shelf&) = delete;

  std::size_t size() const noexcept { return drives_.size(); }
  const drive_spec& spec(std::size_t i) const noexcept { return specs_[i]; }
  // The drive as the layers above see it: the model over the file.
  device::block_device& drive(std::size_t i) const noexcept { return *drives_[i]; }

 private:
  shelf() = default;
  std::vector<drive_spec> specs_;
  std::vector<std::unique_ptr<device::block_device>> files_;
  std::vector<std::unique_ptr<device::block_device>> drives_;  // the models, over files_
};

}  // namespace strata::controller
