// The write cache's records of a failed log -- its retirement and the
// blocks lost with it -- belong to the pool, not to the controller that
// wrote them (issue 48, finding 3): whichever controller opens the pool
// next, with its own config store, formats a retired log rather than
// replay it, serves lost blocks as errors rather than older data, and
// never formats a log that was formatted and written since.
#include "controller/write_cache.h"

#include <catch2/catch.hpp>
#include <mutex>

#include "controller/config_store.h"
#include "controller/shelf.h"
#include "raid/device/fault_device.h"
#include "tests/controller/shelf_helpers.h"
#include "tests/raid/device/harness.h"
#include "tiering/metadata_store.h"

using namespace strata;
using namespace strata::controller;
using namespace strata::device::testing;
using strata::controller::testing::drives;

namespace {

constexpr std::uint32_t block_bytes = 4096;

// 6 HDDs (a RAID-6 4+2) and 2 SSDs (the mirrored write log), small.
std::vector<drive_spec> small_shelf() {
  return strata::controller::testing::small_shelf(6, 2);
}

// Stops a group cleanly: nothing of it in flight when it goes.
void clean(test_loop& loop, disk_group& g) {
  std::optional<std::error_code> done;
  g.mark_clean([&](std::error_code ec) { done = ec; });
  loop.run_until([&] { return done.has_value() && g.idle(); });
}

std::unique_ptr<disk_group> ready(test_loop& loop, std::function<void(group_done)> start) {
  std::optional<std::expected<std::unique_ptr<disk_group>, error>> got;
  start([&](auto r) { got = std::move(r); });
  loop.run_until([&] { return got.has_value(); });
  if (!*got) FAIL(got->error().message);
  return std::move(**got);
}

// One controller's view of the shelf: its own loop, groups assembled from
// the drives, its own config store and event log; the pool's metadata
// store is the one the pool's owner opens (the partner's copy of it, after
// a takeover: the same records).
struct controller_view {
  test_loop loop;
  std::unique_ptr<shelf> drives_;
  // The log SSDs as this controller reaches them: its path to them can
  // fail (cut_log_path) while the partner's works.
  std::vector<std::unique_ptr<device::fault_device>> log_paths;
  std::unique_ptr<disk_group> data, log;
  std::unique_ptr<config_store> config;
  std::mutex events_mutex;
  std::vector<std::string> events;
  std::unique_ptr<event_log> event_log_;
  std::unique_ptr<tiering::metadata_store> pool_store;
  std::unique_ptr<write_cache> cache;

  controller_view(const std::filesystem::path& shelf_dir, const std::filesystem::path& config_dir,
                  const std::filesystem::path& pool_dir, const group_id* data_id,
                  const group_id* log_id) {
    auto s = shelf::open(*loop.ring, loop.clock, shelf_dir, small_shelf());
    REQUIRE(s);
    drives_ = std::move(*s);
    const group_options o{&loop.clock, {}, {}, {}};
    std::vector<device::block_device*> ssds;
    for (std::size_t i = 6; i < 8; ++i) {
      log_paths.push_back(std::make_unique<device::fault_device>(drives_->drive(i), loop.clock,
                                                                 device::fault_options{.seed = i}));
      ssds.push_back(log_paths.back().get());
    }
    if (data_id == nullptr) {
      data = ready(loop, [&](group_done d) {
        create_group(group_kind::raid6, drives(*drives_, 0, 6), o, d);
      });
      log = ready(loop, [&](group_done d) { create_group(group_kind::write_log, ssds, o, d); });
    } else {
      data = ready(loop, [&](group_done d) {
        assemble_group(group_kind::raid6, *data_id, drives(*drives_, 0, 8), o, d);
      });
      log = ready(
          loop, [&](group_done d) { assemble_group(group_kind::write_log, *log_id, ssds, o, d); });
    }
    auto c = config_store::open(config_dir.string());
    REQUIRE(c);
    config = std::move(*c);
    event_log_ = std::make_unique<event_log>(*config, [this](severity, std::string_view line) {
      std::lock_guard lock(events_mutex);
      events.emplace_back(line);
    });
    auto p = tiering::metadata_store::open(pool_dir.string(), loop.context.get_executor());
    REQUIRE(p);
    pool_store = std::move(*p);
    // The store's writes complete on its own thread, the drives' in the
    // kernel: the loop waits for them before virtual time moves (else a
    // destage could start, 2 s of it passing, while a write is on its way).
    loop.elsewhere = [this] { return pool_store->in_flight() + loop.ring->in_flight(); };
  }

