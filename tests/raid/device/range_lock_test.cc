// The range lock's one rule: overlapping requests (unless both shared) run
// one at a time, in arrival order; nothing else waits.
#include "raid/device/range_lock.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <random>
#include <vector>

namespace strata::device::testing {

namespace {

struct req {
  req(int i, std::uint64_t b, std::uint64_t e, bool s = false)
      : id(i), begin(b), end(e), shared(s) {}
  int id = 0;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  bool shared = false;
  bool running = false;
  range_lock_entry lock_entry;
};

using lock_type = range_lock<req, &req::lock_entry>;

bool overlap(const req& a, const req& b) {
  return a.begin < b.end && b.begin < a.end && !(a.shared && b.shared);
}

}  // namespace

TEST_CASE("range lock: an overlapping request waits, a disjoint one does not",
          "[device][range_lock]") {
  lock_type lock;
  req a{1, 0, 10};
  req b{2, 5, 15};
  req c{3, 20, 30};
  CHECK(lock.acquire(a, a.begin, a.end));
  CHECK_FALSE(lock.acquire(b, b.begin, b.end));
  CHECK(lock.acquire(c, c.begin, c.end));
  CHECK(lock.holds(a));
  CHECK_FALSE(lock.holds(b));
  std::vector<int> ran;
  lock.release(a, [&](req& r) { ran.push_back(r.id); });
  CHECK(ran == std::vector<int>{2});
  CHECK(lock.holds(b));
}

TEST_CASE(
    "range lock: a newcomer waits behind an older waiter it overlaps, even if no holder blocks it",
    "[device][range_lock]") {
  lock_type lock;
  req a{1, 0, 10};
  req b{2, 5, 20};   // waits for a
  req c{3, 15, 25};  // overlaps only b: waits behind it
  REQUIRE(lock.acquire(a, a.begin, a.end));
  REQUIRE_FALSE(lock.acquire(b, b.begin, b.end));
  CHECK_FALSE(lock.acquire(c, c.begin, c.end));
  std::vector<int> ran;
  lock.release(a, [&](req& r) { ran.push_back(r.id); });
  CHECK(ran == std::vector<int>{2});  // c still waits for b
  lock.release(b, [&](req& r) { ran.push_back(r.id); });
  CHECK(ran == std::vector<int>{2, 3});
}

TEST_CASE("range lock: shared requests share, an exclusive one waits for them all",
          "[device][range_lock]") {
  lock_type lock;
  req r1{1, 0, 10, true};
  req r2{2, 5, 15, true};
  req w{3, 0, 4};
  req r3{4, 0, 2, true};  // behind the writer it overlaps
  CHECK(lock.acquire(r1, r1.begin, r1.end, true));
  CHECK(lock.acquire(r2, r2.begin, r2.end, true));
  CHECK_FALSE(lock.acquire(w, w.begin, w.end));
  CHECK_FALSE(lock.acquire(r3, r3.begin, r3.end, true));
  std::vector<int> ran;
  lock.release(r1, [&](req& r) { ran.push_back(r.id); });
  CHECK(ran == std::vector<int>{3});  // r2 does not overlap w
  lock.release(w, [&](req& r) { ran.push_back(r.id); });
  CHECK(ran == std::vector<int>{3, 4});
}

TEST_CASE("range lock: a request run from release may release, and the waiters it frees run once",
          "[device][range_lock]") {
  lock_type lock;
  req a{1, 0, 10};
  req b{2, 0, 10};
  req c{3, 0, 10};
  REQUIRE(lock.acquire(a, 0, 10));
  REQUIRE_FALSE(lock.acquire(b, 0, 10));
  REQUIRE_FALSE(lock.acquire(c, 0, 10));
  std::vector<int> ran;
  std::function<void(req&)> run = [&](req& r) {
    ran.push_back(r.id);
    if (r.id == 2) lock.release(r, run);  // b ends at once: c goes from inside
  };
  lock.release(a, run);
  CHECK(ran == std::vector<int>{2, 3});
  CHECK(lock.holds(c));
}

TEST_CASE("range lock: buckets by granule keep each granule's order", "[device][range_lock]") {
  lock_type lock(4, 1);  // as RAID-6: one stripe per range
  std::deque<req> reqs;
  for (int i = 0; i < 12; ++i) reqs.emplace_back(i, std::uint64_t(i % 6), std::uint64_t(i % 6 + 1));
  for (req& r : reqs) CHECK(lock.acquire(r, r.begin, r.end) == (r.id < 6));
  std::vector<int> ran;
  for (int i = 0; i < 6; ++i) lock.release(reqs[i], [&](req& r) { ran.push_back(r.id); });
  CHECK(ran == std::vector<int>{6, 7, 8, 9, 10, 11});
}

TEST_CASE(
    "range lock: random requests never run beside one they overlap, and each runs after every "
    "older one it overlaps has ended",
    "[device][range_lock]") {
  const auto seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (std::size_t buckets : {std::size_t{1}, std::size_t{8}}) {
    lock_type lock(buckets, buckets == 1 ? 1 : 16);
    std::deque<req> all;
    std::vector<req*> running;
    std::vector<int> ended;  // ids, in the order they ended
    auto start = [&](req& r) {
      for (req* o : running) REQUIRE_FALSE(overlap(*o, r));
      // Every older request it overlaps has ended.
      for (const req& o : all) {
        if (o.id >= r.id || !overlap(o, r)) continue;
        REQUIRE(std::find(ended.begin(), ended.end(), o.id) != ended.end());
      }
      r.running = true;
      running.push_back(&r);
    };
    for (int step = 0; step < 4000; ++step) {
      if (running.empty() || rng() % 2 == 0) {
        const std::uint64_t granule = buckets == 1 ? 64 : 16;
        const std::uint64_t base = (rng() % 8) * granule;
        const std::uint64_t begin = base + rng() % granule;
        const std::uint64_t end = std::min(base + granule, begin + 1 + rng() % 6);
        req& r = all.emplace_back(step, begin, end, rng() % 4 == 0);
        if (lock.acquire(r, r.begin, r.end, r.shared)) start(r);
      } else {
        req* r = running[rng() % running.size()];
        std::erase(running, r);
        r->running = false;
        ended.push_back(r->id);
        lock.release(*r, start);
      }
    }
  }
}

}  // namespace strata::device::testing
