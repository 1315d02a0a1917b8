// A full backing store (ENOSPC on a file-backed drive: the simulated shelf
// on a full filesystem) fails the write, never the disk: no member leaves
// the group however many writes are refused, the torn stripes or regions
// stay marked for the next assembly's resync, and that resync leaves the
// members consistent again.
#include <cstring>
#include <optional>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "raid/raid1_group.h"
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
constexpr std::uint64_t data_blocks =
    stripes * 4 * strip_blocks;  // RAID-6 4+2; the mirror's size too

const std::error_code no_space = make_error_code(errc::no_space);

raid6_options raid6_opts() {
  raid6_options o;
  o.strip_size_bytes = strip_blocks * block_size;
  o.reserved_bytes = reserved_blocks * block_size;
  o.bitmap_region_bytes = 4 * strip_blocks * block_size;  // 4 stripes a bit: 8 regions
  return o;
}

raid1_options raid1_opts() {
  raid1_options o;
  o.reserved_bytes = reserved_blocks * block_size;
  o.bitmap_region_bytes = 64 * block_size;
  return o;
}

// Disks that outlive the groups assembled over them (a restart).
struct shelf {
  test_loop loop;
  std::vector<std::unique_ptr<memory_device>> disks;
  std::vector<std::unique_ptr<fault_device>> faults;

  shelf(unsigned members, std::uint64_t member_blocks) {
    for (unsigned i = 0; i < members; ++i) {
      auto m = memory_device::create(loop.context.get_executor(), {block_size, member_blocks});
      REQUIRE(m);
      disks.push_back(std::move(*m));
    }
  }
  // A formatted RAID-6 group of all the disks but the last, which it
  // returns as a blank spare.
  std::pair<std::unique_ptr<raid6_group>, block_device*> formatted_raid6_and_spare() {
    std::vector<block_device*> devices = power_up();
    block_device* spare = devices.back();
    devices.pop_back();
    auto g = raid6_group::create(devices, raid6_opts());
    REQUIRE(g);
    format(**g);
    return {std::move(*g), spare};
  }
  std::vector<block_device*> power_up() {
    faults.clear();
    std::vector<block_device*> list;
    for (std::size_t i = 0; i < disks.size(); ++i) {
      faults.push_back(
          std::make_unique<fault_device>(*disks[i], loop.clock, fault_options{.seed = i + 1}));
      list.push_back(faults.back().get());
    }
    return list;
  }
  template <typename Group>
  void format(Group& g) {
    std::optional<std::optional<error>> formatted;
    g.format([&](std::optional<error> e) { formatted = std::move(e); });
    loop.run_until([&] { return formatted.has_value(); });
    REQUIRE_FALSE(*formatted);
  }
  template <typename Group, typename Options>
  std::unique_ptr<Group> assemble(const Options& options) {
    std::optional<typename Group::assembled> result;
    Group::assemble(power_up(), options,
                    [&](typename Group::assembled r) { result = std::move(r); });
    loop.run_until([&] { return result.has_value(); });
    REQUIRE(*result);
    return std::move(**result);
  }
  std::error_code write(block_device& g, std::uint64_t lba, std::span<const std::byte> data) {
    auto x = io::make(op::write, lba, data.size() / block_size, block_size);
    std::memcpy(x->buffer.data(), data.data(), data.size());
    return run(loop, g, *x);
  }
};

}  // namespace

