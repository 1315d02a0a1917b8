// Thin volumes over a pool with a real RocksDB store: allocation on first
// write, zeros for what was never written, discard, restart, and the bad
// input a pool must refuse.
#include "tiering/volume.h"

#include <cstring>
#include <map>
#include <optional>
#include <random>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "tests/raid/device/harness.h"
#include "tests/tiering/rig.h"
#include "tiering/pool.h"

namespace strata::tiering {
namespace {
using namespace testing;

using namespace device;
using namespace device::testing;

TEST_CASE("volume: a never-written extent reads as zeros without touching a disk",
          "[tiering][volume]") {
  rig r;
  volume& v = r.create("db", 8 * extent_blocks);
  for (auto& f : r.faults) f->fail();  // any disk I/O now fails
  const auto got = read_blocks(r.loop, v, 3, 2 * extent_blocks);
  CHECK(got == std::vector<std::byte>(got.size(), std::byte{0}));
}

TEST_CASE("volume: the first write allocates its extent, zeros around the data",
          "[tiering][volume]") {
  rig r;
  volume& v = r.create("db", 8 * extent_blocks);
  const std::uint64_t free_before =
      r.p->free_extents(tier::performance) + r.p->free_extents(tier::capacity);
  const auto data = pattern(2 * block_size, test_seed());
  write_blocks(r.loop, v, 3 * extent_blocks + 5, data);
  CHECK(v.mapped_extents() == 1);
  CHECK(r.p->free_extents(tier::performance) + r.p->free_extents(tier::capacity) ==
        free_before - 1);
  auto got = read_blocks(r.loop, v, 3 * extent_blocks, extent_blocks);
  std::vector<std::byte> want(extent_bytes, std::byte{0});
  std::memcpy(want.data() + 5 * block_size, data.data(), data.size());
  CHECK(got == want);
  // A second write to the extent goes where the first went.
  write_blocks(r.loop, v, 3 * extent_blocks, pattern(block_size, 7));
  CHECK(v.mapped_extents() == 1);
}

TEST_CASE("volume: concurrent first writes to one extent allocate it once", "[tiering][volume]") {
  rig r;
  volume& v = r.create("db", 4 * extent_blocks);
  auto a = io::make(op::write, extent_blocks + 1, 1, block_size);
  auto b = io::make(op::write, extent_blocks + 9, 2, block_size);
  std::memset(a->buffer.data(), 0xaa, a->buffer.size());
  std::memset(b->buffer.data(), 0xbb, b->buffer.size());
  v.submit(a->req);
  v.submit(b->req);
  r.loop.run_until([&] { return a->completions == 1 && b->completions == 1; });
  REQUIRE_FALSE(a->req.result);
  REQUIRE_FALSE(b->req.result);
  CHECK(v.mapped_extents() == 1);
  const auto got = read_blocks(r.loop, v, extent_blocks, extent_blocks);
  for (std::uint64_t blk = 0; blk < extent_blocks; ++blk) {
    const std::byte want = blk == 1                  ? std::byte{0xaa}
                           : (blk == 9 || blk == 10) ? std::byte{0xbb}
                                                     : std::byte{0};
    INFO("block " << blk);
    CHECK(got[blk * block_size] == want);
  }
}

TEST_CASE("volume: discarding whole extents returns them; a partial discard reads back as zeros",
          "[tiering][volume]") {
  rig r;
  volume& v = r.create("db", 8 * extent_blocks);
  write_blocks(r.loop, v, 0, pattern(3 * extent_bytes, test_seed()));
  const std::uint64_t free_before =
      r.p->free_extents(tier::performance) + r.p->free_extents(tier::capacity);
  // Extent 0 whole, and the first half of extent 1.
  REQUIRE_FALSE(r.io(v, io::discard(0, extent_blocks + extent_blocks / 2)));
  CHECK(v.mapped_extents() == 2);
  CHECK(r.p->free_extents(tier::performance) + r.p->free_extents(tier::capacity) ==
        free_before + 1);
  const auto got = read_blocks(r.loop, v, 0, extent_blocks + extent_blocks / 2);
  CHECK(got == std::vector<std::byte>(got.size(), std::byte{0}));
}

TEST_CASE("volume: allocation_at reports never-written and unmapped extents deallocated, in runs",
          "[tiering][volume]") {
  rig r;
  volume& v = r.create("db", 6 * extent_blocks);
  using device::allocation;
  auto run = [&](std::uint64_t lba, std::uint64_t max) { return v.allocation_at(lba, max); };
  CHECK(run(0, 6 * extent_blocks).state == allocation::deallocated);
  CHECK(run(0, 6 * extent_blocks).block_count == 6 * extent_blocks);  // one run: the whole volume
  write_blocks(r.loop, v, 2 * extent_blocks + 3, pattern(block_size, 1));
  write_blocks(r.loop, v, 3 * extent_blocks, pattern(block_size, 2));
  CHECK(run(1, 6 * extent_blocks - 1).block_count ==
        2 * extent_blocks - 1);  // to the first mapped extent
  CHECK(run(2 * extent_blocks + 5, 4 * extent_blocks - 5).state == allocation::mapped);
  CHECK(run(2 * extent_blocks + 5, 4 * extent_blocks - 5).block_count ==
        2 * extent_blocks - 5);                       // extents 2 and 3
  CHECK(run(2 * extent_blocks, 3).block_count == 3);  // never past max_blocks
  // A whole-extent discard unmaps; a partial one leaves the extent mapped.
  REQUIRE_FALSE(r.io(v, io::discard(2 * extent_blocks, extent_blocks)));
  REQUIRE_FALSE(r.io(v, io::discard(3 * extent_blocks, 1)));
  CHECK(run(2 * extent_blocks, extent_blocks).state == allocation::deallocated);
  CHECK(run(3 * extent_blocks, extent_blocks).state == allocation::mapped);
}

TEST_CASE("volume: a read in flight keeps a discarded extent from being reused",
          "[tiering][volume]") {
  rig r(1, 4);
  volume& v = r.create("db", 2 * extent_blocks, affinity::archive);
  write_blocks(r.loop, v, 0, pattern(extent_bytes, test_seed()));
  for (auto& f : r.faults) f->set_delay(std::chrono::milliseconds(50), 1.0);
  auto read = io::make(op::read, 0, extent_blocks, block_size);
  v.submit(read->req);
  auto discard = io::discard(0, extent_blocks);
  v.submit(discard->req);
  r.loop.run_until([&] { return discard->completions == 1; });
  REQUIRE_FALSE(discard->req.result);
  REQUIRE(read->completions == 0);         // delayed 50 ms; the discard needed no disk I/O
  CHECK(r.p->quarantined_extents() == 1);  // the read may still be reading it
  r.loop.run_until([&] { return read->completions == 1; });
  CHECK(r.p->quarantined_extents() == 0);
}

TEST_CASE("volume: random reads, writes and discards match a reference, across a restart",
          "[tiering][volume]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937_64 random(seed);
  rig r;
  const std::uint64_t blocks = 10 * extent_blocks;
  r.create("db", blocks);
  std::vector<std::byte> reference(blocks * block_size, std::byte{0});
  for (int round = 0; round < 2; ++round) {
    volume& v = *r.p->find_volume("db");
    for (int i = 0; i < 150; ++i) {
      const std::uint64_t n =
          std::uniform_int_distribution<std::uint64_t>(1, 3 * extent_blocks)(random);
      const std::uint64_t lba = std::uniform_int_distribution<std::uint64_t>(0, blocks - n)(random);
      switch (random() % 4) {
        case 0:
        case 1: {
          const auto data = pattern(n * block_size, random());
          write_blocks(r.loop, v, lba, data);
          std::memcpy(reference.data() + lba * block_size, data.data(), data.size());
          break;
        }
        case 2:
          REQUIRE_FALSE(r.io(v, io::discard(lba, n)));
          std::memset(reference.data() + lba * block_size, 0, n * block_size);
          break;
        default: {
          const auto got = read_blocks(r.loop, v, lba, n);
          REQUIRE(std::memcmp(got.data(), reference.data() + lba * block_size, got.size()) == 0);
        }
      }
    }
    flush(r.loop, v);
    REQUIRE(read_blocks(r.loop, v, 0, blocks) == reference);
    const std::uint64_t mapped = v.mapped_extents();
    const std::uint64_t used =
        r.p->capacity_extents(tier::performance) + r.p->capacity_extents(tier::capacity) -
        r.p->free_extents(tier::performance) - r.p->free_extents(tier::capacity);
    CHECK(used == mapped);
    r.restart();
    volume& again = *r.p->find_volume("db");
    CHECK(again.mapped_extents() == mapped);
    REQUIRE(read_blocks(r.loop, again, 0, blocks) == reference);
  }
}

TEST_CASE("volume: new extents go to the performance tier above its reserve, archive volumes never",
          "[tiering][volume]") {
  rig r(10, 16);  // reserve 10%: one performance extent stays free
  volume& hot = r.create("hot", 16 * extent_blocks);
  for (std::uint64_t e = 0; e < 12; ++e)
    write_blocks(r.loop, hot, e * extent_blocks, pattern(block_size, e));
  std::uint64_t on_performance = 0;
  for (std::uint64_t e = 0; e < 12; ++e) {
    on_performance += r.p->tier_of(hot.location(e)->group) == tier::performance ? 1 : 0;
  }
  CHECK(on_performance == 9);
  CHECK(r.p->free_extents(tier::performance) == 1);
  volume& cold = r.create("cold", 4 * extent_blocks, affinity::archive);
  write_blocks(r.loop, cold, 0, pattern(block_size, 1));
  CHECK(r.p->tier_of(cold.location(0)->group) == tier::capacity);
  volume& pinned = r.create("pinned", 4 * extent_blocks, affinity::performance);
  write_blocks(r.loop, pinned, 0, pattern(block_size, 2));
  CHECK(r.p->tier_of(pinned.location(0)->group) == tier::performance);  // the reserve is for it too
}

TEST_CASE("volume: a full pool fails the write with no_space and keeps every written block",
          "[tiering][volume]") {
  rig r(1, 2);  // 5 extents in all
  volume& v = r.create("db", 8 * extent_blocks);
  const auto data = pattern(5 * extent_bytes, test_seed());
  write_blocks(r.loop, v, 0, data);
  auto more = io::make(op::write, 6 * extent_blocks, 1, block_size);
  CHECK(r.io(v, std::move(more)) == make_error_code(errc::no_space));
  // Writes to extents it has still work.
  write_blocks(r.loop, v, 2, std::span(data).subspan(2 * block_size, block_size));
  CHECK(read_blocks(r.loop, v, 0, 5 * extent_blocks) == data);
}

TEST_CASE(
    "volume: a full backing store stops the pool's writes, fails no group, and writes resume once "
    "space is back",
    "[tiering][volume][no_space]") {
  rig r;
  std::vector<std::string> stops;  // the events: a reason, or empty when writes resume
  r.options.on_writes_stopped = [&](const std::string& why) { stops.push_back(why); };
  r.restart();
  volume& v = r.create("db", 8 * extent_blocks);
  const auto data = pattern(extent_bytes, test_seed());
  write_blocks(r.loop, v, 0, data);
  const std::uint16_t g = v.location(0)->group;

  // The group's store fills: a write to a new extent there (space the
  // store never gave) fails with no_space, and the pool stops taking
  // writes, to every extent, before they reach any disk.
  r.faults[g]->set_full(true);
  CHECK(r.io(v, io::make(op::write, extent_blocks + 1, 1, block_size)) ==
        make_error_code(errc::no_space));
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].find("full") != std::string::npos);
  CHECK(r.p->writes_stopped() == stops[0]);
  const auto refused = r.faults[g]->counters().writes_refused_full;
  CHECK(r.io(v, io::make(op::write, 5 * extent_blocks, 1, block_size)) ==
        make_error_code(errc::no_space));
  CHECK(r.io(v, io::discard(2, 1)) == make_error_code(errc::no_space));
  CHECK(r.faults[g]->counters().writes_refused_full == refused);
  // Nothing is given up: reads and flushes go on, the volume stays online.
  CHECK(r.p->group_usable(g));
  CHECK(v.online());
  CHECK(read_blocks(r.loop, v, 0, extent_blocks) == data);
  flush(r.loop, v);
  std::optional<std::error_code> moved;
  v.move_extent(0, r.p->tier_of(g) == tier::performance ? tier::capacity : tier::performance,
                [&](std::error_code ec) { moved = ec; });
  r.loop.run_until([&] { return moved.has_value(); });
  CHECK(*moved == make_error_code(errc::no_space));

