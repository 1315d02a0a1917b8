#include "tiering/heat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

namespace strata::tiering {

heat_map::heat_map(std::uint64_t extent_count, std::uint64_t extent_blocks,
                   std::uint32_t block_size_bytes, const heat_options& options,
                   device::clock& clock)
    : entries_(extent_count),
      streams_(std::max(1u, options.streams_tracked)),
      extent_blocks_(extent_blocks),
      block_size_bytes_(block_size_bytes),
      options_(options),
      half_life_seconds_(std::max(1e-3, std::chrono::duration<double>(options.half_life).count())),
      clock_(clock) {}

std::uint32_t heat_map::now_seconds() const noexcept {
  const auto s =
      std::chrono::duration_cast<std::chrono::seconds>(clock_.now().time_since_epoch()).count();
  return static_cast<std::uint32_t>(s) & ~dirty_bit;
}

double heat_map::decay_factor(std::uint32_t from_seconds, std::uint32_t to_seconds) const noexcept {
  if (to_seconds <= from_seconds) return 1.0;
  return std::exp2(-static_cast<double>(to_seconds - from_seconds) / half_life_seconds_);
}

void heat_map::decay_to(entry& e, std::uint32_t now) const noexcept {
  const std::uint32_t then = e.stamp & ~dirty_bit;
  if (then == now) return;
  const auto f = static_cast<float>(decay_factor(then, now));
  e.values.read_ios *= f;
  e.values.write_ios *= f;
  e.values.read_bytes *= f;
  e.values.write_bytes *= f;
  e.stamp = now | (e.stamp & dirty_bit);
}

bool heat_map::sequential(std::uint64_t lba, std::uint64_t block_count) {
  ++stream_clock_;
  const std::uint64_t bytes = block_count * block_size_bytes_;
  stream* oldest = &streams_[0];
  for (stream& s : streams_) {
    if (s.run_bytes > 0 && s.next_lba == lba) {
      s.next_lba = lba + block_count;
      s.run_bytes += bytes;
      s.last_used = stream_clock_;
      return s.run_bytes > options_.sequential_threshold_bytes;
    }
    if (s.last_used < oldest->last_used) oldest = &s;
  }
  // A new stream replaces the least recently continued one.
  *oldest = stream{lba + block_count, bytes, stream_clock_};
  return bytes > options_.sequential_threshold_bytes;
}

bool heat_map::record(device::op operation, std::uint64_t lba, std::uint64_t block_count) {
  if (operation != device::op::read && operation != device::op::write) return false;
  if (sequential(lba, block_count)) return true;
  const std::uint32_t now = now_seconds();
  const auto age = static_cast<std::uint32_t>(age_seconds());
  const std::uint64_t end = lba + block_count;
  for (std::uint64_t e = lba / extent_blocks_; e * extent_blocks_ < end && e < entries_.size();
       ++e) {
    const std::uint64_t from = std::max(lba, e * extent_blocks_);
    const std::uint64_t to = std::min(end, (e + 1) * extent_blocks_);
    const auto bytes = static_cast<float>((to - from) * block_size_bytes_);
    entry& x = entries_[e];
    decay_to(x, now);
    x.values.last_io_age_seconds = age;
    if (operation == device::op::read) {
      x.values.read_ios += 1;
      x.values.read_bytes += bytes;
    } else {
      x.values.write_ios += 1;
      x.values.write_bytes += bytes;
    }
    if (!(x.stamp & dirty_bit)) {
      x.stamp |= dirty_bit;
      dirty_.push_back(e);
    }
  }
  return false;
}

extent_heat heat_map::heat(std::uint64_t extent) const noexcept {
  entry e = entries_[extent];
  decay_to(e, now_seconds());
  return e.values;
}

std::uint64_t heat_map::age_at(const device::clock& clock,
                               std::int64_t age_at_clock_zero_seconds) noexcept {
  const auto clock_seconds =
      std::chrono::duration_cast<std::chrono::seconds>(clock.now().time_since_epoch()).count();
  return static_cast<std::uint64_t>(
      std::max<std::int64_t>(0, clock_seconds + age_at_clock_zero_seconds));
}

std::uint64_t heat_map::age_seconds() const noexcept {
  return age_at(clock_, options_.age_at_clock_zero_seconds);
}

std::uint64_t heat_map::idle_seconds(std::uint64_t extent) const noexcept {
  const std::uint64_t age = age_seconds();
  const std::uint32_t last = entries_[extent].values.last_io_age_seconds;
  return age > last ? age - last : 0;
}

double heat_map::score(std::uint64_t extent) const noexcept {
  const entry& e = entries_[extent];
  const double f = decay_factor(e.stamp & ~dirty_bit, now_seconds());
  return score(e.values) * f;
}

void heat_map::clear(std::uint64_t extent) noexcept {
  entry& e = entries_[extent];
  e.values = {};
  if (!(e.stamp & dirty_bit)) {
    e.stamp |= dirty_bit;
    dirty_.push_back(extent);
  }
}

void heat_map::take_dirty(const std::function<void(std::uint64_t, const extent_heat&)>& fn) {
  const std::uint32_t now = now_seconds();
  for (std::uint64_t extent : dirty_) {
    entry& e = entries_[extent];
    decay_to(e, now);
    e.stamp &= ~dirty_bit;
    fn(extent, e.values);
  }
  dirty_.clear();
}

void heat_map::load(std::uint64_t extent, const extent_heat& h) noexcept {
  entry& e = entries_[extent];
  e.values = h;
  e.stamp = now_seconds() | (e.stamp & dirty_bit);
}

// Version 1: the four floats. Version 2 adds the last I/O's pool age
// (a host-order u32); a version 1 value reads as idle since the pool
// began, which an upgraded pool's age makes the moment of the upgrade.
std::string heat_map::encode(const extent_heat& h) {
  std::string out(1 + 4 * sizeof(float) + sizeof(std::uint32_t), '\0');
  out[0] = 2;  // format version
  const float values[4] = {h.read_ios, h.write_ios, h.read_bytes, h.write_bytes};
  // Host-order: Strata runs on little-endian x86-64 and arm64 only.
  std::memcpy(out.data() + 1, values, sizeof(values));
  std::memcpy(out.data() + 1 + sizeof(values), &h.last_io_age_seconds, sizeof(std::uint32_t));
  return out;
}

std::optional<extent_heat> heat_map::decode(std::string_view value) {
  constexpr std::size_t floats = 4 * sizeof(float);
  if (value.empty()) return std::nullopt;
  const bool v1 = value[0] == 1 && value.size() == 1 + floats;
  const bool v2 = value[0] == 2 && value.size() == 1 + floats + sizeof(std::uint32_t);
  if (!v1 && !v2) return std::nullopt;
  float values[4];
  std::memcpy(values, value.data() + 1, sizeof(values));
  extent_heat h{values[0], values[1], values[2], values[3]};
  if (v2) std::memcpy(&h.last_io_age_seconds, value.data() + 1 + floats, sizeof(std::uint32_t));
  return h;
}

}  // namespace strata::tiering
