#include "tests/sim/world.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

namespace strata::sim {

using namespace device;
using namespace device::testing;

namespace {

constexpr std::uint64_t performance_extents = 6;
constexpr std::uint64_t capacity_extents = 16;
constexpr std::uint64_t cache_lines = 24;
constexpr std::uint64_t cold_extents = 16;
constexpr std::uint64_t cache_line_bytes = 16 * 1024;
constexpr std::uint64_t strip_bytes = 16 * 1024;  // 4+2: a stripe of data is one extent
constexpr std::uint64_t log_blocks = 2 + 96;  // a small log: it wraps, fills and pushes back often

raid::raid1_options mirror_options(clock& c) {
  raid::raid1_options o;
  o.reserved_bytes = reserved_bytes;
  o.clock = &c;
  o.bitmap_region_bytes = 2 * extent_bytes;  // small regions: resyncs that cover part of the group
  o.sync_chunk_bytes = extent_bytes;
  return o;
}

raid::raid6_options parity_options(clock& c) {
  raid::raid6_options o;
  o.strip_size_bytes = strip_bytes;
  o.reserved_bytes = reserved_bytes;
  o.clock = &c;
  o.bitmap_region_bytes = 2 * strip_bytes;  // two stripes a bit
  o.torn_resync_interval =
      std::chrono::milliseconds(20);  // torn regions resynced often, as the run's time goes
  return o;
}

template <class Group>
std::unique_ptr<Group> make_group(test_loop& loop, std::vector<disk>& disks, const auto& options) {
  std::vector<block_device*> members;
  for (disk& d : disks) members.push_back(d.scheduler.get());
  auto g = Group::create(members, options);
  REQUIRE(g);
  std::optional<std::optional<error>> formatted;
  (*g)->format([&](std::optional<error> e) { formatted = std::move(e); });
  loop.run_until([&] { return formatted.has_value(); });
  REQUIRE_FALSE(*formatted);
  return std::move(*g);
}

// Nothing, with `why` set, if the group cannot be assembled (a failure of
// the run, not of the test binary: the other seeds go on).
template <class Group>
std::unique_ptr<Group> assemble_group(test_loop& loop, std::vector<disk>& disks,
                                      const auto& options, std::string& why) {
  std::vector<block_device*> members;
  for (disk& d : disks) members.push_back(d.scheduler.get());
  std::optional<typename Group::assembled> result;
  Group::assemble(members, options, [&](typename Group::assembled a) { result = std::move(a); });
  loop.run_until([&] { return result.has_value(); });
  if (!*result) {
    why = result->error().message;
    return nullptr;
  }
  return std::move(**result);
}

}  // namespace

raid::write_back_counters& write_back_totals() {
  static raid::write_back_counters totals;
  return totals;
}

world::world(std::uint64_t seed)
    : random(seed), fault_seed(seed * 7919 + 1), link(seed * 104729 + 3) {
  loop.before_step = [this] {
    if (store) store->drain();
  };
  std::filesystem::create_directories(state_dir(0) / "pools");
  std::filesystem::create_directories(state_dir(1) / "pools");
  replicas = std::make_unique<controller::metadata_replicas>(loop.context.get_executor(),
                                                             state_dir(1) / "pools");
  make_disks(performance_disks, 2,
             (reserved_bytes + performance_extents * extent_bytes) / block_size);
  make_disks(capacity_disks, 6,
             (reserved_bytes + capacity_extents / 4 * extent_bytes) / block_size);
  make_disks(cache_disks, 1, (reserved_bytes + cache_lines * cache_line_bytes) / block_size);
  make_disks(log_disks, 2, reserved_bytes / block_size + log_blocks);
  make_disks(cold_disks, 1, cold_extents * extent_bytes / block_size);
  cold_disks[0].durable = true;
  bypass_min_blocks = random() % 2 == 0
                          ? extent_blocks
                          : 1u << 20;  // allocations' whole extents past the log, or logged
  start(true);
}

world::~world() {
  wind_down();
  replicas.reset();
}

std::filesystem::path world::state_dir(unsigned controller) const {
  return dir.path() / controller_name(controller);
}

void world::attach_mirror() {
  // The link's calls and the ownership records, as the array makes them
  // (controller/takeover.cc attach_mirror, record_copy), answered at once
  // on the store's thread (inline_executor).
  mirror = std::make_unique<controller::pool_mirror>(
      link.executor(), "pools/sim",
      [this](std::uint16_t type, controller::link_bytes payload, controller::link_reply done) {
        // A lost request or answer is a connection that broke: the link
        // connects again at once, and the mirror makes its copy anew, as
        // the array's link-up does.
        auto lost = [&] {
          if (link.loss_percent == 0 || link.random() % 100 >= link.loss_percent) return false;
          ++link.calls_lost;
          mirror->link_up();
          return true;
        };
        if (link.die_after_calls > 0 && --link.die_after_calls == 0) link.owner_dead = true;
        if (link.owner_dead)
          return done(
              std::unexpected(make_error(errc::io_error, "this controller's power is failing")));
        if (link.down || lost())
          return done(std::unexpected(make_error(errc::io_error, "the partner link is down")));
        auto answer = replicas ? replicas->answer(type, payload)
                               : std::unexpected(make_error(errc::io_error, "no partner"));
        if (answer && lost())
          return done(
              std::unexpected(make_error(errc::io_error, "the answer was lost with the link")));
        done(std::move(answer));
      },
      [this](bool current, std::function<void(std::error_code)> done) {
        if (link.owner_dead || std::exchange(link.records_fail, false))
          return done(make_error_code(errc::io_error));
        link.drives_say_current = current;
        ++link.records_written;
        done({});
      });
  store->set_copy(mirror.get());
  // The array pokes the store at link-up so that the copy is made even
  // with no batch coming; here the next batch makes it, within a drain, so
  // that the store's thread never runs beside the loop.
  if (!link.down) mirror->link_up();
}

void world::link_down(bool partner_restarts) {
  link.down = true;
  if (partner_restarts) {
    replicas.reset();
    replicas = std::make_unique<controller::metadata_replicas>(loop.context.get_executor(),
                                                               state_dir(1 - owner) / "pools");
  }
}

void world::link_back() {
  link.down = false;
  if (mirror) mirror->link_up();
}

void world::make_disks(std::vector<disk>& disks, std::size_t count, std::uint64_t blocks) {
  for (std::size_t i = 0; i < count; ++i) {
    auto m = memory_device::create(loop.context.get_executor(), {block_size, blocks});
    REQUIRE(m);
    disks.push_back({std::move(*m), nullptr, nullptr, false});
  }
}

std::vector<disk*> world::all_disks() {
  std::vector<disk*> all;
  for (auto* set : {&performance_disks, &capacity_disks, &cache_disks, &log_disks, &cold_disks}) {
    for (disk& d : *set) all.push_back(&d);
  }
  return all;
}

void world::power_up() {
  for (disk* d : all_disks()) power_up(*d);
}

void world::power_up(disk& d) {
  d.drive = std::make_unique<fault_device>(*d.platters, loop.clock,
                                           fault_options{fault_seed++, !d.durable});
  d.drive->keep_allocation_in(d.allocation);
  // A queueing disk: a third of its requests are overtaken by later ones.
  d.drive->set_reorder(std::chrono::microseconds(50 + random() % 3000), 0.3);
  d.drive->set_delay(std::chrono::microseconds(100 + random() % 2000), 0.2);
  if (d.dead) d.drive->fail();
  // Background work (rebuilds, resyncs, moves, cache fills) behind the
  // clients' I/O, as on stratad's shelf: held requests reorder it further.
  d.scheduler = std::make_unique<io_scheduler>(
      *d.drive, loop.clock,
      io_scheduler_options{.busy_background_in_flight = 1,
                           .idle_background_in_flight = 4,
                           .idle_wait = std::chrono::microseconds(500)});
}

void world::replace_failed_disks() {
  replace(performance_disks, *performance);
  replace(capacity_disks, *capacity);
  replace(log_disks, *log);
  write_back->set_log_degraded(log->working_members() < 2);
}

void world::replace(std::vector<disk>& slots, raid::member_replacement& group) {
  for (std::size_t m = 0; m < slots.size(); ++m) {
    if (!slots[m].dead) continue;
    const bool under_way = std::any_of(rebuilds_.begin(), rebuilds_.end(), [&](const auto& r) {
      return r->running && r->slots == &slots && r->member == m;
    });
    if (under_way) continue;
    auto r = std::make_unique<rebuild>();
    r->slots = &slots;
    r->member = m;
    auto platters = memory_device::create(loop.context.get_executor(),
                                          {block_size, slots[m].platters->geometry().block_count});
    REQUIRE(platters);
    r->spare.platters = std::move(*platters);
    power_up(r->spare);
    rebuild* started = r.get();
    const auto refused = group.replace_member(
        static_cast<unsigned>(m), r->spare.scheduler.get(), [this, started](std::error_code ec) {
          started->running = false;
          if (ec) return;  // the spare is dropped with the old controller's objects
          std::vector<disk>& in = *started->slots;
          replaced_.push_back(std::move(in[started->member]));
          in[started->member] = std::move(started->spare);
          ++rebuilds_done;
        });
    if (refused) continue;  // busy (a resync runs): the next call tries again
    rebuilds_.push_back(std::move(r));
  }
}

std::string world::start(bool first_time) {
  power_up();
  if (first_time) {
    performance =
        make_group<raid::raid1_group>(loop, performance_disks, mirror_options(loop.clock));
    capacity = make_group<raid::raid6_group>(loop, capacity_disks, parity_options(loop.clock));
    cache = make_group<raid::raid1_group>(loop, cache_disks, mirror_options(loop.clock));
    log = make_group<raid::raid1_group>(loop, log_disks, mirror_options(loop.clock));
    std::optional<std::error_code> formatted;
    raid::write_back_device::format(*log, capacity->geometry(), {7},
                                    [&](std::error_code ec) { formatted = ec; });
    loop.run_until([&] { return formatted.has_value(); });
    REQUIRE_FALSE(*formatted);
  } else {
    std::string why;
    performance =
        assemble_group<raid::raid1_group>(loop, performance_disks, mirror_options(loop.clock), why);
    if (performance)
      capacity =
          assemble_group<raid::raid6_group>(loop, capacity_disks, parity_options(loop.clock), why);
    if (capacity)
      cache = assemble_group<raid::raid1_group>(loop, cache_disks, mirror_options(loop.clock), why);
    if (cache)
      log = assemble_group<raid::raid1_group>(loop, log_disks, mirror_options(loop.clock), why);
    if (!log) {
      performance.reset();
      capacity.reset();
      cache.reset();
      loop.settle();
      for (disk* d : all_disks()) {
        d->scheduler.reset();
        d->drive.reset();
      }
      return "a group could not be assembled after the restart: " + why;
    }
  }
  // The log replayed (after a crash) before the pool sees the group.
  raid::write_back_options wo;
  wo.clock = &loop.clock;
  wo.stripe_blocks = extent_blocks;
  wo.max_record_blocks = extent_blocks;
  wo.bypass_min_blocks = bypass_min_blocks;
  wo.destage_age = std::chrono::milliseconds(5);
  // The controller keeps the blocks lost with a failed log in its own
  // store, which a power cut does not touch; what the device does while
  // it winds down after the cut, the dead controller never records.
  wo.lost_at_open = lost_blocks;
  wo.persist_lost = [this](const device::block_range_set& lost) {
    if (!lost_at_cut_) lost_blocks = lost;
  };
  if (std::getenv("STRATA_SIM_TRACE") != nullptr) {
    wo.on_event = [](const std::string& e) {
      std::fprintf(stderr, "sim: write cache: %s\n", e.c_str());
    };
  }
  std::optional<raid::write_back_device::opened> opened;
  raid::write_back_device::open(*capacity, *log, {7}, wo,
                                [&](raid::write_back_device::opened r) { opened = std::move(r); });
  loop.run_until([&] { return opened.has_value(); });
  if (!*opened) return "the write log could not be opened: " + opened->error().message;
  write_back = std::move(**opened);
  write_back->set_log_degraded(log->working_members() < 2);
  std::filesystem::create_directories(store_dir());
  auto s = tiering::metadata_store::open(store_dir().string(), loop.context.get_executor(),
                                         metadata.env.get());
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s);
  store = std::move(*s);
  store->set_step_mode(true);  // outcomes only between steps: a seed replays exactly
  attach_mirror();
  loop.elsewhere = [this] { return store->in_flight(); };
  tiering::pool_options o;
  o.clock = &loop.clock;
  o.extent_size_bytes = extent_bytes;
  o.new_extents = tiering::new_extent_tier::performance_first;
  o.performance_reserve = 0.2;
  o.read_cache_device = cache.get();
  o.read_cache.line_bytes = cache_line_bytes;
  o.read_cache.persist_interval = std::chrono::milliseconds(20);  // the index is written often
  o.heat_persist_interval = std::chrono::milliseconds(50);
  o.no_space_retry_interval =
      std::chrono::milliseconds(20);  // a full store stops writes for a short while
  auto p = tiering::pool::open(loop.context.get_executor(), *store,
                               {{performance.get(), tiering::tier::performance},
                                {write_back.get(), tiering::tier::capacity},
                                {cold_disks[0].drive.get(), tiering::tier::cold}},
                               o);
  INFO((p ? std::string() : p.error().message));
  REQUIRE(p);
  pool = std::move(*p);
  if (!first_time) return {};
  for (auto [name, extents] : {std::pair{"a", 12}, std::pair{"b", 6}}) {
    std::optional<std::expected<tiering::volume*, error>> made;
    pool->create_volume({name, block_size, extents * extent_blocks, tiering::affinity::automatic},
                        [&](std::expected<tiering::volume*, error> v) { made = std::move(v); });
    loop.run_until([&] { return made.has_value(); });
    REQUIRE(*made);
  }
  return {};
}