  // The pool tries again after the retry interval: still full, it stops again.
  r.loop.clock.advance_by(r.options.no_space_retry_interval);
  r.loop.settle();
  REQUIRE(stops.size() == 2);
  CHECK(stops[1].empty());
  CHECK(r.io(v, io::make(op::write, extent_blocks + 1, 1, block_size)) ==
        make_error_code(errc::no_space));
  CHECK(stops.size() == 3);
  // Space is freed: after the next interval, writes succeed.
  r.faults[g]->set_full(false);
  r.loop.clock.advance_by(r.options.no_space_retry_interval);
  r.loop.settle();
  CHECK(r.p->writes_stopped().empty());
  const auto more = pattern(block_size, 5);
  write_blocks(r.loop, v, extent_blocks + 1, more);
  CHECK(read_blocks(r.loop, v, extent_blocks + 1, 1) == more);
  CHECK(read_blocks(r.loop, v, 0, extent_blocks) == data);
}

TEST_CASE("volume: bad input gets a clear error", "[tiering][volume]") {
  rig r(2, 4);  // 10 extents: 640 KiB; overcommit 2x allows 1.25 MiB of volumes
  auto message = [&](const volume_spec& spec, errc code = errc::invalid_argument) {
    auto v = r.try_create(spec);
    REQUIRE_FALSE(v);
    CHECK(v.error().code == make_error_code(code));
    return v.error().message;
  };
  // Past the overcommit limit the pool is out of space (the API's RESOURCE_EXHAUSTED).
  CHECK(message({"big", block_size, 400, affinity::automatic}, errc::no_space).find("overcommit") !=
        std::string::npos);
  CHECK(message({"", block_size, 1, affinity::automatic}).find("name") != std::string::npos);
  CHECK(message({"odd", 1024, 1, affinity::automatic}).find("512 or 4096") != std::string::npos);
  CHECK(message({"small", 512, 8, affinity::automatic}).find("cannot be smaller") !=
        std::string::npos);
  CHECK(message({"none", block_size, 0, affinity::automatic}).find("at least one") !=
        std::string::npos);
  volume& v = r.create("db", 16);
  CHECK(message({"db", block_size, 16, affinity::automatic}).find("exists") != std::string::npos);
  CHECK_FALSE(parse_affinity("warm"));
  CHECK(parse_affinity("archive") == affinity::archive);
  // Past the end of the volume.
  CHECK(r.io(v, io::make(op::write, 15, 2, block_size)) == make_error_code(errc::out_of_range));
  CHECK(r.io(v, io::make(op::read, 16, 1, block_size)) == make_error_code(errc::out_of_range));
}

