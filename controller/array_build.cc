// The array's start-up: an empty state directory built from its plan (the
// embedded default or a configuration file's build sections), or the array
// the config store remembers assembled again from its drives (array.h).
#include <algorithm>
#include <cstring>
#include <set>

#include "controller/array.h"
#include "controller/array_records.h"
#include "strata/v1/array.pb.h"
#include "strata/v1/resources.pb.h"

namespace strata::controller {

using namespace records;

std::expected<void, error> array::build_default() {
  const array_plan& plan = options_.plan;
  log("an empty state directory: building " + options_.plan_origin + " in " +
      options_.state_dir.string() + " (" + std::to_string(plan.drives.size()) + " drives, " +
      std::to_string(plan.groups.size()) + " groups, " + std::to_string(plan.volumes.size()) +
      " volumes)");
  auto s = shelf::open(*ring_, clock_, shelf_dir(), plan.drives,
                       {.volatile_write_caches = options_.volatile_drive_caches});
  if (!s) return std::unexpected(s.error());
  shelf_ = std::move(*s);
  // Before anything is formatted: never over another array's drives.
  if (auto mine = check_shelf(read_shelf_areas(), true); !mine) return mine;
  auto fresh_identity = make_identity();
  if (!fresh_identity) return std::unexpected(fresh_identity.error());
  identity_ = *fresh_identity;
  register_reservations();
  config_batch records;
  std::map<std::string, std::size_t> slot_of;  // drive name -> shelf index
  for (std::size_t i = 0; i < shelf_->size(); ++i) {
    const drive_spec& d = shelf_->spec(i);  // as opened: its path, size and model
    const timing_model_info* model = find_timing_model(d.timing_model);
    v1::Disk disk;
    disk.set_name("disks/" + d.name);
    disk.set_kind(d.kind == drive_kind::hdd ? v1::HDD : v1::SSD);
    disk.set_model(model != nullptr ? std::string(model->description) : "");
    // A simulated drive gets a serial; a real one's is its own, which we do not read yet.
    disk.set_serial(plan.drives[i].path.empty() ? "SIM-" + random_hex(6) : "");
    disk.set_size_bytes(d.bytes);
    disk.set_path(d.path.string());
    disk.set_timing_model(d.timing_model);
    disk.set_slot(static_cast<std::uint32_t>(i));
    records.put(disk.name(), disk.SerializeAsString());
    slot_of[d.name] = i;
  }
  for (const group_plan& planned : plan.groups) {
    std::vector<device::block_device*> members;
    v1::DiskGroup record;
    record.set_name("groups/" + planned.name);
    record.set_kind(kind_of(planned.kind));
    if (planned.kind == group_kind::ceph) {
      auto made = connect_planned_ceph(planned, record);
      if (!made) return std::unexpected(made.error());
      records.put(record.name(), record.SerializeAsString());
      groups_.push_back(std::move(*made));
      group_names_.push_back(record.name());
      continue;
    }
    for (const std::string& drive : planned.drives) {
      const auto at = slot_of.find(drive);
      if (at == slot_of.end())
        return std::unexpected(
            make_error(errc::invalid_argument, record.name() + ": no drive " + drive));
      members.push_back(&shelf_->drive(at->second));
      record.add_members("disks/" + drive);
    }
    std::optional<std::expected<std::unique_ptr<disk_group>, error>> made;
    create_group(planned.kind, members, group_options_for(groups_.size()),
                 [&](auto r) { made = std::move(r); });
    wait([&] { return made.has_value(); });
    if (!*made)
      return std::unexpected(
          make_error(errc::io_error, record.name() + ": " + made->error().message));
    record.set_group_id(std::string((**made)->id().begin(), (**made)->id().end()));
    records.put(record.name(), record.SerializeAsString());
    log(record.name() + ": " + to_string(planned.kind) + " of " + std::to_string(members.size()) +
        " drive(s), id " + to_hex((**made)->id()));
    groups_.push_back(std::move(**made));
    group_names_.push_back(record.name());
  }
  // This controller serves every pool it builds; a pool whose home is the
  // partner is handed over once the partner's copy of it is current.
  std::vector<v1::Pool> pools;
  for (const pool_plan& planned : plan.pools) {
    v1::Pool& pool = pools.emplace_back();
    pool.set_name("pools/" + planned.name);
    for (const std::string& g : planned.groups)
      pool.add_groups("groups/" + g);  // in the plan's order
    if (!planned.read_cache_group.empty())
      pool.set_read_cache_group("groups/" + planned.read_cache_group);
    if (!planned.write_log_group.empty())
      pool.set_write_log_group("groups/" + planned.write_log_group);
    pool.set_owner("controllers/" + options_.controller);
    pool.set_ownership_epoch(1);
    pool.set_home("controllers/" + planned.home);
    if (planned.cold_cooling_seconds) pool.set_cold_cooling_seconds(*planned.cold_cooling_seconds);
    records.put(pool.name(), pool.SerializeAsString());
  }
  const auto identity_bytes = area::encode(identity_, 1);
  records.put("array/identity", std::string(reinterpret_cast<const char*>(identity_bytes.data()),
                                            identity_bytes.size()));
  // The groups are on the drives now: remember them before anything else,
  // so that a restart finds them. Then the areas: a crash in between
  // leaves groups with blank areas, which the next start stamps.
  if (auto done = config_->commit(records); !done) return std::unexpected(done.error());
  if (auto stamped = stamp_shelf(); !stamped) return stamped;
  log("the array's id is " + id_text(identity_) + " (on every group member's controller area)");
  for (const v1::Pool& pool : pools) {
    if (auto opened = open_pool(pool.SerializeAsString()); !opened)
      return std::unexpected(opened.error());
  }

  // A crash from here to the commit below leaves pool volumes with no
  // record, which the next start deletes (reconcile_volumes); that start
  // assembles what was committed and does not build again.
  config_batch rest;
  for (const volume_plan& planned : plan.volumes) {
    const std::string pool = "pools/" + planned.pool;
    v1::Volume volume;
    volume.set_name(pool + "/volumes/" + planned.name);
    volume.set_size_bytes(planned.bytes);
    volume.set_block_size_bytes(planned.block_size_bytes);
    volume.set_affinity(affinity_of(planned.placement));
    volume.set_serial(new_volume_serial(planned.name));
    std::optional<std::expected<tiering::volume*, error>> created;
    pool_named(pool)->pool->create_volume(
        {planned.name, tiering_block_bytes, volume.size_bytes() / tiering_block_bytes,
         planned.placement},
        [&](auto r) { created = std::move(r); });
    wait([&] { return created.has_value(); });
    if (!*created)
      return std::unexpected(
          error{created->error().code, volume.name() + ": " + created->error().message});
    rest.put(volume.name(), volume.SerializeAsString());
    log(volume.name() + ": " + std::to_string(volume.size_bytes()) + " bytes thin, placement " +
        std::string(tiering::to_string(planned.placement)));
  }
  for (const host_plan& planned : plan.hosts) {
    v1::Host host;
    host.set_name("hosts/" + planned.name);
    for (const std::string& iqn : planned.iqns) host.add_iqns(iqn);
    for (const std::string& nqn : planned.nqns) host.add_nqns(nqn);
    host.set_any_initiator(planned.any_initiator);
    host.set_chap_user(planned.chap_user);
    host.set_chap_secret(planned.chap_secret);
    host.set_mutual_chap_user(planned.mutual_chap_user);
    host.set_mutual_chap_secret(planned.mutual_chap_secret);
    rest.put(host.name(), host.SerializeAsString());
  }
  for (std::size_t i = 0; i < plan.mappings.size(); ++i) {
    const mapping_plan& planned = plan.mappings[i];
    v1::Mapping mapping;
    mapping.set_name("mappings/m" + std::to_string(i + 1));
    const auto volume = std::ranges::find(plan.volumes, planned.volume, &volume_plan::name);
    mapping.set_volume("pools/" +
                       (volume != plan.volumes.end() ? volume->pool : plan.pools.front().name) +
                       "/volumes/" + planned.volume);
    mapping.set_host("hosts/" + planned.host);
    mapping.set_lun(planned.lun);
    rest.put(mapping.name(), mapping.SerializeAsString());
    log(mapping.name() + ": " + mapping.volume() + " to " + mapping.host() + " as LUN " +
        std::to_string(planned.lun));
  }
  if (auto done = config_->commit(rest); !done) return std::unexpected(done.error());
  return {};
}

std::expected<void, error> array::assemble() {
  std::vector<std::pair<std::uint32_t, drive_spec>> slots;  // (slot, drive)
  for (const auto& [key, bytes] : config_->list("disks/")) {
    auto disk = decode<v1::Disk>(key, bytes);
    if (!disk) return std::unexpected(disk.error());
    drive_spec d{short_name(disk->name()),
                 disk->kind() == v1::HDD ? drive_kind::hdd : drive_kind::ssd, disk->size_bytes(),
                 disk->path(), disk->timing_model()};
    // A simulated drive (its file STATE/shelf/NAME.img) is opened as one:
    // created if missing, and behind its kind's model if its record is
    // from before timing_model was kept (shelf.h). Any other path is a
    // drive of its own, opened as recorded.
    const std::filesystem::path own = shelf_dir() / (d.name + ".img");
    std::error_code ec;
    if (d.path.empty() || d.path.lexically_normal() == own.lexically_normal() ||
        std::filesystem::equivalent(d.path, own, ec))
      d.path.clear();
    slots.emplace_back(disk->slot(), std::move(d));
  }
  // In slot order (records from before slots were kept all say 0: their key order).
  std::ranges::stable_sort(slots, {}, &std::pair<std::uint32_t, drive_spec>::first);
  std::vector<drive_spec> drives;
  for (auto& [slot, d] : slots) drives.push_back(std::move(d));
  auto s = shelf::open(*ring_, clock_, shelf_dir(), drives,
                       {.volatile_write_caches = options_.volatile_drive_caches});
  if (!s) return std::unexpected(s.error());
  shelf_ = std::move(*s);
  // Which array this is, by its record; then no drive may say another.
  bool stamped = false;
  if (const auto recorded = config_->get("array/identity")) {
    // The record is the identity's slot as the areas hold it.
    std::vector<std::byte> as_area(area::slots * area::slot_bytes);
    std::memcpy(as_area.data(), recorded->data(), std::min(recorded->size(), area::slot_bytes));
    auto decoded = area::decode(as_area);
    if (!decoded || !decoded->array)
      return std::unexpected(
          make_error(errc::invalid_argument, "config: the record array/identity is corrupt"));
    identity_ = *decoded->array;
    stamped = true;
    // Before any write (assembly writes superblocks): the partner may have
    // removed this controller's key while it was down.
    register_reservations();
  }
  const auto areas = read_shelf_areas();
  if (auto mine = check_shelf(areas, !stamped); !mine) return mine;
  // Who owns each pool is what its drives say (the partner may have taken
  // one over while this controller was away), then the config's record.
  for (const drive_area& a : areas) {
    const auto& o = a.contents.ownership;
    if (!o) continue;
    auto [at, added] = drive_owners_.emplace(o->pool, *o);
    if (!added && o->sequence() > at->second.sequence()) at->second = *o;
  }
  if (options_.partner_link && partner_beating(areas)) {
    // The partner found this controller silent: it may be taking the
    // pools the drives name this controller the owner of over right now
    // (it read their records, and is about to write its epoch). They wait
    // until it has heard this controller beat (reclaim_pools).
    for (const auto& [pool, o] : drive_owners_) {
      if (o.owner != options_.controller) continue;
      reclaim_.insert(pool);
      taking_over_.insert(pool);  // TAKING_OVER meanwhile
    }
  }
  // Only the groups of the pools this controller serves (and, on
  // controller a, the groups in no pool): the partner's are the partner's
  // to assemble, and assembling writes (superblocks, a resync).
  std::set<std::string> others;
  for (const auto& [key, bytes] : config_->list("pools/")) {
    if (!top_level(key, "pools/")) continue;
    auto pool = decode<v1::Pool>(key, bytes);
    if (!pool) return std::unexpected(pool.error());
    if (owns(*pool)) continue;
    for (const std::string& g : pool->groups()) others.insert(g);
    if (!pool->read_cache_group().empty()) others.insert(pool->read_cache_group());
    if (!pool->write_log_group().empty()) others.insert(pool->write_log_group());
  }
  std::set<std::string> in_pools;
  for (const auto& [key, bytes] : config_->list("pools/")) {
    if (!top_level(key, "pools/")) continue;
    if (auto pool = decode<v1::Pool>(key, bytes)) {
      for (const std::string& g : pool->groups()) in_pools.insert(g);
      in_pools.insert(pool->read_cache_group());
      in_pools.insert(pool->write_log_group());
    }
  }
  for (const auto& [key, bytes] : config_->list("groups/")) {
    if (others.contains(key) || (options_.controller != "a" && !in_pools.contains(key))) continue;
    if (auto assembled = assemble_named(key, bytes); !assembled) return assembled;
  }
  if (!stamped) {
    // An array built before the controller areas: it gets its identity now.
    auto made = make_identity();
    if (!made) return std::unexpected(made.error());
    identity_ = *made;
    const auto identity_bytes = area::encode(identity_, 1);
    config_batch b;
    b.put("array/identity",
          std::string(reinterpret_cast<const char*>(identity_bytes.data()), identity_bytes.size()));
    if (auto done = config_->commit(b); !done) return std::unexpected(done.error());
    log("the array had no id on its drives: it is " + id_text(identity_) + " from now on");
    register_reservations();
  }
  for (const auto& [pool, o] : drive_owners_)
    note_owner(pool, o.owner, o.epoch);  // taken over or handed back while this controller was away
  // What a crash or a failed write left out (a group made just before,
  // an array built before the areas) is written now.
  if (auto written = stamp_shelf(); !written) return written;
  for (const auto& [key, bytes] : config_->list("pools/")) {
    if (!top_level(key, "pools/")) continue;
    auto pool = decode<v1::Pool>(key, bytes);
    if (!pool) return std::unexpected(pool.error());
    if (reclaim_.contains(key)) {
      log(key + ": waits: controller " + std::string(options_.controller == "a" ? "b" : "a") +
          " is alive and may be taking it over; opened here once it hears this controller, if its "
          "drives still name this one");
      continue;
    }
    if (!owns(*pool)) {
      const auto on_drives = drive_owners_.find(key);
      log(key + ": served by controller " +
          (on_drives != drive_owners_.end() ? on_drives->second.owner : short_name(pool->owner())));
      continue;
    }
    if (auto opened = open_pool(bytes); !opened) return std::unexpected(opened.error());
    if (auto reconciled = reconcile_volumes(key); !reconciled)
      return std::unexpected(reconciled.error());
  }
  for (const v1::Operation& op : operations_->interrupted()) {
    if (op.kind() == "volume.delete" && !config_->get(op.resource())) {
      operations_->finish(op.name(), {});  // finished by reconcile_volumes (or before the stop)
    } else {
      operations_->finish(op.name(), std::unexpected(make_error(
                                         errc::io_error, "the controller stopped while it ran")));
    }
  }
  return {};
}

std::expected<void, error> array::assemble_named(const std::string& key, const std::string& bytes) {
  auto record = decode<v1::DiskGroup>(key, bytes);
  if (!record) return std::unexpected(record.error());
  group_id id{};
  if (record->group_id().size() != id.size())
    return std::unexpected(
        make_error(errc::invalid_argument, "config: " + key + " has no group id"));
  std::copy(record->group_id().begin(), record->group_id().end(), id.begin());
  const auto existing = std::ranges::find(group_names_, key);
  const std::size_t index = existing == group_names_.end()
                                ? groups_.size()
                                : static_cast<std::size_t>(existing - group_names_.begin());
  if (record->kind() == v1::CEPH) {
    lost_groups_.erase(index);
    if (index < groups_.size()) {
      groups_[index] = open_ceph_group(key, *record);
      return {};
    }
    groups_.push_back(open_ceph_group(key, *record));
    group_names_.push_back(key);
    if (bay_) bay_->group_added(groups_.size() - 1);
    return {};
  }
  std::vector<device::block_device*> all;
  for (std::size_t i = 0; i < shelf_->size(); ++i) all.push_back(&shelf_->drive(i));
  // A group this controller handed over or lost earlier is assembled
  // anew in its place (`index`): the partner may have changed it since.
  std::optional<std::expected<std::unique_ptr<disk_group>, error>> found;
  assemble_group(kind_of(record->kind()), id, all, group_options_for(index),
                 [&](auto r) { found = std::move(r); });
  const std::size_t groups_before = groups_.size();
  wait([&] { return found.has_value(); });
  if (groups_.size() != groups_before) {
    // Another pool's opening ran in this wait (array::one_at_a_time keeps
    // them apart): `index` may name another group now.
    return std::unexpected(
        make_error(errc::busy, key + ": the array's groups changed while it was assembled"));
  }
  if (!*found)
    return std::unexpected(make_error(errc::io_error, key + ": " + found->error().message));
  log(key + ": assembled from its superblocks");
  lost_groups_.erase(index);
  if (index < groups_.size()) {
    groups_[index] = std::move(**found);
    return {};
  }
  groups_.push_back(std::move(**found));
  group_names_.push_back(key);
  if (bay_) bay_->group_added(groups_.size() - 1);
  return {};
}

std::expected<void, error> array::reconcile_volumes(const std::string& pool_name) {
  tiering::pool& pool = *pool_named(pool_name)->pool;
  for (tiering::volume* v : pool.volumes()) {
    const std::string name = pool_name + "/volumes/" + v->record().name;
    if (const auto bytes = config_->get(name)) {
      // The volume's own write cache mode lives in its record only.
      auto record = decode<v1::Volume>(name, *bytes);
      if (!record) return std::unexpected(record.error());
      v->set_write_through(record->write_cache() == v1::WRITE_THROUGH);
      continue;
    }
    std::optional<std::expected<void, error>> deleted;
    pool.delete_volume(v->record().name,
                       [&](std::expected<void, error> r) { deleted = std::move(r); });
    wait([&] { return deleted.has_value(); });
    if (!*deleted)
      return std::unexpected(
          make_error(errc::io_error, name + ": finishing its delete: " + deleted->error().message));
    log(name + ": its delete, cut short by the last stop, is finished");
  }
  return {};
}

std::vector<drive_area> array::read_shelf_areas() {
  std::vector<device::block_device*> drives;
  for (std::size_t i = 0; i < shelf_->size(); ++i) drives.push_back(&shelf_->drive(i));
  std::optional<std::vector<drive_area>> found;
  read_drive_areas(drives, [&](std::vector<drive_area> r) { found = std::move(r); });
  wait([&] { return found.has_value(); });
  return std::move(*found);
}

std::expected<void, error> array::check_shelf(const std::vector<drive_area>& areas, bool building) {
  for (const drive_area& a : areas) {
    if (!a.contents.array) continue;
    const std::string drive = "disks/" + shelf_->spec(a.drive).name;
    std::string why;
    if (building) {
      why = "the shelf in " + shelf_dir().string() + " holds array " + id_text(*a.contents.array) +
            " (" + drive +
            " says so): a new array is not built over another's drives. Start with that array's "
            "state directory, or give "
            "this one a shelf of its own (--shelf)";
    } else if (a.contents.array->id != identity_.id) {
      why = drive + " belongs to array " + id_text(*a.contents.array) + ", not to this one (" +
            id_text(identity_) + "): this state directory is not for the shelf in " +
            shelf_dir().string();
    } else {
      continue;
    }
    events_->record(severity::error, "", "refused to start: " + why);
    return std::unexpected(make_error(errc::busy, why));
  }
  return {};
}

std::expected<void, error> array::stamp_shelf() {
  std::map<std::string, pool_ownership>
      owner_of_group;  // group record name -> its pool's ownership
  for (const auto& [key, bytes] : config_->list("pools/")) {
    if (!top_level(key, "pools/")) continue;
    auto pool = decode<v1::Pool>(key, bytes);
    if (!pool) return std::unexpected(pool.error());
    const std::string owner =
        pool->owner().empty() ? options_.controller : short_name(pool->owner());
    const pool_ownership o{key, owner, std::max<std::uint64_t>(1, pool->ownership_epoch()),
                           identity_.created_unix_ms};
    for (const std::string& g : pool->groups()) owner_of_group[g] = o;
    if (!pool->read_cache_group().empty()) owner_of_group[pool->read_cache_group()] = o;
    if (!pool->write_log_group().empty()) owner_of_group[pool->write_log_group()] = o;
  }
  std::map<const device::block_device*, std::optional<pool_ownership>> member_of;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const auto owned = owner_of_group.find(group_names_[g]);
    for (unsigned m = 0; m < groups_[g]->member_count(); ++m) {
      member_of[groups_[g]->member_device(m)] =
          owned == owner_of_group.end() ? std::nullopt : std::optional(owned->second);
    }
  }
  // Only what is missing: an ownership record is never overwritten here
  // (the partner may have taken the pool over with a newer epoch).
  std::vector<area_stamp> stamps;
  for (const drive_area& a : read_shelf_areas()) {
    device::block_device* d = &shelf_->drive(a.drive);
    const auto m = member_of.find(d);
    if (m == member_of.end()) continue;  // an area left on a drive no group uses now
    area_stamp stamp{d, a.offset_bytes, std::nullopt, std::nullopt};
    if (!a.contents.array) stamp.identity = identity_;
    if (!a.contents.ownership) stamp.ownership = m->second;
    if (stamp.identity || stamp.ownership) stamps.push_back(stamp);
  }
  std::optional<std::error_code> written;
  write_drive_stamps(std::move(stamps), [&](std::error_code e) { written = e; });
  wait([&] { return written.has_value(); });
  if (*written)
    return std::unexpected(make_error(
        errc::io_error, "cannot write the array's identity to the drives' controller areas: " +
                            written->message()));
  return {};
}

