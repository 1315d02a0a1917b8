// Background work and the I/O scheduler under a RAID-6 group: a host write
// that waits for a stripe held by a scrub does not wait at background pace
// (the scrub's held member reads are expedited), also through the gate the
// shelf puts on top; and background reads the scheduler holds behind busy
// drives past the member timeout fail no member (the drives answer each
// I/O they are given in time), while a drive that hangs is still failed.
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "raid/device/fault_device.h"
#include "raid/device/gate_device.h"
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
  std::vector<std::unique_ptr<gate_device>> gates;
  std::vector<block_device*> members;
  // The shelf (controller/shelf.cc) puts a fencing gate on each drive's
  // scheduler: expediting must reach through it (it once did not).
  bool gated = false;
  SECTION("members straight on their schedulers") {}
  SECTION("members behind a gate, as the shelf stacks them") {
    gated = true;
  }
  for (int i = 0; i < 6; ++i) {
    auto m = memory_device::create(loop.context.get_executor(),
                                   {block_size, 8 + stripes * strip_blocks});
    REQUIRE(m);
    platters.push_back(std::move(*m));
    models.push_back(
        std::make_unique<hdd_model>(*platters.back(), loop.clock, hdd_profile::sas_10k()));
    schedulers.push_back(std::make_unique<io_scheduler>(*models.back(), loop.clock));
    gates.push_back(std::make_unique<gate_device>(*schedulers.back()));
    members.push_back(gated ? static_cast<block_device*>(gates.back().get())
                            : schedulers.back().get());
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
    for (auto& x : host_reads)
      if (x->completions == 0) return false;
    for (auto& x : fillers)
      if (x->completions == 0) return false;
    return true;
  });
}

TEST_CASE(
    "io priority: background reads held behind busy drives past the member timeout fail no member; "
    "a hung drive is failed",
    "[raid][io_priority][timeout]") {
  test_loop loop;
  const duration timeout = std::chrono::seconds(2);
  const duration answer =
      std::chrono::milliseconds(1500);  // every I/O: slow, but inside the timeout
  std::vector<std::unique_ptr<memory_device>> platters;
  std::vector<std::unique_ptr<fault_device>> drives;
  std::vector<std::unique_ptr<io_scheduler>> schedulers;
  std::vector<std::unique_ptr<gate_device>> gates;
  std::vector<block_device*> members;
  for (int i = 0; i < 6; ++i) {
    auto m = memory_device::create(loop.context.get_executor(),
                                   {block_size, 8 + stripes * strip_blocks});
    REQUIRE(m);
    platters.push_back(std::move(*m));
    drives.push_back(std::make_unique<fault_device>(*platters.back(), loop.clock,
                                                    fault_options{.seed = test_seed() + i}));
    drives.back()->set_delay(answer, 1.0);
    schedulers.push_back(std::make_unique<io_scheduler>(*drives.back(), loop.clock));
    gates.push_back(std::make_unique<gate_device>(*schedulers.back()));
    members.push_back(gates.back().get());
  }
  raid6_options options;
  options.strip_size_bytes = strip_blocks * block_size;
  options.reserved_bytes = 8 * block_size;
  options.clock = &loop.clock;
  options.member_timeout = timeout;
  auto g = raid6_group::create(members, options);
  REQUIRE(g);
  raid6_group& group = **g;
  const std::uint64_t stripe_blocks = 4 * strip_blocks;

  // The hosts keep every drive busy: a foreground read always in flight
  // on each, so each scheduler lets one background request go at a time.
  std::vector<std::unique_ptr<io>> host(6);
  const time_point busy_until = loop.clock.now() + std::chrono::seconds(12);
  auto keep_busy = [&] {
    for (int i = 0; i < 6; ++i) {
      if (host[i] && host[i]->completions == 0) continue;
      if (loop.clock.now() >= busy_until) continue;
      host[i] = io::make(op::read, 8 + 50 * strip_blocks, strip_blocks, block_size);
      schedulers[i]->submit(host[i]->req);
    }
  };
  keep_busy();
  // Background reads of six stripes at once: six member reads per drive,
  // one at a time, 1.5 s each -- the last waits 7.5 s in the scheduler,
  // far past the 2 s timeout, though no drive ever takes more than 1.5 s.
  std::vector<std::unique_ptr<io>> background;
  for (std::uint64_t stripe = 0; stripe < 6; ++stripe) {
    background.push_back(io::make(op::read, stripe * stripe_blocks, stripe_blocks, block_size));
    background.back()->req.priority = io_class::background;
    group.submit(background.back()->req);
  }
  loop.run_until([&] {
    keep_busy();
    for (auto& b : background)
      if (b->completions == 0) return false;
    return true;
  });
  std::uint64_t held = 0;
  for (auto& s : schedulers) held += s->counters().background_held;
  CHECK(held > 0);  // the background reads did wait behind the hosts'
  for (unsigned m = 0; m < 6; ++m) CHECK_FALSE(group.member_failed(m));
  for (auto& b : background) CHECK(b->req.result == std::error_code{});
  loop.run_until([&] {
    keep_busy();
    for (auto& h : host)
      if (h->completions == 0) return false;
    return true;
  });

  // A drive that hangs: the I/O it has in flight is overdue, and the group
  // fails it out, held requests and all; reads go on without it.
  drives[3]->hang();
  background.clear();
  for (std::uint64_t stripe = 0; stripe < 4; ++stripe) {
    background.push_back(io::make(op::read, stripe * stripe_blocks, stripe_blocks, block_size));
    background.back()->req.priority = io_class::background;
    group.submit(background.back()->req);
  }
  loop.run_until([&] {
    for (auto& b : background)
      if (b->completions == 0) return false;
    return true;
  });
  CHECK(group.member_failed(3));
  CHECK(group.health(3).failure == member_failure::timed_out);
  for (auto& b : background) CHECK(b->req.result == std::error_code{});
  drives[3]->resume();
  loop.run_until([&] { return group.idle(); });
}

}  // namespace strata::raid