bool world::groups_idle() const {
  return performance->idle() && capacity->idle() && cache->idle() && log->idle() &&
         (!write_back || write_back->idle());
}

void world::quiesce() {
  loop.run_until([&] {
    if (store->in_flight() != 0 || (pool->cache() && !pool->cache()->idle())) return false;
    for (tiering::volume* v : pool->volumes()) {
      if (!v->idle()) return false;
    }
    return true;
  });
}

void world::wind_down(bool clean) {
  if (!pool) return;
  quiesce();
  pool.reset();
  mirror->stop();
  store.reset();
  mirror.reset();
  loop.elsewhere = nullptr;
  bool stopped = false;
  write_back->stop([&] { stopped = true; });
  loop.run_until([&] { return stopped; });
  raid::write_back_counters& t = write_back_totals();
  const raid::write_back_counters& k = write_back->counters();
  t.writes_logged += k.writes_logged;
  t.writes_direct += k.writes_direct;
  t.records_replayed += k.records_replayed;
  t.full_stripe_writes += k.full_stripe_writes;
  t.writes_waited_for_space += k.writes_waited_for_space;
  t.blocks_lost += lost_at_cut_.value_or(k.blocks_lost);
  lost_at_cut_.reset();
  write_back.reset();
  // The groups may stop waiting for a member that failed; its requests,
  // still held back by a reordering drive, must complete (with
  // device_failed) while the groups that sent them still exist.
  auto drives_quiet = [&] {
    std::vector<disk*> disks = all_disks();
    for (auto& r : rebuilds_) disks.push_back(&r->spare);
    for (disk& d : replaced_) disks.push_back(&d);
    return std::none_of(disks.begin(), disks.end(), [](disk* d) {
      return (d->drive && d->drive->requests_pending() > 0) ||
             (d->scheduler && d->scheduler->background_waiting() > 0);
    });
  };
  loop.run_until([&] { return groups_idle() && drives_quiet(); });
  if (clean) {
    // As the array closes a pool it hands over: every member flushed, the
    // write-intent bitmaps cleared (a failed member's flush fails: its
    // group is degraded, and says so at the next assembly).
    std::size_t marked = 0;
    auto done = [&](std::error_code) { ++marked; };
    performance->mark_clean(done);
    capacity->mark_clean(done);
    cache->mark_clean(done);
    log->mark_clean(done);
    loop.run_until([&] { return marked == 4 && groups_idle() && drives_quiet(); });
  }
  loop.settle();
  performance.reset();
  capacity.reset();
  cache.reset();
  log.reset();
  loop.settle();
  for (disk* d : all_disks()) {
    d->scheduler.reset();
    d->drive.reset();
  }
  // Spares whose rebuild did not finish are blank disks again, for good.
  rebuilds_.clear();
  replaced_.clear();
}