void array::stamp_group(const disk_group& g, std::optional<pool_ownership> ownership,
                        std::function<void()> done) {
  std::vector<device::block_device*> members;  // the shelf's own pointers to them
  for (unsigned m = 0; m < g.member_count(); ++m) {
    for (std::size_t i = 0; i < shelf_->size(); ++i) {
      if (&shelf_->drive(i) == g.member_device(m)) members.push_back(&shelf_->drive(i));
    }
  }
  read_drive_areas(
      members, [this, members, ownership, done = std::move(done)](std::vector<drive_area> found) {
        std::vector<area_stamp> stamps;
        for (const drive_area& a : found)
          stamps.push_back({members[a.drive], a.offset_bytes, identity_, ownership});
        write_drive_stamps(std::move(stamps), [this, done](std::error_code e) {
          if (e) {
            events_->record(severity::warning, "",
                            "the array's id could not be written to a group's controller areas (" +
                                e.message() + "); the next start writes it");
          }
          done();
        });
      });
}

bool array::partner_beating(const std::vector<drive_area>& areas) {
  const bool a = options_.controller == "a";
  auto newest = [a](const std::vector<drive_area>& found) -> std::optional<drive_heartbeat> {
    std::optional<drive_heartbeat> best;
    for (const drive_area& d : found) {
      const auto& beat = a ? d.contents.heartbeat_b : d.contents.heartbeat_a;
      if (beat && (!best || beat->counter > best->counter)) best = beat;
    }
    return best;
  };
  const auto before = newest(areas);
  if (!before || before->state != controller_state::running)
    return false;  // never beat, or stopped cleanly
  // Its counter moves every 250 ms while it runs.
  boost::asio::steady_timer pause(loop_, std::chrono::milliseconds(800));
  bool waited = false;
  pause.async_wait([&](boost::system::error_code) { waited = true; });
  wait([&] { return waited; });
  const auto after = newest(read_shelf_areas());
  const bool beating =
      after && after->counter != before->counter && after->state == controller_state::running;
  if (beating)
    log("controller " + std::string(a ? "b" : "a") +
        "'s drive heartbeat beats: the pools the drives name this controller the owner of wait for "
        "it to hear this one");
  return beating;
}