TEST_CASE("volume: heat survives a restart once persisted; a discard clears it",
          "[tiering][volume][heat]") {
  rig r;
  volume& v = r.create("db", 8 * extent_blocks);
  for (int i = 0; i < 6; ++i)
    write_blocks(r.loop, v, 2 * extent_blocks + i, pattern(block_size, i));
  for (int i = 0; i < 3; ++i) read_blocks(r.loop, v, 5 * extent_blocks + 2 * i, 1);
  CHECK(v.heat().score(2) == Approx(6));
  std::optional<std::error_code> persisted;
  r.p->persist_heat([&](std::error_code ec) { persisted = ec; });
  r.loop.run_until([&] { return persisted.has_value(); });
  REQUIRE_FALSE(*persisted);
  r.restart();
  volume& again = *r.p->find_volume("db");
  CHECK(again.heat().score(2) == Approx(6));
  CHECK(again.heat().score(5) == Approx(3));
  CHECK(again.heat().heat(5).read_bytes == Approx(3 * block_size));
  REQUIRE_FALSE(r.io(again, io::discard(2 * extent_blocks, extent_blocks)));
  CHECK(again.heat().score(2) == 0);
}

std::error_code move(rig& r, volume& v, std::uint64_t extent, tier to) {
  std::optional<std::error_code> done;
  v.move_extent(extent, to, [&](std::error_code ec) { done = ec; });
  r.loop.run_until([&] { return done.has_value(); });
  return *done;
}

