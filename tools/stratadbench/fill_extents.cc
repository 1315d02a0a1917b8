// strata-fill-extents: gives a stopped stratad's pool a big extent map
// without writing any data, for the start-up benchmark
// (stratad-bench.sh: "start-up from 100 volumes / 1 M extents").
//
//   strata-fill-extents --state-dir DIR --extents K [--pool NAME] [--prefix P] [--volumes N]
//                       [--batch-records R]
//
// Maps the first K extents of each volume of the pool (those whose names
// start with P, the first N of them in name order) that are not mapped
// yet. A million 4 MiB extents are 4 TiB: writing them through iSCSI is out
// of reach here, and the start-up cost is the metadata's, not the data's.
//
// How it stays consistent: the extent allocator is not persisted
// (tiering/extent_allocator.h): pool::open rebuilds it from the extent map,
// refusing an extent mapped twice or past its group's end. So this tool
// opens the pool with the tiering layer's own pool::open, over stand-in
// devices of exactly the extent counts and tiers the pool record holds,
// takes every extent from pool::allocate with the volume's affinity (the
// call a volume's first write makes: the performance tier first down to its
// reserve, the group with the most free extents, the allocator's rotor),
// and writes each mapping with the records.h encoding a volume's commit
// uses. Then it reopens the pool, which checks the map the way stratad's
// next start will, and reports what each tier holds. The real groups need
// not be assembled: the pool reads only their geometry at open, and
// stratad's pool::open compares the real groups against the same pool
// record, so stand-ins that pass here describe the same extents.
//
// No data is written: an extent mapped here reads what its group holds
// there, zeros on a fresh shelf of sparse files. The heat and the read
// cache index are not touched (a never-written extent has neither).
//
// Run it while stratad is stopped: it takes STATE/stratad.lock as stratad
// does, and RocksDB's own lock would refuse it anyway.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "raid/device/clock.h"
#include "raid/device/null_device.h"
#include "tiering/metadata_store.h"
#include "tiering/pool.h"
#include "tiering/records.h"
#include "tiering/volume.h"
#include "tools/cli.h"

namespace {

namespace device = strata::device;
namespace tiering = strata::tiering;

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "strata-fill-extents: %s\n", why.c_str());
  std::exit(1);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct settings {
  std::filesystem::path state_dir;
  std::string pool_name = "p1";
  std::uint64_t extents_per_volume = 0;
  std::string prefix;
  std::size_t volume_limit = std::numeric_limits<std::size_t>::max();
  // Mappings per synced batch: each batch is atomic, and any prefix of the
  // batches is a consistent map too (every mapping in it is unique).
  std::size_t batch_records = 50'000;
};

// The pool as stratad opens it, over stand-ins for its groups. Members are
// destroyed in reverse order: the pool before what it refers to.
struct opened_pool {
  boost::asio::io_context loop;  // never run: nothing here is asynchronous
  device::real_clock clock;
  std::unique_ptr<tiering::metadata_store> store;
  std::vector<std::unique_ptr<device::null_device>> groups;
  std::unique_ptr<tiering::pool> pool;
  tiering::pool_record record;
};

std::unique_ptr<opened_pool> open_pool(const std::filesystem::path& directory) {
  if (!std::filesystem::is_directory(directory)) {
    fail(directory.string() +
         " is not a directory: has stratad created the pool in this state directory?");
  }
  auto p = std::make_unique<opened_pool>();
  auto store = tiering::metadata_store::open(directory.string(), p->loop.get_executor());
  if (!store) fail(store.error().message);
  p->store = std::move(*store);
  const auto stored = p->store->get(tiering::column::pool, tiering::keys::pool());
  if (!stored) fail(directory.string() + " holds no pool record");
  const auto record = tiering::decode_pool(*stored);
  if (!record) fail(directory.string() + ": the pool record is damaged");
  p->record = *record;
  // 512-byte blocks divide every extent size and both volume block sizes;
  // the pool takes only the group's size (in extents) and its tier from it.
  constexpr std::uint32_t block_bytes = 512;
  std::vector<tiering::pool_group> members;
  for (const auto& g : record->groups) {
    p->groups.push_back(std::make_unique<device::null_device>(
        p->loop.get_executor(), block_bytes,
        g.extent_count * (record->extent_size_bytes / block_bytes)));
    members.push_back({p->groups.back().get(), g.where});
  }
  // controller/array.cc's open_pool: the defaults (new extents on the
  // performance tier first, its 10% reserve), and the clock. The read
  // cache plays no part in where extents go: it is left out.
  tiering::pool_options options;
  options.clock = &p->clock;
  options.extent_size_bytes = record->extent_size_bytes;
  auto opened = tiering::pool::open(p->loop.get_executor(), *p->store, std::move(members), options);
  if (!opened) fail(opened.error().message);
  p->pool = std::move(*opened);
  return p;
}

struct mapping {
  std::uint32_t volume_id;
  std::uint64_t volume_extent;
  tiering::extent_location where;
};

