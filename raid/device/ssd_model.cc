#include "raid/device/ssd_model.h"

#include <algorithm>

namespace strata::device {

using std::chrono::microseconds;

// Figures and sources: docs/device-models.md.
ssd_profile ssd_profile::sas_12g() {
  ssd_profile p;
  p.name = "12G SAS SSD (Samsung PM1643 class)";
  p.read_latency = microseconds(90);
  p.write_latency = microseconds(30);
  // 400,000 random-read IOPS at 90 us each keeps 36 units busy.
  p.parallel_units = 36;
  p.read_mb_per_s = 2'100;
  p.write_mb_per_s = 1'700;
  p.random_write_iops = 50'000;
  p.flush_latency = microseconds(20);
  p.trim_latency = microseconds(20);
  p.capacity_bytes = 1'920'000'000'000;
  return p;
}

ssd_model::ssd_model(block_device& backing, clock& c, const ssd_profile& profile)
    : model_device(backing, c),
      profile_(profile),
      unit_free_(std::max<std::uint32_t>(profile.parallel_units, 1)) {}

duration ssd_model::at_rate(std::uint64_t bytes, double mb_per_s) const noexcept {
  return duration(static_cast<std::int64_t>(static_cast<double>(bytes) * 1e3 / mb_per_s));
}

time_point ssd_model::read_finish(const slot& s, time_point now) {
  auto unit = std::min_element(unit_free_.begin(), unit_free_.end());
  const time_point start = std::max(now, *unit);
  const time_point sensed = start + profile_.read_latency;
  *unit = sensed;
  link_free_ = std::max(link_free_, sensed) +
               at_rate(transfer_bytes(geometry(), *s.outer), profile_.read_mb_per_s);
  return link_free_;
}

time_point ssd_model::write_finish(const slot& s, time_point now) {
  const request& req = *s.outer;
  const std::uint64_t bytes = transfer_bytes(geometry(), req);
  duration flash_cost = at_rate(bytes, profile_.write_mb_per_s);
  if (req.lba != next_sequential_write_lba_) {
    const double pages = static_cast<double>(bytes) / 4096.0;
    flash_cost = std::max(
        flash_cost, duration(static_cast<std::int64_t>(pages * 1e9 / profile_.random_write_iops)));
  }
  next_sequential_write_lba_ = req.lba + req.block_count;
  const time_point start = std::max(now, flash_write_free_ - profile_.write_latency);
  flash_write_free_ = std::max(flash_write_free_, start) + flash_cost;
  return start + profile_.write_latency + at_rate(bytes, profile_.write_mb_per_s);
}

void ssd_model::admit(slot& s) {
  const time_point now = s.arrival;
  switch (s.outer->operation) {
    case op::read:
      begin(s, read_finish(s, now));
      break;
    case op::write:
      begin(s, write_finish(s, now));
      break;
    case op::flush:
      begin(s, now + profile_.flush_latency);
      break;
    case op::discard:
      begin(s, now + profile_.trim_latency);
      break;
  }
}

}  // namespace strata::device