TEST_CASE("migration: an extent moves between tiers with its data; the old place is freed",
          "[tiering][migration]") {
  rig r(4, 8);
  volume& v = r.create("db", 4 * extent_blocks, affinity::archive);
  const auto data = pattern(2 * extent_bytes, test_seed());
  write_blocks(r.loop, v, 0, data);
  REQUIRE(r.p->tier_of(v.location(1)->group) == tier::capacity);
  const std::uint64_t capacity_free = r.p->free_extents(tier::capacity);
  REQUIRE_FALSE(move(r, v, 1, tier::performance));
  CHECK(r.p->tier_of(v.location(1)->group) == tier::performance);
  CHECK(r.p->free_extents(tier::capacity) == capacity_free + 1);
  CHECK(read_blocks(r.loop, v, 0, 2 * extent_blocks) == data);
  REQUIRE_FALSE(move(r, v, 1, tier::capacity));  // and back
  CHECK(read_blocks(r.loop, v, 0, 2 * extent_blocks) == data);
  REQUIRE_FALSE(move(r, v, 0, tier::performance));
  r.restart();
  volume& again = *r.p->find_volume("db");
  CHECK(r.p->tier_of(again.location(0)->group) == tier::performance);
  CHECK(r.p->tier_of(again.location(1)->group) == tier::capacity);
  CHECK(read_blocks(r.loop, again, 0, 2 * extent_blocks) == data);
}

TEST_CASE("migration: refusals change nothing", "[tiering][migration]") {
  rig r(1, 4);
  volume& v = r.create("db", 8 * extent_blocks, affinity::archive);
  write_blocks(r.loop, v, 0, pattern(3 * extent_bytes, 1));
  CHECK(move(r, v, 5, tier::performance) ==
        make_error_code(errc::invalid_argument));                                   // never written
  CHECK(move(r, v, 0, tier::capacity) == make_error_code(errc::invalid_argument));  // there already
  REQUIRE_FALSE(move(r, v, 0, tier::performance));
  CHECK(move(r, v, 1, tier::performance) ==
        make_error_code(errc::no_space));  // its one extent is taken
  CHECK(r.p->tier_of(v.location(1)->group) == tier::capacity);
}