TEST_CASE(
    "raid6: a full backing store fails writes, never members; the next assembly resyncs the torn "
    "stripes",
    "[raid][raid6][no_space]") {
  shelf s(6, reserved_blocks + stripes * strip_blocks);
  auto g = raid6_group::create(s.power_up(), raid6_opts());
  REQUIRE(g);
  std::unique_ptr<raid6_group> group = std::move(*g);
  s.format(*group);
  const std::uint64_t per_stripe = group->layout().stripe_data_blocks();
  // The first half written: the members' backing stores hold those blocks
  // (a sparse file overwrites them in place, needing no new space).
  const std::uint64_t half = data_blocks / 2;
  std::vector<std::byte> expected = pattern(half * block_size, 1);
  write_blocks(s.loop, *group, 0, expected);
  flush(s.loop, *group);

  // Member 2's store fills. Writes to blocks it never held fail --
  // full stripes, and a partial write touching every member -- and no
  // member leaves: failing them one by one would lose the group at the third.
  s.faults[2]->set_full(true);
  const std::uint64_t lbas[] = {17 * per_stripe, 20 * per_stripe, 25 * per_stripe + 1};
  const std::uint64_t counts[] = {per_stripe, 3 * per_stripe, per_stripe - 2};
  for (int i = 0; i < 3; ++i) {
    INFO("write " << i);
    CHECK(s.write(*group, lbas[i], pattern(counts[i] * block_size, 10 + i)) == no_space);
  }
  // Overwrites need no new space: they go on.
  const std::vector<std::byte> over = pattern(5 * block_size, 7);
  REQUIRE_FALSE(s.write(*group, 2 * per_stripe + 3, over));
  std::memcpy(expected.data() + (2 * per_stripe + 3) * block_size, over.data(), over.size());
  CHECK(group->failed_members() == 0);
  CHECK(group->health(2).no_space_errors >= 3);
  CHECK(group->health(2).failure == member_failure::none);
  CHECK(group->torn_regions() == 3);  // stripes 17, 20-22 and 25: regions 4, 5 and 6
  // Reads go on, and the group flushes.
  CHECK(read_blocks(s.loop, *group, 0, half) == expected);
  flush(s.loop, *group);
  // A scrub would take the torn stripes for corruption: refused.
  std::optional<scrub_report> report;
  group->scrub([&](const scrub_report& r) { report = r; });
  s.loop.run_until([&] { return report.has_value(); });
  CHECK(report->error == make_error_code(errc::not_supported));

  // Space is freed: writes succeed again (one rewrites a refused range),
  // and a clean shutdown keeps the torn regions' bits for the next start
  // (the resync of torn regions that write starts pauses before its first
  // stripe: the next test lets it run).
  s.faults[2]->set_full(false);
  const std::vector<std::byte> again = pattern(counts[2] * block_size, 99);
  REQUIRE_FALSE(s.write(*group, lbas[2], again));
  const std::uint64_t torn = group->torn_regions();
  std::optional<std::error_code> clean;
  group->mark_clean([&](std::error_code ec) { clean = ec; });
  s.loop.run_until([&] { return clean.has_value() && group->idle(); });
  REQUIRE_FALSE(*clean);
  CHECK(group->intent_regions_set() == torn);
  group.reset();

  group = s.assemble<raid6_group>(raid6_opts());
  CHECK(group->failed_members() == 0);
  CHECK(group->resync_status().stripes_total == torn * 4);
  s.loop.run_until([&] { return group->idle() && !group->resync_status().running; });
  CHECK(group->torn_regions() == 0);
  report.reset();
  group->scrub([&](const scrub_report& r) { report = r; });
  s.loop.run_until([&] { return report.has_value(); });
  CHECK_FALSE(report->error);
  CHECK(report->stripes_repaired == 0);  // parity agrees with the data everywhere
  // What was written (and not refused) reads back.
  CHECK(read_blocks(s.loop, *group, 0, half) == expected);
  CHECK(read_blocks(s.loop, *group, lbas[2], counts[2]) == again);
}

TEST_CASE(
    "raid6: every member's store full: every write fails, the group stays whole and assembles",
    "[raid][raid6][no_space]") {
  shelf s(6, reserved_blocks + stripes * strip_blocks);
  auto g = raid6_group::create(s.power_up(), raid6_opts());
  REQUIRE(g);
  std::unique_ptr<raid6_group> group = std::move(*g);
  s.format(*group);
  for (auto& f : s.faults) f->set_full(true);
  std::vector<std::unique_ptr<io>> writes;
  for (std::uint64_t i = 0; i < 16; ++i) {
    writes.push_back(io::make(op::write, i * 37 % data_blocks, 9, block_size));
    group->submit(writes.back()->req);
  }
  s.loop.run_until(
      [&] { return std::ranges::all_of(writes, [](auto& w) { return w->completions == 1; }); });
  for (auto& w : writes) CHECK(w->req.result == no_space);
  CHECK(group->failed_members() == 0);
  CHECK_FALSE(group->group_failed());
  group.reset();  // a crash
  group = s.assemble<raid6_group>(raid6_opts());
  CHECK(group->failed_members() == 0);
}

