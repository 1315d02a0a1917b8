#include "controller/shelf.h"

#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>

#include "tests/raid/device/harness.h"

using namespace strata::controller;
using namespace strata::device::testing;

TEST_CASE("shelf: drives are sparse files behind models; reopened, they hold what was written",
          "[controller]") {
  temp_dir dir;
  const std::vector<drive_spec> drives{{"hdd-00", drive_kind::hdd, 64ull << 30},
                                       {"ssd-00", drive_kind::ssd, 1ull << 30}};
  const auto data = pattern(8 * 4096, test_seed());
  {
    test_loop loop;
    auto s = shelf::open(*loop.ring, loop.clock, dir.path() / "shelf", drives);
    REQUIRE(s);
    REQUIRE((*s)->size() == 2);
    CHECK((*s)->drive(0).geometry().block_count == (64ull << 30) / 4096);
    CHECK((*s)->drive(0).geometry().logical_block_size_bytes == 4096);
    write_blocks(loop, (*s)->drive(0), 1000, data);
    write_blocks(loop, (*s)->drive(1), 7, data);
    flush(loop, (*s)->drive(0));
    flush(loop, (*s)->drive(1));
  }
  const auto file = dir.path() / "shelf" / "hdd-00.img";
  CHECK(std::filesystem::file_size(file) == 64ull << 30);
  // Sparse: 64 GiB of file, a few blocks of it allocated.
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK(static_cast<std::uint64_t>(st.st_blocks) * 512 < (16u << 20));
  test_loop loop;
  auto s = shelf::open(*loop.ring, loop.clock, dir.path() / "shelf", drives);
  REQUIRE(s);
  CHECK(read_blocks(loop, (*s)->drive(0), 1000, 8) == data);
  CHECK(read_blocks(loop, (*s)->drive(1), 7, 8) == data);
}

TEST_CASE("shelf: with volatile write caches, what was not flushed is lost with the process",
          "[controller]") {
  temp_dir dir;
  const std::vector<drive_spec> drives{{"hdd-00", drive_kind::hdd, 1ull << 30},
                                       {"ssd-00", drive_kind::ssd, 1ull << 30}};
  const auto flushed = pattern(4 * 4096, test_seed());
  const auto unflushed = pattern(4 * 4096, test_seed() + 1);
  const std::vector<std::byte> zeros(4 * 4096);
  {
    test_loop loop;
    auto s = shelf::open(*loop.ring, loop.clock, dir.path() / "shelf", drives,
                         {.volatile_write_caches = true});
    REQUIRE(s);
    for (std::size_t i = 0; i < 2; ++i) {
      write_blocks(loop, (*s)->drive(i), 100, flushed);
      flush(loop, (*s)->drive(i));
      write_blocks(loop, (*s)->drive(i), 200, unflushed);
      // The cache answers reads of what it holds.
      CHECK(read_blocks(loop, (*s)->drive(i), 200, 4) == unflushed);
    }
    // The shelf goes without a flush, as its process would at a kill -9.
  }
  test_loop loop;
  auto s = shelf::open(*loop.ring, loop.clock, dir.path() / "shelf", drives);
  REQUIRE(s);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(read_blocks(loop, (*s)->drive(i), 100, 4) == flushed);
    CHECK(read_blocks(loop, (*s)->drive(i), 200, 4) == zeros);
  }
}

TEST_CASE("shelf: a drive size that is not whole 4 KiB blocks is refused, naming the drive",
          "[controller]") {
  temp_dir dir;
  test_loop loop;
  auto s = shelf::open(*loop.ring, loop.clock, dir.path(), {{"hdd-07", drive_kind::hdd, 4097}});
  REQUIRE_FALSE(s);
  CHECK(s.error().message.find("hdd-07") != std::string::npos);
}

