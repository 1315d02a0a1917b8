// Heat: decay arithmetic in virtual time, sequential streams that do not
// heat, and what an extent costs in memory.
#include "tiering/heat.h"

#include <catch2/catch.hpp>
#include <chrono>

#include "raid/device/clock.h"

namespace strata::tiering {
namespace {

using namespace std::chrono_literals;
using device::op;

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t extent_blocks = 1024;  // 4 MiB

struct timeline {
  device::virtual_clock clock;
  heat_options options;
  timeline() { options.half_life = 1h; }
};

TEST_CASE("heat: counts decay by half every half-life", "[tiering][heat]") {
  timeline t;
  heat_map h(16, extent_blocks, block_size, t.options, t.clock);
  for (int i = 0; i < 8; ++i) CHECK_FALSE(h.record(op::read, 3 * extent_blocks + 100 * i, 2));
  for (int i = 0; i < 4; ++i) h.record(op::write, 3 * extent_blocks + 7 * i + 900, 1);
  CHECK(h.score(3) == Approx(12));
  CHECK(h.heat(3).read_bytes == Approx(8 * 2 * block_size));
  t.clock.advance_by(1h);
  CHECK(h.score(3) == Approx(6));
  CHECK(h.heat(3).write_ios == Approx(2));
  t.clock.advance_by(2h);
  CHECK(h.score(3) == Approx(1.5));
  // New I/O adds to the decayed value.
  h.record(op::read, 3 * extent_blocks + 5, 1);
  CHECK(h.score(3) == Approx(2.5));
  t.clock.advance_by(30min);
  CHECK(h.score(3) == Approx(2.5 / std::sqrt(2.0)).epsilon(1e-4));
  CHECK(h.score(4) == 0);
}

TEST_CASE("heat: a sequential scan heats nothing past its first megabyte", "[tiering][heat]") {
  timeline t;
  heat_map h(16, extent_blocks, block_size, t.options, t.clock);
  std::uint64_t counted = 0;
  for (std::uint64_t lba = 0; lba < 8 * extent_blocks; lba += 32) {  // 128 KiB reads
    counted += h.record(op::read, lba, 32) ? 0 : 1;
  }
  CHECK(counted == 8);  // the first 1 MiB, before the stream is known
  for (std::uint64_t e = 1; e < 8; ++e) CHECK(h.score(e) == 0);
  // Random reads between the scan's requests still count.
  heat_map mixed(16, extent_blocks, block_size, t.options, t.clock);
  for (std::uint64_t i = 0; i < 200; ++i) {
    mixed.record(op::read, 4 * extent_blocks + i * 32, 32);  // a scan of extents 4..
    mixed.record(op::read, 10 * extent_blocks + (i * 7919) % extent_blocks, 1);  // random in 10
  }
  CHECK(mixed.score(10) == Approx(200));
  CHECK(mixed.score(5) == 0);
}

TEST_CASE("heat: interleaved scans each keep their own stream", "[tiering][heat]") {
  timeline t;
  heat_map h(64, extent_blocks, block_size, t.options, t.clock);
  for (std::uint64_t i = 0; i < 100; ++i) {
    for (std::uint64_t s = 0; s < 4; ++s) h.record(op::read, s * 16 * extent_blocks + i * 64, 64);
  }
  double total = 0;
  for (std::uint64_t e = 0; e < 64; ++e) total += h.score(e);
  CHECK(total == Approx(4 * 4));  // each stream's first 1 MiB: four 256 KiB reads
}

TEST_CASE(
    "heat: 24 bytes an extent (with its last I/O time), so a 1 PiB pool's heat and map fit 128 GiB "
    "with room",
    "[tiering][heat]") {
  CHECK(heat_map::bytes_per_extent() == 24);
  const double extents = static_cast<double>(1ull << 50) / (4 << 20);  // 268 M
  const double bytes = extents * (heat_map::bytes_per_extent() + 8 /* the extent map's entry */);
  INFO(bytes / (1ull << 30) << " GiB");
  CHECK(bytes < 0.1 * 128.0 * (1ull << 30));
}

TEST_CASE("heat: persisted values round-trip; dirty extents are reported once", "[tiering][heat]") {
  timeline t;
  heat_map h(8, extent_blocks, block_size, t.options, t.clock);
  h.record(op::read, 5, 1);
  h.record(op::write, 2 * extent_blocks, 8);
  int reported = 0;
  h.take_dirty([&](std::uint64_t e, const extent_heat& x) {
    ++reported;
    const auto back = heat_map::decode(heat_map::encode(x));
    REQUIRE(back);
    CHECK(back->read_ios == x.read_ios);
    CHECK(back->write_bytes == x.write_bytes);
    CHECK((e == 0 || e == 2));
  });
  CHECK(reported == 2);
  h.take_dirty([&](std::uint64_t, const extent_heat&) { ++reported; });
  CHECK(reported == 2);
  CHECK_FALSE(heat_map::decode("junk"));
}

}  // namespace
}  // namespace strata::tiering
