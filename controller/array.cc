#include "controller/array.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <random>
#include <thread>

#include "controller/array_records.h"
#include "controller/record_writer.h"
#include "strata/v1/array.pb.h"
#include "strata/v1/resources.pb.h"
#include "tiering/records.h"
#include "tiering/volume.h"

namespace strata::controller {

using namespace records;

std::string new_volume_serial(std::string_view volume_id) {
  return "STRATA-" + random_hex(8) + "-" + std::string(volume_id);
}

group_options array::group_options_for(std::size_t index) {
  group_options o;
  o.clock = &clock_;
  o.on_member_event = [this, index](const raid::member_event& e) {
    if (lost_groups_.contains(index))
      return;  // a pool lost to the partner: its drives are not this controller's to fail
    if (bay_) bay_->member_failed(index, e);
    for (auto& [name, p] : pools_) {
      if (p.write_cache)
        p.write_cache->redundancy_changed();  // it may be the pool's write log that lost a member
    }
  };
  o.on_resync_stopped = [this, index](const raid::resync_progress& p) {
    if (lost_groups_.contains(index)) return;
    if (bay_) bay_->resync_stopped(index, p);
  };
  return o;
}

void array::wait(const std::function<bool()>& ready) {
  auto busy = boost::asio::make_work_guard(loop_);
  // A wait inside a handler (a takeover, a hand-over) may see the daemon
  // stop the loop: it runs the loop on to its end, and stops it again.
  bool stopped = false;
  while (!ready()) {
    if (loop_.stopped()) {
      stopped = true;
      loop_.restart();
    }
    loop_.run_one();
  }
  if (stopped) loop_.stop();
}

std::expected<std::unique_ptr<array>, error> array::open(boost::asio::io_context& loop,
                                                         const array_options& options) {
  std::unique_ptr<array> a(new array(loop, options));
  auto ring = device::io_ring::create(loop);
  if (!ring) return std::unexpected(ring.error());
  a->ring_ = std::move(*ring);
  std::error_code ec;
  std::filesystem::create_directories(options.state_dir, ec);
  if (ec)
    return std::unexpected(make_error(
        errc::io_error, "cannot create " + options.state_dir.string() + ": " + ec.message()));
  auto config = config_store::open((options.state_dir / "config").string());
  if (!config) return std::unexpected(config.error());
  a->config_ = std::move(*config);
  // Built once its drives are recorded (build_default's first commit): a
  // state directory holding only the events of a refused build is still
  // to be built.
  const bool fresh = a->config_->list("disks/", {}, 1).empty();
  a->events_ = std::make_unique<event_log>(*a->config_, options.event);
  a->operations_ = std::make_unique<operation_log>(*a->config_, options.controller);
  const bool joining = fresh && options.controller != "a";
  if (joining && !options.partner_link) {
    return std::unexpected(
        make_error(errc::invalid_argument,
                   "controller " + options.controller +
                       " joins an array on an empty state directory over the partner link: give "
                       "--partner-link (controller a builds arrays)"));
  }
  if (auto built = joining ? a->join() : fresh ? a->build_default() : a->assemble(); !built)
    return std::unexpected(built.error());
  if (options.partner_link && !a->partner_) {
    if (auto linked = a->start_partner(); !linked) return std::unexpected(linked.error());
  }
  if (a->partner_) a->start_drive_heartbeats();
  if (!a->reclaim_.empty()) a->reclaim_pools();  // once the partner has heard these beats
  a->bay_ = std::make_unique<drive_bay>(loop.get_executor(), a->clock_, *a->shelf_, a->groups_,
                                        a->group_names_, *a->config_, *a->events_, *a->operations_);
  if (a->partner_) {
    a->bay_->set_spare_claims(
        [raw = a.get()](const std::string& disk, std::function<void(raid::spare_claim)> answer) {
          raw->claim_spare(disk, std::move(answer));
        });
  }
  bool bay_started = false;
  a->bay_->start([&] { bay_started = true; });
  a->wait([&] { return bay_started; });
  if (auto served = a->serve(); !served) return std::unexpected(served.error());
  a->drive_owners_.clear();  // from now on, takeovers and hand-overs change ownership
  a->started_ = true;
  a->events_->record(severity::info, "",
                     joining ? "controller " + options.controller + " joined the array and started"
                     : fresh ? "the array was built (" + options.plan_origin + ") and started"
                             : "the array started");
  return a;
}

std::expected<void, error> array::open_pool(const std::string& bytes) {
  auto record = decode<v1::Pool>("pools/?", bytes);
  if (!record) return std::unexpected(record.error());
  auto loaded = load_pool(*record, true);
  if (!loaded) return std::unexpected(loaded.error());
  if (const auto on_drives = drive_owners_.find(record->name()); on_drives != drive_owners_.end())
    loaded->ownership = on_drives->second;
  adopt_pool(record->name(), std::move(*loaded));
  return {};
}

disk_group* array::group_named(const std::string& name) const {
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    if (group_names_[i] == name) return groups_[i].get();
  }
  return nullptr;
}