TEST_CASE(
    "shelf: the embedded default is 20 HDDs and 5 SSDs, the read-cache and write-log SSDs small",
    "[controller]") {
  const auto d = default_shelf();
  REQUIRE(d.size() == 25);
  CHECK(std::count_if(d.begin(), d.end(),
                      [](const drive_spec& x) { return x.kind == drive_kind::hdd; }) == 20);
  CHECK(d[20].bytes == d[21].bytes);
  CHECK(d[22].bytes < d[21].bytes);
  CHECK(d[23].bytes == d[24].bytes);
  CHECK(d[23].bytes < d[22].bytes);
  for (const auto& x : d) CHECK(x.bytes % 4096 == 0);
}

// Issue 48, finding 2: the fence asked only at the top gate let writes
// admitted before a lapse (queued in the scheduler and the HDD model: one
// in service at a time) reach the file after it, when a thawed controller's
// loop ran again. The bottom gate asks again where a request is handed to
// the kernel.
TEST_CASE(
    "shelf: writes admitted before the lease lapsed and still queued in the drive's model are "
    "stopped at the bottom gate: none reaches the file until the fence opens, none ever once the "
    "pool is lost",
    "[controller]") {
  temp_dir dir;
  const std::vector<drive_spec> drives{{"hdd-00", drive_kind::hdd, 1ull << 30}};
  for (const bool lost : {false, true}) {
    test_loop loop;
    std::filesystem::remove_all(dir.path() / "shelf");
    auto s = shelf::open(*loop.ring, loop.clock, dir.path() / "shelf", drives);
    REQUIRE(s);
    bool allowed = true;
    int holds = 0;
    (*s)->fence([&] { return allowed; }, [&] { ++holds; });
    constexpr int writes = 64;
    std::vector<std::unique_ptr<io>> queued;
    for (int i = 0; i < writes; ++i) {
      queued.push_back(io::make(strata::device::op::write, 16 * i, 4, 4096));
      std::memset(queued.back()->buffer.data(), 0x5a, 4 * 4096);
      (*s)->drive(0).submit(queued.back()->req);  // admitted: the lease is valid
    }
    allowed = false;  // the process froze here; the partner took the pool over
    for (int i = 0; i < 100000 && loop.step(); ++i) {
    }
    int done = 0;
    for (const auto& w : queued) done += w->completions;
    INFO("lost: " << lost << ", completed after the lapse: " << done);
    CHECK(done <= 1);  // the one the model had handed to the file before the lapse
    CHECK((*s)->held_below(0) >= 1);
    CHECK(holds >= 1);
    // What the file holds (read past the gates, as a confirm reads its
    // records): nothing of the writes that did not complete.
    int on_file = 0;
    for (int i = 0; i < writes; ++i) {
      const auto got = read_blocks(loop, (*s)->raw_drive(0), 16 * i, 4);
      on_file += std::ranges::any_of(got, [](std::byte b) { return b != std::byte{0}; });
    }
    CHECK(on_file == done);
    if (!lost) {
      // The drives said the pool is still this controller's: all of it goes on.
      allowed = true;
      (*s)->open_gates();
      loop.run_until([&] {
        return std::ranges::all_of(queued, [](const auto& w) { return w->completions == 1; });
      });
      for (const auto& w : queued) CHECK_FALSE(w->req.result);
      CHECK(read_blocks(loop, (*s)->raw_drive(0), 16 * (writes - 1), 4) ==
            std::vector<std::byte>(4 * 4096, std::byte{0x5a}));
    } else {
      // Stepped down: held for good, failed at the stop; none reaches the file.
      (*s)->hold_for_good(0);
      (*s)->shut_lost(make_error_code(std::errc::operation_canceled));
      loop.run_until([&] {
        return std::ranges::all_of(queued, [](const auto& w) { return w->completions == 1; });
      });
      int failed = 0;
      for (const auto& w : queued) failed += w->req.result ? 1 : 0;
      CHECK(failed >= writes - 1);
      int after = 0;
      for (int i = 0; i < writes; ++i) {
        const auto got = read_blocks(loop, (*s)->raw_drive(0), 16 * i, 4);
        after += std::ranges::any_of(got, [](std::byte b) { return b != std::byte{0}; });
      }
      CHECK(after == on_file);
    }
  }
}