TEST_CASE("migration: writes and discards during a move are not lost", "[tiering][migration]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937_64 random(seed);
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    rig r(4, 8);
    volume& v = r.create("db", 2 * extent_blocks, affinity::archive);
    std::vector<std::byte> reference = pattern(2 * extent_bytes, random());
    write_blocks(r.loop, v, 0, reference);
    // Slow, uneven devices, so writes land before, during and after each pass.
    for (auto& f : r.faults) f->set_delay(std::chrono::microseconds(200 + random() % 800), 0.5);
    std::optional<std::error_code> moved;
    v.move_extent(0, tier::performance, [&](std::error_code ec) { moved = ec; });
    std::vector<std::unique_ptr<io>> writes;
    const int n = 1 + static_cast<int>(random() % 12);
    for (int i = 0; i < n; ++i) {
      const std::uint64_t blocks = 1 + random() % 4;
      const std::uint64_t lba = random() % (extent_blocks - blocks + 1);
      auto w = io::make(op::write, lba, blocks, block_size);
      const auto bytes = pattern(blocks * block_size, random());
      std::memcpy(w->buffer.data(), bytes.data(), bytes.size());
      std::memcpy(reference.data() + lba * block_size, bytes.data(), bytes.size());
      v.submit(w->req);
      writes.push_back(std::move(w));
      // Let the move run a little between writes.
      for (std::uint64_t k = random() % 6; k > 0; --k) {
        if (auto next = r.loop.clock.next_deadline()) r.loop.clock.advance_to(*next);
        r.loop.settle();
      }
    }
    r.loop.run_until([&] {
      return moved.has_value() &&
             std::all_of(writes.begin(), writes.end(), [](auto& w) { return w->completions == 1; });
    });
    REQUIRE_FALSE(*moved);
    for (auto& w : writes) REQUIRE_FALSE(w->req.result);
    CHECK(r.p->tier_of(v.location(0)->group) == tier::performance);
    REQUIRE(read_blocks(r.loop, v, 0, 2 * extent_blocks) == reference);
    // A whole-extent discard issued mid-move waits for it, then unmaps.
    std::optional<std::error_code> back;
    v.move_extent(0, tier::capacity, [&](std::error_code ec) { back = ec; });
    auto discard = io::discard(0, extent_blocks);
    v.submit(discard->req);
    r.loop.run_until([&] { return back.has_value() && discard->completions == 1; });
    REQUIRE_FALSE(*back);
    REQUIRE_FALSE(discard->req.result);
    CHECK_FALSE(v.location(0));
  }
}

TEST_CASE("pool: reopened over different groups, it refuses with the difference",
          "[tiering][pool]") {
  rig r;
  r.create("db", 16);
  r.close();
  const auto original = r.groups;
  r.groups.pop_back();
  auto s =
      metadata_store::open((r.dir.path() / "metadata").string(), r.loop.context.get_executor());
  REQUIRE(s);
  auto opened = pool::open(r.loop.context.get_executor(), **s, r.groups, r.options);
  REQUIRE_FALSE(opened);
  CHECK(opened.error().message.find("3 groups, but 2 were given") != std::string::npos);
  std::swap(r.groups[0], r.groups[1]);
  r.groups.push_back(r.groups[0]);
  opened = pool::open(r.loop.context.get_executor(), **s, r.groups, r.options);
  REQUIRE_FALSE(opened);
  CHECK(opened.error().message.find("group 0 was a performance group") != std::string::npos);
  // More groups than recorded (an add finished at open), but a recorded
  // one differs: refused, and the record is left as it was.
  auto wrong = original;          // performance, capacity, capacity
  std::swap(wrong[0], wrong[1]);  // group 0 differs
  wrong.push_back(original[1]);   // and a fourth
  opened = pool::open(r.loop.context.get_executor(), **s, wrong, r.options);
  REQUIRE_FALSE(opened);
  CHECK(opened.error().message.find("group 0 was a performance group") != std::string::npos);
  opened = pool::open(r.loop.context.get_executor(), **s, original, r.options);
  INFO((opened ? std::string() : opened.error().message));
  CHECK(opened);
}

std::uint64_t free_total(rig& r) {
  return r.p->free_extents(tier::performance) + r.p->free_extents(tier::capacity);
}

