#include "tools/bdevperf/workload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace strata::tools {

double workload_result::iops() const {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  return seconds > 0 ? static_cast<double>(completed) / seconds : 0.0;
}

double workload_result::mb_per_s(std::uint64_t bytes_per_io) const {
  return iops() * static_cast<double>(bytes_per_io) / 1e6;
}

device::duration workload_result::percentile(double p) const {
  if (latencies.empty()) return {};
  const auto rank =
      static_cast<std::size_t>(p / 100.0 * static_cast<double>(latencies.size() - 1) + 0.5);
  return latencies[std::min(rank, latencies.size() - 1)];
}

device::duration workload_result::mean() const {
  if (latencies.empty()) return {};
  const auto total = std::accumulate(latencies.begin(), latencies.end(), device::duration::zero());
  return total / static_cast<std::int64_t>(latencies.size());
}

device::duration workload_result::write_percentile(double p) const {
  if (write_latencies.empty()) return {};
  const auto rank =
      static_cast<std::size_t>(p / 100.0 * static_cast<double>(write_latencies.size() - 1) + 0.5);
  return write_latencies[std::min(rank, write_latencies.size() - 1)];
}

device::duration workload_result::write_mean() const {
  if (write_latencies.empty()) return {};
  const auto total =
      std::accumulate(write_latencies.begin(), write_latencies.end(), device::duration::zero());
  return total / static_cast<std::int64_t>(write_latencies.size());
}

workload::workload(device::block_device& target, device::clock& clock, const workload_spec& spec)
    : target_(target),
      clock_(clock),
      spec_(spec),
      random_(spec.seed),
      // At least one: a request larger than the device is then out of range
      // and reported as an error, rather than dividing by zero.
      span_ios_(std::max<std::uint64_t>(
          1, (spec.span_blocks > 0 ? std::min(spec.span_blocks, target.geometry().block_count)
                                   : target.geometry().block_count) /
                 std::max<std::uint32_t>(spec.io_blocks, 1))) {
  if (spec.zipf_theta > 0) {
    zipf_cdf_.resize(span_ios_);
    double sum = 0;
    for (std::uint64_t i = 0; i < span_ios_; ++i)
      zipf_cdf_[i] = sum += 1.0 / std::pow(static_cast<double>(i + 1), spec.zipf_theta);
    for (double& c : zipf_cdf_) c /= sum;
  }
  const std::uint64_t io_bytes =
      std::uint64_t{spec.io_blocks} * target.geometry().logical_block_size_bytes;
  const std::uint64_t buffer_count = std::max<std::uint64_t>(
      spec.queue_depth, io_bytes > 0 ? spec.buffer_pool_bytes / io_bytes : 0);
  for (std::uint64_t i = 0; i < buffer_count; ++i) {
    buffers_.emplace_back(io_bytes);
    // Touched, so that every page is a page of its own in DRAM.
    std::memset(buffers_.back().data(), static_cast<int>(i + 1), io_bytes);
  }
  for (std::uint32_t i = 0; i < spec.queue_depth; ++i) {
    auto s = std::make_unique<slot>();
    s->owner = this;
    s->req.operation = spec.operation;
    s->req.block_count = spec.io_blocks;
    s->req.buffers = {&s->segment, 1};
    s->req.context = s.get();
    s->req.on_complete = &workload::on_done;
    slots_.push_back(std::move(s));
  }
  // Room for every latency up front, so that recording one never
  // reallocates on the completion path being measured. A timed run is sized
  // for 1M completions a second, at most 8M (64 MiB, touched only as used).
  std::uint64_t expected = spec.io_count;
  if (expected == 0 && spec.run_time > device::duration::zero()) {
    const double seconds = std::chrono::duration<double>(spec.run_time).count();
    expected = static_cast<std::uint64_t>(std::min(seconds * 1e6, 8e6));
  }
  result_.latencies.reserve(expected);
}

void workload::start() {
  started_ = true;
  start_time_ = clock_.now();
  last_completion_ = start_time_;
  for (auto& s : slots_) {
    if (!more_to_issue()) break;
    issue(*s);
  }
}

bool workload::more_to_issue() const noexcept {
  if (spec_.io_count > 0 && issued_ >= spec_.io_count) return false;
  if (spec_.run_time > device::duration::zero() && clock_.now() - start_time_ >= spec_.run_time) {
    return false;
  }
  return true;
}

void workload::issue(slot& s) {
  std::uint64_t index;
  if (spec_.random && !zipf_cdf_.empty()) {
    const double u = std::uniform_real_distribution<double>(0, 1)(random_);
    const std::uint64_t rank = static_cast<std::uint64_t>(
        std::lower_bound(zipf_cdf_.begin(), zipf_cdf_.end(), u) - zipf_cdf_.begin());
    // Rank r's place, by a fixed multiplicative hash: hot ranks land far
    // apart (two ranks may share a place, which only merges hot spots).
    index = (std::min(rank, span_ios_ - 1) * 0x9E3779B97F4A7C15ull) % span_ios_;
  } else if (spec_.random) {
    index = std::uniform_int_distribution<std::uint64_t>(0, span_ios_ - 1)(random_);
  } else {
    index = next_sequential_++ % span_ios_;
  }
  s.req.lba = index * spec_.io_blocks;
  if (spec_.write_percent > 0) {
    const bool write =
        std::uniform_int_distribution<unsigned>(0, 99)(random_) < spec_.write_percent;
    s.req.operation = write ? device::op::write : spec_.operation;
  }
  s.segment = buffers_[next_buffer_].segment();
  next_buffer_ = (next_buffer_ + 1) % buffers_.size();
  s.issued = clock_.now();
  ++issued_;
  ++in_flight_;
  target_.submit(s.req);
}

void workload::on_done(device::request& req) noexcept {
  slot& s = *static_cast<slot*>(req.context);
  workload& self = *s.owner;
  --self.in_flight_;
  const device::time_point now = self.clock_.now();
  self.last_completion_ = now;
  if (req.result) {
    if (self.result_.errors++ == 0) self.result_.first_error = req.result;
  } else {
    ++self.result_.completed;
    const bool mixed_write = self.spec_.write_percent > 0 && req.operation != self.spec_.operation;
    (mixed_write ? self.result_.write_latencies : self.result_.latencies).push_back(now - s.issued);
  }
  if (self.more_to_issue()) self.issue(s);
}

workload_result workload::finish() {
  result_.elapsed = last_completion_ - start_time_;
  std::sort(result_.latencies.begin(), result_.latencies.end());
  std::sort(result_.write_latencies.begin(), result_.write_latencies.end());
  return std::move(result_);
}

}  // namespace strata::tools