bool array::owns(const v1::Pool& pool) const {
  if (reclaim_.contains(pool.name())) return false;
  if (const auto on_drives = drive_owners_.find(pool.name()); on_drives != drive_owners_.end()) {
    return on_drives->second.owner == options_.controller;
  }
  return (pool.owner().empty() ? std::string("a") : short_name(pool.owner())) ==
         options_.controller;
}

std::expected<void, error> array::start_partner() {
  partner_link_options o;
  o.self = options_.controller;
  o.partner = options_.controller == "a" ? "b" : "a";
  o.listen_at = *options_.partner_link;
  o.dial_at = options_.partner_dial;
  o.key = identity_.link_key;
  partner_ = std::make_unique<controller::partner>(loop_.get_executor(), *config_, *events_, o);
  partner_->on_applied = [this](const config_change& change) { partner_changed(change); };
  replicas_ = std::make_unique<metadata_replicas>(loop_.get_executor(),
                                                  options_.state_dir / "pools", partner_->link());
  forwarding_.loop = loop_.get_executor();
  forwarding_.call = [this](std::uint16_t type, link_bytes payload, link_reply done) {
    partner_->link().call(type, std::move(payload), std::move(done));
  };
  forwarding_.state = [this] { return forwarding_now(); };
  const auto groups = port_groups();
  const bool a = options_.controller == "a";
  forwarding_.own_group = groups[a ? 0 : 1];
  forwarding_.partner_group = groups[a ? 1 : 0];
  receiver_ =
      std::make_unique<forward_receiver>([this](const std::string& volume) -> scsi::logical_unit* {
        const auto it = units_.find(volume);
        return receiving_ && it != units_.end() ? it->second.unit.get() : nullptr;
      });
  partner_->link().handle(link_type::scsi_command, [this](link_bytes payload, link_reply reply) {
    receiver_->command(std::move(payload), std::move(reply));
  });
  partner_->link().handle(link_type::scsi_nexus_event,
                          [this](link_bytes payload, link_reply reply) {
                            receiver_->nexus_event(std::move(payload), std::move(reply));
                          });
  partner_->link().handle(link_type::spare_claim, [this](link_bytes payload, link_reply reply) {
    if (!bay_)
      return reply(std::unexpected(make_error(
          errc::busy,
          "controller " + options_.controller + " is starting: its spares are not known yet")));
    const auto answer =
        bay_->answer_claim(std::string(payload.begin(), payload.end()), options_.controller == "b");
    reply(link_bytes{static_cast<std::uint8_t>(answer == raid::spare_claim::taken ? 0 : 1)});
  });
  partner_->on_link = [this](bool up) {
    if (!up) return;
    // The partner's units hear again of the nexuses of the hosts logged in here.
    for (auto& [volume, served] : units_) {
      if (served.forwarded) served.forwarded->reannounce();
    }
    for (auto& [name, p] : pools_) {
      if (!p.mirror) continue;
      p.mirror
          ->link_up();  // a new copy of everything: batches may have gone missing while it was down
      p.metadata->poke();
    }
  };
  partner_->link().handle(link_type::pool_handover, [this](link_bytes payload, link_reply reply) {
    receive_pool(std::string(payload.begin(), payload.end()), std::move(reply));
  });
  partner_->on_liveness = [this](partner::liveness l) {
    liveness_since_ = clock_.now();
    present_nvme_ana();
    if (l == partner::liveness::down) take_over_pools();
  };
  for (auto& [name, p] : pools_) {
    replicas_->hold(name);
    attach_mirror(name, p);
  }
  if (auto started = partner_->start(); !started) return started;
  log(std::string(o.self < o.partner ? "dialing" : "listening for") + " controller " + o.partner +
      " on the partner link at " + o.listen_at.address().to_string() + ":" +
      std::to_string(o.listen_at.port()));
  return {};
}

