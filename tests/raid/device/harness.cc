#include "tests/raid/device/harness.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace strata::device::testing {

std::uint64_t test_seed() {
  static const std::uint64_t seed = []() -> std::uint64_t {
    std::uint64_t s = std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32);
    if (const char* fixed = std::getenv("STRATA_TEST_SEED")) s = std::strtoull(fixed, nullptr, 0);
    std::fprintf(stderr, "test seed %llu (replay with STRATA_TEST_SEED=%llu)\n",
                 static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

temp_dir::temp_dir(const std::filesystem::path& parent) {
  std::string name = (parent / "strata-test-XXXXXX").string();
  if (::mkdtemp(name.data()) == nullptr) FAIL("mkdtemp in " << parent << " failed");
  path_ = name;
}

temp_dir::~temp_dir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

test_loop::test_loop() {
  auto r = io_ring::create(context, 256);
  if (!r) FAIL("io_ring: " << r.error().message);
  ring = std::move(*r);
}

std::unique_ptr<io> io::make(op operation, std::uint64_t lba, std::uint64_t blocks,
                             std::uint32_t block_size) {
  auto x = std::make_unique<io>();
  x->buffer = aligned_buffer(blocks * block_size);
  x->segment = x->buffer.segment();
  x->req.operation = operation;
  x->req.lba = lba;
  x->req.block_count = blocks;
  x->req.buffers = {&x->segment, 1};
  return x;
}

std::unique_ptr<io> io::flush() {
  auto x = std::make_unique<io>();
  x->req.operation = op::flush;
  return x;
}

std::unique_ptr<io> io::discard(std::uint64_t lba, std::uint64_t blocks) {
  auto x = std::make_unique<io>();
  x->req.operation = op::discard;
  x->req.lba = lba;
  x->req.block_count = blocks;
  return x;
}

std::error_code run(test_loop& loop, block_device& device, io& x) {
  x.completions = 0;
  device.submit(x.req);
  REQUIRE(x.completions == 0);  // never inside submit
  loop.run_until([&] { return x.completions > 0; });
  loop.settle();
  REQUIRE(x.completions == 1);  // exactly once
  return x.req.result;
}

void write_blocks(test_loop& loop, block_device& device, std::uint64_t lba,
                  std::span<const std::byte> data) {
  const std::uint32_t block_size = device.geometry().logical_block_size_bytes;
  auto x = io::make(op::write, lba, data.size() / block_size, block_size);
  std::memcpy(x->buffer.data(), data.data(), data.size());
  const std::error_code ec = run(loop, device, *x);
  INFO("write lba " << lba << ": " << ec.message());
  REQUIRE(!ec);
}

std::vector<std::byte> read_blocks(test_loop& loop, block_device& device, std::uint64_t lba,
                                   std::uint64_t blocks) {
  const std::uint32_t block_size = device.geometry().logical_block_size_bytes;
  auto x = io::make(op::read, lba, blocks, block_size);
  const std::error_code ec = run(loop, device, *x);
  INFO("read lba " << lba << ": " << ec.message());
  REQUIRE(!ec);
  return {x->buffer.data(), x->buffer.data() + x->buffer.size()};
}

void flush(test_loop& loop, block_device& device) {
  auto x = io::flush();
  const std::error_code ec = run(loop, device, *x);
  INFO("flush: " << ec.message());
  REQUIRE(!ec);
}

std::vector<std::byte> pattern(std::size_t size_bytes, std::uint64_t seed) {
  std::vector<std::byte> bytes(size_bytes);
  std::mt19937_64 random(seed);
  for (std::size_t i = 0; i < size_bytes; i += 8) {
    const std::uint64_t word = random();
    std::memcpy(bytes.data() + i, &word, std::min<std::size_t>(8, size_bytes - i));
  }
  return bytes;
}

}  // namespace strata::device::testing
