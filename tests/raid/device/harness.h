// Test harness for block devices: one loop (io_context + virtual clock +
// io_uring ring) and helpers that run requests to completion while checking
// the interface's contract.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/device/clock.h"
#include "raid/device/io_ring.h"

namespace strata::device::testing {

// A seed for randomized tests: STRATA_TEST_SEED if set, else fresh. Printed
// with every test that uses it, so a failure can be replayed.
std::uint64_t test_seed();

// The source tree (tests read shipped files and call its scripts). Compiled
// into one small file of its own (source_dir.cc), so that the absolute path
// keeps no other object out of a clone's compiler cache (README: "The
// compiler cache").
std::filesystem::path source_dir();

// A temporary directory, removed with everything in it.
class temp_dir {
 public:
  explicit temp_dir(const std::filesystem::path& parent = std::filesystem::temp_directory_path());
  ~temp_dir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct test_loop {
  boost::asio::io_context context;
  virtual_clock clock;
  std::unique_ptr<io_ring> ring;
  // Work in flight on other threads that will post to this loop (a
  // metadata store's writes): waited for before virtual time moves, so
  // that such work takes no virtual time.
  std::function<std::size_t()> elsewhere;
  // Called before every step: a simulation lets that work elsewhere finish
  // here (a metadata store's drain), so its outcomes reach the loop at the
  // same point in every run and a seed replays exactly.
  std::function<void()> before_step;

  test_loop();

  // Runs handlers until done() holds. When nothing is runnable, waits for
  // work elsewhere, else moves the virtual clock to the next timer; with
  // no timer either, waits for the ring (a real device is busy). Fails the
  // test if nothing can happen.
  template <class Done>
  void run_until(Done done) {
    while (!done()) {
      if (!step()) FAIL("the loop is stuck: nothing runnable, no timer armed, no I/O in flight");
    }
  }
  // One step of run_until: one handler, or one move of the clock. False if
  // nothing can happen. Crash tests stop the world between two steps.
  bool step() {
    if (before_step) before_step();
    context.restart();
    if (context.poll_one() > 0) return true;
    if (elsewhere && elsewhere() > 0) {
      context.run_one();
    } else if (auto next = clock.next_deadline()) {
      clock.advance_to(*next);
    } else if (ring->in_flight() > 0) {
      context.run_one();
    } else {
      return false;
    }
    return true;
  }
  // Runs whatever is runnable now (no time passes).
  void settle() {
    context.restart();
    context.poll();
  }
};

// A request with its buffer and a count of its completions.
struct io {
  request req;
  aligned_buffer buffer;
  iovec segment{};
  int completions = 0;

  io() { req.bind<&io::on_done>(this); }
  io(const io&) = delete;
  void on_done(request&) noexcept { ++completions; }

  // A read or write of [lba, lba + blocks) in one segment.
  static std::unique_ptr<io> make(op operation, std::uint64_t lba, std::uint64_t blocks,
                                  std::uint32_t block_size);
  static std::unique_ptr<io> flush();
  static std::unique_ptr<io> discard(std::uint64_t lba, std::uint64_t blocks);
};

// Submits `x`, checks it did not complete inside submit, runs the loop until
// it completes, and returns its result.
std::error_code run(test_loop& loop, block_device& device, io& x);

// Synchronous helpers built on run(); REQUIREs success.
void write_blocks(test_loop& loop, block_device& device, std::uint64_t lba,
                  std::span<const std::byte> data);
std::vector<std::byte> read_blocks(test_loop& loop, block_device& device, std::uint64_t lba,
                                   std::uint64_t blocks);
void flush(test_loop& loop, block_device& device);

// Deterministic bytes for block contents.
std::vector<std::byte> pattern(std::size_t size_bytes, std::uint64_t seed);

}  // namespace strata::device::testing