std::expected<array::served_pool, error> array::load_pool(const v1::Pool& record, bool on_loop) {
  if (pools_.contains(record.name()))
    return std::unexpected(make_error(errc::invalid_argument, record.name() + " is open already"));
  served_pool p;
  // A pool whose open fails after its write cache opened (the log replayed,
  // destage perhaps under way) stops the cache before it goes: destroyed
  // with destage I/O in flight, its requests would complete into freed
  // memory.
  struct stop_cache_on_failure {
    array& a;
    served_pool& pool;
    ~stop_cache_on_failure() {
      if (pool.write_cache) pool.write_cache->stop([this](const auto& ready) { a.wait(ready); });
      // Its last writes to the pool's store (lost blocks) reach the loop
      // before the store closes.
      if (pool.metadata) a.wait([this] { return pool.metadata->in_flight() == 0; });
    }
  } stop_cache{*this, p};
  p.ownership = {record.name(),
                 record.owner().empty() ? options_.controller : short_name(record.owner()),
                 std::max<std::uint64_t>(1, record.ownership_epoch()), unix_ms_now()};
  // RocksDB's open and the pool's read of its records block for as long as
  // the store takes to open (seconds on a slow machine). On the loop, they
  // run on a thread of their own while the loop goes on: its drive
  // heartbeat must beat meanwhile, or the partner takes this controller's
  // pools over (it did, under AddressSanitizer, as a pool came back).
  auto off_loop = [&](const std::function<std::expected<void, error>()>& work) {
    if (!on_loop) return work();
    std::expected<void, error> result;
    std::atomic<bool> done = false;
    std::thread worker([&] {
      result = work();
      done = true;
      boost::asio::post(loop_, [] {});  // wakes the wait
    });
    wait([&] { return done.load(); });
    worker.join();
    return result;
  };
  // The store first: the write cache keeps its logs' retirement and lost
  // blocks there (the pool's, so the partner's copy has them too).
  const std::filesystem::path directory = options_.state_dir / "pools" / short_name(record.name());
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (auto opened = off_loop([&]() -> std::expected<void, error> {
        auto store = tiering::metadata_store::open(directory.string(), loop_.get_executor());
        if (!store) return std::unexpected(store.error());
        p.metadata = std::move(*store);
        return {};
      });
      !opened) {
    return std::unexpected(opened.error());
  }
  std::vector<write_cache::cached_group> cached;
  for (const std::string& name : record.groups()) {
    disk_group* g = group_named(name);
    if (g == nullptr)
      return std::unexpected(make_error(
          errc::not_found, record.name() + ": its group " + name + " is not in the config"));
    cached.push_back({g, name});
  }
  if (!record.write_log_group().empty()) {
    disk_group* log_group = group_named(record.write_log_group());
    if (log_group == nullptr)
      return std::unexpected(make_error(
          errc::not_found, record.name() + ": its write log group is not in the config"));
    if (!on_loop)
      return std::unexpected(make_error(
          errc::not_supported, record.name() + ": a write log is opened at start-up only"));
    write_cache_options wo{.clock = &clock_,
                           .pool_store = p.metadata.get(),
                           .config = config_.get(),
                           .loop = loop_.get_executor(),
                           .events = events_.get()};
    auto opened = write_cache::open(*log_group, record.write_log_group(), cached, wo,
                                    [this](const std::function<bool()>& ready) { wait(ready); });
    if (!opened) return std::unexpected(opened.error());
    p.write_cache = std::move(*opened);
    if (record.write_cache() == v1::WRITE_THROUGH)
      p.write_cache->set_mode(raid::cache_mode::write_through);
  }
  std::vector<tiering::pool_group> members;
  for (const write_cache::cached_group& c : cached) {
    device::block_device& d =
        p.write_cache ? p.write_cache->device_for(*c.group) : c.group->device();
    members.push_back({&d, tier_of(c.group->kind())});
  }
  tiering::pool_options options;
  options.clock =
      const_cast<device::real_clock*>(&clock_);  // the pool reads it; the array's, as every layer's
  options.heat_history.interval = options_.heat_history_interval;
  if (record.has_cold_cooling_seconds())
    p.migration.cold_cooling = std::chrono::seconds(record.cold_cooling_seconds());
  options.on_group_paused = [this, pool_name = record.name()](std::uint16_t g,
                                                              const std::string& why) {
    const served_pool* served = pool_named(pool_name);
    const std::string group = served != nullptr && g < served->groups.size()
                                  ? served->groups[g]
                                  : "group " + std::to_string(g);
    if (why.empty()) {
      events_->record(severity::info, group, "takes extents again (" + pool_name + ")");
    } else {
      events_->record(severity::warning, group,
                      "unavailable to " + pool_name + ": " + why +
                          "; I/O to its extents fails meanwhile, the rest of the pool serves");
    }
  };
  options.on_writes_stopped = [this, pool_name = record.name()](const std::string& why) {
    if (why.empty()) {
      events_->record(severity::warning, pool_name,
                      "writes go on again (retried after a full backing store)");
    } else {
      events_->record(severity::critical, pool_name, "writes stopped: " + why);
    }
  };
  if (!record.read_cache_group().empty()) {
    disk_group* cache = group_named(record.read_cache_group());
    if (cache == nullptr)
      return std::unexpected(make_error(
          errc::not_found, record.name() + ": its read cache group is not in the config"));
    options.read_cache_device = &cache->device();
  }
  if (auto opened = off_loop([&]() -> std::expected<void, error> {
        auto made = tiering::pool::open(loop_.get_executor(), *p.metadata, members, options);
        if (!made) return std::unexpected(made.error());
        p.pool = std::move(*made);
        return {};
      });
      !opened) {
    return std::unexpected(opened.error());
  }
  p.groups.assign(record.groups().begin(), record.groups().end());
  return p;  // moved out (the implicit move): the guard finds no cache to stop
}

void array::adopt_pool(const std::string& name, served_pool p) {
  p.migrator = std::make_unique<tiering::migrator>(*p.pool, p.migration);
  p.migrator->start();
  auto [at, added] = pools_.emplace(name, std::move(p));
  if (replicas_) replicas_->hold(name);
  attach_mirror(name, at->second);
  if (!sampler_) {
    sampler_ = std::make_unique<boost::asio::steady_timer>(loop_);
    take_samples();
  }
}

