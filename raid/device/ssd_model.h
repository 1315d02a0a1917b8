// A flash SSD timing model over any backing device that holds the data.
//
// Reads: `parallel_units` flash units (dies/planes the controller can keep
//   busy at once), each occupied for read_latency per command; the host link
//   then moves the data at the sequential read bandwidth, one transfer at a
//   time. QD1 latency = read_latency + transfer; peak random IOPS =
//   parallel_units / read_latency.
// Writes: land in the drive's power-protected DRAM after write_latency, but
//   the flash behind it drains at most random_write_iops (4 KiB random,
//   garbage-collection bound) or the sequential write bandwidth for streams;
//   once that backlog builds, writes wait for it.
// Flush: flush_latency (power-loss-protected cache: nothing to write out).
// Discard: trim_latency.
//
// Profiles and their datasheet sources: docs/device-models.md.
#pragma once

#include <string>
#include <vector>

#include "raid/device/model_device.h"

namespace strata::device {

struct ssd_profile {
  std::string name;
  duration read_latency{};   // 4 KiB, QD1, including the controller
  duration write_latency{};  // 4 KiB, QD1, to the protected cache
  std::uint32_t parallel_units = 1;
  double read_mb_per_s = 0;   // sequential, 10^6 bytes/s
  double write_mb_per_s = 0;  // sequential
  double random_write_iops = 0;
  duration flush_latency{};
  duration trim_latency{};
  std::uint64_t capacity_bytes = 0;  // nominal, for the simulated shelf's backing files

  static ssd_profile sas_12g();  // 12 Gb/s SAS, read-intensive class
};

class ssd_model final : public model_device {
 public:
  ssd_model(block_device& backing, clock& c, const ssd_profile& profile);
  const ssd_profile& profile() const noexcept { return profile_; }

 private:
  void admit(slot& s) override;
  time_point read_finish(const slot& s, time_point now);
  time_point write_finish(const slot& s, time_point now);
  duration at_rate(std::uint64_t bytes, double mb_per_s) const noexcept;

  ssd_profile profile_;
  std::vector<time_point> unit_free_;  // when each flash unit is next idle
  time_point link_free_{};             // when the host link is next idle
  time_point flash_write_free_{};      // when the write backlog has drained
  std::uint64_t next_sequential_write_lba_ = UINT64_MAX;
};

}  // namespace strata::device