  ~controller_view() {
    if (cache) stop();
    loop.run_until([&] { return pool_store->in_flight() == 0; });
    pool_store->close();
    clean(loop, *data);
    clean(loop, *log);
    // A failed path's requests still at the drive end before it goes.
    loop.run_until([&] {
      return std::ranges::all_of(log_paths,
                                 [](const auto& f) { return f->requests_pending() == 0; });
    });
  }

  void open() {
    write_cache_options o{.clock = &loop.clock,
                          .pool_store = pool_store.get(),
                          .config = config.get(),
                          .loop = loop.context.get_executor(),
                          .events = event_log_.get()};
    auto opened = write_cache::open(*log, "groups/log", {{data.get(), "groups/g1"}}, o,
                                    [this](const std::function<bool()>& r) { loop.run_until(r); });
    if (!opened) FAIL(opened.error().message);
    cache = std::move(*opened);
  }
  // This controller's path to both log SSDs fails (the partner's works).
  void cut_log_path() {
    for (auto& f : log_paths) f->fail();
  }
  void stop() {
    cache->stop([this](const std::function<bool()>& r) { loop.run_until(r); });
    cache.reset();
  }
  device::block_device& lun() { return cache->device_for(*data); }
  const raid::write_back_device& back() { return *cache->cache_of(*data); }
  bool said(const std::string& text) {
    std::lock_guard lock(events_mutex);
    return std::ranges::any_of(events,
                               [&](const std::string& e) { return e.find(text) != e.npos; });
  }
  std::optional<std::string> pool_record(const std::string& key) {
    return pool_store->get(tiering::column::pool, key);
  }
  // A read's outcome: its bytes, or its error.
  std::expected<std::vector<std::byte>, std::error_code> read(std::uint64_t lba,
                                                              std::uint64_t blocks) {
    auto x = io::make(device::op::read, lba, blocks, block_bytes);
    if (auto ec = run(loop, lun(), *x)) return std::unexpected(ec);
    auto bytes = x->buffer.bytes();
    return std::vector<std::byte>(bytes.begin(), bytes.begin() + blocks * block_bytes);
  }
};

}  // namespace