std::expected<void, error> array::add_pool(const v1::Pool& record) {
  const std::filesystem::path directory = options_.state_dir / "pools" / short_name(record.name());
  std::error_code ec;
  const bool existed = std::filesystem::exists(directory, ec);
  auto loaded = load_pool(record, false);  // on this thread: RocksDB's open blocks
  if (!loaded) {
    if (!existed) std::filesystem::remove_all(directory, ec);  // a failed request leaves nothing
    return std::unexpected(loaded.error());
  }
  auto handed = std::make_shared<std::promise<void>>();
  auto adopted = handed->get_future();
  auto box = std::make_shared<served_pool>(std::move(*loaded));
  std::vector<std::string> group_names(record.groups().begin(), record.groups().end());
  if (!record.read_cache_group().empty()) group_names.push_back(record.read_cache_group());
  boost::asio::post(loop_, [this, name = record.name(), box, handed, group_names] {
    // Its groups' areas say who owns it before it serves.
    std::vector<const disk_group*> groups;
    for (const std::string& g : group_names) {
      if (const disk_group* found = group_named(g)) groups.push_back(found);
    }
    auto left = std::make_shared<std::size_t>(groups.size() + 1);
    auto one_less = [this, name, box, handed, left] {
      if (--*left > 0) return;
      adopt_pool(name, std::move(*box));
      handed->set_value();
    };
    for (const disk_group* g : groups) stamp_group(*g, box->ownership, one_less);
    one_less();
  });
  adopted.wait();
  return {};
}

array::served_pool* array::pool_named(std::string_view name) {
  const auto it = pools_.find(std::string(name));
  return it == pools_.end() ? nullptr : &it->second;
}

const array::served_pool* array::pool_named(std::string_view name) const {
  const auto it = pools_.find(std::string(name));
  return it == pools_.end() ? nullptr : &it->second;
}

std::pair<array::served_pool*, tiering::volume*> array::volume_named(std::string_view name) const {
  const auto at = name.find("/volumes/");
  if (at == std::string_view::npos) return {nullptr, nullptr};
  auto it = pools_.find(std::string(name.substr(0, at)));
  if (it == pools_.end()) return {nullptr, nullptr};
  auto* p = const_cast<served_pool*>(&it->second);
  return {p, p->pool->find_volume(name.substr(at + 9))};
}

std::expected<array::served_volume, error> array::make_unit(const std::string& volume,
                                                            const std::string& serial,
                                                            std::uint32_t block_size_bytes,
                                                            scsi::state_origin origin) {
  if (block_size_bytes != 0 && block_size_bytes != 512 && block_size_bytes != tiering_block_bytes) {
    return std::unexpected(make_error(errc::invalid_argument, volume + ": a block size of " +
                                                                  std::to_string(block_size_bytes) +
                                                                  " bytes is not 512 or 4096"));
  }
  served_volume fresh;
  fresh.serial = serial;
  fresh.block_size_bytes = block_size_bytes;
  const auto [pool, v] = volume_named(volume);
  const std::string pool_name = volume.substr(0, volume.find("/volumes/"));
  if (v == nullptr || pool->lost || handing_over_.contains(pool_name)) {
    // Not served here: the partner serves it (or, for a pool this
    // controller stepped down from or is handing over, the partner is
    // about to: the pool's objects here are going).
    const served_pool* here = pool_named(pool_name);
    if (!partner_ || (here != nullptr && !here->lost && !handing_over_.contains(pool_name))) {
      return std::unexpected(make_error(errc::not_found, "no pool has volume " + volume));
    }
    return forwarded_volume(volume, serial, block_size_bytes);
  }
  scsi::unit_identity id;
  id.serial = serial;
  id.non_rotating = false;  // mostly HDDs behind it
  id.non_volatile_cache = pool->write_cache != nullptr;
  // Initiators align to the volume's own blocks (READ CAPACITY(16)'s
  // LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT: 3 for 512e).
  id.physical_block_bytes = tiering_block_bytes;
  id.relative_port = server_ ? server_->options().relative_target_port : 1;
  id.port_group = id.relative_port;
  id.port_groups = port_groups();
  fresh.state = std::make_unique<pool_unit_state_store>(*pool->metadata,
                                                        tiering::keys::unit_state(v->record().id),
                                                        *config_, "reservations/" + volume);
  device::block_device* presented = v;
  if (block_size_bytes == 512) {
    fresh.emulation = std::make_unique<device::emulated_512e>(*v);
    presented = fresh.emulation.get();
  }
  fresh.unit = std::make_unique<scsi::logical_unit>(*presented, id, fresh.state.get());
  // EXTENDED COPY within the volume only: a lookup across volumes would
  // let one host copy into another host's volume.
  fresh.unit->set_copy_targets([unit = fresh.unit.get()](std::span<const std::uint8_t, 16> naa) {
    return std::ranges::equal(unit->naa_designator(), naa) ? unit : nullptr;
  });
  if (auto restored = fresh.unit->restore_state(origin); !restored) {
    log(volume + ": its reservation state was not restored: " + restored.error().message);
  }
  return fresh;
}

array::served_volume array::forwarded_volume(const std::string& volume, const std::string& serial,
                                             std::uint32_t block_size_bytes) {
  served_volume v;
  v.serial = serial;
  v.block_size_bytes = block_size_bytes;
  v.forwarded = std::make_unique<forwarded_unit>(volume, forwarding_);
  return v;
}

std::vector<scsi::target_port_group> array::port_groups() const {
  if (!partner_) return {};  // one controller: one group, one port
  const bool a = options_.controller == "a";
  const scsi::target_port_group own{static_cast<std::uint16_t>(a ? 1 : 2),
                                    scsi::alua_state::active_optimized,
                                    {static_cast<std::uint16_t>(a ? 1 : 2)}};
  const scsi::target_port_group other{static_cast<std::uint16_t>(a ? 2 : 1),
                                      scsi::alua_state::active_non_optimized,
                                      {static_cast<std::uint16_t>(a ? 2 : 1)}};
  return a ? std::vector{own, other} : std::vector{other, own};
}

