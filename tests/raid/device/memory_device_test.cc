// The memory device is sparse: RAM is taken on first write and given back
// when a whole chunk is discarded.
#include "raid/device/memory_device.h"

#include "tests/raid/device/harness.h"

namespace strata::device::testing {

TEST_CASE("memory device: a large device costs only what is written", "[device][memory]") {
  test_loop loop;
  // 1 TB of 4 KiB blocks: the shape of a model drive.
  auto d = memory_device::create(loop.context.get_executor(), {4096, 250'000'000});
  REQUIRE(d);
  memory_device& m = **d;
  CHECK(m.resident_bytes() == 0);

  write_blocks(loop, m, 123'456'789, pattern(2 * 4096, 1));
  CHECK(m.resident_bytes() == memory_device::chunk_size_bytes);
  CHECK(read_blocks(loop, m, 123'456'789, 2) == pattern(2 * 4096, 1));

  const std::uint64_t blocks_per_chunk = memory_device::chunk_size_bytes / 4096;
  const std::uint64_t chunk_start = 123'456'789 / blocks_per_chunk * blocks_per_chunk;
  auto discard = io::discard(chunk_start, blocks_per_chunk);
  REQUIRE_FALSE(run(loop, m, *discard));
  CHECK(m.resident_bytes() == 0);
}

TEST_CASE("memory device: bad options are refused with a message", "[device][memory]") {
  test_loop loop;
  auto zero = memory_device::create(loop.context.get_executor(), {4096, 0});
  REQUIRE_FALSE(zero);
  CHECK(zero.error().code == make_error_code(errc::invalid_argument));
  auto odd = memory_device::create(loop.context.get_executor(), {520, 100});
  REQUIRE_FALSE(odd);
  CHECK(odd.error().message.find("512 or 4096") != std::string::npos);
}

}  // namespace strata::device::testing