std::string world::crash_and_restart(bool torn, bool takeover, std::string& what) {
  // The store's files as they are now (a process crash: what RocksDB
  // wrote to them survives, synced or not, as the OS still has it). A
  // checkpoint would need syncs, which may be failing.
  store->drain();
  const auto image = dir.path() / "crash-image";
  std::filesystem::remove_all(image);
  std::filesystem::copy(store_dir(), image, std::filesystem::copy_options::recursive);
  std::size_t settled = 0;
  auto disks = all_disks();
  // The spares being rebuilt onto lose their power too: one left on would
  // take the superblock of a group whose other members just failed.
  for (auto& r : rebuilds_) {
    if (r->spare.drive) disks.push_back(&r->spare);
  }
  lost_at_cut_ = write_back->counters().blocks_lost;
  for (disk* d : disks)
    d->drive->power_cut(torn ? power_loss::tear : power_loss::drop, [&] { ++settled; });
  loop.run_until([&] { return settled == disks.size(); });
  metadata.fs->fail_syncs(false);
  wind_down();
  // A takeover as controller/takeover.cc makes it: only from a copy the
  // drives call current, and one made since the partner started.
  const std::string partner = controller_name(1 - owner);
  bool taken = false;
  if (takeover && !link.drives_say_current) {
    what =
        "controller " + partner + " does not take the pool over: the drives say its copy is behind";
    ++takeovers_refused;
  } else if (takeover) {
    taken = replicas->take_now("pools/sim");
    if (!taken) {
      what = "controller " + partner +
             " does not take the pool over: it holds no whole copy made since it started";
      ++takeovers_refused;
    }
  }
  link.owner_dead = false;
  link.die_after_calls = 0;
  if (taken) {
    // The new owner's epoch: its ownership records say no copy is current.
    link.drives_say_current = false;
    owner = 1 - owner;
    replicas.reset();
    replicas = std::make_unique<controller::metadata_replicas>(loop.context.get_executor(),
                                                               state_dir(1 - owner) / "pools");
    std::filesystem::remove_all(image);
    what = "controller " + partner + " takes the pool over from its copy";
    ++takeovers;
  } else {
    std::filesystem::remove_all(store_dir());
    std::filesystem::rename(image, store_dir());
    if (what.empty()) what = "controller " + controller_name(owner) + " starts again";
  }
  return start(false);
}