TEST_CASE(
    "write cache: a failed log's retirement and lost blocks are the pool's: the next owner "
    "formats the log rather than replay it, and reads the lost blocks as errors; a log "
    "formatted and written since is never formatted for an old record",
    "[controller][write_cache]") {
  temp_dir dir;
  const auto old_data = pattern(8 * block_bytes, test_seed());
  const auto lost_data = pattern(8 * block_bytes, test_seed() + 1);
  const auto held_data = pattern(8 * block_bytes, test_seed() + 2);
  const auto b_data = pattern(8 * block_bytes, test_seed() + 3);
  group_id data_id{}, log_id{};
  std::uint64_t retired_at = 0;

  // Controller a: two writes logged, then its path to both log SSDs fails.
  {
    controller_view a(dir.path() / "shelf", dir.path() / "a", dir.path() / "pool", nullptr,
                      nullptr);
    data_id = a.data->id();
    log_id = a.log->id();
    a.open();
    write_blocks(a.loop, a.lun(), 100, old_data);
    write_blocks(a.loop, a.lun(), 200, lost_data);
    REQUIRE(a.back().dirty_blocks() == 16);
    a.cut_log_path();
    // Over the dirty blocks at 100: held until the failed log is retired,
    // then written to the group (and acknowledged).
    write_blocks(a.loop, a.lun(), 100, held_data);
    const auto retired = a.pool_record("write_log/g1/retired");
    REQUIRE(retired.has_value());
    retired_at = std::stoull(*retired);
    CHECK(retired_at >= 2);
    CHECK(a.pool_record("write_log/g1/lost").has_value());
    // Nothing of it in a's own store: b would never see it there.
    CHECK_FALSE(a.config->get("write_logs/g1/retired").has_value());
    CHECK_FALSE(a.read(200, 8).has_value());
    a.stop();
  }

  // Controller b takes the pool over: its own (empty) config store, the
  // pool's records, and a log that reads again from its side.
  {
    controller_view b(dir.path() / "shelf", dir.path() / "b", dir.path() / "pool", &data_id,
                      &log_id);
    b.open();
    CHECK(b.said("its retired write log was formatted anew"));
    CHECK(b.back().counters().records_replayed == 0);
    CHECK_FALSE(b.pool_record("write_log/g1/retired").has_value());
    // The write acknowledged after the retirement stands (a replay of the
    // old log would have brought old_data back over it) ...
    const auto held = b.read(100, 8);
    REQUIRE(held.has_value());
    CHECK(std::ranges::equal(*held, held_data));
    // ... and the blocks lost with a's log read as errors, not as the
    // group's older data.
    CHECK_FALSE(b.read(200, 8).has_value());
    // b writes into its fresh log, and stops with the write still there
    // (a failback: the home controller replays it).
    write_blocks(b.loop, b.lun(), 300, b_data);
    REQUIRE(b.back().dirty_blocks() >= 8);
    b.stop();
  }

  // Failback to a, with a retirement record for the old log put back as
  // if b's erase had not landed: the log's generations are past it, so a
  // replays b's acknowledged write rather than format it away.
  {
    controller_view a(dir.path() / "shelf", dir.path() / "a", dir.path() / "pool", &data_id,
                      &log_id);
    REQUIRE(!a.pool_store->write_now([&] {
      tiering::metadata_batch stale;
      stale.put(tiering::column::pool, "write_log/g1/retired", std::to_string(retired_at));
      return stale;
    }()));
    a.open();
    CHECK(a.said("formatted since"));
    CHECK_FALSE(a.said("its retired write log was formatted anew"));
    CHECK(a.back().counters().records_replayed > 0);
    const auto from_b = a.read(300, 8);
    REQUIRE(from_b.has_value());
    CHECK(std::ranges::equal(*from_b, b_data));
    CHECK_FALSE(a.read(200, 8).has_value());  // still lost
  }
}

TEST_CASE(
    "write cache: a retirement and lost blocks an older version kept in the controller's own "
    "store move into the pool's",
    "[controller][write_cache]") {
  temp_dir dir;
  const auto data = pattern(8 * block_bytes, test_seed());
  group_id data_id{}, log_id{};
  {
    controller_view a(dir.path() / "shelf", dir.path() / "a", dir.path() / "pool", nullptr,
                      nullptr);
    data_id = a.data->id();
    log_id = a.log->id();
    a.open();
    write_blocks(a.loop, a.lun(), 100, data);  // logged: a replay would bring it back
    a.stop();
    config_batch legacy;
    legacy.put("write_logs/g1/retired", "1");
    legacy.put("write_logs/g1/lost", "500+4");
    REQUIRE(a.config->commit(legacy));
  }
  controller_view a(dir.path() / "shelf", dir.path() / "a", dir.path() / "pool", &data_id, &log_id);
  a.open();
  CHECK(a.said("its retired write log was formatted anew"));
  CHECK(a.back().counters().records_replayed == 0);
  CHECK_FALSE(a.config->get("write_logs/g1/retired").has_value());
  CHECK_FALSE(a.config->get("write_logs/g1/lost").has_value());
  CHECK(a.pool_record("write_log/g1/lost") == "500+4");
  CHECK_FALSE(a.read(500, 4).has_value());
  CHECK(a.read(504, 4).has_value());
}