forwarding_state array::forwarding_now() const {
  if (!partner_) return forwarding_state::transitioning;
  switch (partner_->state()) {
    case partner::liveness::active:  // the link is up
      return forwarding_state::forwarding;
    case partner::liveness::unreachable:
      // Alive by its drive heartbeat with the link down: for the first
      // seconds that is also what a dead partner looks like.
      return clock_.now() - liveness_since_ > std::chrono::seconds(3)
                 ? forwarding_state::unavailable
                 : forwarding_state::transitioning;
    case partner::liveness::down:
      break;
  }
  return forwarding_state::transitioning;  // taken over from here, or nobody can serve it
}

std::expected<void, error> array::map_volume(const std::string& volume, const std::string& serial,
                                             std::uint32_t block_size_bytes,
                                             const std::string& host, std::uint32_t lun) {
  const auto h = hosts_.find(host);
  if (h == hosts_.end())
    return std::unexpected(make_error(errc::not_found, "no host " + host + " is served"));
  scsi::lun_map& luns = *h->second.luns;
  if (lun >= scsi::lun_count || luns.find(lun) != nullptr) {
    return std::unexpected(
        make_error(errc::invalid_argument,
                   "LUN " + std::to_string(lun) + " of " + host + " is taken or too large"));
  }
  auto served = units_.find(volume);
  if (served == units_.end()) {
    auto fresh = make_unit(volume, serial, block_size_bytes, scsi::state_origin::power_loss);
    if (!fresh) return std::unexpected(fresh.error());
    served = units_.emplace(volume, std::move(*fresh)).first;
  }
  if (auto e = luns.add(static_cast<std::uint16_t>(lun), served->second.presented())) {
    if (served->second.mappings == 0) units_.erase(served);
    return std::unexpected(
        make_error(errc::invalid_argument, "LUN " + std::to_string(lun) + ": " + e.message()));
  }
  ++served->second.mappings;
  if (server_) server_->luns_changed(luns);
  present_nvme();
  return {};
}

void array::present_pool(const std::string& pool, bool here, bool stranded) {
  const std::string prefix = pool + "/volumes/";
  std::set<scsi::lun_map*> changed;
  for (auto& [volume, served] : units_) {
    if (!volume.starts_with(prefix) || (served.unit != nullptr) == here) continue;
    auto fresh = here ? make_unit(volume, served.serial, served.block_size_bytes,
                                  scsi::state_origin::failover)
                      : forwarded_volume(volume, served.serial, served.block_size_bytes);
    if (!fresh) {
      events_->record(severity::error, volume,
                      "its hosts' LUNs still reach it the old way: " + fresh.error().message);
      continue;
    }
    scsi::unit_interface& old = served.presented();
    for (auto& [name, h] : hosts_) {
      for (const std::uint16_t lun : h.luns->luns()) {
        if (h.luns->find(lun) != &old) continue;
        h.luns->replace(lun, fresh->presented());
        changed.insert(h.luns.get());
      }
    }
    fresh->mappings = served.mappings;
    (stranded ? stranded_ : retiring_).push_back(std::move(served));
    served = std::move(*fresh);
    if (served.forwarded) served.forwarded->reannounce();
  }
  // The same volumes behind the same LUNs: no REPORTED LUNS DATA HAS CHANGED.
  if (server_) {
    for (scsi::lun_map* luns : changed) server_->luns_changed(*luns, false);
  }
  present_nvme();
  retire_units([] {});
}

void array::unmap_volume(const std::string& host, std::uint32_t lun,
                         std::function<void(std::expected<void, error>)> done) {
  const auto h = hosts_.find(host);
  scsi::unit_interface* unit =
      h == hosts_.end() || lun >= scsi::lun_count ? nullptr : h->second.luns->find(lun);
  if (unit == nullptr)
    return done(
        std::unexpected(make_error(errc::not_found, host + " has no LUN " + std::to_string(lun))));
  h->second.luns->remove(static_cast<std::uint16_t>(lun));
  server_->luns_changed(
      *h->second.luns);  // before the unit may go: sessions tell it their nexus is gone
  present_nvme();
  const auto served =
      std::ranges::find_if(units_, [&](const auto& u) { return &u.second.presented() == unit; });
  if (--served->second.mappings == 0) {
    retiring_.push_back(std::move(served->second));
    units_.erase(served);
  }
  retire_units([done = std::move(done)] { done({}); });
}

void array::retire_units(std::function<void()> done) {
  std::erase_if(retiring_, [&](const served_volume& v) {
    return v.presented().commands_in_flight() == 0 &&
           std::ranges::all_of(
               hosts_, [](const auto& h) { return h.second.luns->answers_in_flight() == 0; });
  });
  if (retiring_.empty()) return done();
  auto later = std::make_shared<boost::asio::steady_timer>(loop_, std::chrono::milliseconds(1));
  later->async_wait([this, later, done = std::move(done)](boost::system::error_code) mutable {
    retire_units(std::move(done));
  });
}

std::expected<void, error> array::set_host(const std::string& name, const host_access& access) {
  const bool existed = hosts_.contains(name);
  served_host& h = hosts_[name];
  const host_access before = h.access;
  h.access = access;
  if (!h.luns) h.luns = std::make_unique<scsi::lun_map>(loop_.get_executor());
  iscsi::target_node node = target_node();
  if (auto bad = iscsi::check_target(node)) {
    if (!existed) {
      hosts_.erase(name);
    } else {
      h.access = before;
    }
    return std::unexpected(make_error(errc::invalid_argument, name + ": " + *bad));
  }
  if (server_) server_->set_target(std::move(node));
  present_nvme();
  return {};
}

