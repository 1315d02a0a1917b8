// Management changes to the array's storage: pools (made, updated, moved
// between the controllers), disks and RAID groups (management.h; the
// rest is in management.cc).
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "controller/management.h"
#include "controller/management_detail.h"

namespace strata::controller {

using namespace management_detail;

// ---- pools ----

outcome<v1::Pool> management::update_pool(const v1::Pool& want,
                                          const std::vector<std::string>& fields) {
  if (auto ok = check_fields(fields, {"write_cache", "cold_cooling_seconds", "home"}); !ok)
    return std::unexpected(ok.error());
  if (std::ranges::find(fields, "home") != fields.end()) {
    if (fields.size() > 1) return invalid("update_mask", "home moves the pool: change it alone");
    auto moving = move_pool(want.name(), want.home());
    if (!moving) {
      if (moving.error().field == "to") moving.error().field = "pool.home";
      if (moving.error().field == "name") moving.error().field = "pool.name";
      return std::unexpected(moving.error());
    }
    // Answered once the move has ended, as before moves were operations.
    for (;;) {
      auto now = operation(moving->name());
      if (!now) return std::unexpected(now.error());
      if (now->state() == v1::Operation::SUCCEEDED) break;
      if (now->state() != v1::Operation::RUNNING)
        return refuse(kind::unavailable, "pool.home", now->error().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    auto moved = read<v1::Pool>(config_, want.name());
    if (!moved) return refuse(kind::not_found, "pool.name", want.name() + " does not exist");
    return *moved;
  }
  const std::string& name = want.name();
  std::lock_guard hold(changes_);
  auto pool = is_pool_name(name) ? read<v1::Pool>(config_, name) : std::nullopt;
  if (!pool) return refuse(kind::not_found, "pool.name", name + " does not exist");
  const bool cache = std::ranges::find(fields, "write_cache") != fields.end();
  const bool cooling = std::ranges::find(fields, "cold_cooling_seconds") != fields.end();
  const v1::WriteCache mode = want.write_cache();
  if (cache) {
    if (mode != v1::WRITE_BACK && mode != v1::WRITE_THROUGH)
      return invalid("pool.write_cache", "WRITE_BACK or WRITE_THROUGH");
    if (pool->write_log_group().empty()) {
      return refuse(
          kind::precondition, "pool.write_cache",
          name +
              " has no write log (its write_log_group): it writes through, and cannot write back");
    }
  }
  if (cooling) {
    if (!want.has_cold_cooling_seconds()) {
      return invalid(
          "pool.cold_cooling_seconds",
          "give the seconds an extent stays idle before it moves to the cold tier (0: never)");
    }
    if (auto bad = cooling_problem(want.cold_cooling_seconds()))
      return invalid("pool.cold_cooling_seconds", *bad);
  }
  v1::UpdatePoolRequest request;
  *request.mutable_pool() = want;
  for (const std::string& f : fields) request.mutable_update_mask()->add_paths(f);
  if (auto there = elsewhere(name, "UpdatePool", request))
    return parsed<v1::Pool>(std::move(*there));
  if (auto allowed = may_change("to change the pool in"); !allowed)
    return std::unexpected(allowed.error());
  v1::Pool updated = *pool;
  if (cache) updated.set_write_cache(mode);
  if (cooling) updated.set_cold_cooling_seconds(want.cold_cooling_seconds());
  // Recorded first: the next start opens the pool as asked.
  config_batch b;
  b.put(name, updated.SerializeAsString());
  if (auto done = commit(b); !done) return std::unexpected(done.error());
  auto set = on_loop(*array_, [this, name, mode, cache, cooling,
                               seconds = want.cold_cooling_seconds()](auto done) {
    if (cache) {
      auto r =
          array_->set_write_cache(name, mode == v1::WRITE_BACK ? raid::cache_mode::write_back
                                                               : raid::cache_mode::write_through);
      if (!r) return done(std::move(r));
    }
    if (cooling) return done(array_->set_cold_cooling(name, std::chrono::seconds(seconds)));
    done({});
  });
  if (!set) return refused(set.error(), cache ? "pool.write_cache" : "pool.cold_cooling_seconds");
  if (cache)
    array_->events().record(severity::info, name,
                            std::string("changed: write cache ") + v1::WriteCache_Name(mode));
  if (cooling) {
    array_->events().record(
        severity::info, name,
        want.cold_cooling_seconds() == 0
            ? std::string("changed: cold cooling off (nothing moves to the cold tier)")
            : "changed: cold cooling " + std::to_string(want.cold_cooling_seconds()) + " s");
  }
  return updated;
}

namespace {

// What is missing or malformed in a Ceph group's inputs (the field, and
// why), before the cluster is asked anything.
std::optional<std::pair<std::string, std::string>> ceph_input_problem(const v1::CephImage& c) {
  constexpr std::uint64_t extent_bytes = 4 << 20;  // the pools' extent size
  if (c.monitors().empty())
    return std::pair{"monitors", "give the monitors' addresses (\"127.0.0.1:3300\")"};
  if (c.keyring_path().empty())
    return std::pair{"keyring_path", "give the keyring file holding the cephx user's key"};
  if (c.rados_pool().empty()) return std::pair{"rados_pool", "give the RADOS pool of the image"};
  if (c.image().empty()) return std::pair{"image", "give the RBD image's name"};
  if (c.size_bytes() == 0 || c.size_bytes() % extent_bytes != 0) {
    return std::pair{"size_bytes", std::to_string(c.size_bytes()) +
                                       " is not a positive multiple of the 4 MiB extent"};
  }
  return std::nullopt;
}

// "controllers/b" of "b" or "controllers/b"; empty if neither a nor b.
std::string controller_named(const std::string& name) {
  const std::string full = name.starts_with("controllers/") ? name : "controllers/" + name;
  return full == "controllers/a" || full == "controllers/b" ? full : std::string();
}

// Where pool record `p` belongs when nothing is failed over: its home (a
// record older than homes: controller a).
std::string home_of(const v1::Pool& p) {
  return p.home().empty() ? "controllers/a" : p.home();
}

}  // namespace

outcome<void> management::may_move(const std::string& field) const {
  if (array_ == nullptr || array_->partner() == nullptr) {
    return refuse(kind::precondition, field,
                  "this array has one controller: there is nowhere to move a pool to");
  }
  if (auto allowed = may_change("to move pools in"); !allowed)
    return std::unexpected(allowed.error());
  partner::liveness now = partner::liveness::down;
  (void)on_loop(*array_, [this, &now](auto done) {
    now = array_->partner()->state();
    done({});
  });
  if (now != partner::liveness::active) {
    return refuse(kind::precondition, field,
                  std::string("controller ") + array_->partner()->name() + " is " +
                      partner::to_string(now) + ": pools move between two running controllers");
  }
  return {};
}

outcome<v1::Operation> management::follow(const std::string& kind_name, const std::string& resource,
                                          std::map<std::string, std::string> pools) {
  v1::Operation out = array_->operations().start(kind_name, resource);
  // Each pool's hand-over waits for the partner's copy of its metadata,
  // then pauses its I/O for a moment: a minute each is generous.
  const auto limit = std::chrono::seconds(60 * std::max<std::size_t>(1, pools.size()));
  boost::asio::post(array_->executor(),
                    [a = array_, op = out.name(), pools = std::move(pools), limit]() mutable {
                      a->placement_changed();
                      a->follow_pools(op, std::move(pools), limit);
                    });
  return out;
}

outcome<v1::Operation> management::move_pool(const std::string& name, const std::string& to) {
  const std::string home = controller_named(to);
  if (home.empty()) return invalid("to", "controllers/a or controllers/b, not '" + to + "'");
  std::lock_guard hold(changes_);
  auto pool = is_pool_name(name) ? read<v1::Pool>(config_, name) : std::nullopt;
  if (!pool) return refuse(kind::not_found, "name", name + " does not exist");
  if (auto allowed = may_move("to"); !allowed) return std::unexpected(allowed.error());
  if (auto target = read<v1::Controller>(config_, home); target && target->failed_over()) {
    return refuse(
        kind::precondition, "to",
        home + " is failed over (strata controller failback " + home.substr(12) + " first)");
  }
  if (pool->home() != home) {
    v1::Pool updated = *pool;
    updated.set_home(home);
    config_batch b;
    b.put(name, updated.SerializeAsString());
    if (auto done = commit(b); !done) return std::unexpected(done.error());
  }
  array_->events().record(severity::info, name,
                          "moving to " + home +
                              " (its home from now on): it is handed over once that controller "
                              "holds a current copy of its metadata");
  return follow("pool.move", name, {{name, home}});
}

outcome<v1::Operation> management::failover_controller(const std::string& name) {
  const std::string from = controller_named(name);
  if (from.empty()) return invalid("name", "controllers/a or controllers/b, not '" + name + "'");
  std::lock_guard hold(changes_);
  if (auto allowed = may_move("name"); !allowed) return std::unexpected(allowed.error());
  const std::string to = from == "controllers/a" ? "controllers/b" : "controllers/a";
  v1::Controller mark;
  mark.set_name(from);
  mark.set_failed_over(true);
  config_batch b;
  b.put(from, mark.SerializeAsString());
  if (auto done = commit(b); !done) return std::unexpected(done.error());
  std::map<std::string, std::string> moving;
  for (const auto& [key, bytes] : config_.list("pools/")) {
    v1::Pool p;
    if (is_pool_name(key) && p.ParseFromString(bytes) &&
        (p.owner().empty() ? "controllers/a" : p.owner()) == from)
      moving[key] = to;
  }
  array_->events().record(severity::warning, from,
                          "failing over by command: its " + std::to_string(moving.size()) +
                              " pool(s) move to " + to + " and stay there until failback");
  return follow("controller.failover", from, std::move(moving));
}

outcome<v1::Operation> management::failback_controller(const std::string& name) {
  const std::string to = controller_named(name);
  if (to.empty()) return invalid("name", "controllers/a or controllers/b, not '" + name + "'");
  std::lock_guard hold(changes_);
  if (auto allowed = may_move("name"); !allowed) return std::unexpected(allowed.error());
  if (config_.get(to)) {
    config_batch b;
    b.erase(to);
    if (auto done = commit(b); !done) return std::unexpected(done.error());
  }
  std::map<std::string, std::string> moving;
  for (const auto& [key, bytes] : config_.list("pools/")) {
    v1::Pool p;
    if (is_pool_name(key) && p.ParseFromString(bytes) && home_of(p) == to &&
        (p.owner().empty() ? "controllers/a" : p.owner()) != to)
      moving[key] = to;
  }
  array_->events().record(severity::info, to,
                          "failing back by command: " + std::to_string(moving.size()) +
                              " pool(s) whose home it is come back to it");
  return follow("controller.failback", to, std::move(moving));
}

outcome<v1::Pool> management::create_pool(const std::string& pool_id, const v1::Pool& want) {
  if (!valid_id(pool_id)) return bad_id("pool_id", pool_id);
  if (want.groups().empty())
    return invalid("pool.groups", "a pool needs one or more RAID-6 or RAID-1 groups");
  std::lock_guard hold(changes_);
  const std::string name = "pools/" + pool_id;
  if (config_.get(name)) return refuse(kind::exists, "pool_id", name + " exists");
  // Every group a pool has, and which.
  std::map<std::string, std::string> taken;
  for (const auto& [key, bytes] : config_.list("pools/")) {
    v1::Pool other;
    if (key.find('/', 6) != std::string::npos || !other.ParseFromString(bytes)) continue;
    for (const std::string& g : other.groups()) taken[g] = key;
    if (!other.read_cache_group().empty()) taken[other.read_cache_group()] = key;
    if (!other.write_log_group().empty()) taken[other.write_log_group()] = key;
  }
  std::set<std::string> seen;
  for (const std::string& g : want.groups()) {
    auto group = g.starts_with("groups/") ? read<v1::DiskGroup>(config_, g) : std::nullopt;
    if (!group) return refuse(kind::not_found, "pool.groups", g + " does not exist");
    if (!seen.insert(g).second) return invalid("pool.groups", g + " is listed twice");
    if (group->kind() == v1::READ_CACHE)
      return invalid("pool.groups", g + " is a read cache: name it as pool.read_cache_group");
    if (group->kind() == v1::WRITE_LOG)
      return invalid("pool.groups", g + " is a write log: name it as pool.write_log_group");
    if (taken.contains(g))
      return refuse(kind::precondition, "pool.groups", g + " is in " + taken[g]);
  }
  if (const std::string& cache = want.read_cache_group(); !cache.empty()) {
    auto group = cache.starts_with("groups/") ? read<v1::DiskGroup>(config_, cache) : std::nullopt;
    if (!group) return refuse(kind::not_found, "pool.read_cache_group", cache + " does not exist");
    if (group->kind() != v1::READ_CACHE)
      return invalid("pool.read_cache_group",
                     cache + " is " + v1::GroupKind_Name(group->kind()) + ", not READ_CACHE");
    if (taken.contains(cache))
      return refuse(kind::precondition, "pool.read_cache_group", cache + " is in " + taken[cache]);
  }
  if (!want.write_log_group().empty()) {
    // The write log's replay runs at start-up, where the loop is the
    // array's alone; a pool made through the API writes through.
    return refuse(kind::unimplemented, "pool.write_log_group",
                  "a write log is set up with the pool in the configuration file's build sections "
                  "(write_log); "
                  "pools made through the API write through");
  }
  if (want.has_cold_cooling_seconds()) {
    if (auto bad = cooling_problem(want.cold_cooling_seconds()))
      return invalid("pool.cold_cooling_seconds", *bad);
  }
  if (auto allowed = may_change("to make the pool in"); !allowed)
    return std::unexpected(allowed.error());
  v1::Pool out = want;
  out.set_name(name);
  out.set_owner("controllers/" + array_->controller_name());  // the controller asked serves it
  out.set_ownership_epoch(1);
  out.set_home("controllers/" + array_->controller_name());
  // Recorded first: a crash before it is open opens it at the next start.
  config_batch b;
  b.put(name, out.SerializeAsString());
  if (auto done = commit(b); !done) return std::unexpected(done.error());
  if (auto opened = array_->add_pool(out); !opened) {
    config_batch undo;  // a failed request changes nothing
    undo.erase(name);
    (void)commit(undo);
    return refused(opened.error(), "pool");
  }
  array_->events().record(severity::info, name,
                          "created over " + std::to_string(want.groups_size()) + " group(s)");
  return out;
}

// ---- disks and groups ----

std::string management::pool_of_group(const std::string& group) const {
  for (const auto& [key, bytes] : config_.list("pools/")) {
    v1::Pool p;
    if (!is_pool_name(key) || !p.ParseFromString(bytes)) continue;
    if (std::ranges::find(p.groups(), group) != p.groups().end() || p.read_cache_group() == group ||
        p.write_log_group() == group)
      return key;
  }
  return {};
}

std::string management::pool_of_disk(const std::string& disk) const {
  for (const auto& [key, bytes] : config_.list("groups/")) {
    v1::DiskGroup g;
    if (g.ParseFromString(bytes) && std::ranges::find(g.members(), disk) != g.members().end())
      return pool_of_group(key);
  }
  return {};
}

outcome<v1::Disk> management::create_disk(const std::string& disk_id, const v1::Disk& d) {
  if (!valid_id(disk_id)) return bad_id("disk_id", disk_id);
  if (d.kind() != v1::HDD && d.kind() != v1::SSD) return invalid("disk.kind", "HDD or SSD");
  constexpr std::uint64_t smallest = 64ull << 20;
  if (d.size_bytes() < smallest || d.size_bytes() % 4096 != 0) {
    return invalid("disk.size_bytes", std::to_string(d.size_bytes()) +
                                          " is not a multiple of 4096 of at least 64 MiB");
  }
  std::lock_guard hold(changes_);
  const std::string name = "disks/" + disk_id;
  if (config_.get(name)) return refuse(kind::exists, "disk_id", name + " exists");
  if (auto allowed = may_change("to add the disk to"); !allowed)
    return std::unexpected(allowed.error());
  v1::Disk out;
  auto added = on_loop(
      *array_, [this, disk_id, drive = d.kind() == v1::HDD ? drive_kind::hdd : drive_kind::ssd,
                bytes = d.size_bytes(), &out](auto done) {
        auto disk = array_->add_disk(disk_id, drive, bytes);
        if (!disk) return done(std::unexpected(disk.error()));
        out = std::move(*disk);
        done({});
      });
  if (!added) return refused(added.error(), "disk");
  config_batch b;
  b.put(name, out.SerializeAsString());
  if (auto done = commit(b); !done) return std::unexpected(done.error());
  array_->events().record(severity::info, name,
                          "added: a simulated " + v1::DiskKind_Name(d.kind()) + " of " +
                              std::to_string(d.size_bytes()) + " bytes in slot " +
                              std::to_string(out.slot()));
  describe(out);
  return out;
}

outcome<v1::Disk> management::update_disk(const v1::Disk& want,
                                          const std::vector<std::string>& fields) {
  if (auto ok = check_fields(fields, {"spare"}); !ok) return std::unexpected(ok.error());
  const std::string& name = want.name();
  std::lock_guard hold(changes_);
  auto disk = name.starts_with("disks/") ? read<v1::Disk>(config_, name) : std::nullopt;
  if (!disk) return refuse(kind::not_found, "disk.name", name + " does not exist");
  if (auto allowed = may_change("to change the disk in"); !allowed)
    return std::unexpected(allowed.error());
  const bool spare = want.spare();
  const bool was = disk->spare();
  auto changed = on_loop(
      *array_, [this, name, spare](auto done) { done(array_->drives().set_spare(name, spare)); });
  if (!changed) return refused(changed.error(), "disk.spare");
  disk->set_spare(spare);
  config_batch b;
  b.put(name, disk->SerializeAsString());
  if (auto done = commit(b); !done) {
    // Back to what it was (not to the opposite of what was asked: asking
    // a spare to be a spare changes nothing to undo).
    if (was != spare)
      (void)on_loop(*array_,
                    [this, name, was](auto undo) { undo(array_->drives().set_spare(name, was)); });
    return std::unexpected(done.error());
  }
  describe(*disk);
  return *disk;
}

outcome<v1::Disk> management::fail_disk(const std::string& name) {
  std::lock_guard hold(changes_);
  auto disk = get_record<v1::Disk>(config_, "disks/", name);
  if (!disk) return disk;
  v1::GetRequest request;
  request.set_name(name);
  if (auto there = elsewhere(pool_of_disk(name), "FailDisk", request))
    return parsed<v1::Disk>(std::move(*there));
  if (auto allowed = may_change("to fail the disk in"); !allowed)
    return std::unexpected(allowed.error());
  // Described in the same turn of the loop: a hot spare may take its place right after.
  auto failed = on_loop(*array_, [this, &disk](auto done) {
    auto r = array_->drives().fail_disk(disk->name());
    if (r) array_->drives().describe(*disk);
    done(std::move(r));
  });
  if (!failed) return refused(failed.error(), "name");
  return disk;
}

outcome<v1::Operation> management::replace_disk(const std::string& name,
                                                const std::string& replacement) {
  std::lock_guard hold(changes_);
  if (!name.starts_with("disks/") || !config_.get(name))
    return refuse(kind::not_found, "name", name + " does not exist");
  if (!replacement.starts_with("disks/") || !config_.get(replacement))
    return refuse(kind::not_found, "replacement", replacement + " does not exist");
  v1::ReplaceDiskRequest request;
  request.set_name(name);
  request.set_replacement(replacement);
  if (auto there = elsewhere(pool_of_disk(name), "ReplaceDisk", request))
    return parsed<v1::Operation>(std::move(*there));
  if (auto allowed = may_change("to replace the disk in"); !allowed)
    return std::unexpected(allowed.error());
  v1::Operation out;
  auto started = on_loop(*array_, [this, &name, &replacement, &out](auto done) {
    auto op = array_->drives().replace_disk(name, replacement);
    if (!op) return done(std::unexpected(op.error()));
    out = std::move(*op);
    done({});
  });
  // The bay's messages start with the disk they are about.
  if (!started)
    return refused(started.error(),
                   started.error().message.starts_with(replacement) ? "replacement" : "name");
  return out;
}

outcome<v1::Disk> management::erase_disk(const std::string& name) {
  std::lock_guard hold(changes_);
  auto disk = get_record<v1::Disk>(config_, "disks/", name);
  if (!disk) return disk;
  if (auto allowed = may_change("to erase the disk in"); !allowed)
    return std::unexpected(allowed.error());
  auto erased = on_loop(
      *array_, [this, name](auto done) { array_->drives().erase_disk(name, std::move(done)); });
  if (!erased) return refused(erased.error(), "name");
  describe(*disk);
  return disk;
}

outcome<v1::DiskGroup> management::create_group(const std::string& id, const v1::DiskGroup& g,
                                                const std::string& pool_name) {
  if (!valid_id(id)) return bad_id("group_id", id);
  const int n = g.members_size();
  switch (g.kind()) {
    case v1::RAID6:
      if (n < 4 || n > 255)
        return invalid("group.members", "RAID-6 needs 4 to 255 disks, not " + std::to_string(n));
      break;
    case v1::RAID1:
      if (n < 2)
        return invalid("group.members", "RAID-1 needs 2 or more disks, not " + std::to_string(n));
      break;
    case v1::READ_CACHE:
      if (n != 1)
        return invalid("group.members",
                       "a read cache is one SSD, not " + std::to_string(n) + " disks");
      break;
    case v1::CEPH:
      if (n != 0)
        return invalid("group.members", "a Ceph group has no disks: Ceph keeps its redundancy");
      if (auto bad = ceph_input_problem(g.ceph()))
        return invalid("group.ceph." + bad->first, bad->second);
      break;
    default:
      return invalid("group.kind", "RAID6, RAID1, READ_CACHE or CEPH");
  }
  std::lock_guard hold(changes_);
  const std::string name = "groups/" + id;
  if (config_.get(name)) return refuse(kind::exists, "group_id", name + " exists");
  std::set<std::string> seen;
  for (const std::string& d : g.members()) {
    auto disk = d.starts_with("disks/") ? read<v1::Disk>(config_, d) : std::nullopt;
    if (!disk) return refuse(kind::not_found, "group.members", d + " does not exist");
    if (!seen.insert(d).second) return invalid("group.members", d + " is listed twice");
    if (g.kind() != v1::RAID6 && disk->kind() != v1::SSD) {
      return invalid("group.members", d + " is an HDD: " + v1::GroupKind_Name(g.kind()) +
                                          " groups are the SSD tier");
    }
  }
  std::optional<v1::Pool> pool;
  if (!pool_name.empty()) {
    pool = is_pool_name(pool_name) ? read<v1::Pool>(config_, pool_name) : std::nullopt;
    if (!pool) return refuse(kind::not_found, "pool", pool_name + " does not exist");
    if (g.kind() == v1::READ_CACHE)
      return refuse(kind::precondition, "pool",
                    "a read cache joins a pool only when the pool is built");
    if (g.kind() == v1::WRITE_LOG)
      return refuse(kind::precondition, "pool",
                    "a write log joins a pool only when the pool is built");
  }
  if (pool) {
    v1::CreateDiskGroupRequest request;
    request.set_group_id(id);
    *request.mutable_group() = g;
    request.set_pool(pool_name);
    if (auto there = elsewhere(pool_name, "CreateDiskGroup", request))
      return parsed<v1::DiskGroup>(std::move(*there));
  }
  if (auto allowed = may_change("to make the group in"); !allowed)
    return std::unexpected(allowed.error());
  const std::vector<std::string> members(g.members().begin(), g.members().end());
  v1::DiskGroup out;
  if (g.kind() == v1::CEPH) {
    // Every input is checked against the cluster here, off the loop, before
    // anything is recorded: a refusal changes nothing in the array.
    ceph_group_spec spec;
    spec.connection.monitors = g.ceph().monitors();
    spec.connection.user = g.ceph().user().empty() ? "admin" : g.ceph().user();
    spec.connection.keyring_path = g.ceph().keyring_path();
    // A monitor that is there answers in milliseconds; the answer must
    // reach the client within its call's deadline (10 s for the CLI).
    spec.connection.connect_timeout = std::chrono::seconds(5);
    spec.rados_pool = g.ceph().rados_pool();
    spec.image = g.ceph().image();
    spec.size_bytes = g.ceph().size_bytes();
    auto image = ceph_image::connect(array_->loop(), spec, g.ceph().create(), {});
    if (!image) return refused(image.error(), "group.ceph");
    auto shared = std::make_shared<std::unique_ptr<ceph_image>>(std::move(*image));
    auto adopted = on_loop(*array_, [this, name, shared, &out](auto done) {
      array_->adopt_ceph_group(name, std::move(*shared),
                               [&out, done](std::expected<v1::DiskGroup, error> r) {
                                 if (!r) return done(std::unexpected(r.error()));
                                 out = std::move(*r);
                                 done({});
                               });
    });
    if (!adopted) return refused(adopted.error(), "group_id");
  }
  std::expected<void, error> formed;
  if (g.kind() != v1::CEPH)
    formed = on_loop(*array_, [this, name, made = g.kind(), members, &out](auto done) {
      array_->form_group(name,
                         made == v1::RAID6       ? group_kind::raid6
                         : made == v1::RAID1     ? group_kind::raid1
                         : made == v1::WRITE_LOG ? group_kind::write_log
                                                 : group_kind::read_cache,
                         members, [&out, done](std::expected<v1::DiskGroup, error> r) {
                           if (!r) return done(std::unexpected(r.error()));
                           out = std::move(*r);
                           done({});
                         });
    });
  if (!formed) return refused(formed.error(), "group.members");
  // The group, and the pool naming it, are recorded before the pool uses
  // it: a crash in between is finished by the next start.
  config_batch b;
  b.put(name, out.SerializeAsString());
  if (pool) {
    pool->add_groups(name);
    b.put(pool->name(), pool->SerializeAsString());
  }
  if (auto done = commit(b); !done) return std::unexpected(done.error());
  if (pool) {
    auto grown = on_loop(*array_, [this, pool_name = pool->name(), name](auto done) {
      array_->grow_pool(pool_name, name, std::move(done));
    });
    if (!grown) {
      if (grown.error().code == make_error_code(errc::invalid_argument)) {
        // Refused before the pool changed: the pool record goes back; the
        // group stays, a group no pool uses.
        config_batch undo;
        pool->mutable_groups()->RemoveLast();
        undo.put(pool->name(), pool->SerializeAsString());
        (void)commit(undo);
      }
      return refused(grown.error(), "pool");
    }
  }
  array_->events().record(
      severity::info, name,
      (g.kind() == v1::CEPH
           ? "CEPH group made over image " + g.ceph().rados_pool() + "/" + g.ceph().image() +
                 " at " + g.ceph().monitors()
           : v1::GroupKind_Name(g.kind()) + " of " + std::to_string(n) + " disks made") +
          (pool ? ", " + pool->name() + " grown by it" : ""));
  describe(out);
  return out;
}

outcome<v1::Operation> management::scrub_group(const std::string& name) {
  std::lock_guard hold(changes_);
  if (!name.starts_with("groups/") || !config_.get(name))
    return refuse(kind::not_found, "name", name + " does not exist");
  v1::GetRequest request;
  request.set_name(name);
  if (auto there = elsewhere(pool_of_group(name), "ScrubDiskGroup", request))
    return parsed<v1::Operation>(std::move(*there));
  if (auto allowed = may_change("to scrub"); !allowed) return std::unexpected(allowed.error());
  v1::Operation out;
  auto started = on_loop(*array_, [this, &name, &out](auto done) {
    auto op = array_->drives().scrub(name);
    if (!op) return done(std::unexpected(op.error()));
    out = std::move(*op);
    done({});
  });
  if (!started) return refused(started.error(), "name");
  return out;
}

}  // namespace strata::controller