TEST_CASE(
    "raid6: torn stripes are resynced once a write lands again, and stay torn while the store is "
    "full",
    "[raid][raid6][no_space]") {
  shelf s(6, reserved_blocks + stripes * strip_blocks);
  auto g = raid6_group::create(s.power_up(), raid6_opts());
  REQUIRE(g);
  std::unique_ptr<raid6_group> group = std::move(*g);
  s.format(*group);
  const std::uint64_t per_stripe = group->layout().stripe_data_blocks();
  const std::vector<std::byte> first = pattern(4 * per_stripe * block_size, 1);
  write_blocks(s.loop, *group, 0, first);
  flush(s.loop, *group);
  s.faults[2]->set_full(true);
  CHECK(s.write(*group, 17 * per_stripe, pattern(per_stripe * block_size, 2)) == no_space);
  REQUIRE(group->torn_regions() == 1);

  // An overwrite lands while the store is still full: a resync of the torn
  // region starts, meets the full store again, and the region stays torn
  // (and marked: its bit survives a clean stop).
  const std::vector<std::byte> over = pattern(per_stripe * block_size, 3);
  REQUIRE_FALSE(s.write(*group, 0, over));
  s.loop.run_until([&] { return group->idle() && !group->resync_status().running; });
  CHECK(group->resync_status().stripes_done == 4);
  CHECK(group->torn_regions() == 1);
  CHECK(group->failed_members() == 0);

  // Room again: the next write's resync makes the stripes consistent, with
  // no restart, and a scrub (allowed again) finds nothing to repair.
  s.faults[2]->set_full(false);
  REQUIRE_FALSE(s.write(*group, 0, over));
  s.loop.run_until([&] { return group->idle() && !group->resync_status().running; });
  CHECK(group->torn_regions() == 0);
  std::optional<scrub_report> report;
  group->scrub([&](const scrub_report& r) { report = r; });
  s.loop.run_until([&] { return report.has_value(); });
  CHECK_FALSE(report->error);
  CHECK(report->stripes_repaired == 0);
  std::vector<std::byte> expected = first;
  std::copy(over.begin(), over.end(), expected.begin());
  CHECK(read_blocks(s.loop, *group, 0, 4 * per_stripe) == expected);
  // Nothing is left marked once a clean stop has flushed.
  std::optional<std::error_code> clean;
  group->mark_clean([&](std::error_code ec) { clean = ec; });
  s.loop.run_until([&] { return clean.has_value() && group->idle(); });
  CHECK(group->intent_regions_set() == 0);
}

TEST_CASE("raid6: a rebuild over a stripe a full store tore while degraded counts it unverifiable",
          "[raid][raid6][no_space]") {
  // The degraded write hole without a crash: member 0 is gone, and a
  // write to a stripe lands on some survivors only. The lost strip can
  // then be rebuilt only from parity that may not match the data; the
  // rebuild cannot tell which blocks are wrong, but it must say so.
  shelf s(7, reserved_blocks + stripes * strip_blocks);  // six members and a spare
  auto [group, spare] = s.formatted_raid6_and_spare();
  const std::uint64_t per_stripe = group->layout().stripe_data_blocks();
  write_blocks(s.loop, *group, 0, pattern(4 * per_stripe * block_size, 1));
  flush(s.loop, *group);
  group->fail_member(0);
  s.faults[1]->set_full(true);
  CHECK(s.write(*group, 20 * per_stripe, pattern(per_stripe * block_size, 2)) == no_space);
  s.faults[1]->set_full(false);
  CHECK(group->rebuild_unverifiable() == 0);

  std::optional<std::error_code> rebuilt;
  REQUIRE_FALSE(group->replace_member(0, spare, [&](std::error_code ec) { rebuilt = ec; }));
  s.loop.run_until([&] { return rebuilt.has_value() && group->idle(); });
  REQUIRE_FALSE(*rebuilt);
  CHECK(group->rebuild_unverifiable() ==
        1);  // stripe 20; the stripes no tear touched are verified or whole
  CHECK(read_blocks(s.loop, *group, 0, 4 * per_stripe) == pattern(4 * per_stripe * block_size, 1));
}

TEST_CASE(
    "raid6: a new member's metadata blocks are claimed as its rebuild starts: its store filling "
    "later fails no member",
    "[raid][raid6][no_space]") {
  // Found by the simulation (seed 544): a spare was rebuilt, its store
  // filled, and the next bitmap write -- to blocks its store had never
  // held -- failed it out as a member that cannot keep metadata.
  shelf s(7, reserved_blocks + stripes * strip_blocks);  // six members and a spare
  auto [group, spare] = s.formatted_raid6_and_spare();
  const std::uint64_t per_stripe = group->layout().stripe_data_blocks();
  const auto data = pattern(data_blocks * block_size, 1);
  write_blocks(s.loop, *group, 0, data);
  flush(s.loop, *group);
  // Let the bitmap clear: the next write needs a bitmap write.
  flush(s.loop, *group);
  flush(s.loop, *group);
  s.loop.run_until([&] { return group->idle(); });
  CHECK(group->intent_regions_set() == 0);
  group->fail_member(3);
  std::optional<std::error_code> rebuilt;
  REQUIRE_FALSE(group->replace_member(3, spare, [&](std::error_code ec) { rebuilt = ec; }));
  s.loop.run_until([&] { return rebuilt.has_value() && group->idle(); });
  REQUIRE_FALSE(*rebuilt);
  s.faults[6]->set_full(true);  // the new member's store
  CHECK_FALSE(s.write(*group, 5 * per_stripe, pattern(per_stripe * block_size, 2)));
  CHECK_FALSE(group->member_failed(3));
  CHECK(group->failed_members() == 0);
}