std::expected<void, error> array::remove_host(const std::string& name) {
  const auto h = hosts_.find(name);
  if (h == hosts_.end())
    return std::unexpected(make_error(errc::not_found, "no host " + name + " is served"));
  if (!h->second.luns->luns().empty())
    return std::unexpected(make_error(errc::invalid_argument, name + " still has LUNs mapped"));
  retired_maps_.push_back(std::move(h->second.luns));
  hosts_.erase(h);
  if (server_) server_->set_target(target_node());
  present_nvme();
  return {};
}

std::string array::nvme_subsystem_nqn() const {
  const std::string& t = options_.target_name;
  return t.starts_with("iqn.") ? "nqn." + t.substr(4) : "nqn.2026-11.io.strata:" + t;
}

void array::present_nvme() {
  if (!nvme_) return;
  const std::uint32_t own_group = options_.controller == "a" ? 1 : 2;
  nvme::subsystem s;
  s.nqn = nvme_subsystem_nqn();
  for (const auto& [name, h] : hosts_) {
    std::vector<nvme::namespace_config> spaces;
    for (const std::uint16_t lun : h.luns->luns()) {
      scsi::unit_interface* unit = h.luns->find(lun);
      const auto v = std::ranges::find_if(
          units_, [&](const auto& u) { return &u.second.presented() == unit; });
      if (v == units_.end()) continue;
      const std::uint32_t block_bytes =
          v->second.block_size_bytes == 512 ? 512 : tiering_block_bytes;
      // Its ANA group is the controller serving its pool: optimized on
      // that controller's port, non-optimized (forwarded) on the other's.
      std::uint64_t recorded_bytes = 0;
      if (const auto bytes = config_->get(v->first)) {
        if (auto volume = decode<v1::Volume>(v->first, *bytes))
          recorded_bytes = volume->size_bytes();
      }
      spaces.push_back({lun + 1u, unit, block_bytes, v->second.serial,
                        v->second.unit ? own_group : 3 - own_group, recorded_bytes});
    }
    for (const std::string& nqn : h.access.nqns) s.hosts[nqn] = spaces;
    if (h.access.any_initiator) s.anyone = spaces;
  }
  nvme_->set_subsystem(std::move(s));
}

void array::present_nvme_ana() {
  if (!nvme_) return;
  const std::uint32_t own = options_.controller == "a" ? 1 : 2;
  // Without a partner its group is empty: non-optimized, unused.
  const bool partner_up = partner_ == nullptr || partner_->state() == partner::liveness::active;
  nvme_->set_ana_states(
      {{own, nvme::ana_state::optimized},
       {3 - own, partner_up ? nvme::ana_state::non_optimized : nvme::ana_state::change}});
}

iscsi::target_node array::target_node() const {
  iscsi::target_node node{options_.target_name, {}, std::nullopt};
  for (const auto& [name, h] : hosts_) {
    const iscsi::initiator_access access{h.luns.get(), h.access.chap, h.access.mutual_chap};
    for (const std::string& iqn : h.access.iqns) node.initiators[iqn] = access;
    if (h.access.any_initiator) node.anyone = access;
  }
  return node;
}

host_access host_access_of(const v1::Host& host) {
  host_access a;
  a.iqns.assign(host.iqns().begin(), host.iqns().end());
  a.nqns.assign(host.nqns().begin(), host.nqns().end());
  a.any_initiator = host.any_initiator();
  if (!host.chap_user().empty() || !host.chap_secret().empty())
    a.chap = iscsi::chap_credentials{host.chap_user(), host.chap_secret()};
  if (!host.mutual_chap_user().empty() || !host.mutual_chap_secret().empty()) {
    a.mutual_chap = iscsi::chap_credentials{host.mutual_chap_user(), host.mutual_chap_secret()};
  }
  return a;
}

void array::delete_volume(const std::string& name,
                          std::function<void(std::expected<void, error>)> done) {
  if (units_.contains(name))
    return done(std::unexpected(make_error(errc::invalid_argument, name + " is served to a host")));
  served_pool* p = volume_named(name).first;
  if (p == nullptr)
    return done(std::unexpected(make_error(errc::not_found, "no pool has volume " + name)));
  p->pool->delete_volume(short_name(name), std::move(done));
}

void array::resize_volume(const std::string& name, std::uint64_t bytes,
                          std::function<void(std::expected<void, error>)> done) {
  served_pool* p = volume_named(name).first;
  if (p == nullptr)
    return done(std::unexpected(make_error(errc::not_found, "no pool has volume " + name)));
  p->pool->resize_volume(short_name(name), bytes / tiering_block_bytes,
                         [this, name, done = std::move(done)](std::expected<void, error> r) {
                           if (const auto served = units_.find(name);
                               r && served != units_.end() && served->second.unit)
                             served->second.unit->capacity_changed();
                           done(std::move(r));
                         });
}

std::expected<void, error> array::set_write_cache(const std::string& name, raid::cache_mode mode) {
  served_pool* p = pool_named(name);
  if (p == nullptr) return std::unexpected(make_error(errc::not_found, "no pool " + name));
  if (!p->write_cache)
    return std::unexpected(make_error(errc::not_supported, name + " has no write log"));
  p->write_cache->set_mode(mode);
  return {};
}

std::expected<void, error> array::set_cold_cooling(const std::string& name,
                                                   std::chrono::seconds cooling) {
  served_pool* p = pool_named(name);
  if (p == nullptr || p->lost)
    return std::unexpected(make_error(errc::not_found, "no pool " + name + " is served here"));
  p->migration.cold_cooling = cooling;
  if (p->migrator) p->migrator->set_cold_cooling(cooling);
  return {};
}