void array::start_drive_heartbeats() {
  std::vector<drive_area> areas = read_shelf_areas();
  std::ranges::stable_sort(areas, {}, [this](const drive_area& a) {
    return shelf_->spec(a.drive).kind == drive_kind::ssd ? 0 : 1;
  });
  std::vector<heartbeat_drive> drives;
  std::string names;
  for (const drive_area& a : areas) {
    if (drives.size() == 3) break;
    drives.push_back({&shelf_->raw_drive(a.drive),
                      a.offset_bytes});  // past the gates: a lapsed lease is renewed here
    names += (names.empty() ? "" : ", ") + shelf_->spec(a.drive).name;
  }
  lease_ = std::make_unique<controller::lease>(clock_, std::chrono::seconds(1));
  // Fenced from the first renewal on: a drive request made while the lease
  // has lapsed is held until the drives say this controller still owns
  // its pools (takeover.cc, confirm_ownership).
  shelf_->fence([this] { return !lease_->fenced(); },
                [this] { boost::asio::post(loop_, [this] { confirm_ownership(); }); });
  register_reservations();
  // A beat that renewed a lapsed lease (the controller thawed) reads the
  // records at once, rather than at the next drive request held at a gate:
  // a thawed owner with no I/O queued must not go on presenting, as
  // active/optimized, a pool its partner took over meanwhile.
  auto renewed = [this] {
    if (lease_->fenced() && !pools_.empty())
      boost::asio::post(loop_, [this] { confirm_ownership(); });
  };
  // A drive that refused a beat says the partner preempted this
  // controller there: once fenced (nothing but its own records reaches a
  // drive), it registers again, or it could never renew its lease and
  // learn from the records what it lost.
  auto refused = [this] {
    if (lease_->fenced()) register_again("a drive refused its heartbeat while it was fenced");
  };
  partner_->start_heartbeats(clock_, std::move(drives), *lease_, generation_of(*config_), renewed,
                             refused);  // start-up: the store may be read here
  log("drive heartbeat on " +
      (names.empty() ? std::string("no drive (none has a controller area)") : names));
}