TEST_CASE(
    "write cache: an open that fails at a later group stops the logs it opened first, destage "
    "in flight, before they go; nothing they held is lost",
    "[controller][write_cache]") {
  // Issue 48, finding 4: destroyed with destage I/O in flight, their
  // requests completed into freed memory (now an invariant that stops the
  // process in every build).
  temp_dir dir;
  test_loop loop;
  auto s = shelf::open(*loop.ring, loop.clock, dir.path() / "shelf",
                       strata::controller::testing::small_shelf(18, 2));
  REQUIRE(s);
  const group_options go{&loop.clock, {}, {}, {}};
  auto make = [&](group_kind kind, std::size_t from, std::size_t count) {
    return ready(loop, [&](group_done d) { create_group(kind, drives(**s, from, count), go, d); });
  };
  auto g1 = make(group_kind::raid6, 0, 6);
  auto g2 = make(group_kind::raid6, 6, 6);
  auto g3 = make(group_kind::raid6, 12, 6);
  auto log = make(group_kind::write_log, 18, 2);
  auto config = config_store::open((dir.path() / "config").string());
  REQUIRE(config);
  event_log events(**config);
  auto store =
      tiering::metadata_store::open((dir.path() / "pool").string(), loop.context.get_executor());
  REQUIRE(store);
  loop.elsewhere = [&] { return (*store)->in_flight() + loop.ring->in_flight(); };
  const write_cache_options o{.clock = &loop.clock,
                              .pool_store = store->get(),
                              .config = config->get(),
                              .loop = loop.context.get_executor(),
                              .events = &events};
  const write_cache::waiter wait = [&](const std::function<bool()>& r) { loop.run_until(r); };
  // 40 writes of 128 KiB logged for g1: past a tenth of its slice, so that
  // destage starts the moment the log is replayed.
  const auto data = pattern(40 * 32 * block_bytes, test_seed());
  {
    auto w = write_cache::open(*log, "groups/log",
                               {{g1.get(), "groups/g1"}, {g2.get(), "groups/g2"}}, o, wait);
    REQUIRE(w);
    for (int i = 0; i < 40; ++i) {
      write_blocks(loop, (*w)->device_for(*g1), std::uint64_t(i) * 64,
                   std::span(data).subspan(std::size_t(i) * 32 * block_bytes, 32 * block_bytes));
    }
    REQUIRE((*w)->cache_of(*g1)->dirty_blocks() > 0);
    (*w)->stop(wait);
  }
  // g3 where g2 was: its slice holds g2's log, so the open fails there,
  // after g1's log replayed and began to destage.
  auto failed = write_cache::open(*log, "groups/log",
                                  {{g1.get(), "groups/g1"}, {g3.get(), "groups/g3"}}, o, wait);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().message.find("groups/g3") != std::string::npos);
  // g1 is idle (nothing of the failed open is in flight), and its log
  // still holds what it had: opened again, every write reads back.
  CHECK(g1->idle());
  auto again = write_cache::open(*log, "groups/log",
                                 {{g1.get(), "groups/g1"}, {g2.get(), "groups/g2"}}, o, wait);
  REQUIRE(again);
  for (int i = 0; i < 40; ++i) {
    const auto back = read_blocks(loop, (*again)->device_for(*g1), std::uint64_t(i) * 64, 32);
    CHECK(std::ranges::equal(
        back, std::span(data).subspan(std::size_t(i) * 32 * block_bytes, 32 * block_bytes)));
  }
  (*again)->stop(wait);
  loop.run_until([&] { return (*store)->in_flight() == 0; });
  (*store)->close();
  for (disk_group* g : {g1.get(), g2.get(), g3.get(), log.get()}) clean(loop, *g);
}