std::string world::hand_over(bool receiver_dies, std::string& what) {
  const std::string giver = controller_name(owner), receiver = controller_name(1 - owner);
  quiesce();
  store->drain();
  // The array hands a pool over only once the partner's copy holds the
  // last batch (array::hand_over_now).
  const bool current = !link.down && mirror->current();
  wind_down(true);
  if (!current) {
    link.drives_say_current = false;  // the giver's new epoch, its partner's copy behind
    what = "controller " + giver + " takes the pool back: controller " + receiver +
           "'s copy is not current";
    return start(false);
  }
  ++hand_overs;
  // The giver's store, closed with every batch in the receiver's copy
  // too: its copy from now on, which the hand-over's record vouches for.
  auto kept = std::make_unique<controller::metadata_replicas>(loop.context.get_executor(),
                                                              state_dir(owner) / "pools");
  kept->adopt_now("pools/sim");
  link.drives_say_current = true;
  if (receiver_dies) {
    // Its copy is gone with it (it restarts empty); the giver, whose
    // drives name the dead receiver, takes the pool over from what it kept.
    replicas = std::make_unique<controller::metadata_replicas>(loop.context.get_executor(),
                                                               state_dir(1 - owner) / "pools");
    if (!kept->take_now("pools/sim")) {
      return "controller " + receiver +
             " died before it served the pool handed to it, and controller " + giver +
             ", alive, holds no copy it may take it over from: the pool is unserved";
    }
    link.drives_say_current = false;  // the giver's new epoch
    ++takeovers;
    what = "controller " + giver + " hands the pool over to controller " + receiver +
           ", which dies before it serves it; controller " + giver +
           " takes it over from the store it kept";
  } else {
    if (!replicas->take_now("pools/sim"))
      return "controller " + receiver + "'s copy was current, but it holds no whole one";
    owner = 1 - owner;
    replicas = std::move(kept);
    what = "controller " + giver + " hands the pool over to controller " + receiver;
  }
  return start(false);
}