void array::register_reservations() {
  // With a partner only (a lone controller fences nobody), once. A new
  // process has nothing queued from before: registering at once is safe.
  if (!options_.partner_link || reservations_registered_) return;
  reservations_registered_ = true;
  log(shelf_->register_key(reservation_key_of(options_.controller)));
}

std::expected<void, error> array::join() {
  log("an empty state directory: controller " + options_.controller +
      " joins the array on the shelf in " + shelf_dir().string());
  auto found = identity_in_files(shelf_dir());
  if (!found) return std::unexpected(found.error());
  identity_ = *found;
  log("the shelf holds array " + id_text(identity_));
  if (auto linked = start_partner(); !linked) return linked;
  // Controller a may start after this one: wait for it, saying so.
  bool gave_up = false;
  boost::asio::steady_timer patience(loop_, std::chrono::seconds(120));
  patience.async_wait([&](boost::system::error_code ec) { gave_up = !ec; });
  wait([&] { return partner_->up() || gave_up; });
  patience.cancel();
  if (!partner_->up()) {
    return std::unexpected(make_error(
        errc::timed_out, "controller " + partner_->name() +
                             " did not link within 120 s: the configuration to join with is its"));
  }
  std::optional<std::expected<config_records, error>> copied;
  partner_->fetch_configuration([&](auto r) { copied = std::move(r); });
  wait([&] { return copied.has_value(); });
  if (!*copied)
    return std::unexpected(
        error{copied->error().code, "copying the configuration from controller " +
                                        partner_->name() + ": " + copied->error().message});
  config_batch records;
  for (auto& [key, value] : **copied) records.put(key, value);
  if (auto done = config_->commit(records); !done) return std::unexpected(done.error());
  log("copied " + std::to_string((*copied)->size()) +
      " records of the array's configuration from controller " + partner_->name());
  return assemble();
}

