// The tiering tests' pool: one performance group and two capacity groups
// (and, when asked, a cold-tier group) over memory devices (behind fault devices), with a real
// RocksDB store in a temporary directory, on a test loop in virtual time.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "raid/raid1_group.h"
#include "tests/raid/device/harness.h"
#include "tests/tiering/fault_fs.h"
#include "tiering/pool.h"
#include "tiering/volume.h"

namespace strata::tiering::testing {

using namespace device;
using namespace device::testing;

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t extent_bytes = 64 * 1024;  // small extents: small tests
constexpr std::uint64_t extent_blocks = extent_bytes / block_size;

struct rig_shape {
  std::uint64_t performance_extents = 8;
  std::uint64_t capacity_extents = 16;  // in each of the two capacity groups
  new_extent_tier new_extents = new_extent_tier::performance_first;
  // With cache_lines > 0, a read cache of that many 16 KiB lines on a
  // memory device behind `cache_fault`.
  std::uint64_t cache_lines = 0;
  // Group disks with write caches that a power cut empties (fault_device),
  // their random choices seeded from `seed`.
  bool volatile_write_caches = false;
  std::uint64_t seed = 1;
  // The performance group as a RAID-1 pair (faults[0] and faults[1]).
  bool mirrored_performance = false;
  // With cold_extents > 0, a cold-tier group of that many extents, last
  // (the Ceph image's place; a memory device behind faults.back()).
  std::uint64_t cold_extents = 0;
};

// A pool of one performance group and two capacity groups over memory
// devices (behind fault devices), with its store in a temporary directory.
struct rig {
  test_loop loop;
  temp_dir dir;
  std::vector<std::unique_ptr<memory_device>> disks;
  std::vector<std::unique_ptr<fault_device>> faults;
  std::vector<pool_group> groups;
  std::unique_ptr<metadata_store> store;
  std::unique_ptr<pool> p;
  pool_options options;
  rig_shape shape;
  faulty_metadata metadata;

  explicit rig(std::uint64_t performance_extents = 8, std::uint64_t capacity_extents = 16,
               new_extent_tier new_extents = new_extent_tier::performance_first,
               std::uint64_t cache_lines = 0)
      : rig(rig_shape{performance_extents, capacity_extents, new_extents, cache_lines}) {}
  explicit rig(const rig_shape& s) : shape(s) {
    options.extent_size_bytes = extent_bytes;
    options.new_extents = s.new_extents;
    options.clock = &loop.clock;
    if (s.mirrored_performance) {
      add_mirror(s.performance_extents);
    } else {
      add_group(tier::performance, s.performance_extents);
    }
    add_group(tier::capacity, s.capacity_extents);
    add_group(tier::capacity, s.capacity_extents);
    if (s.cold_extents > 0) add_group(tier::cold, s.cold_extents);
    if (s.cache_lines > 0) {
      auto m = memory_device::create(loop.context.get_executor(),
                                     {block_size, s.cache_lines * cache_line_blocks});
      REQUIRE(m);
      cache_disk = std::move(*m);
      cache_fault = std::make_unique<fault_device>(*cache_disk, loop.clock, fault_options{});
      options.read_cache_device = cache_fault.get();
      options.read_cache.line_bytes = cache_line_blocks * block_size;
    }
    open();
  }
  static constexpr std::uint64_t cache_line_blocks = 4;
  std::unique_ptr<memory_device> cache_disk;
  std::unique_ptr<fault_device> cache_fault;
  ~rig() { close(); }