settings parse(int argc, char** argv) {
  settings s;
  CLI::App app{
      "Maps the first K extents of each volume of a stopped stratad's pool without writing their "
      "data, "
      "for the start-up benchmark (stratad-bench.sh). Run it while stratad is stopped.",
      "strata-fill-extents"};
  strata::tools::use_conventions(app);
  app.add_option("--state-dir", s.state_dir, "stratad's state directory")
      ->type_name("DIR")
      ->required();
  app.add_option("--extents", s.extents_per_volume, "Extents to map from the start of each volume")
      ->type_name("K")
      ->default_str("")
      ->required()
      ->check(strata::tools::positive);
  app.add_option("--pool", s.pool_name, "The pool")->type_name("NAME");
  app.add_option("--prefix", s.prefix, "Only the volumes whose names start with this")
      ->type_name("P");
  app.add_option("--volumes", s.volume_limit, "Only the first N of those volumes, in name order")
      ->type_name("N")
      ->default_str("all");
  app.add_option("--batch-records", s.batch_records, "Mappings per synced batch")
      ->type_name("R")
      ->check(strata::tools::positive);
  strata::tools::parse_or_exit(app, argc, argv);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const settings s = parse(argc, argv);

  if (!std::filesystem::is_directory(s.state_dir))
    fail(s.state_dir.string() + " is not a directory");
  // One writer per state directory, as stratad takes it (controller/stratad.cc).
  const std::string lock_path = (s.state_dir / "stratad.lock").string();
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) fail("cannot open " + lock_path + ": " + std::strerror(errno));
  if (::flock(lock, LOCK_EX | LOCK_NB) != 0)
    fail("stratad runs on " + s.state_dir.string() + ": stop it first");

  const std::filesystem::path directory = s.state_dir / "pools" / s.pool_name;
  auto t0 = std::chrono::steady_clock::now();
  auto p = open_pool(directory);
  std::printf("opened pool %s in %.2f s: %zu volumes, extent size: %llu bytes\n",
              s.pool_name.c_str(), seconds_since(t0), p->pool->volumes().size(),
              static_cast<unsigned long long>(p->pool->extent_size_bytes()));

  std::vector<tiering::volume*> chosen;
  for (tiering::volume* v : p->pool->volumes()) {  // in name order
    if (chosen.size() == s.volume_limit) break;
    if (!v->record().name.starts_with(s.prefix)) continue;
    if (v->extent_count() < s.extents_per_volume) {
      fail("volume " + v->record().name + " has " + std::to_string(v->extent_count()) +
           " extents, fewer than " + std::to_string(s.extents_per_volume) +
           ": grow it first (strata volume update NAME --size SIZE)");
    }
    chosen.push_back(v);
  }
  if (chosen.empty()) fail("no volume of pool " + s.pool_name + " starts with '" + s.prefix + "'");

  // Everything is allocated before anything is written: a pool too small
  // for the request changes nothing. Extent by extent across the volumes,
  // as hosts writing side by side would, so that every volume gets its
  // share of the performance tier.
  t0 = std::chrono::steady_clock::now();
  std::vector<mapping> mappings;
  std::uint64_t on_tier[2]{};
  for (std::uint64_t e = 0; e < s.extents_per_volume; ++e) {
    for (tiering::volume* v : chosen) {
      if (v->location(e)) continue;  // mapped already: a second run adds only what is missing
      const auto where = p->pool->allocate(v->record().placement);
      if (!where) {
        fail("the pool is full after " + std::to_string(mappings.size()) + " new extents (volume " +
             v->record().name + " extent " + std::to_string(e) + "): nothing was written");
      }
      v->load_mapping(e, *where);
      mappings.push_back({v->record().id, e, *where});
      ++on_tier[static_cast<int>(p->pool->tier_of(where->group))];
    }
  }
  const double allocate_s = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  tiering::metadata_batch batch;
  auto commit = [&] {
    if (batch.empty()) return;
    if (auto ec = p->store->write_now(batch)) fail("writing the extent map: " + ec.message());
    batch = {};
  };
  for (const mapping& m : mappings) {
    batch.put(tiering::column::extent_map, tiering::keys::extent(m.volume_id, m.volume_extent),
              tiering::encode(m.where));
    if (batch.size() >= s.batch_records) commit();
  }
  commit();
  std::printf(
      "mapped %zu new extents over %zu volumes (%llu performance, %llu capacity): allocated in "
      "%.2f s, "
      "written in %.2f s\n",
      mappings.size(), chosen.size(), static_cast<unsigned long long>(on_tier[0]),
      static_cast<unsigned long long>(on_tier[1]), allocate_s, seconds_since(t0));
  std::vector<std::string> names;
  for (tiering::volume* v : chosen) names.push_back(v->record().name);
  chosen.clear();
  p.reset();
  // Reopened as stratad will: pool::open refuses an extent mapped twice or
  // out of range.
  t0 = std::chrono::steady_clock::now();
  p = open_pool(directory);
  const double reopen_s = seconds_since(t0);
  std::uint64_t total = 0;
  for (const std::string& name : names) {
    const tiering::volume* v = p->pool->find_volume(name);
    if (v == nullptr) fail("volume " + name + " is gone after the reopen");
    std::uint64_t first = 0;
    while (first < s.extents_per_volume && v->location(first)) ++first;
    if (first < s.extents_per_volume) {
      fail("volume " + name + ": extent " + std::to_string(first) +
           " is unmapped after the reopen");
    }
    total += v->mapped_extents();
  }
  const tiering::pool& pool = *p->pool;
  std::printf(
      "reopened in %.2f s: the %zu volumes map %llu extents; free extents: performance %llu of "
      "%llu, "
      "capacity %llu of %llu\n",
      reopen_s, names.size(), static_cast<unsigned long long>(total),
      static_cast<unsigned long long>(pool.free_extents(tiering::tier::performance)),
      static_cast<unsigned long long>(pool.capacity_extents(tiering::tier::performance)),
      static_cast<unsigned long long>(pool.free_extents(tiering::tier::capacity)),
      static_cast<unsigned long long>(pool.capacity_extents(tiering::tier::capacity)));
  p.reset();
  ::close(lock);
  return 0;
}