TEST_CASE("raid6: a spare whose store cannot take its metadata fails the rebuild, not a member",
          "[raid][raid6][no_space]") {
  shelf s(7, reserved_blocks + stripes * strip_blocks);  // six members and a spare
  auto [group, spare] = s.formatted_raid6_and_spare();
  write_blocks(s.loop, *group, 0, pattern(data_blocks * block_size, 1));
  group->fail_member(3);
  s.faults[6]->set_full(true);
  std::optional<std::error_code> rebuilt;
  REQUIRE_FALSE(group->replace_member(3, spare, [&](std::error_code ec) { rebuilt = ec; }));
  s.loop.run_until([&] { return rebuilt.has_value() && group->idle(); });
  CHECK(*rebuilt == no_space);
  CHECK(group->member_failed(3));  // still to be rebuilt
  CHECK(group->failed_members() == 1);
  CHECK(read_blocks(s.loop, *group, 0, data_blocks) == pattern(data_blocks * block_size, 1));
}

TEST_CASE(
    "raid1: a full member fails the write, stays, and the torn region reads from one member until "
    "resynced",
    "[raid][raid1][no_space]") {
  shelf s(2, reserved_blocks + data_blocks);
  auto g = raid1_group::create(s.power_up(), raid1_opts());
  REQUIRE(g);
  std::unique_ptr<raid1_group> group = std::move(*g);
  s.format(*group);
  write_blocks(s.loop, *group, 0, pattern(data_blocks / 2 * block_size, 1));
  flush(s.loop, *group);

  // Member 1 cannot take a write to blocks it never held, member 0 does:
  // the mirrors differ there now, and the write is not the group's.
  s.faults[1]->set_full(true);
  CHECK(s.write(*group, 704, pattern(8 * block_size, 2)) == no_space);
  CHECK(group->working_members() == 2);
  CHECK(group->health(1).no_space_errors == 1);
  CHECK(group->torn_regions() == 1);
  // Two reads of the torn blocks never disagree: one member answers them.
  const std::vector<std::byte> first = read_blocks(s.loop, *group, 704, 8);
  for (int i = 0; i < 6; ++i) CHECK(read_blocks(s.loop, *group, 704, 8) == first);

  s.faults[1]->set_full(false);
  std::optional<std::error_code> clean;
  group->mark_clean([&](std::error_code ec) { clean = ec; });
  s.loop.run_until([&] { return clean.has_value() && group->idle(); });
  REQUIRE_FALSE(*clean);
  CHECK(group->intent_regions_set() == 1);
  group.reset();

  group = s.assemble<raid1_group>(raid1_opts());
  s.loop.run_until([&] { return group->idle() && !group->resync_status().running; });
  CHECK(group->working_members() == 2);
  CHECK(read_blocks(s.loop, *group, 704, 8) == first);
  // The resync copied one member over the other: identical again.
  std::vector<std::vector<std::byte>> images;
  for (auto& d : s.disks) images.push_back(read_blocks(s.loop, *d, reserved_blocks, data_blocks));
  CHECK(images[0] == images[1]);
}

TEST_CASE("raid1: a full member's refusal is the write's answer when the other fails meanwhile",
          "[raid][raid1][no_space]") {
  // Found by the simulation (seed 1143): member 0's store was full, member
  // 1 failed while a write was on both. No member took the write, but the
  // group is whole (member 0 works): the write fails for want of space,
  // not with device_failed, which says the group is lost.
  shelf s(2, reserved_blocks + data_blocks);
  auto g = raid1_group::create(s.power_up(), raid1_opts());
  REQUIRE(g);
  std::unique_ptr<raid1_group> group = std::move(*g);
  s.format(*group);
  CHECK_FALSE(s.write(*group, 720, pattern(8 * block_size, 1)));  // its region's bit is on disk now
  s.faults[0]->set_full(true);
  s.faults[1]->hang();
  auto x = io::make(op::write, 704, 8, block_size);
  group->submit(x->req);
  s.loop.settle();      // member 0 refused it
  s.faults[1]->fail();  // member 1 is gone
  s.loop.run_until([&] { return x->completions == 1; });
  CHECK(x->req.result == no_space);
  CHECK(group->working_members() == 1);
  s.faults[0]->set_full(false);
  CHECK_FALSE(s.write(*group, 704, pattern(8 * block_size, 3)));
  s.loop.run_until([&] { return group->idle(); });
}

}  // namespace strata::raid