  void add_group(tier t, std::uint64_t extents) {
    auto m =
        memory_device::create(loop.context.get_executor(), {block_size, extents * extent_blocks});
    REQUIRE(m);
    disks.push_back(std::move(*m));
    // Garbage everywhere: a new extent must not show what was there before.
    const auto junk = pattern(extents * extent_bytes, 0xdead + disks.size());
    write_blocks(loop, *disks.back(), 0, junk);
    faults.push_back(std::make_unique<fault_device>(
        *disks.back(), loop.clock,
        fault_options{shape.seed + disks.size(), shape.volatile_write_caches}));
    groups.push_back({faults.back().get(), t});
  }
  std::string store_path() const { return (dir.path() / "metadata").string(); }
  // A RAID-1 performance group of two memory disks behind fault devices.
  std::unique_ptr<raid::raid1_group> mirror;
  void add_mirror(std::uint64_t extents) {
    raid::raid1_options o;
    o.reserved_bytes = 1 << 20;
    std::vector<block_device*> members;
    for (int m = 0; m < 2; ++m) {
      auto d = memory_device::create(
          loop.context.get_executor(),
          {block_size, (extents * extent_bytes + o.reserved_bytes) / block_size});
      REQUIRE(d);
      disks.push_back(std::move(*d));
      faults.push_back(std::make_unique<fault_device>(*disks.back(), loop.clock, fault_options{}));
      members.push_back(faults.back().get());
    }
    auto g = raid::raid1_group::create(members, o);
    REQUIRE(g);
    mirror = std::move(*g);
    groups.push_back({mirror.get(), tier::performance});
  }
  void open() {
    auto s = metadata_store::open(store_path(), loop.context.get_executor(), metadata.env.get());
    REQUIRE(s);
    store = std::move(*s);
    loop.elsewhere = [this] { return store->in_flight(); };
    auto opened = pool::open(loop.context.get_executor(), *store, groups, options);
    INFO((opened ? std::string() : opened.error().message));
    REQUIRE(opened);
    p = std::move(*opened);
  }
  void close() {
    loop.run_until([&] {
      if (store == nullptr) return true;
      if (store->in_flight() != 0 || (p && p->cache() && !p->cache()->idle())) return false;
      if (!p) return true;
      for (volume* v : p->volumes()) {
        if (!v->idle()) return false;  // a move or a request still running
      }
      return true;
    });
    p.reset();
    store.reset();
    loop.elsewhere = nullptr;
  }
  // A controller restart: the pool comes back from its store alone.
  void restart() {
    close();
    open();
  }
  std::expected<volume*, error> try_create(const volume_spec& spec) {
    std::optional<std::expected<volume*, error>> result;
    p->create_volume(spec, [&](std::expected<volume*, error> r) { result = std::move(r); });
    loop.run_until([&] { return result.has_value(); });
    return std::move(*result);
  }
  volume& create(std::string name, std::uint64_t blocks, affinity a = affinity::automatic) {
    auto v = try_create({std::move(name), block_size, blocks, a});
    INFO((v ? std::string() : v.error().message));
    REQUIRE(v);
    return **v;
  }
  std::error_code io(block_device& d, std::unique_ptr<device::testing::io> x) {
    return run(loop, d, *x);
  }

  // The pool's management operations, run to their outcome.
  using outcome = std::expected<void, error>;
  template <class Start>
  outcome manage(Start start) {
    std::optional<outcome> result;
    start([&](outcome x) { result = std::move(x); });
    loop.run_until([&] { return result.has_value(); });
    return std::move(*result);
  }
  outcome delete_volume(std::string_view name) {
    return manage([&](auto done) { p->delete_volume(name, done); });
  }
  outcome resize(std::string_view name, std::uint64_t blocks) {
    return manage([&](auto done) { p->resize_volume(name, blocks, done); });
  }
  outcome set_placement(std::string_view name, affinity a) {
    return manage([&](auto done) { p->set_placement(name, a, done); });
  }
  // Every key of `c` that belongs to volume `id` (extent map and heat keys
  // start with it). Blocking: between steps, as a diagnostic would.
  std::size_t keys_of_volume(column c, std::uint32_t id) const {
    std::size_t n = 0;
    const auto scanned = store->scan(c, [&](std::string_view key, std::string_view) {
      if (const auto k = keys::parse_extent(key); k && k->first == id) ++n;
    });
    REQUIRE_FALSE(scanned);
    return n;
  }
};

}  // namespace strata::tiering::testing