namespace {
// Whether one more fault on `disks[index]` keeps at most two disks faulty.
bool within_raid6_budget(const std::vector<disk>& disks, std::size_t index) {
  std::size_t faulty = 0;
  for (const disk& d : disks) faulty += d.dead || d.latent_errors;
  return disks[index].dead || disks[index].latent_errors || faulty < 2;
}
}  // namespace

bool world::fail_capacity_disk(std::size_t index) {
  if (capacity_disks[index].dead || !within_raid6_budget(capacity_disks, index)) return false;
  capacity_disks[index].dead = true;
  capacity_disks[index].drive->fail();
  return true;
}

bool world::fail_performance_disk(std::size_t index) {
  if (performance_disks[0].dead || performance_disks[1].dead) return false;
  performance_disks[index].dead = true;
  performance_disks[index].drive->fail();
  return true;
}

bool world::fail_log_disk(std::size_t index) {
  if (log_disks[0].dead || log_disks[1].dead) return false;
  log_disks[index].dead = true;
  log_disks[index].drive->fail();
  write_back->set_log_degraded(true);  // as the controller does on the group's member event
  return true;
}

bool world::add_latent_error(std::size_t capacity_disk, std::uint64_t lba, std::uint64_t blocks) {
  disk& d = capacity_disks[capacity_disk];
  if (d.dead || !within_raid6_budget(capacity_disks, capacity_disk)) return false;
  d.latent_errors = true;
  d.drive->add_latent_error(lba, blocks);
  return true;
}

