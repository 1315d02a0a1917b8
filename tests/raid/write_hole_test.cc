// The write hole: power cuts at random moments during concurrent writes and
// flushes to a formatted RAID-6 group whose members have volatile write
// caches; then a restart, assembly and resync. Every write acknowledged
// before the last completed flush reads back; every other block holds a
// version that was written to it; and every stripe's P and Q agree with
// its data (a scrub finds nothing to repair). Seeded; the seed is printed.
#include <cstring>
#include <optional>
#include <random>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "raid/raid6_group.h"
#include "tests/raid/device/harness.h"

namespace strata::raid {
namespace {

using namespace device;
using namespace device::testing;

constexpr std::uint32_t block_size = 512;
constexpr std::uint64_t strip_blocks = 8;
constexpr std::uint64_t stripes = 32;
constexpr std::uint64_t reserved_blocks = 64;  // 32 KiB: superblocks and the bitmap

raid6_options group_options() {
  raid6_options o;
  o.strip_size_bytes = strip_blocks * block_size;
  o.reserved_bytes = reserved_blocks * block_size;
  o.bitmap_region_bytes = 4 * strip_blocks * block_size;  // 4 stripes a bit: 8 regions
  return o;
}

struct shelf {
  test_loop loop;
  std::vector<std::unique_ptr<memory_device>> disks;
  std::vector<std::unique_ptr<fault_device>> faults;
  std::unique_ptr<raid6_group> group;
  std::uint64_t seed;

