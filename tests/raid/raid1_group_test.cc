// RAID-1 mirrors and single-disk groups: reads spread over the members, a
// failed member costs nothing, an unreadable block is read elsewhere and
// written back, and with no member left every request fails cleanly.
#include "raid/raid1_group.h"

#include <cstring>
#include <random>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "tests/raid/device/harness.h"

namespace strata::raid {
namespace {

using namespace device;
using namespace device::testing;

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t member_blocks = 256 + 1024;  // reserved 1 MiB + 4 MiB of data

struct mirror {
  test_loop loop;
  std::vector<std::unique_ptr<memory_device>> disks;
  std::vector<std::unique_ptr<fault_device>> faults;
  std::unique_ptr<raid1_group> group;

  // Each member's fault device seeded apart (seed + member), so that their
  // random choices differ.
  explicit mirror(unsigned members, std::uint64_t seed = 1) {
    std::vector<block_device*> list;
    for (unsigned i = 0; i < members; ++i) {
      auto m = memory_device::create(loop.context.get_executor(), {block_size, member_blocks});
      REQUIRE(m);
      disks.push_back(std::move(*m));
      faults.push_back(std::make_unique<fault_device>(*disks.back(), loop.clock,
                                                      fault_options{.seed = seed + i}));
      list.push_back(faults.back().get());
    }
    auto g = raid1_group::create(list, {});
    REQUIRE(g);
    group = std::move(*g);
  }
};

const std::error_code device_failed = make_error_code(errc::device_failed);

}  // namespace

TEST_CASE("raid1: reads are spread over the mirrors", "[raid][raid1]") {
  mirror m(2);
  write_blocks(m.loop, *m.group, 0, pattern(64 * block_size, 1));
  std::vector<std::unique_ptr<io>> reads;
  for (std::uint64_t i = 0; i < 64; ++i) reads.push_back(io::make(op::read, i, 1, block_size));
  for (auto& r : reads) m.group->submit(r->req);
  m.loop.run_until([&] {
    return std::all_of(reads.begin(), reads.end(), [](auto& r) { return r->completions == 1; });
  });
  CHECK(m.group->reads_served(0) == 32);
  CHECK(m.group->reads_served(1) == 32);
}

TEST_CASE("raid1: one failed member costs nothing; none left fails cleanly", "[raid][raid1]") {
  mirror m(2);
  const auto a = pattern(16 * block_size, 2);
  write_blocks(m.loop, *m.group, 100, a);
  m.faults[0]->fail();
  const auto b = pattern(16 * block_size, 3);
  write_blocks(m.loop, *m.group, 200, b);  // member 0 fails the write: failed out
  CHECK(m.group->member_failed(0));
  CHECK(m.group->working_members() == 1);
  CHECK(read_blocks(m.loop, *m.group, 100, 16) == a);
  CHECK(read_blocks(m.loop, *m.group, 200, 16) == b);
  flush(m.loop, *m.group);

  m.faults[1]->fail();
  auto x = io::make(op::read, 100, 1, block_size);
  CHECK(run(m.loop, *m.group, *x) == device_failed);
  auto y = io::make(op::read, 100, 1, block_size);
  CHECK(run(m.loop, *m.group, *y) == device_failed);  // now refused on sight
  CHECK(m.group->working_members() == 0);
}

TEST_CASE("raid1: an unreadable block is read from the other member and written back",
          "[raid][raid1]") {
  mirror m(2);
  const auto data = pattern(32 * block_size, 4);
  write_blocks(m.loop, *m.group, 0, data);
  // The group adds its reserved area: member block = group block + 256.
  m.faults[0]->add_latent_error(256 + 8, 4);
  m.faults[1]->add_latent_error(256 + 20, 4);
  for (int i = 0; i < 4; ++i) CHECK(read_blocks(m.loop, *m.group, 0, 32) == data);
  CHECK(m.faults[0]->latent_error_blocks() == 0);
  CHECK(m.faults[1]->latent_error_blocks() == 0);
  CHECK(m.group->repaired_blocks() >= 8);  // at least the 8 bad blocks
  CHECK_FALSE(m.group->member_failed(0));
  CHECK_FALSE(m.group->member_failed(1));
}

TEST_CASE("raid1: an unreadable block on every member is a media error, not wrong data",
          "[raid][raid1]") {
  mirror m(2);
  write_blocks(m.loop, *m.group, 0, pattern(8 * block_size, 5));
  m.faults[0]->add_latent_error(256 + 2, 1);
  m.faults[1]->add_latent_error(256 + 2, 1);
  auto x = io::make(op::read, 0, 8, block_size);
  CHECK(run(m.loop, *m.group, *x) == make_error_code(errc::media_error));
  // Rewriting the block heals both members.
  write_blocks(m.loop, *m.group, 2, pattern(block_size, 6));
  auto y = io::make(op::read, 0, 8, block_size);
  CHECK_FALSE(run(m.loop, *m.group, *y));
}

TEST_CASE("raid1: a read's repair never puts old data over a newer write", "[raid][raid1]") {
  mirror m(2);
  write_blocks(m.loop, *m.group, 5, pattern(block_size, 8));  // old data
  m.faults[0]->add_latent_error(256 + 5, 1);
  m.faults[1]->set_delay(std::chrono::milliseconds(10), 1.0);  // member 1 answers late
  // The read fails on member 0, then fetches the old data from member 1...
  auto r = io::make(op::read, 5, 1, block_size);
  m.group->submit(r->req);
  m.loop.settle();
  // ...while a write of new data lands on both members.
  const auto fresh = pattern(block_size, 9);
  auto w = io::make(op::write, 5, 1, block_size);
  std::memcpy(w->buffer.data(), fresh.data(), block_size);
  m.group->submit(w->req);
  m.loop.run_until([&] { return r->completions == 1 && w->completions == 1; });
  REQUIRE_FALSE(w->req.result);
  // Both members hold the new data: the read did not "repair" over it.
  m.faults[1]->set_delay({}, 0);
  CHECK(read_blocks(m.loop, *m.disks[0], 256 + 5, 1) == fresh);
  CHECK(read_blocks(m.loop, *m.disks[1], 256 + 5, 1) == fresh);
}

TEST_CASE("raid1: a single-disk group is the member, minus the reserved area", "[raid][raid1]") {
  mirror m(1);
  CHECK(m.group->geometry().block_count == member_blocks - 256);
  const auto data = pattern(4 * block_size, 7);
  write_blocks(m.loop, *m.group, 10, data);
  CHECK(read_blocks(m.loop, *m.group, 10, 4) == data);
  m.faults[0]->fail();
  auto x = io::make(op::read, 10, 1, block_size);
  CHECK(run(m.loop, *m.group, *x) == device_failed);
}

TEST_CASE("raid1: bad member lists are refused with a clear error", "[raid][raid1]") {
  test_loop loop;
  std::vector<std::unique_ptr<memory_device>> disks;
  auto disk = [&](std::uint32_t bs, std::uint64_t blocks) {
    auto d = memory_device::create(loop.context.get_executor(), {bs, blocks});
    REQUIRE(d);
    disks.push_back(std::move(*d));
    return static_cast<block_device*>(disks.back().get());
  };
  auto message_of = [](auto result) { return result ? std::string() : result.error().message; };
  CHECK(message_of(raid1_group::create({}, {})).find("1 to 255 members") != std::string::npos);
  block_device* a = disk(4096, 2048);
  CHECK(message_of(raid1_group::create({a, a}, {})).find("again") != std::string::npos);
  CHECK(message_of(raid1_group::create({a, disk(4096, 4096)}, {})).find("same size") !=
        std::string::npos);
  CHECK(message_of(raid1_group::create({disk(4096, 100)}, {})).find("cannot hold") !=
        std::string::npos);
  CHECK(raid1_group::create({a, disk(4096, 2048)}, {}));
}

namespace {

// One of a round's writes, with what it wrote.
struct ordered_write {
  std::unique_ptr<io> x;
  std::uint64_t lba = 0;
  std::uint64_t blocks = 0;
  std::vector<std::byte> data;
};

}  // namespace

TEST_CASE("raid1: overlapping writes land in the same order on both mirrors", "[raid][raid1]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937_64 random(seed);
  mirror m(2, seed);
  // Each member lands and completes what it is given in its own random
  // order, as two drives' queues would.
  for (auto& f : m.faults) {
    f->set_shuffle(true);
    f->set_delay(std::chrono::microseconds(200), 0.5);
  }
  constexpr std::uint64_t area_blocks = 16;  // small: most writes overlap
  // Per block: what the last write to complete over it wrote.
  std::vector<std::vector<std::byte>> expected(area_blocks, std::vector<std::byte>(block_size));
  std::vector<ordered_write> writes;
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    writes.clear();
    for (int i = 0; i < 24; ++i) {
      ordered_write w;
      w.lba = std::uniform_int_distribution<std::uint64_t>(0, area_blocks - 1)(random);
      w.blocks = std::uniform_int_distribution<std::uint64_t>(
          1, std::min<std::uint64_t>(8, area_blocks - w.lba))(random);
      w.data = pattern(w.blocks * block_size, random());
      w.x = io::make(op::write, w.lba, w.blocks, block_size);
      std::memcpy(w.x->buffer.data(), w.data.data(), w.data.size());
      writes.push_back(std::move(w));
    }
    for (auto& w : writes) m.group->submit(w.x->req);  // all in flight at once
    // The last write to complete over a block is the one a read must see.
    std::vector<bool> seen(writes.size(), false);
    std::size_t done = 0;
    while (done < writes.size()) {
      REQUIRE(m.loop.step());
      for (std::size_t i = 0; i < writes.size(); ++i) {
        if (seen[i] || writes[i].x->completions == 0) continue;
        REQUIRE_FALSE(writes[i].x->req.result);
        seen[i] = true;
        ++done;
        for (std::uint64_t b = 0; b < writes[i].blocks; ++b) {
          const auto* from = writes[i].data.data() + b * block_size;
          expected[writes[i].lba + b].assign(from, from + block_size);
        }
      }
    }
    // Both members identical, block by block, and holding the last write.
    for (std::uint64_t b = 0; b < area_blocks; ++b) {
      INFO("block " << b);
      const auto a = read_blocks(m.loop, *m.disks[0], 256 + b, 1);
      const auto c = read_blocks(m.loop, *m.disks[1], 256 + b, 1);
      REQUIRE(a == c);
      CHECK(a == expected[b]);
      // Reads through the group alternate between the members: both agree.
      for (int k = 0; k < 2; ++k) CHECK(read_blocks(m.loop, *m.group, b, 1) == expected[b]);
    }
  }
}

}  // namespace strata::raid