std::string world::check_redundancy() {
  std::string wrong;
  // No group fails out a member whose disk works: every fault here is the
  // simulation's, and the only one a group may fail a working disk for is
  // too many read errors (latent errors, injected on the RAID-6 disks; the
  // failure shows as "recorded" after a restart).
  auto check_members = [&](const char* name, const auto& group, const std::vector<disk>& disks) {
    for (unsigned m = 0; m < group.member_count(); ++m) {
      const raid::member_failure why = group.health(m).failure;
      if (!group.member_failed(m) || disks[m].dead || disks[m].latent_errors) continue;
      wrong += std::string(name) + " member " + std::to_string(m) + " failed (" +
               std::string(raid::to_string(why)) + ") though its disk works; ";
    }
  };
  check_members("RAID-1", *performance, performance_disks);
  check_members("RAID-6", *capacity, capacity_disks);
  // RAID-1: both members hold the same data (the reserved area holds each
  // member's own superblock, and differs).
  if (!performance_disks[0].dead && !performance_disks[1].dead) {
    const std::uint64_t first = reserved_bytes / block_size;
    const std::uint64_t blocks = performance_disks[0].platters->geometry().block_count - first;
    const auto a = read_blocks(loop, *performance_disks[0].drive, first, blocks);
    const auto b = read_blocks(loop, *performance_disks[1].drive, first, blocks);
    for (std::uint64_t i = 0; i < blocks; ++i) {
      if (std::memcmp(a.data() + i * block_size, b.data() + i * block_size, block_size) != 0) {
        wrong += "RAID-1 members differ at member block " + std::to_string(first + i) + "; ";
        break;
      }
    }
  }
  // RAID-6: a scrub finds every stripe's P and Q in agreement with its data.
  bool degraded = false;
  for (unsigned m = 0; m < capacity->member_count(); ++m) degraded |= capacity->member_failed(m);
  if (!degraded) {
    std::optional<raid::scrub_report> report;
    capacity->scrub([&](const raid::scrub_report& r) { report = r; });
    loop.run_until([&] { return report.has_value(); });
    if (report->stripes_repaired + report->stripes_unrecoverable > 0 || report->error) {
      wrong += "RAID-6 scrub found " + std::to_string(report->stripes_repaired) +
               " stripe(s) to repair and " + std::to_string(report->stripes_unrecoverable) +
               " unrecoverable" +
               (report->error ? " (" + report->error.message() + ")" : std::string()) + "; ";
    }
  }
  return wrong;
}

}  // namespace strata::sim