void array::replicate(const config_batch& change,
                      std::function<void(std::expected<void, error>)> done) {
  if (!partner_) return done({});
  partner_->replicate(change, std::move(done));
}

void array::call_partner(std::uint16_t type, link_bytes payload, link_reply done) {
  if (!partner_) return done(std::unexpected(make_error(errc::canceled, "no partner controller")));
  partner_->call(type, std::move(payload), std::move(done));
}

void array::answer_partner_calls(std::function<link_bytes(link_bytes, bool delegated)> answer) {
  if (partner_) partner_->answer_calls(std::move(answer));
}

void array::partner_changed(const config_change& change) {
  bool mappings_changed = false;
  for (const auto& [key, value] : change) {
    if (top_level(key, "pools/") && value) {
      // The partner's record of who owns the pool is the partner's view:
      // this controller's is what it serves.
      v1::Pool pool;
      if (pool.ParseFromString(*value)) {
        if (const served_pool* p = pool_named(key); p != nullptr && !p->lost) {
          note_owner(key, options_.controller, p->ownership.epoch);
          if (belongs_with_partner(pool))
            boost::asio::post(loop_, [this, key] {
              hand_over(key);
            });  // a planned move, made through the partner
        } else if (short_name(pool.owner()) == options_.controller) {
          note_owner(key, partner_->name(), pool.ownership_epoch());
        }
      }
    }
    if (key.starts_with("mappings/")) {
      mappings_changed = true;
      continue;
    }
    if (key.starts_with("disks/") && value) {
      v1::Disk disk;
      if (disk.ParseFromString(*value))
        boost::asio::post(loop_, [this, key, disk] { partner_disk_changed(key, disk); });
      continue;
    }
    if (key.starts_with("controllers/")) {
      // A controller failed over or back through the partner.
      boost::asio::post(loop_, [this] { placement_changed(); });
      continue;
    }
    if (!key.starts_with("hosts/")) continue;
    v1::Host host;
    if (value && host.ParseFromString(*value)) {
      if (auto served = set_host(key, host_access_of(host)); !served)
        log(key + ": " + served.error().message);
    } else if (!value && hosts_.contains(key)) {
      if (auto removed = remove_host(key); !removed) log(key + ": " + removed.error().message);
    }
  }
  if (mappings_changed) present_mappings();
}