std::expected<void, error> array::set_volume_write_cache(const std::string& name,
                                                         raid::cache_mode mode) {
  const auto [p, v] = volume_named(name);
  if (v == nullptr)
    return std::unexpected(make_error(errc::not_found, "no pool has volume " + name));
  if (mode == raid::cache_mode::write_through && !p->write_cache) {
    return std::unexpected(make_error(errc::not_supported, name + ": its pool has no write log"));
  }
  v->set_write_through(mode == raid::cache_mode::write_through);
  return {};
}

void array::set_placement(const std::string& name, tiering::affinity placement,
                          std::function<void(std::expected<void, error>)> done) {
  served_pool* p = volume_named(name).first;
  if (p == nullptr)
    return done(std::unexpected(make_error(errc::not_found, "no pool has volume " + name)));
  p->pool->set_placement(short_name(name), placement, std::move(done));
}

void array::create_volume(const std::string& name, std::uint64_t bytes, tiering::affinity placement,
                          std::function<void(std::expected<void, error>)> done) {
  served_pool* p = volume_named(name).first;
  if (p == nullptr)
    return done(std::unexpected(make_error(errc::not_found, "no pool for " + name)));
  p->pool->create_volume(
      {short_name(name), tiering_block_bytes, bytes / tiering_block_bytes, placement},
      [done = std::move(done)](std::expected<tiering::volume*, error> r) {
        if (!r) return done(std::unexpected(r.error()));
        done({});
      });
}

std::expected<v1::Disk, error> array::add_disk(const std::string& name, drive_kind kind,
                                               std::uint64_t bytes) {
  drive_spec spec;
  spec.name = name;
  spec.kind = kind;
  spec.bytes = bytes;
  auto index = shelf_->add(spec);
  if (!index) return std::unexpected(index.error());
  bay_->drive_added(*index);
  const drive_spec& opened = shelf_->spec(*index);
  v1::Disk disk;
  disk.set_name("disks/" + name);
  disk.set_kind(kind == drive_kind::hdd ? v1::HDD : v1::SSD);
  if (const timing_model_info* model = find_timing_model(opened.timing_model))
    disk.set_model(std::string(model->description));
  disk.set_serial("SIM-" + random_hex(6));
  disk.set_size_bytes(opened.bytes);
  disk.set_path(opened.path.string());
  disk.set_timing_model(opened.timing_model);
  disk.set_slot(static_cast<std::uint32_t>(*index));
  return disk;
}

void array::form_group(const std::string& name, group_kind kind,
                       const std::vector<std::string>& disks,
                       std::function<void(std::expected<v1::DiskGroup, error>)> done) {
  if (std::ranges::find(group_names_, name) != group_names_.end()) {
    return done(std::unexpected(make_error(errc::invalid_argument, name + " exists")));
  }
  auto drives = bay_->blank_drives(disks);
  if (!drives) return done(std::unexpected(drives.error()));
  create_group(kind, *drives, group_options_for(groups_.size()),
               [this, name, kind, disks,
                done = std::move(done)](std::expected<std::unique_ptr<disk_group>, error> made) {
                 if (!made)
                   return done(std::unexpected(
                       error{made.error().code, name + ": " + made.error().message}));
                 v1::DiskGroup record;
                 record.set_name(name);
                 record.set_kind(kind_of(kind));
                 record.set_group_id(std::string((*made)->id().begin(), (*made)->id().end()));
                 for (const std::string& d : disks) record.add_members(d);
                 groups_.push_back(std::move(*made));
                 group_names_.push_back(name);
                 bay_->group_added(groups_.size() - 1);
                 log(name + ": " + to_string(kind) + " of " + std::to_string(disks.size()) +
                     " drive(s), id " + to_hex(groups_.back()->id()));
                 stamp_group(*groups_.back(), std::nullopt,
                             [record = std::move(record), done] { done(record); });
               });
}

void array::grow_pool(const std::string& pool, const std::string& name,
                      std::function<void(std::expected<void, error>)> done) {
  const auto it = std::ranges::find(group_names_, name);
  if (it == group_names_.end())
    return done(std::unexpected(make_error(errc::not_found, "no group " + name)));
  served_pool* p = pool_named(pool);
  if (p == nullptr) return done(std::unexpected(make_error(errc::not_found, "no pool " + pool)));
  const disk_group& g = *groups_[static_cast<std::size_t>(it - group_names_.begin())];
  if (g.kind() == group_kind::read_cache) {
    return done(std::unexpected(
        make_error(errc::busy, "a read cache joins a pool when the pool is built")));
  }
  p->groups.push_back(name);  // the pool's next index: heat names it from now on
  p->pool->add_group(
      {&g.device(), tier_of(g.kind())},
      [this, p, &g, done = std::move(done)](std::expected<std::uint16_t, error> added) {
        if (!added) {
          if (added.error().code == make_error_code(errc::invalid_argument))
            p->groups.pop_back();  // refused: not in it
          return done(std::unexpected(added.error()));
        }
        stamp_group(g, p->ownership, [done] { done({}); });
      });
}

void array::follow_move(const std::string& name, tiering::tier to, const std::string& operation) {
  tiering::volume* v = volume_named(name).second;
  const tiering::tier from =
      to == tiering::tier::capacity ? tiering::tier::performance : tiering::tier::capacity;
  moves_.push_back({name, to, v ? v->mapped_extents_on(from) : 0, operation});
  if (!move_timer_) {
    move_timer_ = std::make_unique<boost::asio::steady_timer>(loop_);
    check_moves();
  }
}

bool array::stop_following(const std::string& operation) {
  if (std::erase_if(moves_, [&](const followed_move& m) { return m.operation == operation; }) == 0)
    return false;
  operations_->finish(operation, std::unexpected(make_error(errc::canceled, "cancelled")), true);
  return true;
}

