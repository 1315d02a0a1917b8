// A closed-loop workload for one block device, in the spirit of SPDK's
// bdevperf: keeps queue_depth requests in flight, each resubmitted with a
// new target from its own completion, and records every latency.
//
// Runs on the device's loop: start() and everything after happen on that
// thread. Time comes from the injected clock, so the same workload measures
// a model in virtual time (tests) or a real file in real time (benchmarks).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/device/clock.h"

namespace strata::tools {

struct workload_spec {
  device::op operation = device::op::read;
  bool random = true;           // false: sequential from block 0
  std::uint32_t io_blocks = 1;  // blocks per request
  std::uint32_t queue_depth = 1;
  std::uint64_t io_count = 0;   // stop after this many completions (0: no limit)
  device::duration run_time{};  // stop issuing after this long (0: no limit)
  std::uint64_t seed = 1;
  // 0: each slot reuses its own buffer, which stays in the CPU's caches.
  // Else the requests cycle through buffers of this many bytes in all, so
  // that (when it is larger than the caches) data comes from DRAM, as a
  // host's writes would.
  std::uint64_t buffer_pool_bytes = 0;
  // Of a random read workload, this share of requests (percent) are writes
  // instead: a mixed load, as OLTP's. Their latencies are kept apart.
  unsigned write_percent = 0;
  // Random offsets fall in blocks [0, span_blocks) only (0: the whole
  // device): hot blocks clustered in a few stripes.
  std::uint64_t span_blocks = 0;
  // Above 0: random offsets are skewed, Zipf-distributed with this
  // exponent (fio's random_distribution=zipf:1.1), the hot ones scattered
  // over the span by a fixed permutation, as fio scatters them.
  double zipf_theta = 0;
};

struct workload_result {
  std::uint64_t completed = 0;
  std::uint64_t errors = 0;
  std::error_code first_error;
  device::duration elapsed{};
  std::vector<device::duration> latencies;        // sorted
  std::vector<device::duration> write_latencies;  // of a mixed load's writes, sorted

  double iops() const;
  // The mean of a mixed load's writes.
  device::duration write_mean() const;
  device::duration write_percentile(double p) const;  // of a mixed load's writes
  double mb_per_s(std::uint64_t bytes_per_io) const;
  device::duration percentile(double p) const;  // p in [0, 100]
  device::duration mean() const;
};

class workload {
 public:
  workload(device::block_device& target, device::clock& clock, const workload_spec& spec);
  workload(const workload&) = delete;

  void start();
  bool done() const noexcept { return in_flight_ == 0 && started_; }
  // Sorts the latencies; call once done().
  workload_result finish();

 private:
  struct slot {
    workload* owner = nullptr;
    device::request req;
    iovec segment{};
    device::time_point issued{};
  };
  void issue(slot& s);
  static void on_done(device::request& req) noexcept;
  bool more_to_issue() const noexcept;

  device::block_device& target_;
  device::clock& clock_;
  workload_spec spec_;
  std::mt19937_64 random_;
  std::uint64_t span_ios_;        // how many io-sized pieces the device holds
  std::vector<double> zipf_cdf_;  // zipf_theta > 0: P(rank <= i)
  std::uint64_t next_sequential_ = 0;
  std::uint64_t issued_ = 0;
  std::uint64_t in_flight_ = 0;
  bool started_ = false;
  device::time_point start_time_{};
  device::time_point last_completion_{};
  std::vector<std::unique_ptr<slot>> slots_;
  std::vector<device::aligned_buffer> buffers_;  // at least one per slot
  std::size_t next_buffer_ = 0;
  workload_result result_;
};

}  // namespace strata::tools