TEST_CASE(
    "pool: a deleted volume's extents are freed once the I/O in flight drains, and its records are "
    "gone",
    "[tiering][pool][delete]") {
  rig r(2, 4);  // 10 extents: 640 KiB; overcommit 2x allows 20 extents of volumes
  volume& keep = r.create("keep", 2 * extent_blocks, affinity::archive);
  volume& doomed = r.create("doomed", 16 * extent_blocks);
  const std::uint32_t id = doomed.record().id;
  const auto kept = pattern(extent_bytes, 1);
  write_blocks(r.loop, keep, 0, kept);
  for (std::uint64_t e = 0; e < 4; ++e)
    write_blocks(r.loop, doomed, e * 3 * extent_blocks, pattern(block_size, e + 2));
  read_blocks(r.loop, doomed, extent_blocks + 5, 1);  // heat on an extent never written, too
  std::optional<std::error_code> persisted;
  r.p->persist_heat([&](std::error_code ec) { persisted = ec; });
  r.loop.run_until([&] { return persisted.has_value(); });
  REQUIRE_FALSE(*persisted);
  REQUIRE(r.keys_of_volume(column::extent_map, id) == 4);
  REQUIRE(r.keys_of_volume(column::heat, id) == 5);
  // Full, by the overcommit sum: a volume as big as `doomed` does not fit.
  auto big = r.try_create({"big", block_size, 16 * extent_blocks, affinity::automatic});
  REQUIRE_FALSE(big);
  CHECK(big.error().code == make_error_code(errc::no_space));
  const std::uint64_t free_before = free_total(r);

  // A read of another volume in flight: it began before the delete, and
  // the freed extents wait for it.
  for (auto& f : r.faults) f->set_delay(std::chrono::milliseconds(50), 1.0);
  auto read = io::make(op::read, 0, extent_blocks, block_size);
  keep.submit(read->req);
  const auto deleted = r.delete_volume("doomed");
  INFO((deleted ? std::string() : deleted.error().message));
  REQUIRE(deleted);
  REQUIRE(read->completions == 0);  // delayed 50 ms; the delete needed no disk I/O
  CHECK(r.p->quarantined_extents() == 4);
  CHECK(free_total(r) == free_before);
  CHECK(r.p->find_volume("doomed") == nullptr);
  CHECK(r.p->volumes() == std::vector<volume*>{&keep});
  r.loop.run_until([&] { return read->completions == 1; });
  REQUIRE_FALSE(read->req.result);
  CHECK(std::memcmp(read->buffer.data(), kept.data(), kept.size()) == 0);
  CHECK(r.p->quarantined_extents() == 0);
  CHECK(free_total(r) == free_before + 4);
  for (auto& f : r.faults) f->set_delay({}, 0);

  // Its size left the overcommit sum.
  volume& again = r.create("doomed", 16 * extent_blocks);
  CHECK(again.record().id != id);  // no id is reused before a restart
  CHECK(again.mapped_extents() == 0);
  REQUIRE(r.delete_volume("doomed"));

  r.restart();
  CHECK(r.p->find_volume("doomed") == nullptr);
  REQUIRE(r.p->find_volume("keep") != nullptr);
  CHECK(read_blocks(r.loop, *r.p->find_volume("keep"), 0, extent_blocks) == kept);
  CHECK(free_total(r) == free_before + 4);
  CHECK_FALSE(r.store->get(column::pool, keys::volume(id)));
  CHECK(r.keys_of_volume(column::extent_map, id) == 0);
  CHECK(r.keys_of_volume(column::heat, id) == 0);
  CHECK(r.keys_of_volume(column::extent_map, r.p->find_volume("keep")->record().id) == 1);
}

TEST_CASE("pool: a new volume on a deleted volume's extents reads zeros, not its data",
          "[tiering][pool][delete]") {
  rig r(1, 2);  // 5 extents in all
  volume& old = r.create("old", 5 * extent_blocks);
  write_blocks(r.loop, old, 0, pattern(5 * extent_bytes, test_seed()));
  REQUIRE(free_total(r) == 0);
  REQUIRE(r.delete_volume("old"));
  REQUIRE(free_total(r) == 5);
  for (std::uint64_t round = 0; round < 2; ++round) {
    // The second round after a restart, on the extents the first round's
    // volume wrote (and with the first volume's id, free again).
    INFO("round " << round);
    volume& fresh = r.create("new", 5 * extent_blocks);
    const std::uint64_t block = 3 + round;
    for (std::uint64_t e = 0; e < 5; ++e) {
      write_blocks(r.loop, fresh, e * extent_blocks + block, pattern(block_size, 10 * round + e));
    }
    CHECK(free_total(r) == 0);  // every extent the deleted volume had
    for (std::uint64_t e = 0; e < 5; ++e) {
      INFO("extent " << e);
      std::vector<std::byte> want(extent_bytes, std::byte{0});
      const auto data = pattern(block_size, 10 * round + e);
      std::memcpy(want.data() + block * block_size, data.data(), data.size());
      CHECK(read_blocks(r.loop, fresh, e * extent_blocks, extent_blocks) == want);
    }
    REQUIRE(r.delete_volume("new"));
    r.restart();
  }
}