void array::check_moves() {
  std::erase_if(moves_, [&](const followed_move& m) {
    const auto [p, v] = volume_named(m.volume);
    if (v == nullptr) {
      operations_->finish(m.operation,
                          std::unexpected(make_error(errc::not_found, "the volume was deleted")));
      return true;
    }
    const tiering::affinity wanted = m.to == tiering::tier::capacity
                                         ? tiering::affinity::archive
                                         : tiering::affinity::performance;
    if (v->record().placement != wanted) {
      operations_->finish(m.operation,
                          std::unexpected(make_error(
                              errc::canceled, "the volume's affinity was changed while it moved")));
      return true;
    }
    const tiering::tier from =
        m.to == tiering::tier::capacity ? tiering::tier::performance : tiering::tier::capacity;
    const std::uint64_t left = v->mapped_extents_on(from);
    if (left == 0) {
      operations_->finish(m.operation, {});
      events_->record(
          severity::info, m.volume,
          std::string("every extent is on the ") +
              (m.to == tiering::tier::capacity ? "capacity (HDD)" : "performance (SSD)") +
              " tier now (" + m.operation + ")");
      return true;
    }
    if (m.to == tiering::tier::performance && p->pool->free_extents(tiering::tier::performance) <=
                                                  p->pool->performance_reserve_extents()) {
      operations_->finish(m.operation,
                          std::unexpected(make_error(
                              errc::no_space, "the performance tier is full down to its reserve; " +
                                                  std::to_string(left) + " extents stay on HDD")));
      return true;
    }
    operations_->progress(
        m.operation, m.to_move == 0 ? 0.0
                                    : 1.0 - static_cast<double>(left) /
                                                static_cast<double>(std::max(m.to_move, left)));
    return false;
  });
  if (moves_.empty() || closed_) {
    move_timer_.reset();
    return;
  }
  move_timer_->expires_after(std::chrono::seconds(1));
  move_timer_->async_wait([this](boost::system::error_code ec) {
    if (!ec && !closed_) check_moves();
  });
}

std::expected<void, error> array::serve() {
  iscsi::server_options options;
  options.log = [this](std::string_view what) { log(std::string(what)); };
  options.portals = options_.iscsi_portals;
  options.relative_target_port = options_.controller == "a" ? 1 : 2;
  options.connection_loops = options_.connection_loops;
  server_ = std::make_unique<iscsi::server>(loop_.get_executor(), std::vector<iscsi::target_node>{},
                                            options);
  for (const auto& [key, bytes] : config_->list("hosts/")) {
    auto host = decode<v1::Host>(key, bytes);
    if (!host) return std::unexpected(host.error());
    if (auto served = set_host(key, host_access_of(*host)); !served)
      return std::unexpected(served.error());
  }
  if (hosts_.empty())
    server_->set_target(target_node());  // the target exists, and no one may log in
  for (const auto& [key, bytes] : config_->list("mappings/")) {
    auto mapping = decode<v1::Mapping>(key, bytes);
    if (!mapping) return std::unexpected(mapping.error());
    const auto volume_bytes = config_->get(mapping->volume());
    if (!volume_bytes)
      return std::unexpected(make_error(errc::not_found, key + ": no volume " + mapping->volume()));
    auto volume = decode<v1::Volume>(mapping->volume(), *volume_bytes);
    if (!volume) return std::unexpected(volume.error());
    if (!partner_ &&
        pool_named(mapping->volume().substr(0, mapping->volume().find("/volumes/"))) == nullptr) {
      log(key + ": " + mapping->volume() +
          " is in a pool this controller does not serve: not presented");
      continue;
    }
    if (auto mapped = map_volume(volume->name(), volume->serial(), volume->block_size_bytes(),
                                 mapping->host(), mapping->lun());
        !mapped) {
      return std::unexpected(error{mapped.error().code, key + ": " + mapped.error().message});
    }
  }
  if (auto listening = server_->listen(options_.iscsi); !listening)
    return std::unexpected(listening.error());
  if (options_.nvme) {
    nvme::server_options nvme_options;
    nvme_options.port_id = options_.controller == "a" ? 1 : 2;
    nvme_options.ana_groups = 2;
    nvme_options.connection_loops = options_.connection_loops;
    for (const nvme_portal& p : options_.nvme_portals) {
      nvme_options.referrals.push_back(
          {p.host, p.port, p.port_id == 0 ? nvme_options.port_id : p.port_id});
    }
    nvme_options.log = [this](std::string_view what) { log(std::string(what)); };
    nvme_ = std::make_unique<nvme::server>(loop_.get_executor(), std::vector<nvme::subsystem>{},
                                           nvme_options);
    present_nvme_ana();
    present_nvme();
    if (auto listening = nvme_->listen(*options_.nvme); !listening)
      return std::unexpected(listening.error());
  }
  return {};
}

namespace {
// No request, transition or move of the pool's volumes in flight, nor any
// read-cache fill.
bool pool_idle(tiering::pool& pool) {
  for (tiering::volume* v : pool.volumes()) {
    if (!v->idle()) return false;
  }
  return pool.cache() == nullptr || pool.cache()->idle();
}
}  // namespace

void array::quiesce_pool(served_pool& served) {
  tiering::pool* pool = served.pool.get();
  wait([&] { return pool_idle(*pool); });
  std::optional<std::error_code> heat;
  pool->persist_heat([&](std::error_code ec) { heat = ec; });
  wait([&] { return heat.has_value(); });
  if (*heat) log("the heat map was not saved: " + heat->message());
  if (pool->cache() != nullptr) {
    std::optional<std::error_code> index;
    pool->cache()->persist([&](std::error_code ec) { index = ec; });
    wait([&] { return index.has_value(); });
    if (*index) log("the read cache's index was not saved: " + index->message());
  }
  for (tiering::volume* v : pool->volumes()) {
    struct flush_wait {
      device::request req;
      bool done = false;
    } f;
    f.req.operation = device::op::flush;
    f.req.context = &f;
    f.req.on_complete = [](device::request& r) noexcept {
      static_cast<flush_wait*>(r.context)->done = true;
    };
    v->submit(f.req);
    wait([&] { return f.done; });
    if (f.req.result) log("a volume flush failed: " + f.req.result.message());
  }
  // What is dirty stays in the write log: the next start replays it.
  if (served.write_cache)
    served.write_cache->stop([this](const std::function<bool()>& ready) { wait(ready); });
}

