// The I/O scheduler: background I/O yields to foreground I/O on a busy
// drive, keeps going, and takes the drive once it is quiet; on an HDD model
// a host's latency under a background stream stays near its idle latency.
#include "raid/device/io_scheduler.h"

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "raid/device/hdd_model.h"
#include "raid/device/memory_device.h"
#include "tests/raid/device/harness.h"

namespace strata::device::testing {
namespace {

using std::chrono::milliseconds;

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t disk_blocks = 1u << 20;  // 4 GiB of platter (sparse memory)

struct drive {
  test_loop loop;
  std::unique_ptr<memory_device> memory;
  std::unique_ptr<hdd_model> model;
  std::unique_ptr<io_scheduler> scheduler;

  explicit drive(bool scheduled) {
    auto m = memory_device::create(loop.context.get_executor(), {block_size, disk_blocks});
    REQUIRE(m);
    memory = std::move(*m);
    model = std::make_unique<hdd_model>(*memory, loop.clock, hdd_profile::sas_10k());
    if (scheduled) scheduler = std::make_unique<io_scheduler>(*model, loop.clock);
  }
  block_device& top() { return scheduler ? static_cast<block_device&>(*scheduler) : *model; }
};

std::unique_ptr<io> background_read(std::uint64_t lba, std::uint64_t blocks) {
  auto x = io::make(op::read, lba, blocks, block_size);
  x->req.priority = io_class::background;
  return x;
}

}  // namespace

TEST_CASE(
    "io scheduler: background waits behind foreground one at a time, then takes the quiet drive",
    "[device][io_scheduler]") {
  drive d(true);
  auto host = io::make(op::read, 500000, 2, block_size);
  d.top().submit(host->req);
  std::vector<std::unique_ptr<io>> work;
  for (std::uint64_t i = 0; i < 12; ++i) work.push_back(background_read(i * 64, 64));
  for (auto& w : work) d.top().submit(w->req);
  CHECK(d.scheduler->background_waiting() == 11);  // one goes beside the host's read
  d.loop.run_until([&] { return host->completions == 1; });
  CHECK(host->req.result == std::error_code{});
  // Right after the host's read, still one at a time: the host may send its next.
  CHECK(d.scheduler->background_waiting() >= 9);
  d.loop.run_until([&] {
    return std::all_of(work.begin(), work.end(), [](auto& w) { return w->completions == 1; });
  });
  for (auto& w : work) CHECK(w->req.result == std::error_code{});
  CHECK(d.scheduler->counters().background == 12);
  CHECK(d.scheduler->counters().background_held == 11);
  CHECK(d.scheduler->counters().foreground == 1);
}

TEST_CASE("io scheduler: an expedited background request goes at once, beside the cap",
          "[device][io_scheduler]") {
  drive d(true);
  auto host = io::make(op::read, 500000, 2, block_size);
  d.top().submit(host->req);
  auto first = background_read(0, 64);
  auto second = background_read(64, 64);
  d.top().submit(first->req);
  d.top().submit(second->req);
  REQUIRE(d.scheduler->background_waiting() == 1);  // `second`, behind the cap
  d.scheduler->expedite(host->req);                 // not held: nothing
  CHECK(d.scheduler->background_waiting() == 1);
  d.scheduler->expedite(second->req);
  CHECK(d.scheduler->background_waiting() == 0);
  CHECK(d.scheduler->counters().expedited == 1);
  d.loop.run_until([&] {
    return host->completions == 1 && first->completions == 1 && second->completions == 1;
  });
  CHECK(second->req.result == std::error_code{});
}

TEST_CASE(
    "io scheduler: a host's random reads beside a background stream on an HDD keep near their idle "
    "latency, and the stream still moves",
    "[device][io_scheduler]") {
  const auto seed = test_seed();
  INFO("seed " << seed);
  struct outcome {
    double host_mean_ms = 0;
    double host_max_ms = 0;
    std::uint64_t background_mib = 0;
  };
  auto measure = [seed](bool scheduled, bool background) {
    drive d(scheduled);
    std::mt19937_64 rng(seed);
    constexpr unsigned host_depth = 4;
    constexpr unsigned host_total = 300;
    constexpr unsigned stream_depth = 8;
    constexpr std::uint64_t stream_blocks = 64;  // 256 KiB, as a rebuild reads a strip row
    std::vector<std::unique_ptr<io>> host(host_depth);
    std::vector<time_point> started(host_depth);
    std::vector<std::unique_ptr<io>> stream(stream_depth);
    unsigned host_done = 0;
    unsigned host_sent = 0;
    double total_ms = 0;
    double max_ms = 0;
    std::uint64_t stream_next = 0;
    std::uint64_t stream_blocks_done = 0;
    auto send_host = [&](unsigned i) {
      host[i] = io::make(op::read, (rng() % (disk_blocks / 2)) * 2, 2, block_size);
      started[i] = d.loop.clock.now();
      ++host_sent;
      d.top().submit(host[i]->req);
    };
    auto send_stream = [&](unsigned i) {
      stream[i] = background_read(stream_next, stream_blocks);
      stream_next = (stream_next + stream_blocks) % disk_blocks;
      d.top().submit(stream[i]->req);
    };
    for (unsigned i = 0; i < host_depth; ++i) send_host(i);
    if (background) {
      for (unsigned i = 0; i < stream_depth; ++i) send_stream(i);
    }
    while (host_done < host_total) {
      REQUIRE(d.loop.step());
      for (unsigned i = 0; i < host_depth; ++i) {
        if (!host[i] || host[i]->completions == 0) continue;
        REQUIRE(host[i]->req.result == std::error_code{});
        const double ms =
            std::chrono::duration<double, std::milli>(d.loop.clock.now() - started[i]).count();
        total_ms += ms;
        max_ms = std::max(max_ms, ms);
        ++host_done;
        host[i].reset();
        if (host_sent < host_total) send_host(i);
      }
      for (unsigned i = 0; background && i < stream_depth; ++i) {
        if (stream[i]->completions == 0) continue;
        stream_blocks_done += stream_blocks;
        send_stream(i);
      }
    }
    // Let what is left in flight end before the drive goes.
    d.loop.run_until([&] {
      return std::all_of(host.begin(), host.end(),
                         [](auto& h) { return !h || h->completions == 1; }) &&
             std::all_of(stream.begin(), stream.end(),
                         [](auto& s) { return !s || s->completions == 1; });
    });
    return outcome{total_ms / host_total, max_ms, stream_blocks_done * block_size >> 20};
  };
  const outcome idle = measure(false, false);
  const outcome unscheduled = measure(false, true);
  const outcome scheduled = measure(true, true);
  INFO("host mean/max ms: idle " << idle.host_mean_ms << "/" << idle.host_max_ms
                                 << ", beside the stream " << unscheduled.host_mean_ms << "/"
                                 << unscheduled.host_max_ms << " unscheduled, "
                                 << scheduled.host_mean_ms << "/" << scheduled.host_max_ms
                                 << " scheduled; stream MiB " << unscheduled.background_mib
                                 << " unscheduled, " << scheduled.background_mib << " scheduled");
  CHECK(scheduled.host_mean_ms < 0.6 * unscheduled.host_mean_ms);
  CHECK(scheduled.host_mean_ms < 2.0 * idle.host_mean_ms);
  CHECK(scheduled.background_mib > 0);
}

}  // namespace strata::device::testing