TEST_CASE("pool: a delete is refused, changing nothing, for no such volume or one not idle",
          "[tiering][pool][delete]") {
  rig r(4, 8);
  volume& v = r.create("db", 4 * extent_blocks, affinity::archive);
  const auto data = pattern(2 * extent_bytes, test_seed());
  write_blocks(r.loop, v, 0, data);
  const std::uint64_t free_before = free_total(r);

  auto missing = r.delete_volume("nope");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == make_error_code(errc::not_found));
  CHECK(missing.error().message.find("'nope'") != std::string::npos);

  // A write in flight.
  for (auto& f : r.faults) f->set_delay(std::chrono::milliseconds(50), 1.0);
  auto write = io::make(op::write, 1, 1, block_size);
  std::memset(write->buffer.data(), 0x5a, block_size);
  v.submit(write->req);
  auto busy = r.delete_volume("db");
  REQUIRE_FALSE(busy);
  CHECK(busy.error().code == make_error_code(errc::busy));
  CHECK(busy.error().message.find("in flight") != std::string::npos);
  r.loop.run_until([&] { return write->completions == 1; });
  REQUIRE_FALSE(write->req.result);
  for (auto& f : r.faults) f->set_delay({}, 0);

  // An extent move in flight (the migrator's).
  std::optional<std::error_code> moved;
  v.move_extent(0, tier::performance, [&](std::error_code ec) { moved = ec; });
  busy = r.delete_volume("db");
  REQUIRE_FALSE(busy);
  CHECK(busy.error().code == make_error_code(errc::busy));
  r.loop.run_until([&] { return moved.has_value(); });
  REQUIRE_FALSE(*moved);

  // Nothing changed: the volume serves, with its data and its extents.
  REQUIRE(r.p->find_volume("db") == &v);
  CHECK(v.online());
  CHECK(free_total(r) == free_before);
  auto want = data;
  std::memset(want.data() + block_size, 0x5a, block_size);
  CHECK(read_blocks(r.loop, v, 0, 2 * extent_blocks) == want);

  // While its delete is written: a second delete and a create of the same
  // name are refused, and the volume refuses requests.
  std::optional<rig::outcome> first, second;
  r.p->delete_volume("db", [&](rig::outcome x) { first = std::move(x); });
  r.p->delete_volume("db", [&](rig::outcome x) { second = std::move(x); });
  // Submitted before anything runs: once the delete is done, `v` is gone.
  auto late = io::make(op::write, 0, 1, block_size);
  v.submit(late->req);
  auto same_name = r.try_create({"db", block_size, extent_blocks, affinity::automatic});
  r.loop.run_until(
      [&] { return first.has_value() && second.has_value() && late->completions == 1; });
  REQUIRE(*first);
  REQUIRE_FALSE(*second);
  CHECK(second->error().code == make_error_code(errc::busy));
  REQUIRE_FALSE(same_name);
  CHECK(same_name.error().code == make_error_code(errc::busy));
  CHECK(late->req.result == make_error_code(errc::device_failed));
  CHECK(free_total(r) == free_before + 2);
  r.restart();
  CHECK(r.p->volumes().empty());
}

TEST_CASE(
    "pool: a volume grows, keeps its data, reads zeros past the old end, and keeps its size across "
    "a restart",
    "[tiering][pool][resize]") {
  rig r(2, 4);  // 10 extents; overcommit 2x allows 20 extents of volumes
  const std::uint64_t old_blocks = extent_blocks + extent_blocks / 2;
  volume& v = r.create("db", old_blocks);
  const auto data = pattern(old_blocks * block_size, test_seed());
  write_blocks(r.loop, v, 0, data);

  // Refusals change nothing.
  auto shrink = r.resize("db", old_blocks - 1);
  REQUIRE_FALSE(shrink);
  CHECK(shrink.error().code == make_error_code(errc::invalid_argument));
  CHECK(shrink.error().message.find("shrinking would lose data") != std::string::npos);
  auto huge = r.resize("db", 21 * extent_blocks);
  REQUIRE_FALSE(huge);
  CHECK(huge.error().code == make_error_code(errc::no_space));
  CHECK(huge.error().message.find("overcommit") != std::string::npos);
  auto missing = r.resize("nope", 100);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == make_error_code(errc::not_found));
  CHECK(v.geometry().block_count == old_blocks);
  REQUIRE(r.resize("db", old_blocks));  // the same size: nothing to do

  REQUIRE(r.resize("db", 4 * extent_blocks));
  CHECK(v.geometry().block_count == 4 * extent_blocks);
  CHECK(v.record().block_count == 4 * extent_blocks);
  CHECK(v.extent_count() == 4);
  std::vector<std::byte> want(4 * extent_bytes, std::byte{0});
  std::memcpy(want.data(), data.data(), data.size());
  CHECK(read_blocks(r.loop, v, 0, 4 * extent_blocks) == want);  // the old last extent's tail too
  const auto more = pattern(block_size, 99);
  write_blocks(r.loop, v, 4 * extent_blocks - 1, more);
  std::memcpy(want.data() + want.size() - block_size, more.data(), more.size());
  read_blocks(r.loop, v, 3 * extent_blocks + 2, 1);  // heat for the new extent
  CHECK(v.heat().score(3) > 0);
  // The growth counts against overcommit: 4 + 16 extents fill the 20.
  auto other = r.try_create({"other", block_size, 17 * extent_blocks, affinity::automatic});
  REQUIRE_FALSE(other);
  CHECK(other.error().code == make_error_code(errc::no_space));

  r.restart();
  volume& again = *r.p->find_volume("db");
  CHECK(again.geometry().block_count == 4 * extent_blocks);
  CHECK(read_blocks(r.loop, again, 0, 4 * extent_blocks) == want);
  r.create("other", 16 * extent_blocks);
}

TEST_CASE("pool: a placement change is durable and steers new extents at once",
          "[tiering][pool][placement]") {
  rig r(4, 8);
  volume& v = r.create("db", 4 * extent_blocks);
  REQUIRE(r.set_placement("db", affinity::archive));
  CHECK(v.record().placement == affinity::archive);
  write_blocks(r.loop, v, 0, pattern(block_size, 1));
  CHECK(r.p->tier_of(v.location(0)->group) ==
        tier::capacity);  // the performance tier has room, but not for it
  auto missing = r.set_placement("nope", affinity::archive);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == make_error_code(errc::not_found));
  REQUIRE(r.set_placement("db", affinity::archive));  // unchanged: nothing to do

  r.restart();
  volume& again = *r.p->find_volume("db");
  CHECK(again.record().placement == affinity::archive);
  REQUIRE(r.set_placement("db", affinity::performance));
  write_blocks(r.loop, again, extent_blocks, pattern(block_size, 2));
  CHECK(r.p->tier_of(again.location(1)->group) == tier::performance);
  r.restart();
  CHECK(r.p->find_volume("db")->record().placement == affinity::performance);
}