void array::partner_disk_changed(const std::string& name, const v1::Disk& disk) {
  if (closed_ || !bay_) return;
  bool known = false;
  for (std::size_t i = 0; i < shelf_->size(); ++i) known |= "disks/" + shelf_->spec(i).name == name;
  if (!known) {
    drive_spec spec;
    spec.name = short_name(name);
    spec.kind = disk.kind() == v1::HDD ? drive_kind::hdd : drive_kind::ssd;
    spec.bytes = disk.size_bytes();
    spec.timing_model = disk.timing_model();
    auto index = shelf_->add(spec);  // the file the partner made: opened as it is
    if (!index)
      return events_->record(severity::error, name,
                             "added by controller " + partner_->name() +
                                 ", but not opened here: " + index.error().message);
    bay_->drive_added(*index);
  }
  if (auto changed = bay_->set_spare(name, disk.spare()); !changed) {
    events_->record(severity::warning, name,
                    std::string("controller ") + partner_->name() + " made it " +
                        (disk.spare() ? "a hot spare" : "no hot spare") +
                        ", but not here: " + changed.error().message);
  }
}

void array::present_mappings() {
  std::set<std::pair<std::string, std::uint32_t>> wanted;
  for (const auto& [key, bytes] : config_->list("mappings/")) {
    auto mapping = decode<v1::Mapping>(key, bytes);
    if (!mapping) continue;
    wanted.emplace(mapping->host(), mapping->lun());
    const auto h = hosts_.find(mapping->host());
    if (h == hosts_.end()) continue;
    if (scsi::unit_interface* there = h->second.luns->find(mapping->lun())) {
      // The LUN shows this volume already, or another one the partner
      // moved it from (while this controller was away): that one goes.
      const auto shown = std::ranges::find_if(
          units_, [&](const auto& u) { return &u.second.presented() == there; });
      if (shown != units_.end() && shown->first == mapping->volume()) continue;
      unmap_volume(mapping->host(), mapping->lun(), [](std::expected<void, error>) {});
    }
    const auto volume_bytes = config_->get(mapping->volume());
    auto volume =
        volume_bytes
            ? decode<v1::Volume>(mapping->volume(), *volume_bytes)
            : std::unexpected(make_error(errc::not_found, "no volume " + mapping->volume()));
    auto mapped = volume ? map_volume(volume->name(), volume->serial(), volume->block_size_bytes(),
                                      mapping->host(), mapping->lun())
                         : std::expected<void, error>(std::unexpected(volume.error()));
    if (!mapped)
      events_->record(severity::error, key,
                      "made through controller " + partner_->name() +
                          ", not presented here: " + mapped.error().message);
  }
  for (const auto& [name, h] : hosts_) {
    for (const std::uint16_t lun : h.luns->luns()) {
      if (!wanted.contains({name, lun})) unmap_volume(name, lun, [](std::expected<void, error>) {});
    }
  }
}

}  // namespace strata::controller
