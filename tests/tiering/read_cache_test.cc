// The SSD read cache inside a pool (W-TinyLFU, the default): admission by
// frequency, hits served from the cache device, coherence with writes, discards and moves, a warm
// restart, and a failed cache device.
#include "tiering/read_cache.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "tests/tiering/rig.h"

namespace strata::tiering {
namespace {
using namespace testing;

constexpr std::uint64_t line_blocks = rig::cache_line_blocks;

// Writes the cache's index now, and waits for it.
void persist_cache(rig& r) {
  std::optional<std::error_code> persisted;
  r.p->cache()->persist([&](std::error_code ec) { persisted = ec; });
  r.loop.run_until([&] { return persisted.has_value(); });
  REQUIRE_FALSE(*persisted);
}

// Reads the same block three times from places that never form a stream.
void read_twice_randomly(rig& r, volume& v, std::uint64_t lba) {
  read_blocks(r.loop, v, lba, 1);
  read_blocks(r.loop, v, lba + 2 * extent_blocks + 1, 1);  // breaks any stream (another extent)
  read_blocks(r.loop, v, lba, 1);
  r.loop.run_until([&] { return r.p->cache()->idle(); });
}

TEST_CASE("read cache: a line read is filled and then served from the cache", "[tiering][cache]") {
  rig r(2, 16, new_extent_tier::capacity, 64);
  volume& v = r.create("db", 8 * extent_blocks);
  const auto data = pattern(extent_bytes, test_seed());
  write_blocks(r.loop, v, 0, data);
  read_blocks(r.loop, v, 5, 1);
  r.loop.run_until([&] { return r.p->cache()->idle(); });
  CHECK(r.p->cache()->counters().fills == 1);  // the cache has room: the window takes it
  const auto before = v.counters().reads(source::cache).ios;
  const auto got = read_blocks(r.loop, v, 4, line_blocks);  // the whole line of block 5
  CHECK(v.counters().reads(source::cache).ios == before + 1);
  CHECK(got ==
        std::vector<std::byte>(data.begin() + 4 * block_size, data.begin() + 8 * block_size));
}

TEST_CASE("read cache: lines read once do not displace lines read often", "[tiering][cache]") {
  rig r(2, 16, new_extent_tier::capacity, 4);  // 4 lines: a window of 1, a main cache of 3
  volume& v = r.create("db", 8 * extent_blocks);
  write_blocks(r.loop, v, 0, pattern(8 * extent_bytes, 8));
  auto read_one = [&](std::uint64_t lba) {
    read_blocks(r.loop, v, lba, 1);
    r.loop.run_until([&] { return r.p->cache()->idle(); });
  };
  // Three hot lines, read in turn (never a stream), into the main cache.
  for (int round = 0; round < 4; ++round) {
    for (std::uint64_t l = 0; l < 3; ++l)
      read_one(l * line_blocks + 1 + static_cast<std::uint64_t>(round % 2));
  }
  // Twelve cold lines, each read once.
  for (std::uint64_t l = 0; l < 12; ++l) read_one((8 + 2 * l) * line_blocks + 2);
  const auto hits = v.counters().reads(source::cache).ios;
  for (std::uint64_t l = 0; l < 3; ++l) read_one(l * line_blocks + 3);
  CHECK(v.counters().reads(source::cache).ios == hits + 3);  // all three still cached
}

TEST_CASE("read cache: a write over a cached line updates it; a discard drops it; no read is stale",
          "[tiering][cache]") {
  rig r(2, 16, new_extent_tier::capacity, 64);
  volume& v = r.create("db", 8 * extent_blocks);
  write_blocks(r.loop, v, 0, pattern(extent_bytes, 1));
  read_twice_randomly(r, v, 5);
  REQUIRE(r.p->cache()->size_lines() >= 1);
  const auto fresh = pattern(block_size, 2);
  write_blocks(r.loop, v, 5, fresh);
  CHECK(r.p->cache()->counters().updates == 1);
  auto hits = v.counters().reads(source::cache).ios;
  CHECK(read_blocks(r.loop, v, 5, 1) == fresh);
  CHECK(v.counters().reads(source::cache).ios == hits + 1);  // still a hit, with the new data
  REQUIRE_FALSE(r.io(v, device::testing::io::discard(5, 1)));
  CHECK(r.p->cache()->counters().invalidations == 1);
  hits = v.counters().reads(source::cache).ios;
  CHECK(read_blocks(r.loop, v, 5, 1) == std::vector<std::byte>(block_size, std::byte{0}));
  CHECK(v.counters().reads(source::cache).ios == hits);
}

TEST_CASE(
    "read cache: two overlapping writes in flight never leave the older data in the cached line",
    "[tiering][cache]") {
  rig r(2, 16, new_extent_tier::capacity, 64);
  volume& v = r.create("db", 8 * extent_blocks);
  write_blocks(r.loop, v, 0, pattern(extent_bytes, 1));
  read_twice_randomly(r, v, 5);
  REQUIRE(
      r.p->cache()->holds(read_cache::key(v.record().id, 1), read_cache::key(v.record().id, 1)));
  const auto older = pattern(block_size, 2), newer = pattern(block_size, 3);
  // The capacity tier applies the two in order; the cache SSD serves the
  // first one's copy last (a queueing SSD may).
  r.cache_fault->set_reorder(std::chrono::milliseconds(5), 1.0);
  auto first = device::testing::io::make(device::op::write, 5, 1, block_size);
  std::memcpy(first->buffer.data(), older.data(), older.size());
  v.submit(first->req);
  r.cache_fault->set_reorder({}, 0);
  auto second = device::testing::io::make(device::op::write, 5, 1, block_size);
  std::memcpy(second->buffer.data(), newer.data(), newer.size());
  v.submit(second->req);
  r.loop.run_until([&] { return first->completions == 1 && second->completions == 1; });
  REQUIRE_FALSE(first->req.result);
  REQUIRE_FALSE(second->req.result);
  CHECK(read_blocks(r.loop, v, 5, 1) == newer);  // what the capacity tier holds
  persist_cache(r);
  r.restart();
  CHECK(read_blocks(r.loop, *r.p->find_volume("db"), 5, 1) == newer);
}

TEST_CASE("read cache: random reads, writes, discards and moves match a reference",
          "[tiering][cache]") {
  const auto seed = test_seed();
  INFO("seed " << seed);
  rig r(4, 16, new_extent_tier::capacity, 16);  // a small cache: evictions and slot reuse
  volume& v = r.create("db", 6 * extent_blocks);
  std::mt19937_64 random(seed);
  const std::uint64_t blocks = 6 * extent_blocks;
  std::vector<std::byte> model(blocks * block_size, std::byte{0});
  for (int step = 0; step < 1500; ++step) {
    const int what = static_cast<int>(random() % 100);
    // Hot spots: most I/O lands on a few lines, so the cache fills.
    const std::uint64_t lba =
        (random() % 4 == 0) ? random() % blocks : (random() % 6) * extent_blocks + random() % 8;
    const std::uint64_t n = std::min<std::uint64_t>(1 + random() % 6, blocks - lba);
    if (what < 60) {
      const auto got = read_blocks(r.loop, v, lba, n);
      INFO("step " << step << " read " << lba << "+" << n);
      REQUIRE(std::memcmp(got.data(), model.data() + lba * block_size, got.size()) == 0);
    } else if (what < 90) {
      const auto data = pattern(n * block_size, random());
      write_blocks(r.loop, v, lba, data);
      std::memcpy(model.data() + lba * block_size, data.data(), data.size());
    } else if (what < 95) {
      REQUIRE_FALSE(r.io(v, device::testing::io::discard(lba, n)));
      std::memset(model.data() + lba * block_size, 0, n * block_size);
    } else {
      const std::uint64_t e = random() % 6;
      if (const auto where = v.location(e)) {
        const tier to =
            r.p->tier_of(where->group) == tier::capacity ? tier::performance : tier::capacity;
        std::optional<std::error_code> moved;
        v.move_extent(e, to, [&](std::error_code ec) { moved = ec; });
        // Reads during the move.
        const auto got = read_blocks(r.loop, v, e * extent_blocks, extent_blocks);
        REQUIRE(std::memcmp(got.data(), model.data() + e * extent_blocks * block_size,
                            got.size()) == 0);
        r.loop.run_until([&] { return moved.has_value(); });
      }
    }
    if (step % 100 == 0) r.loop.run_until([&] { return r.p->cache()->idle(); });
  }
  CHECK(r.p->cache()->counters().fills > 0);
  CHECK(v.counters().reads(source::cache).ios > 0);
}

TEST_CASE("read cache: its index survives a restart, and a write made before it is not undone",
          "[tiering][cache]") {
  rig r(2, 16, new_extent_tier::capacity, 64);
  {
    volume& v = r.create("db", 8 * extent_blocks);
    write_blocks(r.loop, v, 0, pattern(extent_bytes, 1));
    read_twice_randomly(r, v, 5);
    read_twice_randomly(r, v, 9);
    persist_cache(r);
    // A write after the persist: its line's entry must be gone on disk
    // until a persist after the update.
    write_blocks(r.loop, v, 9, pattern(block_size, 3));
  }
  r.restart();
  volume& v = *r.p->find_volume("db");
  CHECK(r.p->cache()->size_lines() == 1);  // the line of block 5, warm
  const auto before = v.counters().reads(source::cache).ios;
  const auto want = pattern(extent_bytes, 1);
  CHECK(read_blocks(r.loop, v, 5, 1) ==
        std::vector<std::byte>(want.begin() + 5 * block_size, want.begin() + 6 * block_size));
  CHECK(v.counters().reads(source::cache).ios == before + 1);
  CHECK(read_blocks(r.loop, v, 9, 1) == pattern(block_size, 3));
}

TEST_CASE("read cache: a write to a line whose index entry is being deleted waits for the delete",
          "[tiering][cache]") {
  rig r(2, 16, new_extent_tier::capacity, 64);
  volume& v = r.create("db", 8 * extent_blocks);
  write_blocks(r.loop, v, 0, pattern(extent_bytes, 1));
  read_twice_randomly(r, v, 5);
  persist_cache(r);  // the line of block 5 is now named on disk
  // Two writes to the line in one turn: the first deletes its entry; the
  // second must not be acknowledged before a delete of its own is synced
  // (an acknowledged write with the old entry still on disk would read
  // stale after a crash).
  auto w1 = io::make(op::write, 5, 1, block_size);
  auto w2 = io::make(op::write, 6, 1, block_size);
  v.submit(w1->req);
  v.submit(w2->req);
  std::optional<std::size_t> store_writes_unseen_at_w2;
  while (w1->completions == 0 || w2->completions == 0) {
    REQUIRE(r.loop.step());
    if (w2->completions == 1 && !store_writes_unseen_at_w2)
      store_writes_unseen_at_w2 = r.store->in_flight();
  }
  REQUIRE_FALSE(w1->req.result);
  REQUIRE_FALSE(w2->req.result);
  CHECK(*store_writes_unseen_at_w2 == 0);
  // The first updates the line; the second, over a line still being
  // updated, drops it (two copies to one slot would race).
  CHECK(r.p->cache()->counters().updates == 1);
  CHECK(r.p->cache()->counters().invalidations == 1);
}

TEST_CASE("read cache: a failed write drops the lines it updated", "[tiering][cache]") {
  rig r(2, 16, new_extent_tier::capacity, 64);
  volume& v = r.create("db", 8 * extent_blocks);
  write_blocks(r.loop, v, 0, pattern(extent_bytes, 1));
  read_twice_randomly(r, v, 5);
  const extent_location where = *v.location(0);
  r.faults[where.group]->fail_writes(where.extent * extent_blocks, extent_blocks);
  CHECK(r.io(v, io::make(op::write, 5, 1, block_size)) == errc::media_error);
  CHECK(r.p->cache()->counters().invalidations == 1);
  const auto hits = v.counters().reads(source::cache).ios;
  read_blocks(r.loop, v, 5, 1);
  CHECK(v.counters().reads(source::cache).ios ==
        hits);  // from the capacity tier, whatever it holds
}

TEST_CASE(
    "read cache: an updated line is indexed again after a persist, and restarts warm with the new "
    "data",
    "[tiering][cache]") {
  rig r(2, 16, new_extent_tier::capacity, 64);
  {
    volume& v = r.create("db", 8 * extent_blocks);
    write_blocks(r.loop, v, 0, pattern(extent_bytes, 1));
    read_twice_randomly(r, v, 5);
    persist_cache(r);
    write_blocks(r.loop, v, 5, pattern(block_size, 7));
    persist_cache(r);
  }
  r.restart();
  volume& v = *r.p->find_volume("db");
  CHECK(r.p->cache()->size_lines() == 1);
  const auto hits = v.counters().reads(source::cache).ios;
  CHECK(read_blocks(r.loop, v, 5, 1) == pattern(block_size, 7));
  CHECK(v.counters().reads(source::cache).ios == hits + 1);
}

TEST_CASE("read cache: an entry is written only once the capacity tier holds its line durably too",
          "[tiering][cache]") {
  // Found by the simulation (seed 3129): a write updated a cached line on
  // the cache device and on the capacity tier, both in the disks' write
  // caches; the cache's persist flushed the cache device only and indexed
  // the line. A power cut then kept the new data in the cache and the old
  // on the capacity tier: reads answered the new, and once the line was
  // evicted (here: moved off the tier) the old -- a read going back in time.
  rig_shape shape;
  shape.performance_extents = 2;
  shape.new_extents = new_extent_tier::capacity;
  shape.cache_lines = 64;
  shape.volatile_write_caches = true;
  rig r(shape);
  {
    volume& v = r.create("db", 8 * extent_blocks);
    write_blocks(r.loop, v, 0, pattern(extent_bytes, 1));
    flush(r.loop, v);
    read_twice_randomly(r, v, 5);
    persist_cache(r);
    write_blocks(r.loop, v, 5, pattern(block_size, 7));  // updates the cached line; no flush
    persist_cache(r);                                    // indexes it again
  }
  // A power cut: the capacity disks keep only what a flush covered.
  r.store->drain();
  const std::string image = (r.dir.path() / "crash-image").string();
  REQUIRE(r.store->checkpoint(image));
  std::size_t settled = 0;
  for (auto& f : r.faults) f->power_cut(power_loss::drop, [&] { ++settled; });
  r.loop.run_until([&] { return settled == r.faults.size(); });
  r.close();
  std::filesystem::remove_all(r.store_path());
  std::filesystem::rename(image, r.store_path());
  for (auto& f : r.faults) f->power_on();
  r.open();
  volume& v = *r.p->find_volume("db");
  const auto first = read_blocks(r.loop, v, 5, 1);  // the cache answers, if it kept the line
  CHECK((first == pattern(block_size, 7) ||
         first == std::vector<std::byte>(pattern(extent_bytes, 1).begin() + 5 * block_size,
                                         pattern(extent_bytes, 1).begin() + 6 * block_size)));
  // What the capacity tier holds must be what the cache answered: moved
  // to the performance tier, the extent is copied from there.
  std::optional<std::error_code> moved;
  v.move_extent(0, tier::performance, [&](std::error_code ec) { moved = ec; });
  r.loop.run_until([&] { return moved.has_value(); });
  REQUIRE_FALSE(*moved);
  CHECK(read_blocks(r.loop, v, 5, 1) == first);
}

TEST_CASE("read cache: a failed cache device disables the cache and reads go on from the HDDs",
          "[tiering][cache]") {
  rig r(2, 16, new_extent_tier::capacity, 64);
  volume& v = r.create("db", 8 * extent_blocks);
  const auto data = pattern(extent_bytes, 4);
  write_blocks(r.loop, v, 0, data);
  read_twice_randomly(r, v, 5);
  REQUIRE(r.p->cache()->size_lines() >= 1);
  r.cache_fault->fail();
  // The read meets the failed device, and is served from the capacity tier.
  CHECK(read_blocks(r.loop, v, 5, 1) ==
        std::vector<std::byte>(data.begin() + 5 * block_size, data.begin() + 6 * block_size));
  CHECK_FALSE(r.p->cache()->enabled());
  CHECK(r.p->cache()->counters().device_errors == 1);
  // Writes and reads go on.
  write_blocks(r.loop, v, 5, pattern(block_size, 5));
  CHECK(read_blocks(r.loop, v, 5, 1) == pattern(block_size, 5));
}

TEST_CASE("read cache: sequential streams are not admitted", "[tiering][cache]") {
  rig r(2, 64, new_extent_tier::capacity, 512);
  volume& v = r.create("db", 64 * extent_blocks);
  write_blocks(r.loop, v, 0, pattern(64 * extent_bytes, 6));
  // A 4 MiB scan, twice, in 64 KiB reads: 256 lines, each read twice.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint64_t lba = 0; lba < 64 * extent_blocks; lba += 16)
      read_blocks(r.loop, v, lba, 16);
  }
  r.loop.run_until([&] { return r.p->cache()->idle(); });
  // Only each pass's first MiB, before the stream is recognised, may count.
  const std::uint64_t first_mib_lines = (1 << 20) / (line_blocks * block_size);
  CHECK(r.p->cache()->counters().fills <= first_mib_lines);
}

TEST_CASE("read cache: bad settings get a clear error", "[tiering][cache]") {
  rig r(2, 16, new_extent_tier::capacity, 64);
  r.close();
  r.options.read_cache.policy = "mru";
  auto s =
      metadata_store::open((r.dir.path() / "metadata").string(), r.loop.context.get_executor());
  REQUIRE(s);
  auto opened = pool::open(r.loop.context.get_executor(), **s, r.groups, r.options);
  REQUIRE_FALSE(opened);
  CHECK(opened.error().message.find("unknown replacement policy 'mru'") != std::string::npos);
  r.options.read_cache.policy = "lru";
  r.options.read_cache.line_bytes = 3 * block_size;
  opened = pool::open(r.loop.context.get_executor(), **s, r.groups, r.options);
  REQUIRE_FALSE(opened);
  CHECK(opened.error().message.find("line size") != std::string::npos);
}

TEST_CASE(
    "read cache: a deleted volume's lines are dropped, and a volume given its id after a restart "
    "does not read them",
    "[tiering][cache][delete]") {
  rig r(2, 16, new_extent_tier::capacity, 64);
  volume& old = r.create("old", 8 * extent_blocks);
  const std::uint32_t id = old.record().id;
  write_blocks(r.loop, old, 0, pattern(extent_bytes, 1));
  read_twice_randomly(r, old, 5);
  persist_cache(r);  // the line of block 5 is named on disk
  REQUIRE(r.p->cache()->size_lines() == 1);
  // A fill in flight, slow to reach the cache device, when the delete runs.
  r.cache_fault->set_delay(std::chrono::milliseconds(50), 1.0);
  read_blocks(r.loop, old, 2 * extent_blocks + 9, 1);
  read_blocks(r.loop, old, 9, 1);
  REQUIRE_FALSE(r.p->cache()->idle());
  REQUIRE(old.idle());

  REQUIRE(r.delete_volume("old"));
  CHECK(r.p->cache()->size_lines() == 0);
  r.loop.run_until([&] { return r.p->cache()->idle(); });
  CHECK(r.p->cache()->size_lines() == 0);  // the fill was cancelled, not indexed
  CHECK(r.p->cache()->counters().cancelled_fills >= 1);
  r.cache_fault->set_delay({}, 0);
  persist_cache(r);

  r.restart();
  CHECK(r.p->cache()->size_lines() == 0);  // no index entry survived
  volume& fresh = r.create("new", 8 * extent_blocks);
  REQUIRE(fresh.record().id == id);  // what makes a surviving entry dangerous
  // Extent 0 is mapped again (on the old volume's extent, perhaps), so
  // reads of it may go through the cache.
  write_blocks(r.loop, fresh, 0, pattern(block_size, 2));
  CHECK(read_blocks(r.loop, fresh, 5, 1) == std::vector<std::byte>(block_size, std::byte{0}));
  CHECK(read_blocks(r.loop, fresh, 9, 1) == std::vector<std::byte>(block_size, std::byte{0}));
  CHECK(fresh.counters().reads(source::cache).ios == 0);
}

}  // namespace
}  // namespace strata::tiering
