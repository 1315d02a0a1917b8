// A hard-disk timing model: one actuator, seek time by distance, rotational
// position, zoned media rate, and a bounded reordering queue (the drive's
// tagged command queue), over any backing device that holds the data.
//
// Service time of one command =
//   command overhead
//   + seek(|target - head| / span)       0 for the same track; else
//                                        t2t + a*sqrt(d) + b*d, fitted to the
//                                        datasheet's track-to-track, average
//                                        and full-stroke seeks
//   + rotational wait                    until the target sector comes under
//                                        the head (platter angle is tracked
//                                        from the clock, sectors laid out by
//                                        the zone's track size)
//   + transfer                           bytes / media rate at that radius
//                                        (outer to inner zone, linear in LBA)
// A command that continues the previous one (sequential) pays only overhead
// and transfer: the drive's read-ahead and write cache hide the rest. If it
// was already queued when the previous one started, the drive processed it
// during that transfer and it pays the transfer alone: a queued stream runs
// at the media rate.
//
// The drive picks, among the `reorder_window` oldest queued commands, the one
// with the shortest positioning time (shortest access time first), unless the
// oldest has waited longer than `starvation_limit`.
//
// The backing device's span is the whole platter: LBA 0 is the outer edge,
// the last LBA the inner edge. Profiles and their datasheet sources:
// docs/device-models.md.
#pragma once

#include <string>
#include <vector>

#include "raid/device/model_device.h"

namespace strata::device {

struct seek_curve {
  duration track_to_track;
  duration average;  // over uniformly random pairs of positions
  duration full_stroke;
};

struct hdd_profile {
  std::string name;
  double rpm = 0;
  seek_curve read_seek;
  seek_curve write_seek;
  double outer_transfer_mb_per_s = 0;  // sustained media rate, 10^6 bytes/s
  double inner_transfer_mb_per_s = 0;
  duration command_overhead{};
  std::uint32_t reorder_window = 32;
  duration starvation_limit = std::chrono::milliseconds(500);
  std::uint64_t capacity_bytes = 0;  // nominal, for the simulated shelf's backing files

  static hdd_profile sas_10k();     // 10,000 rpm 2.5" SAS
  static hdd_profile nl_sas_7k2();  // 7,200 rpm 3.5" nearline SAS
};

class hdd_model final : public model_device {
 public:
  hdd_model(block_device& backing, clock& c, const hdd_profile& profile);

  const hdd_profile& profile() const noexcept { return profile_; }
  // Commands waiting for the actuator (not counting the one it serves).
  std::size_t queued() const noexcept { return queue_.size(); }

  // The modelled seek time over a fraction (0..1) of the stroke. Exposed for
  // tests that check the curve against the datasheet.
  duration seek_time(double distance_fraction, bool write) const noexcept;

 private:
  struct fitted_seek {
    double track_to_track_ns, sqrt_coefficient_ns, linear_coefficient_ns;
  };
  static fitted_seek fit(const seek_curve& curve) noexcept;

  void admit(slot& s) override;
  void on_modelled_done(slot& s) override;
  void dispatch();
  // Overhead + seek + rotational wait for `s` if the actuator starts it at `start`.
  duration positioning_time(const slot& s, time_point start) const noexcept;
  duration transfer_time(const slot& s) const noexcept;
  double media_rate_bytes_per_ns(std::uint64_t lba) const noexcept;

  hdd_profile profile_;
  fitted_seek read_fit_;
  fitted_seek write_fit_;
  double revolution_ns_;
  std::vector<slot*> queue_;  // arrival order
  bool busy_ = false;
  time_point actuator_free_{};
  std::uint64_t head_lba_ = 0;  // where the last command ended
};

}  // namespace strata::device
