// 512e: 512-byte blocks over a 4096-byte device. The conformance suite runs
// it too (conformance_test.cc); these are the cases only it has: partial
// 4 KiB blocks read, written and discarded, what reaches the device below,
// and many overlapping unaligned writes in flight over a device that
// completes out of order, checked against a model.
#include "raid/device/emulated_512e.h"

#include <cstring>
#include <map>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "tests/raid/device/harness.h"

namespace strata::device::testing {
namespace {

constexpr std::uint32_t sector = 512;
constexpr std::uint64_t physical_blocks = 64;  // 256 KiB
constexpr std::uint64_t device_sectors = physical_blocks * 8;

struct stack_512e {
  test_loop loop;
  std::unique_ptr<memory_device> memory;
  std::unique_ptr<fault_device> faults;  // completes out of order when delays are on
  std::unique_ptr<emulated_512e> device;

  explicit stack_512e(std::uint64_t seed = 1) {
    auto m = memory_device::create(loop.context.get_executor(), {4096, physical_blocks});
    REQUIRE(m);
    memory = std::move(*m);
    fault_options options;
    options.seed = seed;
    faults = std::make_unique<fault_device>(*memory, loop.clock, options);
    device = std::make_unique<emulated_512e>(*faults);
  }
  std::vector<std::byte> read(std::uint64_t lba, std::uint64_t blocks) {
    return read_blocks(loop, *device, lba, blocks);
  }
};

std::vector<std::byte> sectors_of(std::uint64_t blocks, std::uint64_t seed) {
  return pattern(blocks * sector, seed);
}

}  // namespace

TEST_CASE("512e: the geometry is 512-byte blocks, eight per block below, and follows it",
          "[device][512e]") {
  stack_512e s;
  CHECK(s.device->geometry().logical_block_size_bytes == 512);
  CHECK(s.device->geometry().block_count == device_sectors);
  CHECK(s.device->geometry().buffer_alignment_bytes == 512);
}

TEST_CASE("512e: a write inside one 4 KiB block keeps the rest of it", "[device][512e]") {
  stack_512e s;
  const auto base = sectors_of(16, 7);
  write_blocks(s.loop, *s.device, 0, base);
  const auto one = sectors_of(1, 8);
  write_blocks(s.loop, *s.device, 3, one);
  auto expected = base;
  std::memcpy(expected.data() + 3 * sector, one.data(), sector);
  CHECK(s.read(0, 16) == expected);
  CHECK(s.device->read_modify_writes() == 1);
  // Unaligned at both ends, across three 4 KiB blocks.
  const auto middle = sectors_of(13, 9);
  write_blocks(s.loop, *s.device, 5, middle);  // 5..17
  std::vector<std::byte> read_back = s.read(0, 24);
  std::memcpy(expected.data() + 5 * sector, middle.data(), 11 * sector);
  CHECK(std::memcmp(read_back.data(), expected.data(), 16 * sector) == 0);
  CHECK(std::memcmp(read_back.data() + 16 * sector, middle.data() + 11 * sector, 2 * sector) == 0);
  CHECK(std::all_of(read_back.begin() + 18 * sector, read_back.end(),
                    [](std::byte b) { return b == std::byte{0}; }));
}

TEST_CASE("512e: aligned I/O goes to the device below as it is", "[device][512e]") {
  stack_512e s;
  const auto data = sectors_of(16, 3);
  write_blocks(s.loop, *s.device, 8, data);
  CHECK(s.device->read_modify_writes() == 0);
  CHECK(read_blocks(s.loop, *s.memory, 1, 2) == data);
  CHECK(s.read(8, 16) == data);
}

TEST_CASE("512e: a discard reads back as zeros, partial 4 KiB blocks included", "[device][512e]") {
  stack_512e s;
  const auto data = sectors_of(40, 11);
  write_blocks(s.loop, *s.device, 0, data);
  for (const auto& [lba, blocks] :
       {std::pair<std::uint64_t, std::uint64_t>{2, 3}, {6, 20}, {30, 2}, {32, 8}}) {
    INFO("discard " << lba << " +" << blocks);
    auto x = io::discard(lba, blocks);
    REQUIRE_FALSE(run(s.loop, *s.device, *x));
  }
  std::vector<std::byte> expected = data;
  for (const auto& [lba, blocks] :
       {std::pair<std::uint64_t, std::uint64_t>{2, 3}, {6, 20}, {30, 2}, {32, 8}})
    std::memset(expected.data() + lba * sector, 0, blocks * sector);
  CHECK(s.read(0, 40) == expected);
}

TEST_CASE("512e: a read of part of a 4 KiB block, into buffers of 512-byte alignment",
          "[device][512e]") {
  stack_512e s;
  const auto data = sectors_of(16, 5);
  write_blocks(s.loop, *s.device, 0, data);
  auto x = io::make(op::read, 3, 2, sector);
  aligned_buffer odd(3 * sector, 512);
  x->segment = iovec{odd.data() + sector, 2 * sector};  // 512-aligned, not 4096
  x->req.buffers = {&x->segment, 1};
  REQUIRE_FALSE(run(s.loop, *s.device, *x));
  CHECK(std::memcmp(odd.data() + sector, data.data() + 3 * sector, 2 * sector) == 0);
}

TEST_CASE("512e: a device error below reaches the caller", "[device][512e]") {
  stack_512e s;
  s.faults->fail_writes(2, 1);
  auto x = io::make(op::write, 17, 1, sector);  // a read-modify-write of block 2 below
  CHECK(run(s.loop, *s.device, *x) == make_error_code(errc::media_error));
}

// Many unaligned writes and discards of 512-byte blocks in flight at once,
// densely packed so that most share a 4 KiB block with others, over a
// device that completes a seeded half of its requests late (out of order).
// Round 1: the ranges are disjoint, so the outcome is exact: every block
// holds what its one writer wrote (zeros for a discard), and blocks nobody
// touched keep their old contents: a read-modify-write that raced another
// would put back stale data. Round 2: the ranges overlap; in-flight order is
// free, so each block must hold what one of the requests covering it wrote.
TEST_CASE("512e: overlapping unaligned writes in flight, out of order, lose nothing",
          "[device][512e]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  stack_512e s(seed);
  std::mt19937_64 random(seed);
  const auto initial = sectors_of(device_sectors, seed ^ 0x5a5a);
  write_blocks(s.loop, *s.device, 0, initial);
  s.faults->set_delay(std::chrono::microseconds(300), 0.5);

  auto run_all = [&](std::vector<std::unique_ptr<io>>& batch) {
    for (auto& x : batch) s.device->submit(x->req);
    for (auto& x : batch) REQUIRE(x->completions == 0);  // none inside submit
    s.loop.run_until([&] {
      return std::all_of(batch.begin(), batch.end(), [](auto& x) { return x->completions > 0; });
    });
    s.loop.settle();
    for (auto& x : batch) {
      REQUIRE(x->completions == 1);
      REQUIRE_FALSE(x->req.result);
    }
  };

  // Round 1: cut [0, device_sectors) into runs of 1..11 blocks; most are
  // written, some discarded, some left alone; submitted in random order.
  std::vector<std::byte> model = initial;
  std::vector<std::unique_ptr<io>> batch;
  for (std::uint64_t lba = 0; lba < device_sectors;) {
    const std::uint64_t blocks = std::min<std::uint64_t>(1 + random() % 11, device_sectors - lba);
    const unsigned kind = random() % 8;
    if (kind < 6) {
      auto w = io::make(op::write, lba, blocks, sector);
      const auto data = sectors_of(blocks, random());
      std::memcpy(w->buffer.data(), data.data(), data.size());
      std::memcpy(model.data() + lba * sector, data.data(), data.size());
      batch.push_back(std::move(w));
    } else if (kind == 6) {
      batch.push_back(io::discard(lba, blocks));
      std::memset(model.data() + lba * sector, 0, blocks * sector);
    }
    lba += blocks;
  }
  std::shuffle(batch.begin(), batch.end(), random);
  // Reads of the same blocks in flight with the writes must not fail or
  // hold anything up.
  for (int i = 0; i < 32; ++i) {
    const std::uint64_t blocks = 1 + random() % 16;
    batch.push_back(io::make(op::read, random() % (device_sectors - blocks), blocks, sector));
  }
  run_all(batch);
  CHECK(s.device->read_modify_writes() > 0);
  s.faults->set_delay(std::chrono::microseconds(0), 0);
  const auto after_round_1 = s.read(0, device_sectors);
  for (std::uint64_t b = 0; b < device_sectors; ++b) {
    INFO("block " << b);
    REQUIRE(std::memcmp(after_round_1.data() + b * sector, model.data() + b * sector, sector) == 0);
  }

  // Round 2: 300 overlapping writes of 1..9 blocks over the first 32 KiB.
  s.faults->set_delay(std::chrono::microseconds(300), 0.5);
  constexpr std::uint64_t span_sectors = 64;
  batch.clear();
  std::vector<std::vector<std::size_t>> writers(span_sectors);
  for (std::size_t i = 0; i < 300; ++i) {
    const std::uint64_t blocks = 1 + random() % 9;
    const std::uint64_t lba = random() % (span_sectors - blocks + 1);
    auto w = io::make(op::write, lba, blocks, sector);
    const auto data = sectors_of(blocks, random());
    std::memcpy(w->buffer.data(), data.data(), data.size());
    for (std::uint64_t b = lba; b < lba + blocks; ++b) writers[b].push_back(i);
    batch.push_back(std::move(w));
  }
  run_all(batch);
  s.faults->set_delay(std::chrono::microseconds(0), 0);
  const auto after_round_2 = s.read(0, span_sectors);
  for (std::uint64_t b = 0; b < span_sectors; ++b) {
    INFO("block " << b);
    const std::byte* got = after_round_2.data() + b * sector;
    bool from_a_writer = false;
    for (const std::size_t i : writers[b]) {
      const io& w = *batch[i];
      from_a_writer |= std::memcmp(got, w.buffer.data() + (b - w.req.lba) * sector, sector) == 0;
    }
    if (writers[b].empty())
      from_a_writer = std::memcmp(got, after_round_1.data() + b * sector, sector) == 0;
    REQUIRE(from_a_writer);
  }
}

}  // namespace strata::device::testing