void array::close() {
  if (closed_) return;
  closed_ = true;
  loop_.restart();                           // stopped by the daemon: the waits below run it again
  if (partner_) partner_->stop_answering();  // the partner's management calls: refused from now on
  // Forwarded commands too: the partner's ports answer them "transitioning"
  // until it takes the pools over or this controller is back.
  receiving_ = false;
  auto units_idle = [&] {
    if (receiver_ && receiver_->in_flight() > 0) return false;
    for (const auto& [name, v] : units_) {
      if (v.presented().commands_in_flight() > 0) return false;
    }
    for (const auto& [name, h] : hosts_) {
      if (h.luns->answers_in_flight() > 0) return false;
    }
    for (const served_volume& v : stranded_) {
      if (v.presented().commands_in_flight() > 0) return false;  // failed by shut_lost(), above
    }
    return retiring_.empty();
  };
  // The drives of pools lost to the partner fail what waits for them.
  if (shelf_) shelf_->shut_lost(make_error_code(errc::permission_denied));
  if (nvme_) nvme_->stop();
  if (server_) {
    server_->stop();
    bool retired = false;
    retire_units([&] { retired = true; });
    wait([&] {
      return server_->connections() == 0 && (!nvme_ || nvme_->connections() == 0) && retired &&
             units_idle();
    });
  }
  if (bay_) {
    bay_->stop();  // a rebuild or scrub cut short here is started again by command
    wait([&] { return bay_->idle(); });
  }
  for (auto& [name, p] : pools_) {
    if (!p.lost) p.migrator->stop();
  }
  if (sampler_) sampler_->cancel();
  for (const followed_move& m : moves_) {
    operations_->finish(m.operation,
                        std::unexpected(make_error(
                            errc::canceled,
                            "stopped by the shutdown: the volume keeps its placement, and the "
                            "migrator goes on moving it after the restart")),
                        true);
  }
  moves_.clear();
  move_timer_.reset();
  for (const followed_pools& f : pool_moves_) {
    operations_->finish(
        f.operation,
        std::unexpected(make_error(errc::canceled,
                                   "stopped by the shutdown of controller " + options_.controller)),
        true);
  }
  pool_moves_.clear();
  pool_move_timer_.reset();
  reclaim_timer_.reset();
  for (auto& [name, served] : pools_) {
    if (!served.lost) {
      quiesce_pool(served);
    } else if (served.write_cache) {
      // A lost pool's drives are the partner's now: nothing more goes to
      // them (its gates are shut, above), but its logs' destage may still
      // be failing there: stopped before they go (a device destroyed
      // with I/O in flight stops the process).
      served.write_cache->stop([this](const std::function<bool()>& ready) { wait(ready); });
    }
  }
  // The pools' last metadata reached the partner's copies (or the drives
  // say the copies are behind): they stop; then the last drive beat says
  // this controller stopped (it hands its pools over, not loses them),
  // and the link goes.
  for (auto& [name, served] : pools_) {
    wait([&] { return served.metadata->in_flight() == 0; });
    if (served.mirror) served.mirror->stop();
  }
  state_writer_.join();
  server_.reset();
  hosts_.clear();
  retired_maps_.clear();
  units_.clear();
  stranded_.clear();
  for (auto& [name, p] : pools_) {
    // A lost pool's requests that were queued below its drives' gates
    // when they shut (a move's copy read, held in the scheduler, then
    // stopped at the bottom gate) fail later than the shut: they end
    // before the pool goes (the freeze torture's stop found one
    // completing into a destroyed pool).
    if (p.lost) wait([&] { return pool_idle(*p.pool); });
    p.migrator.reset();
    p.pool.reset();
    p.write_cache.reset();
    wait([&] { return p.metadata->in_flight() == 0; });
    // A full file system (or a failed disk) under the state directory
    // leaves RocksDB in its background-error state: the store closes
    // without its last flush, and says so (tiering/metadata_store.h).
    if (const auto how = p.metadata->close()) log(name + ": " + *how);
    p.metadata.reset();
  }
  pools_.clear();
  // A takeover or handover cut short by the stop: its drives answer first.
  wait([&] { return area_io_in_flight_ == 0; });
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    if (lost_groups_.contains(i)) continue;  // handed over or lost: the partner's superblocks now
    const auto& g = groups_[i];
    std::optional<std::error_code> clean;
    g->mark_clean([&](std::error_code ec) { clean = ec; });
    wait([&] { return clean.has_value() && g->idle(); });
    if (*clean) log("a group was not marked clean: " + clean->message());
  }
  if (partner_) {
    // Only now, with every group marked clean, does the last drive beat
    // say this controller stopped (it hands its pools over, not loses
    // them): the partner takes them over from then on, and a superblock
    // written here after it began would be written over its own.
    bool beaten = false;
    partner_->stop_heartbeats(true, [&] { beaten = true; });
    wait([&] { return beaten; });
    partner_->stop();
    wait(
        [&] { return partner_->idle(); });  // a call of the partner's in flight waits for this loop
  }
  bay_.reset();
  groups_.clear();
  shelf_.reset();
  // An array that never started (a refused start) did not stop: its
  // refusal is the last word in the event log.
  if (events_ && started_) events_->record(severity::info, "", "the array stopped cleanly");
  operations_.reset();  // their last writes drain first
  events_.reset();
  config_.reset();
  ring_.reset();
}

array::~array() {
  close();
}

}  // namespace strata::controller
