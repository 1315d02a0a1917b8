#include "raid/device/hdd_model.h"

#include <algorithm>
#include <cmath>

namespace strata::device {
namespace {

using std::chrono::microseconds;

double to_ns(duration d) {
  return static_cast<double>(d.count());
}
duration from_ns(double ns) {
  return duration(static_cast<std::int64_t>(ns));
}

double fraction_of(double value) {
  return value - std::floor(value);
}

}  // namespace

// Figures and sources: docs/device-models.md.
hdd_profile hdd_profile::sas_10k() {
  hdd_profile p;
  p.name = "10K SAS (Seagate Savvio 10K.4 600 GB)";
  p.rpm = 10'000;
  p.read_seek = {microseconds(300), microseconds(3'800), microseconds(7'810)};
  p.write_seek = {microseconds(560), microseconds(4'400), microseconds(8'180)};
  p.outer_transfer_mb_per_s = 135;
  p.inner_transfer_mb_per_s = 72;
  p.command_overhead = microseconds(200);
  p.capacity_bytes = 600'000'000'000;
  return p;
}

hdd_profile hdd_profile::nl_sas_7k2() {
  hdd_profile p;
  p.name = "7.2K NL-SAS (WD Ultrastar DC HC310 seeks, Seagate Constellation ES.3 rates)";
  p.rpm = 7'200;
  p.read_seek = {microseconds(230), microseconds(7'400), microseconds(15'000)};
  p.write_seek = {microseconds(320), microseconds(8'200), microseconds(16'000)};
  p.outer_transfer_mb_per_s = 175;
  p.inner_transfer_mb_per_s = 83;
  p.command_overhead = microseconds(200);
  p.capacity_bytes = 4'000'000'000'000;
  return p;
}

// seek(d) = t2t + a*sqrt(d) + b*d for d in (0, 1]. Over uniformly random
// pairs of positions E[d] = 1/3 and E[sqrt(d)] = 8/15, so requiring
// seek(1) = full stroke and E[seek] = average gives two linear equations.
hdd_model::fitted_seek hdd_model::fit(const seek_curve& curve) noexcept {
  const double t2t = to_ns(curve.track_to_track);
  const double full = to_ns(curve.full_stroke) - t2t;
  const double average = to_ns(curve.average) - t2t;
  const double a = (average - full / 3.0) / (8.0 / 15.0 - 1.0 / 3.0);
  return {t2t, a, full - a};
}

hdd_model::hdd_model(block_device& backing, clock& c, const hdd_profile& profile)
    : model_device(backing, c),
      profile_(profile),
      read_fit_(fit(profile.read_seek)),
      write_fit_(fit(profile.write_seek)),
      revolution_ns_(60e9 / profile.rpm) {
  queue_.reserve(256);
}

duration hdd_model::seek_time(double distance_fraction, bool write) const noexcept {
  if (distance_fraction <= 0) return duration::zero();
  const fitted_seek& f = write ? write_fit_ : read_fit_;
  const double d = std::min(distance_fraction, 1.0);
  return from_ns(f.track_to_track_ns + f.sqrt_coefficient_ns * std::sqrt(d) +
                 f.linear_coefficient_ns * d);
}

double hdd_model::media_rate_bytes_per_ns(std::uint64_t lba) const noexcept {
  const double radius_fraction =
      static_cast<double>(lba) / static_cast<double>(geometry().block_count);
  const double mb_per_s =
      profile_.outer_transfer_mb_per_s -
      (profile_.outer_transfer_mb_per_s - profile_.inner_transfer_mb_per_s) * radius_fraction;
  return mb_per_s * 1e6 / 1e9;
}

duration hdd_model::transfer_time(const slot& s) const noexcept {
  if (s.outer->operation != op::read && s.outer->operation != op::write) return duration::zero();
  const double bytes = static_cast<double>(transfer_bytes(geometry(), *s.outer));
  return from_ns(bytes / media_rate_bytes_per_ns(s.outer->lba));
}

duration hdd_model::positioning_time(const slot& s, time_point start) const noexcept {
  const request& req = *s.outer;
  const double overhead_ns = to_ns(profile_.command_overhead);
  if (req.lba == head_lba_) {
    // Sequential: no seek, no rotation. A command already queued while the
    // previous one ran was processed during its transfer (tagged queueing),
    // so a queued stream pays no overhead either.
    return s.arrival < start ? duration::zero() : from_ns(overhead_ns);
  }

  const double block_count = static_cast<double>(geometry().block_count);
  const double distance =
      std::abs(static_cast<double>(req.lba) - static_cast<double>(head_lba_)) / block_count;
  const double seek_ns = to_ns(seek_time(distance, req.operation == op::write));

  // Where the platter is when the head has settled, and where the target
  // sector sits on its track.
  const double arrival_ns = to_ns(start.time_since_epoch()) + overhead_ns + seek_ns;
  const double platter_angle = fraction_of(arrival_ns / revolution_ns_);
  const double track_bytes = media_rate_bytes_per_ns(req.lba) * revolution_ns_;
  const double sector_angle =
      fraction_of(static_cast<double>(req.lba) * geometry().logical_block_size_bytes / track_bytes);
  const double wait_ns = fraction_of(sector_angle - platter_angle) * revolution_ns_;
  return from_ns(overhead_ns + seek_ns + wait_ns);
}

void hdd_model::admit(slot& s) {
  if (s.outer->operation == op::flush || s.outer->operation == op::discard) {
    // No volatile cache to empty (arrays run drives with it off) and no
    // media work to model: straight through to the backing device.
    begin(s, s.arrival);
    return;
  }
  queue_.push_back(&s);
  if (!busy_) dispatch();
}

void hdd_model::dispatch() {
  if (queue_.empty()) return;
  // Times come from the model, not from when the timer happened to fire, so
  // timer lateness does not accumulate into the drive's throughput.
  auto start_of = [this](const slot* s) { return std::max(actuator_free_, s->arrival); };

  std::size_t chosen = 0;
  const slot* oldest = queue_.front();
  if (start_of(oldest) - oldest->arrival < profile_.starvation_limit) {
    const std::size_t window = std::min<std::size_t>(queue_.size(), profile_.reorder_window);
    duration best = duration::max();
    for (std::size_t i = 0; i < window; ++i) {
      const duration cost = positioning_time(*queue_[i], start_of(queue_[i]));
      if (cost < best) {
        best = cost;
        chosen = i;
      }
    }
  }
  slot& s = *queue_[chosen];
  queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(chosen));

  const time_point start = start_of(&s);
  const time_point finish = start + positioning_time(s, start) + transfer_time(s);
  busy_ = true;
  actuator_free_ = finish;
  head_lba_ = s.outer->lba + s.outer->block_count;
  begin(s, finish);
}

void hdd_model::on_modelled_done(slot& s) {
  if (s.outer->operation == op::flush || s.outer->operation == op::discard) return;
  busy_ = false;
  dispatch();
}

}  // namespace strata::device