TEST_CASE(
    "volume: mapped extents are counted per tier through writes, moves, discards and a restart",
    "[tiering][volume]") {
  rig r(4, 8);
  volume& v = r.create("db", 6 * extent_blocks, affinity::archive);
  write_blocks(r.loop, v, 0, pattern(3 * extent_bytes, 1));
  CHECK(v.mapped_extents_on(tier::capacity) == 3);
  CHECK(v.mapped_extents_on(tier::performance) == 0);
  REQUIRE_FALSE(move(r, v, 1, tier::performance));
  CHECK(v.mapped_extents_on(tier::capacity) == 2);
  CHECK(v.mapped_extents_on(tier::performance) == 1);
  REQUIRE(r.set_placement("db", affinity::performance));
  write_blocks(r.loop, v, 4 * extent_blocks, pattern(block_size, 2));
  CHECK(v.mapped_extents_on(tier::performance) == 2);
  REQUIRE_FALSE(r.io(v, io::discard(0, extent_blocks)));
  CHECK(v.mapped_extents_on(tier::capacity) == 1);
  r.restart();
  volume& again = *r.p->find_volume("db");
  CHECK(again.mapped_extents_on(tier::capacity) == 1);
  CHECK(again.mapped_extents_on(tier::performance) == 2);
  CHECK(again.mapped_extents() == 3);
}

TEST_CASE(
    "pool: a group added while it runs takes new extents at once, and the pool reopens with it",
    "[tiering][pool][grow]") {
  rig r(2, 4);  // 2 performance extents, 2 × 4 capacity
  const std::uint64_t before = r.p->capacity_extents(tier::capacity);
  r.add_group(tier::capacity, 8);  // a new RAID-6 group, as the controller forms it
  std::optional<std::expected<std::uint16_t, error>> added;
  r.p->add_group(r.groups.back(),
                 [&](std::expected<std::uint16_t, error> x) { added = std::move(x); });
  r.loop.run_until([&] { return added.has_value(); });
  REQUIRE(*added);
  CHECK(**added == 3);
  CHECK(r.p->group_count() == 4);
  CHECK(r.p->capacity_extents(tier::capacity) == before + 8);
  // The emptiest capacity group takes a new extent: the new one.
  volume& v = r.create("db", 2 * extent_blocks, affinity::archive);  // the capacity tier
  const auto data = pattern(2 * extent_bytes, test_seed());
  write_blocks(r.loop, v, 0, data);
  REQUIRE(v.location(0));
  CHECK(v.location(0)->group == 3);

  r.restart();  // given the four groups, as the controller records them
  volume& again = *r.p->find_volume("db");
  CHECK(again.location(0)->group == 3);
  CHECK(read_blocks(r.loop, again, 0, 2 * extent_blocks) == data);
  CHECK(r.p->capacity_extents(tier::capacity) == before + 8);
}

TEST_CASE(
    "pool: an add a crash cut short before the pool record is finished at open; refusals change "
    "nothing",
    "[tiering][pool][grow]") {
  rig r(2, 4);
  r.close();
  r.add_group(tier::capacity, 8);  // recorded by the controller, not yet by the pool
  r.open();
  CHECK(r.p->group_count() == 4);
  r.restart();  // the pool record names it now
  CHECK(r.p->group_count() == 4);

  // Too small, or of another block size: refused at once, nothing added.
  auto tiny = memory_device::create(r.loop.context.get_executor(), {block_size, extent_blocks / 2});
  REQUIRE(tiny);
  std::optional<std::expected<std::uint16_t, error>> added;
  r.p->add_group({tiny->get(), tier::capacity},
                 [&](std::expected<std::uint16_t, error> x) { added = std::move(x); });
  r.loop.run_until([&] { return added.has_value(); });
  REQUIRE_FALSE(*added);
  CHECK(added->error().message == "pool: the new group is smaller than one extent");
  auto odd = memory_device::create(r.loop.context.get_executor(), {512, 8 * extent_bytes / 512});
  REQUIRE(odd);
  added.reset();
  r.p->add_group({odd->get(), tier::capacity},
                 [&](std::expected<std::uint16_t, error> x) { added = std::move(x); });
  r.loop.run_until([&] { return added.has_value(); });
  REQUIRE_FALSE(*added);
  CHECK(added->error().message == "pool: the new group has 512-byte blocks, group 0 has 4096");
  CHECK(r.p->group_count() == 4);
}

}  // namespace
}  // namespace strata::tiering