  shelf(unsigned members, std::uint64_t s) : seed(s) {
    for (unsigned i = 0; i < members; ++i) {
      auto m = memory_device::create(loop.context.get_executor(),
                                     {block_size, reserved_blocks + stripes * strip_blocks});
      REQUIRE(m);
      disks.push_back(std::move(*m));
    }
  }
  // New drives' electronics over the same platters: what a restart sees.
  std::vector<block_device*> power_up() {
    faults.clear();
    std::vector<block_device*> list;
    for (auto& d : disks) {
      fault_options fo;
      fo.seed = seed++;
      fo.volatile_write_cache = true;
      faults.push_back(std::make_unique<fault_device>(*d, loop.clock, fo));
      list.push_back(faults.back().get());
    }
    return list;
  }
  void create_and_format() {
    auto g = raid6_group::create(power_up(), group_options());
    REQUIRE(g);
    group = std::move(*g);
    std::optional<std::optional<error>> formatted;
    group->format([&](std::optional<error> e) { formatted = std::move(e); });
    loop.run_until([&] { return formatted.has_value(); });
    REQUIRE_FALSE(*formatted);
  }
};

// One write of the workload: its blocks and the data it put there.
struct write_record {
  std::uint64_t lba = 0;
  std::vector<std::byte> data;
  std::unique_ptr<io> x;
  std::uint64_t acknowledged = 0;  // its place in acknowledgement order; 0: not (yet)
};

// What each block may hold after the crash: the version made durable by a
// completed flush (0: zeros), or one written after it.
struct block_state {
  std::uint32_t stable = 0;
  std::vector<std::uint32_t> later;
};

}  // namespace

TEST_CASE(
    "raid6: power cuts mid-write; assembly and resync keep flushed writes and consistent parity",
    "[raid][raid6][crash]") {
  const std::uint64_t seed = test_seed();
  std::mt19937_64 random(seed);
  for (int round = 0; round < 25; ++round) {
    INFO("seed " << seed << ", round " << round);
    shelf s(6, random());
    s.create_and_format();
    flush(s.loop, *s.group);
    const std::uint64_t blocks = s.group->geometry().block_count;
    const std::uint64_t per_stripe = s.group->layout().stripe_data_blocks();
    std::vector<write_record> writes(1);  // version 0: the zeros of a new group
    std::vector<block_state> state(blocks);
    std::uint64_t acknowledged = 0;
    std::unique_ptr<io> flush_io;
    std::uint64_t flush_covers = 0;
    bool flush_in_flight = false;
    unsigned in_flight = 0;

    auto overlaps_in_flight = [&](std::uint64_t lba, std::uint64_t count) {
      for (const auto& w : writes) {
        if (w.x && w.x->completions == 0 && lba < w.lba + w.data.size() / block_size &&
            w.lba < lba + count) {
          return true;
        }
      }
      return false;
    };
    auto start_write = [&] {
      // Sizes from one block to two stripes: RMW, reconstruct-write, full stripes.
      const std::uint64_t count = 1 + random() % (2 * per_stripe);
      const std::uint64_t lba = random() % (blocks - count + 1);
      if (overlaps_in_flight(lba, count)) return;  // so each block's versions are ordered
      write_record w;
      w.lba = lba;
      w.data = pattern(count * block_size, random());
      w.x = io::make(op::write, lba, count, block_size);
      std::memcpy(w.x->buffer.data(), w.data.data(), w.data.size());
      const auto id = static_cast<std::uint32_t>(writes.size());
      for (std::uint64_t b = lba; b < lba + count; ++b) state[b].later.push_back(id);
      writes.push_back(std::move(w));
      ++in_flight;
      s.group->submit(writes.back().x->req);
    };
    auto collect = [&] {
      for (std::size_t id = 1; id < writes.size(); ++id) {
        write_record& w = writes[id];
        if (w.x && w.x->completions == 1 && w.acknowledged == 0) {
          REQUIRE_FALSE(w.x->req.result);
          w.acknowledged = ++acknowledged;
          --in_flight;
        }
      }
      if (flush_in_flight && flush_io->completions == 1) {
        REQUIRE_FALSE(flush_io->req.result);
        flush_in_flight = false;
        // Every write acknowledged before the flush began is durable now.
        for (std::size_t id = 1; id < writes.size(); ++id) {
          const write_record& w = writes[id];
          if (w.acknowledged == 0 || w.acknowledged > flush_covers) continue;
          for (std::uint64_t b = w.lba; b < w.lba + w.data.size() / block_size; ++b) {
            if (state[b].stable >= id) continue;
            state[b].stable = static_cast<std::uint32_t>(id);
            std::erase_if(state[b].later, [&](std::uint32_t v) { return v <= id; });
          }
        }
      }
    };

    // Run the workload for a random number of steps, then cut the power.
    const int steps = 50 + static_cast<int>(random() % 400);
    for (int step = 0; step < steps; ++step) {
      while (in_flight < 8 && random() % 3 != 0) start_write();
      if (!flush_in_flight && random() % 16 == 0) {
        flush_io = io::flush();
        flush_covers = acknowledged;
        flush_in_flight = true;
        s.group->submit(flush_io->req);
      }
      s.loop.context.restart();
      if (s.loop.context.poll_one() == 0) {
        if (auto next = s.loop.clock.next_deadline()) s.loop.clock.advance_to(*next);
      }
      collect();
    }
    unsigned settled = 0;
    for (auto& f : s.faults) {
      f->power_cut(random() % 2 ? power_loss::tear : power_loss::drop, [&] { ++settled; });
    }
    // The old group fails everything still in flight; let it wind down.
    s.loop.run_until([&] {
      return settled == s.faults.size() && s.group->idle() &&
             (!flush_in_flight || flush_io->completions) &&
             std::all_of(writes.begin() + 1, writes.end(),
                         [](const write_record& w) { return w.x->completions; });
    });
    s.group.reset();

    // Restart: assemble, let the resync finish, then check.
    std::optional<raid6_group::assembled> result;
    raid6_group::assemble(s.power_up(), group_options(),
                          [&](raid6_group::assembled r) { result = std::move(r); });
    s.loop.run_until([&] { return result.has_value(); });
    REQUIRE(*result);
    s.group = std::move(**result);
    CHECK(s.group->failed_members() == 0);
    s.loop.run_until([&] { return !s.group->resync_status().running && s.group->idle(); });
    CHECK(s.group->resync_status().unverifiable == 0);
    // Nothing left marked: a second crash now would need no resync.
    CHECK(s.group->intent_regions_set() == 0);

    const auto got = read_blocks(s.loop, *s.group, 0, blocks);
    for (std::uint64_t b = 0; b < blocks; ++b) {
      auto version_data = [&](std::uint32_t id) -> std::vector<std::byte> {
        if (id == 0) return std::vector<std::byte>(block_size, std::byte{0});
        const write_record& w = writes[id];
        const auto* p = w.data.data() + (b - w.lba) * block_size;
        return {p, p + block_size};
      };
      const std::vector<std::byte> here(
          got.begin() + static_cast<std::ptrdiff_t>(b * block_size),
          got.begin() + static_cast<std::ptrdiff_t>((b + 1) * block_size));
      bool ok = here == version_data(state[b].stable);
      for (std::uint32_t v : state[b].later) ok = ok || here == version_data(v);
      INFO("block " << b << ": stable version " << state[b].stable << ", " << state[b].later.size()
                    << " later");
      REQUIRE(ok);
    }
    std::optional<scrub_report> report;
    s.group->scrub([&](const scrub_report& r) { report = r; });
    s.loop.run_until([&] { return report.has_value(); });
    CHECK_FALSE(report->error);
    CHECK(report->stripes_checked == stripes);
    CHECK(report->stripes_repaired == 0);
    CHECK(report->stripes_unrecoverable == 0);
    s.loop.run_until([&] { return s.group->idle(); });
  }
}

TEST_CASE("raid6: a clean shutdown leaves nothing to resync", "[raid][raid6][crash]") {
  shelf s(5, test_seed());
  s.create_and_format();
  std::optional<std::error_code> done;
  const auto data = pattern(s.group->geometry().size_bytes(), 3);
  write_blocks(s.loop, *s.group, 0, data);
  CHECK(s.group->intent_regions_set() == 8);
  done.reset();
  s.group->mark_clean([&](std::error_code ec) { done = ec; });
  s.loop.run_until([&] { return done.has_value() && s.group->idle(); });
  REQUIRE_FALSE(*done);
  CHECK(s.group->intent_regions_set() == 0);
  s.group.reset();

  std::optional<raid6_group::assembled> result;
  raid6_group::assemble(s.power_up(), group_options(),
                        [&](raid6_group::assembled r) { result = std::move(r); });
  s.loop.run_until([&] { return result.has_value(); });
  REQUIRE(*result);
  CHECK_FALSE((**result)->resync_status().running);
  CHECK((**result)->resync_status().stripes_total == 0);
  CHECK(read_blocks(s.loop, ***result, 0, (**result)->geometry().block_count) == data);
}

TEST_CASE("raid6: an unclean shutdown resyncs only the regions being written",
          "[raid][raid6][crash]") {
  shelf s(5, test_seed());
  s.create_and_format();
  const std::uint64_t per_stripe = s.group->layout().stripe_data_blocks();
  // Stripes 0 and 9 (regions 0 and 2) written; the bits stay set while the
  // regions are hot (written between every two flushes).
  write_blocks(s.loop, *s.group, 3, pattern(4 * block_size, 1));
  write_blocks(s.loop, *s.group, 9 * per_stripe + 1, pattern(2 * block_size, 2));
  flush(s.loop, *s.group);
  CHECK(s.group->intent_regions_set() == 2);
  // A region idle for a whole flush interval is cleared; one written in it is not.
  write_blocks(s.loop, *s.group, 9 * per_stripe + 1, pattern(2 * block_size, 3));
  flush(s.loop, *s.group);
  s.loop.run_until([&] { return s.group->idle(); });
  CHECK(s.group->intent_regions_set() == 1);  // region 2 written since; region 0 idle
  s.group.reset();                            // a crash: no mark_clean

  std::optional<raid6_group::assembled> result;
  raid6_group::assemble(s.power_up(), group_options(),
                        [&](raid6_group::assembled r) { result = std::move(r); });
  s.loop.run_until([&] { return result.has_value(); });
  REQUIRE(*result);
  CHECK((**result)->resync_status().stripes_total == 4);  // one region of four stripes
  s.loop.run_until([&] { return (**result)->idle(); });
  CHECK((**result)->resync_status().stripes_done == 4);
}

namespace {

// Assembles the shelf's members after a restart, leaving out member
// `missing` (none: every member there).
std::unique_ptr<raid6_group> restart(shelf& s, const raid6_options& options,
                                     unsigned missing = ~0u) {
  std::vector<block_device*> devices = s.power_up();
  if (missing < devices.size()) devices.erase(devices.begin() + missing);
  std::optional<raid6_group::assembled> result;
  raid6_group::assemble(devices, options, [&](raid6_group::assembled r) { result = std::move(r); });
  s.loop.run_until([&] { return result.has_value(); });
  REQUIRE(*result);
  return std::move(**result);
}

scrub_report scrub_all(shelf& s) {
  std::optional<scrub_report> report;
  s.group->scrub([&](const scrub_report& r) { report = r; });
  s.loop.run_until([&] { return report.has_value(); });
  return *report;
}

}  // namespace

TEST_CASE("raid6: a clean shutdown pauses the resync promptly; the next assembly finishes it",
          "[raid][raid6][crash]") {
  shelf s(5, test_seed());
  s.create_and_format();
  const std::uint64_t per_stripe = s.group->layout().stripe_data_blocks();
  // Every stripe written and flushed: durable, but every region's bit still
  // set (written within the last flush interval) when the power goes.
  write_blocks(s.loop, *s.group, 0, pattern(s.group->geometry().size_bytes(), 4));
  flush(s.loop, *s.group);
  REQUIRE(s.group->intent_regions_set() == 8);
  const raid6_layout layout = s.group->layout();
  s.group.reset();  // a crash
  // The last stripe's P was torn: only its resync puts it right.
  const unsigned p_member = layout.member_of(stripes - 1, layout.data_strips());
  write_blocks(s.loop, *s.disks[p_member], layout.member_lba(stripes - 1, 0),
               pattern(strip_blocks * block_size, 5));

  std::vector<resync_progress> reported;
  raid6_options options = group_options();
  options.on_resync_stopped = [&](const resync_progress& p) { reported.push_back(p); };
  s.group = restart(s, options);
  for (auto& f : s.faults) f->set_delay(std::chrono::milliseconds(10), 1.0);  // slow drives
  s.loop.run_until([&] { return s.group->resync_status().stripes_done >= 2; });
  // The stop: back within a few member I/Os, not after the 30 stripes left.
  const auto stop_started = s.loop.clock.now();
  std::optional<std::error_code> clean;
  s.group->mark_clean([&](std::error_code ec) { clean = ec; });
  s.loop.run_until([&] { return clean.has_value() && s.group->idle(); });
  CHECK(s.loop.clock.now() - stop_started < std::chrono::milliseconds(200));
  CHECK_FALSE(*clean);
  const resync_progress paused = s.group->resync_status();
  CHECK(paused.paused);
  CHECK(paused.stripes_done < stripes);
  CHECK(s.group->intent_regions_set() > 0);  // what is left stays marked, on disk too
  REQUIRE(reported.size() == 1);
  CHECK(reported[0].paused);
  s.group.reset();

  // The next start resyncs what the last one left, and only that.
  reported.clear();
  s.group = restart(s, options);
  const resync_progress resumed = s.group->resync_status();
  CHECK(resumed.running);
  CHECK(resumed.stripes_total > 0);
  CHECK(resumed.stripes_total <=
        stripes - paused.stripes_done + 3);  // the region it stopped in, again
  s.loop.run_until([&] { return s.group->idle(); });
  CHECK_FALSE(s.group->resync_status().running);
  REQUIRE(reported.size() == 1);
  CHECK_FALSE(reported[0].paused);
  const scrub_report report = scrub_all(s);
  CHECK(report.stripes_checked == stripes);
  CHECK(report.stripes_repaired == 0);  // the torn P was resynced
  CHECK(report.stripes_unrecoverable == 0);
  const auto written = pattern(s.group->geometry().size_bytes(), 4);
  CHECK(read_blocks(s.loop, *s.group, 0, per_stripe) ==
        std::vector<std::byte>(written.begin(), written.begin() + static_cast<std::ptrdiff_t>(
                                                                      per_stripe * block_size)));
}

TEST_CASE(
    "raid6: a degraded read before the resync reaches a torn stripe returns nothing unverified",
    "[raid][raid6][crash]") {
  shelf s(6, test_seed());  // 4 + 2
  s.create_and_format();
  const raid6_layout layout = s.group->layout();
  const std::uint64_t per_stripe = layout.stripe_data_blocks();
  const std::uint64_t strip_bytes = strip_blocks * block_size;
  // Region 0 (stripes 0-3) written and flushed; its bit still set at the crash.
  const auto old_data = pattern(4 * per_stripe * block_size, 6);
  write_blocks(s.loop, *s.group, 0, old_data);
  flush(s.loop, *s.group);
  s.group.reset();  // a crash
  // Stripe 3 was being rewritten: data strip 0 landed, P and Q did not.
  constexpr std::uint64_t torn = 3;
  write_blocks(s.loop, *s.disks[layout.member_of(torn, 0)], layout.member_lba(torn, 0),
               pattern(strip_bytes, 7));
  // The restart finds the member holding data strip 1 of stripe 3 gone.
  const unsigned missing = layout.member_of(torn, 1);
  std::vector<resync_progress> reported;
  raid6_options options = group_options();
  options.on_resync_stopped = [&](const resync_progress& p) { reported.push_back(p); };
  s.group = restart(s, options, missing);
  REQUIRE(s.group->resync_status().running);
  REQUIRE(s.group->resync_status().stripes_done == 0);  // stripes 2 and 3 not reached yet

  auto expected = [&](std::uint64_t lba, std::uint64_t blocks) {
    const auto from = old_data.begin() + static_cast<std::ptrdiff_t>(lba * block_size);
    return std::vector<std::byte>(from, from + static_cast<std::ptrdiff_t>(blocks * block_size));
  };
  // Strip 1 of stripe 2 (not torn) and of stripe 3 (torn), both lost with
  // the member, both in flight before the resync gets there.
  const std::uint64_t clean_lba = 2 * per_stripe + strip_blocks;
  const std::uint64_t torn_lba = torn * per_stripe + strip_blocks;
  auto clean_read = io::make(op::read, clean_lba, strip_blocks, block_size);
  auto torn_read = io::make(op::read, torn_lba, strip_blocks, block_size);
  s.group->submit(clean_read->req);
  s.group->submit(torn_read->req);
  s.loop.run_until([&] { return clean_read->completions == 1 && torn_read->completions == 1; });
  // The stripe that P and Q agree on reads as it was written.
  REQUIRE_FALSE(clean_read->req.result);
  CHECK(
      std::vector<std::byte>(clean_read->buffer.data(), clean_read->buffer.data() + strip_bytes) ==
      expected(clean_lba, strip_blocks));
  // The torn one: P rebuilds something that is neither the old data nor a
  // write's; Q disagrees. The read says so instead of returning it.
  CHECK(torn_read->req.result == make_error_code(errc::media_error));
  // The resync counts the stripe it could not verify, and reports it.
  s.loop.run_until([&] { return s.group->idle(); });
  CHECK(s.group->resync_status().unverifiable == 1);
  REQUIRE(reported.size() == 1);
  CHECK(reported[0].unverifiable == 1);
  CHECK(read_blocks(s.loop, *s.group, clean_lba, strip_blocks) ==
        expected(clean_lba, strip_blocks));
}

}  // namespace strata::raid
