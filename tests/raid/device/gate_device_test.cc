// The gate in front of a shared drive (fencing): held requests wait in
// order and go on when it opens; a shut gate fails them and every later
// one; the lease's check stops the first request after it lapses.
#include "raid/device/gate_device.h"

#include <cstring>

#include "raid/device/memory_device.h"
#include "tests/raid/device/harness.h"

namespace strata::device::testing {
namespace {

constexpr std::uint32_t block_size = 4096;

struct gated {
  test_loop loop;
  std::unique_ptr<memory_device> drive;
  bool lease_valid = true;
  int holds = 0;
  std::unique_ptr<gate_device> gate;

  gated() {
    auto m = memory_device::create(loop.context.get_executor(), {block_size, 256});
    REQUIRE(m);
    drive = std::move(*m);
    gate = std::make_unique<gate_device>(
        *drive, [this] { return lease_valid; }, [this] { ++holds; });
  }
  std::unique_ptr<io> start_write(std::uint64_t lba, std::byte fill) {
    auto x = io::make(op::write, lba, 1, block_size);
    std::memset(x->buffer.data(), static_cast<int>(fill), block_size);
    gate->submit(x->req);
    return x;
  }
};

}  // namespace

TEST_CASE("gate: held requests, reads too, wait in arrival order and go on when it opens",
          "[device][gate]") {
  gated g;
  write_blocks(g.loop, *g.gate, 0, pattern(block_size, 1));  // open: straight through
  g.gate->hold();
  CHECK(g.holds == 1);
  auto first = g.start_write(5, std::byte{0x11});
  auto second = g.start_write(5, std::byte{0x22});  // the same block: order decides what stays
  auto read = io::make(op::read, 0, 1, block_size);
  g.gate->submit(read->req);
  auto flush = io::flush();
  g.gate->submit(flush->req);
  g.loop.settle();  // nothing moves while held
  CHECK(first->completions == 0);
  CHECK(second->completions == 0);
  CHECK(read->completions == 0);
  CHECK(flush->completions == 0);
  CHECK(g.gate->held() == 4);
  CHECK(read_blocks(g.loop, *g.drive, 5, 1) ==
        std::vector<std::byte>(block_size));  // the drive saw nothing

  g.gate->open();
  g.loop.run_until([&] {
    return first->completions && second->completions && read->completions && flush->completions;
  });
  CHECK_FALSE(first->req.result);
  CHECK_FALSE(read->req.result);
  CHECK(std::memcmp(read->buffer.data(), pattern(block_size, 1).data(), block_size) == 0);
  CHECK(read_blocks(g.loop, *g.gate, 5, 1) == std::vector<std::byte>(block_size, std::byte{0x22}));
  CHECK(g.gate->current() == gate_device::state::open);
}

TEST_CASE("gate: the lease's check stops the first request after it lapses, and holds the rest",
          "[device][gate]") {
  gated g;
  auto before = g.start_write(1, std::byte{1});
  g.loop.run_until([&] { return before->completions == 1; });
  g.lease_valid = false;  // frozen past the lease: the first request after the thaw is stopped
  auto after = g.start_write(2, std::byte{2});
  CHECK(g.holds == 1);
  CHECK(g.gate->current() == gate_device::state::held);
  g.lease_valid = true;  // held stays held until whoever renewed the lease opens it
  auto later = g.start_write(3, std::byte{3});
  g.loop.settle();
  CHECK(after->completions == 0);
  CHECK(later->completions == 0);
  CHECK(g.holds == 1);  // told once
  g.gate->open();
  g.loop.run_until([&] { return after->completions && later->completions; });
  CHECK(read_blocks(g.loop, *g.drive, 3, 1) == std::vector<std::byte>(block_size, std::byte{3}));
}

TEST_CASE(
    "gate: shut fails the held requests and every later one, never inside submit, and the drive "
    "sees none",
    "[device][gate]") {
  gated g;
  g.gate->hold();
  auto held = g.start_write(7, std::byte{7});
  const auto fenced = make_error_code(errc::permission_denied);
  g.gate->shut(fenced);
  CHECK(held->completions == 0);  // completed later, from the loop
  auto later = g.start_write(8, std::byte{8});
  CHECK(later->completions == 0);
  g.loop.run_until([&] { return held->completions && later->completions; });
  CHECK(held->req.result == fenced);
  CHECK(later->req.result == fenced);
  g.gate->open();  // shut is for good
  CHECK(g.gate->current() == gate_device::state::shut);
  CHECK(read_blocks(g.loop, *g.drive, 7, 2) == std::vector<std::byte>(2 * block_size));
}

}  // namespace strata::device::testing
