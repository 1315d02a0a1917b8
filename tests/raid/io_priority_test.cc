// Background work and the I/O scheduler under a RAID-6 group: a host write
// that waits for a stripe held by a scrub does not wait at background pace
// (the scrub's held member reads are expedited).
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "raid/device/hdd_model.h"
#include "raid/device/io_scheduler.h"
#include "raid/device/memory_device.h"
#include "raid/raid6_group.h"
#include "tests/raid/device/harness.h"

namespace strata::raid {
namespace {

using namespace device;
using namespace device::testing;

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t strip_blocks = 16;
constexpr std::uint64_t stripes = 64;

}  // namespace

TEST_CASE("io priority: a host write behind a scrub's stripe gets the scrub's held reads expedited",
          "[raid][io_priority]") {
  test_loop loop;
  std::vector<std::unique_ptr<memory_device>> platters;
  std::vector<std::unique_ptr<hdd_model>> models;
  std::vector<std::unique_ptr<io_scheduler>> schedulers;
  std::vector<block_device*> members;
  for (int i = 0; i < 6; ++i) {
    auto m = memory_device::create(loop.context.get_executor(), {block_size, 8 + stripes * strip_blocks});
    REQUIRE(m);
    platters.push_back(std::move(*m));
    models.push_back(std::make_unique<hdd_model>(*platters.back(), loop.clock, hdd_profile::sas_10k()));
    schedulers.push_back(std::make_unique<io_scheduler>(*models.back(), loop.clock));
    members.push_back(schedulers.back().get());
  }
  raid6_options options;
  options.strip_size_bytes = strip_blocks * block_size;
  options.reserved_bytes = 8 * block_size;
  options.clock = &loop.clock;
  auto g = raid6_group::create(members, options);
  REQUIRE(g);
  raid6_group& group = **g;
  const std::uint64_t stripe_blocks = 4 * strip_blocks;

  // Every member busy: a host read in flight on each (each holds the
  // drive's background cap at one), and a background read of its own in
  // flight beside it, so the scrub's reads are held.
  std::vector<std::unique_ptr<io>> host_reads, fillers;
  for (int i = 0; i < 6; ++i) {
    host_reads.push_back(io::make(op::read, 8 + 40 * strip_blocks, strip_blocks, block_size));
    schedulers[i]->submit(host_reads.back()->req);
    fillers.push_back(io::make(op::read, 8 + 60 * strip_blocks, strip_blocks, block_size));
    fillers.back()->req.priority = io_class::background;
    schedulers[i]->submit(fillers.back()->req);
  }
  std::optional<scrub_report> report;
  group.scrub([&](const scrub_report& s) { report = s; });
  loop.settle();  // the scrub locks stripe 0 and issues its reads: held
  std::uint64_t held = 0;
  for (auto& s : schedulers) held += s->background_waiting();
  REQUIRE(held == 6);

  const auto data = pattern(stripe_blocks * block_size / 4, 7);
  auto write = io::make(op::write, 0, stripe_blocks / 4, block_size);
  std::memcpy(write->buffer.data(), data.data(), data.size());
  group.submit(write->req);
  loop.settle();
  std::uint64_t expedited = 0;
  for (auto& s : schedulers) expedited += s->counters().expedited;
  CHECK(expedited == 6);  // the write waits for stripe 0: the scrub's reads go now
  loop.run_until([&] { return write->completions == 1; });
  CHECK(write->req.result == std::error_code{});
  loop.run_until([&] { return report.has_value(); });
  CHECK(report->stripes_checked == stripes);
  CHECK(report->stripes_repaired == 0);
  CHECK(read_blocks(loop, group, 0, stripe_blocks / 4) == data);
  loop.run_until([&] {
    for (auto& x : host_reads) if (x->completions == 0) return false;
    for (auto& x : fillers) if (x->completions == 0) return false;
    return true;
  });
}

}  // namespace strata::raid
