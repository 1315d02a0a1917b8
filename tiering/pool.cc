#include "tiering/pool.h"

#include <algorithm>
#include <bit>
#include <boost/asio/post.hpp>
#include <cassert>

#include "tiering/volume.h"

namespace strata::tiering {

namespace {

std::string group_name(std::size_t g) {
  return "group " + std::to_string(g);
}

}  // namespace

pool::pool(boost::asio::any_io_executor loop, metadata_store& store, std::vector<pool_group> groups,
           const pool_options& options)
    : loop_(std::move(loop)),
      store_(store),
      groups_(std::move(groups)),
      options_(options),
      zeros_(options.extent_size_bytes) {
  for (const pool_group& g : groups_) {
    allocators_.emplace_back(g.device->geometry().size_bytes() / options_.extent_size_bytes);
  }
  group_failures_.resize(groups_.size());
  group_pauses_.resize(groups_.size());
}

pool::~pool() {
  if (heat_timer_) heat_timer_->cancel();
  if (history_timer_) history_timer_->cancel();
  if (retry_writes_timer_) retry_writes_timer_->cancel();
  if (pause_timer_) pause_timer_->cancel();
}

pool::opened pool::open(boost::asio::any_io_executor loop, metadata_store& store,
                        std::vector<pool_group> groups, const pool_options& options) {
  const std::uint64_t extent = options.extent_size_bytes;
  if (groups.empty()) return std::unexpected(make_error(errc::invalid_argument, "pool: no groups"));
  if (groups.size() > 0x7fff) {
    return std::unexpected(make_error(errc::invalid_argument, "pool: more than 32767 groups"));
  }
  if (extent < 4096 || !std::has_single_bit(extent)) {
    return std::unexpected(
        make_error(errc::invalid_argument,
                   "pool: the extent size must be a power of two of at least 4096 bytes, not " +
                       std::to_string(extent)));
  }
  if (options.clock == nullptr)
    return std::unexpected(make_error(errc::invalid_argument, "pool: no clock"));
  if (!(options.overcommit >= 1.0) ||
      !(options.performance_reserve >= 0.0 && options.performance_reserve < 1.0)) {
    return std::unexpected(
        make_error(errc::invalid_argument,
                   "pool: overcommit must be at least 1 and the performance reserve in [0, 1)"));
  }
  const std::uint32_t block_size = groups[0].device->geometry().logical_block_size_bytes;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& geometry = groups[g].device->geometry();
    if (geometry.logical_block_size_bytes != block_size) {
      return std::unexpected(make_error(
          errc::invalid_argument, "pool: " + group_name(g) + " has " +
                                      std::to_string(geometry.logical_block_size_bytes) +
                                      "-byte blocks, group 0 has " + std::to_string(block_size)));
    }
    if (geometry.size_bytes() < extent) {
      return std::unexpected(make_error(errc::invalid_argument,
                                        "pool: " + group_name(g) + " is smaller than one extent"));
    }
  }
  // The pool's age goes on from where it was last written: extents' last
  // I/O times are kept in it (heat_options::age_at_clock_zero_seconds).
  pool_options with_age = options;
  {
    std::uint64_t age = 0;
    if (auto stored = store.get(column::pool, keys::pool_age()))
      age = decode_pool_age(*stored).value_or(0);
    const auto clock_seconds =
        std::chrono::duration_cast<std::chrono::seconds>(options.clock->now().time_since_epoch())
            .count();
    with_age.heat.age_at_clock_zero_seconds = static_cast<std::int64_t>(age) - clock_seconds;
  }
  std::unique_ptr<pool> p(new pool(loop, store, std::move(groups), with_age));

  pool_record record;
  record.extent_size_bytes = extent;
  for (std::size_t g = 0; g < p->groups_.size(); ++g) {
    record.groups.push_back({p->groups_[g].where, p->allocators_[g].extent_count()});
  }
  if (auto stored = store.get(column::pool, keys::pool())) {
    const auto recorded = decode_pool(*stored);
    if (!recorded)
      return std::unexpected(make_error(errc::io_error, "pool: the pool record is damaged"));
    if (recorded->extent_size_bytes != extent) {
      return std::unexpected(
          make_error(errc::invalid_argument, "pool: it was created with " +
                                                 std::to_string(recorded->extent_size_bytes) +
                                                 "-byte extents, not " + std::to_string(extent)));
    }
    // More groups given than recorded: an add_group a stop cut short
    // before its record (the owner records the group first), finished
    // here. Fewer: a group is missing, which nothing here can mend.
    if (recorded->groups.size() > record.groups.size()) {
      return std::unexpected(make_error(errc::invalid_argument,
                                        "pool: it has " + std::to_string(recorded->groups.size()) +
                                            " groups, but " + std::to_string(record.groups.size()) +
                                            " were given"));
    }
    for (std::size_t g = 0; g < recorded->groups.size(); ++g) {
      const auto& want = recorded->groups[g];
      const auto& got = record.groups[g];
      if (want.where != got.where || want.extent_count != got.extent_count) {
        return std::unexpected(
            make_error(errc::invalid_argument,
                       "pool: " + group_name(g) + " was a " + std::string(to_string(want.where)) +
                           " group of " + std::to_string(want.extent_count) +
                           " extents; the one given is a " + std::string(to_string(got.where)) +
                           " group of " + std::to_string(got.extent_count)));
      }
    }
    // Checked first: only groups added after the recorded ones.
    if (recorded->groups.size() < record.groups.size()) {
      metadata_batch batch;
      batch.put(column::pool, keys::pool(), encode(record));
      if (auto ec = store.write_now(batch)) {
        return std::unexpected(error{ec, "pool: cannot record the groups added: " + ec.message()});
      }
    }
  } else {
    metadata_batch batch;
    batch.put(column::pool, keys::pool(), encode(record));
    if (auto ec = store.write_now(batch)) {
      return std::unexpected(error{ec, "pool: cannot record the new pool: " + ec.message()});
    }
  }

  // Volumes, then the extents they map.
  std::optional<error> problem;
  std::map<std::uint32_t, volume*> by_id;
  auto ec = store.scan(column::pool, [&](std::string_view key, std::string_view value) {
    if (problem || !key.starts_with(keys::volume_prefix)) return;
    const auto v = decode_volume(value);
    if (!v) {
      problem = make_error(errc::io_error, "pool: a volume record is damaged");
      return;
    }
    auto made = std::make_unique<volume>(*p, *v, p->volume_geometry(*v));
    by_id[v->id] = made.get();
    p->next_volume_id_ = std::max(p->next_volume_id_, v->id + 1);
    p->committed_bytes_ += v->block_count * v->block_size_bytes;
    p->volumes_.emplace(v->name, std::move(made));
  });
  if (!ec) {
    ec = store.scan(column::extent_map, [&](std::string_view key, std::string_view value) {
      if (problem) return;
      const auto k = keys::parse_extent(key);
      const auto l = decode_location(value);
      if (!k || !l) {
        problem = make_error(errc::io_error, "pool: an extent map record is damaged");
        return;
      }
      auto v = by_id.find(k->first);
      if (v == by_id.end() || k->second >= v->second->extent_count() ||
          l->group >= p->groups_.size() || l->extent >= p->allocators_[l->group].extent_count()) {
        problem =
            make_error(errc::io_error,
                       "pool: the extent map names an extent that does not exist (volume " +
                           std::to_string(k->first) + " extent " + std::to_string(k->second) + ")");
        return;
      }
      if (p->allocators_[l->group].used(l->extent)) {
        problem = make_error(errc::io_error, "pool: " + group_name(l->group) + " extent " +
                                                 std::to_string(l->extent) + " is mapped twice");
        return;
      }
      p->allocators_[l->group].mark_used(l->extent);
      v->second->load_mapping(k->second, *l);
    });
  }
  if (!ec) {
    // Heat is advisory: a record that does not decode, or names an extent
    // no volume has, is skipped rather than refused.
    ec = store.scan(column::heat, [&](std::string_view key, std::string_view value) {
      const auto k = keys::parse_extent(key);
      const auto h = heat_map::decode(value);
      if (!k || !h) return;
      auto v = by_id.find(k->first);
      if (v == by_id.end() || k->second >= v->second->extent_count()) return;
      v->second->heat().load(k->second, *h);
    });
  }
  if (ec)
    return std::unexpected(error{ec, "pool: cannot read the metadata store: " + ec.message()});
  if (problem) return std::unexpected(*problem);
  if (options.read_cache_device != nullptr) {
    if (options.read_cache.line_bytes == 0 ||
        options.read_cache.line_bytes > options.extent_size_bytes ||
        options.extent_size_bytes % options.read_cache.line_bytes != 0) {
      return std::unexpected(make_error(
          errc::invalid_argument, "pool: the read cache's line size must divide the extent size"));
    }
    auto cache = read_cache::open(loop, *options.read_cache_device, store, *options.clock,
                                  options.read_cache);
    if (!cache) return std::unexpected(cache.error());
    p->cache_ = std::move(*cache);
    for (const pool_group& g : p->groups_) {
      if (read_cached(g.where)) p->cache_->add_source(*g.device);
    }
  }
  auto history = heat_history::open(store, options.heat_history);
  if (!history) return std::unexpected(history.error());
  p->history_ = std::move(*history);
  p->arm_timers();
  return p;
}

void pool::arm_timers() {
  // Failures of these writes show in metadata_failed().
  heat_timer_ = options_.clock->make_timer(loop_, [this] {
    persist_heat([](std::error_code) {});
    heat_timer_->arm(options_.clock->now() + options_.heat_persist_interval);
  });
  heat_timer_->arm(options_.clock->now() + options_.heat_persist_interval);
  history_timer_ = options_.clock->make_timer(loop_, [this] {
    snapshot_heat([](std::error_code) {});
    history_timer_->arm(options_.clock->now() + options_.heat_history.interval);
  });
  history_timer_->arm(options_.clock->now() + options_.heat_history.interval);
}

void pool::snapshot_heat(std::function<void(std::error_code)> done) {
  heat_snapshot_builder builder(options_.heat_history.extents_per_snapshot);
  for (const auto& [name, v] : volumes_) {
    const heat_map& heat = v->heat();
    for (std::uint64_t e = 0; e < v->extent_count(); ++e) {
      const std::optional<extent_location> where = v->location(e);
      if (!where) continue;
      const extent_heat h = heat.heat(e);
      builder.offer({v->record().id, e, tier_of(where->group), h, heat_map::score(h)});
    }
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  heat_snapshot snap =
      builder.finish(std::chrono::duration_cast<std::chrono::seconds>(now).count());
  store_.write(history_->record(snap), false, std::move(done));
}

std::uint64_t pool::age_seconds() const noexcept {
  return heat_map::age_at(*options_.clock, options_.heat.age_at_clock_zero_seconds);
}

void pool::persist_heat(std::function<void(std::error_code)> done) {
  metadata_batch batch;
  for (const auto& [name, v] : volumes_) {
    const std::uint32_t id = v->record().id;
    v->heat().take_dirty([&](std::uint64_t extent, const extent_heat& h) {
      batch.put(column::heat, keys::heat(id, extent), heat_map::encode(h));
    });
  }
  // The age with every batch, changed or not: it is what time the pool has
  // been served, and the cooling of cold extents counts in it.
  batch.put(column::pool, keys::pool_age(), encode_pool_age(age_seconds()));
  store_.write(std::move(batch), false, std::move(done));
}

device::block_geometry pool::volume_geometry(const volume_record& v) const {
  device::block_geometry g;
  g.logical_block_size_bytes = v.block_size_bytes;
  g.block_count = v.block_count;
  g.buffer_alignment_bytes = 0;
  g.max_segments = ~0u;
  for (const pool_group& pg : groups_) {
    g.buffer_alignment_bytes =
        std::max(g.buffer_alignment_bytes, pg.device->geometry().buffer_alignment_bytes);
    // Two segments of zeros may surround the data of a new extent.
    g.max_segments = std::min(g.max_segments, pg.device->geometry().max_segments - 2);
  }
  return g;
}

void pool::create_volume(const volume_spec& spec,
                         std::function<void(std::expected<volume*, error>)> done) {
  auto refuse = [&](std::string message, errc why = errc::invalid_argument) {
    boost::asio::post(loop_, [done = std::move(done), message = std::move(message), why] {
      done(std::unexpected(make_error(why, message)));
    });
  };
  const std::uint32_t group_block = groups_[0].device->geometry().logical_block_size_bytes;
  if (spec.name.empty() || spec.name.size() > 255) {
    return refuse("a volume name must be 1 to 255 bytes");
  }
  if (volumes_.contains(spec.name) || creating_.contains(spec.name)) {
    return refuse("a volume named '" + spec.name + "' exists already");
  }
  if (deleting_.contains(spec.name)) {
    return refuse("volume '" + spec.name + "' is being deleted: retry once its delete is done",
                  errc::busy);
  }
  if (spec.block_size_bytes != 512 && spec.block_size_bytes != 4096) {
    return refuse("a volume's block size must be 512 or 4096 bytes, not " +
                  std::to_string(spec.block_size_bytes));
  }
  if (spec.block_size_bytes < group_block) {
    return refuse("the pool's groups have " + std::to_string(group_block) +
                  "-byte blocks: a volume's blocks cannot be smaller");
  }
  if (spec.block_count == 0) return refuse("a volume must have at least one block");
  const double size_bytes = static_cast<double>(spec.block_count) * spec.block_size_bytes;
  if (std::string why = overcommit_refusal(
          size_bytes,
          "a volume of " + std::to_string(spec.block_count * spec.block_size_bytes) + " bytes");
      !why.empty()) {
    return refuse(std::move(why), errc::no_space);
  }
  volume_record record;
  record.id = next_volume_id_++;
  record.name = spec.name;
  record.block_size_bytes = spec.block_size_bytes;
  record.block_count = spec.block_count;
  record.placement = spec.placement;
  committed_bytes_ += spec.block_count * spec.block_size_bytes;
  creating_.insert(spec.name);
  metadata_batch batch;
  batch.put(column::pool, keys::volume(record.id), encode(record));
  store_.write(std::move(batch), true, [this, record, done = std::move(done)](std::error_code ec) {
    creating_.erase(record.name);
    if (ec) {
      committed_bytes_ -= record.block_count * record.block_size_bytes;
      done(std::unexpected(
          error{ec, "cannot record volume '" + record.name + "': " + ec.message()}));
      return;
    }
    auto made = std::make_unique<volume>(*this, record, volume_geometry(record));
    volume* v = made.get();
    volumes_.emplace(record.name, std::move(made));
    done(v);
  });
}

std::uint64_t pool::capacity_bytes() const noexcept {
  std::uint64_t extents = 0;
  for (const extent_allocator& a : allocators_) extents += a.extent_count();
  return extents * options_.extent_size_bytes;
}

std::string pool::overcommit_refusal(double more_bytes, const std::string& what) const {
  // committed_bytes_ counts the creates and growths being written too.
  const double limit = options_.overcommit * static_cast<double>(capacity_bytes());
  if (static_cast<double>(committed_bytes_) + more_bytes <= limit) return {};
  return what + " takes the pool past its overcommit limit: " + std::to_string(committed_bytes_) +
         " bytes of volumes on " + std::to_string(capacity_bytes()) + " bytes, at most " +
         std::to_string(options_.overcommit) + "x";
}

void pool::post_result(std::function<void(std::expected<void, error>)> done,
                       std::expected<void, error> result) {
  boost::asio::post(loop_, [done = std::move(done), result = std::move(result)] { done(result); });
}

std::expected<volume*, error> pool::volume_to_change(std::string_view name) const {
  const std::string quoted = "volume '" + std::string(name) + "'";
  if (deleting_.contains(name))
    return std::unexpected(make_error(errc::busy, quoted + " is being deleted"));
  auto it = volumes_.find(name);
  if (it == volumes_.end()) {
    if (creating_.contains(name)) {
      return std::unexpected(
          make_error(errc::busy, quoted + " is being created: retry once it is done"));
    }
    return std::unexpected(
        make_error(errc::not_found, "there is no volume named '" + std::string(name) + "'"));
  }
  if (changing_.contains(name)) {
    return std::unexpected(make_error(
        errc::busy,
        quoted + " has a resize or placement change being recorded: retry once it is done"));
  }
  return it->second.get();
}

void pool::add_group(pool_group g, std::function<void(std::expected<std::uint16_t, error>)> done) {
  auto refuse = [&](const std::string& why) {
    boost::asio::post(loop_,
                      [done = std::move(done),
                       e = make_error(errc::invalid_argument, "pool: the new group " + why)] {
                        done(std::unexpected(e));
                      });
  };
  const auto& geometry = g.device->geometry();
  if (groups_.size() >= 0x7fff) return refuse("would be its 32768th");
  if (geometry.logical_block_size_bytes != groups_[0].device->geometry().logical_block_size_bytes) {
    return refuse("has " + std::to_string(geometry.logical_block_size_bytes) +
                  "-byte blocks, group 0 has " +
                  std::to_string(groups_[0].device->geometry().logical_block_size_bytes));
  }
  if (geometry.size_bytes() < options_.extent_size_bytes)
    return refuse("is smaller than one extent");
  // In use at once: a crash before the record below is mended by open(),
  // which the owner gives the group to (it records the group first).
  const auto index = static_cast<std::uint16_t>(groups_.size());
  groups_.push_back(g);
  if (cache_ && read_cached(g.where)) cache_->add_source(*g.device);
  allocators_.emplace_back(geometry.size_bytes() / options_.extent_size_bytes);
  group_failures_.emplace_back();
  group_pauses_.emplace_back();
  pool_record record;
  record.extent_size_bytes = options_.extent_size_bytes;
  for (std::size_t i = 0; i < groups_.size(); ++i)
    record.groups.push_back({groups_[i].where, allocators_[i].extent_count()});
  metadata_batch batch;
  batch.put(column::pool, keys::pool(), encode(record));
  store_.write(std::move(batch), true, [index, done = std::move(done)](std::error_code ec) {
    if (ec)
      return done(std::unexpected(
          error{ec, "pool: the new group is in use but not recorded: " + ec.message()}));
    done(index);
  });
}

void pool::delete_volume(std::string_view name,
                         std::function<void(std::expected<void, error>)> done) {
  auto found = volume_to_change(name);
  if (!found) return post_result(std::move(done), std::unexpected(found.error()));
  volume& v = **found;
  const volume_record record = v.record();
  if (!v.idle()) {
    // A request in flight could commit a mapping after the batch below,
    // and leave a record naming a volume that no longer exists; a move
    // would free or map extents of a deleted volume.
    return post_result(
        std::move(done),
        std::unexpected(make_error(
            errc::busy, "volume '" + record.name +
                            "' cannot be deleted while it has I/O in flight (requests, or " +
                            std::to_string(v.moves_in_flight()) +
                            " extent moves): stop serving it, and retry once it is idle")));
  }
  // Out of volumes_ from now on, so that no heat persist or snapshot, and
  // no migrator plan, sees it while its records go; and refusing every
  // request, so that nothing allocates an extent for it meanwhile.
  deleting_.insert(volumes_.extract(volumes_.find(name)));
  ++volume_changes_;
  std::string status = v.offline_reason();
  v.take_offline("volume '" + record.name + "' is being deleted");

  // One atomic batch: a crash leaves the volume whole or gone. Its extents
  // number far fewer than 2^64 - 1, so the ranges end past its last key.
  metadata_batch batch;
  batch.erase(column::pool, keys::volume(record.id));
  batch.erase(column::pool, keys::unit_state(record.id));
  batch.erase_range(column::extent_map, keys::extent(record.id, 0), keys::extent(record.id, ~0ull));
  batch.erase_range(column::heat, keys::heat(record.id, 0), keys::heat(record.id, ~0ull));
  // The next start may give the volume's id to a new volume: no cache
  // index entry of this one's may survive it.
  std::function<void(std::error_code)> cache_done;
  if (cache_) cache_done = cache_->forget_volume(record.id, batch);
  store_.write(std::move(batch), true,
               [this, record, status = std::move(status), cache_done = std::move(cache_done),
                done = std::move(done)](std::error_code ec) {
                 if (cache_done) cache_done(ec);
                 auto node = deleting_.extract(record.name);
                 volume& gone = *node.mapped();
                 if (ec) {
                   // The store takes no more writes now; the volume serves
                   // as before (its cache lines, dropped, refill).
                   gone.take_offline(status);
                   for (std::uint16_t g = 0; g < groups_.size(); ++g) {
                     if (!group_usable(g) && gone.has_extent_on(g))
                       gone.take_offline(lost_group_status(g));
                   }
                   volumes_.insert(std::move(node));
                   done(std::unexpected(
                       error{ec, "cannot delete volume '" + record.name + "': " + ec.message()}));
                   return;
                 }
                 std::vector<extent_location> extents;
                 extents.reserve(gone.mapped_extents());
                 for (std::uint64_t e = 0; e < gone.extent_count(); ++e) {
                   if (const auto where = gone.location(e)) extents.push_back(*where);
                 }
                 free_after_io(extents);
                 committed_bytes_ -= gone.record().block_count * gone.record().block_size_bytes;
                 // Destroyed from a later turn: a request refused while the
                 // batch was written may have its completion queued in it.
                 std::shared_ptr<volume> doomed(std::move(node.mapped()));
                 boost::asio::post(loop_, [doomed = std::move(doomed)] {});
                 done({});
               });
}

void pool::resize_volume(std::string_view name, std::uint64_t block_count,
                         std::function<void(std::expected<void, error>)> done) {
  auto found = volume_to_change(name);
  if (!found) return post_result(std::move(done), std::unexpected(found.error()));
  volume& v = **found;
  const volume_record& now = v.record();
  if (block_count < now.block_count) {
    return post_result(std::move(done), std::unexpected(make_error(
                                            errc::invalid_argument,
                                            "shrinking would lose data: volume '" + now.name +
                                                "' has " + std::to_string(now.block_count) +
                                                " blocks, and " + std::to_string(block_count) +
                                                " were asked for; a volume can only grow")));
  }
  if (block_count == now.block_count) return post_result(std::move(done), {});
  if (block_count > ~0ull / now.block_size_bytes) {
    return post_result(std::move(done), std::unexpected(make_error(
                                            errc::invalid_argument,
                                            std::to_string(block_count) +
                                                " blocks are more bytes than 64 bits count")));
  }
  const std::uint64_t growth_bytes = (block_count - now.block_count) * now.block_size_bytes;
  if (std::string why =
          overcommit_refusal(static_cast<double>(growth_bytes),
                             "growing volume '" + now.name + "' to " +
                                 std::to_string(block_count * now.block_size_bytes) + " bytes");
      !why.empty()) {
    return post_result(std::move(done),
                       std::unexpected(make_error(errc::no_space, std::move(why))));
  }
  volume_record record = now;
  record.block_count = block_count;
  // Held while the record is written, as create_volume holds a new
  // volume's size, so that no other growth or create overcommits.
  committed_bytes_ += growth_bytes;
  changing_.insert(record.name);
  metadata_batch batch;
  batch.put(column::pool, keys::volume(record.id), encode(record));
  // `v` cannot go away meanwhile: delete_volume refuses it while it is in
  // changing_.
  store_.write(std::move(batch), true,
               [this, &v, record, growth_bytes, done = std::move(done)](std::error_code ec) {
                 changing_.erase(record.name);
                 if (ec) {
                   committed_bytes_ -= growth_bytes;
                   done(std::unexpected(error{ec, "cannot record volume '" + record.name + "' at " +
                                                      std::to_string(record.block_count) +
                                                      " blocks: " + ec.message()}));
                   return;
                 }
                 v.grow(record.block_count);
                 done({});
               });
}

void pool::set_placement(std::string_view name, affinity placement,
                         std::function<void(std::expected<void, error>)> done) {
  auto found = volume_to_change(name);
  if (!found) return post_result(std::move(done), std::unexpected(found.error()));
  volume& v = **found;
  if (v.record().placement == placement) return post_result(std::move(done), {});
  volume_record record = v.record();
  record.placement = placement;
  changing_.insert(record.name);
  metadata_batch batch;
  batch.put(column::pool, keys::volume(record.id), encode(record));
  store_.write(std::move(batch), true,
               [this, &v, record, done = std::move(done)](std::error_code ec) {
                 changing_.erase(record.name);
                 if (ec) {
                   done(std::unexpected(error{ec, "cannot record volume '" + record.name + "' as " +
                                                      std::string(to_string(record.placement)) +
                                                      ": " + ec.message()}));
                   return;
                 }
                 v.set_placement(record.placement);
                 ++volume_changes_;  // a plan made with the old affinity is stale
                 done({});
               });
}

volume* pool::find_volume(std::string_view name) const noexcept {
  auto it = volumes_.find(name);
  return it == volumes_.end() ? nullptr : it->second.get();
}

std::vector<volume*> pool::volumes() const {
  std::vector<volume*> all;
  for (const auto& [name, v] : volumes_) all.push_back(v.get());
  return all;
}

std::uint64_t pool::capacity_extents(tier t) const noexcept {
  std::uint64_t n = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].where == t) n += allocators_[g].extent_count();
  }
  return n;
}

std::uint64_t pool::free_extents(tier t) const noexcept {
  std::uint64_t n = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].where == t && takes_extents(static_cast<std::uint16_t>(g)))
      n += allocators_[g].free_count();
  }
  return n;
}

std::optional<extent_location> pool::allocate_from(tier t, std::uint64_t keep_free) {
  if (free_extents(t) <= keep_free) return std::nullopt;
  std::size_t best = groups_.size();
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].where != t || allocators_[g].free_count() == 0 ||
        !takes_extents(static_cast<std::uint16_t>(g))) {
      continue;
    }
    if (best == groups_.size() || allocators_[g].free_count() > allocators_[best].free_count())
      best = g;
  }
  if (best == groups_.size()) return std::nullopt;
  const auto e = allocators_[best].allocate();
  assert(e);
  return extent_location{static_cast<std::uint16_t>(best), *e};
}

std::uint64_t pool::performance_reserve_extents() const noexcept {
  if (options_.new_extents != new_extent_tier::performance_first) return 0;
  return static_cast<std::uint64_t>(options_.performance_reserve *
                                    static_cast<double>(capacity_extents(tier::performance)));
}

std::optional<extent_location> pool::allocate(affinity placement) {
  const std::uint64_t reserve = performance_reserve_extents();
  std::optional<extent_location> where;
  switch (placement) {
    case affinity::performance:
      where = allocate_from(tier::performance, 0);
      break;
    case affinity::automatic:
    case affinity::local:
      if (options_.new_extents == new_extent_tier::performance_first)
        where = allocate_from(tier::performance, reserve);
      break;
    case affinity::archive:
      break;
  }
  if (!where) where = allocate_from(tier::capacity, 0);
  // Full capacity tier: the performance tier's last extents rather than a
  // failed write (the migrator demotes them when room returns), except for
  // archive volumes, which never touch it.
  if (!where && placement != affinity::archive) where = allocate_from(tier::performance, 0);
  return where;
}

std::optional<extent_location> pool::allocate_on(tier t) {
  return allocate_from(t, 0);
}

std::string pool::lost_group_status(std::uint16_t g) const {
  return group_name(g) + " (" + std::string(to_string(groups_[g].where)) +
         " tier) is lost beyond its redundancy: " + group_failures_[g];
}

void pool::stop_writes(std::uint16_t g) {
  if (!writes_stopped_.empty()) return;
  writes_stopped_ = "the backing store of " + std::string(to_string(tier_of(g))) + " group " +
                    std::to_string(g) +
                    " is full (no space left): writes fail until space is freed";
  if (options_.on_writes_stopped) options_.on_writes_stopped(writes_stopped_);
  if (!retry_writes_timer_) {
    retry_writes_timer_ = options_.clock->make_timer(loop_, [this] {
      writes_stopped_.clear();
      if (options_.on_writes_stopped) options_.on_writes_stopped(writes_stopped_);
    });
  }
  retry_writes_timer_->arm(options_.clock->now() + options_.no_space_retry_interval);
}

void pool::group_failed(std::uint16_t g, const std::string& reason) {
  if (!group_usable(g)) return;
  group_failures_[g] = reason.empty() ? "failed" : reason;
  const std::string status = lost_group_status(g);
  for (const auto& [name, v] : volumes_) {
    if (v->has_extent_on(g)) v->take_offline(status);
  }
}

std::uint64_t pool::begin_io() noexcept {
  ++io_counts_.back();
  return epoch_;
}

void pool::end_io(std::uint64_t epoch) noexcept {
  assert(epoch >= first_epoch_ && io_counts_[epoch - first_epoch_] > 0);
  --io_counts_[epoch - first_epoch_];
  release_quarantine();
}

void pool::free_after_io(extent_location l) {
  quarantine_.push_back({l, epoch_});
  ++epoch_;
  io_counts_.push_back(0);
  release_quarantine();
}

void pool::free_after_io(const std::vector<extent_location>& extents) {
  if (extents.empty()) return;
  // One epoch for them all: the same I/O may touch any of them.
  for (const extent_location& l : extents) quarantine_.push_back({l, epoch_});
  ++epoch_;
  io_counts_.push_back(0);
  release_quarantine();
}

void pool::release_quarantine() noexcept {
  while (io_counts_.size() > 1 && io_counts_.front() == 0) {
    io_counts_.pop_front();
    ++first_epoch_;
  }
  while (!quarantine_.empty() && quarantine_.front().epoch < first_epoch_) {
    const extent_location l = quarantine_.front().where;
    allocators_[l.group].release(l.extent);
    quarantine_.pop_front();
  }
}

void pool::pause_group(std::uint16_t g, const std::string& reason) {
  const bool was = !group_pauses_[g].reason.empty();
  group_pauses_[g].reason = reason;
  group_pauses_[g].until = options_.clock->now() + options_.pause_interval;
  if (!was && options_.on_group_paused) options_.on_group_paused(g, reason);
  if (!pause_timer_) {
    pause_timer_ = options_.clock->make_timer(loop_, [this] { resume_groups(); });
  }
  resume_groups();  // re-arms the timer for the earliest pause to end
}

void pool::resume_group(std::uint16_t g) {
  if (group_pauses_[g].reason.empty()) return;
  group_pauses_[g].reason.clear();
  if (options_.on_group_paused) options_.on_group_paused(g, {});
}

void pool::resume_groups() {
  const device::time_point now = options_.clock->now();
  std::optional<device::time_point> next;
  for (std::size_t g = 0; g < group_pauses_.size(); ++g) {
    pause& p = group_pauses_[g];
    if (p.reason.empty()) continue;
    if (p.until <= now) {
      p.reason.clear();
      if (options_.on_group_paused) options_.on_group_paused(static_cast<std::uint16_t>(g), {});
    } else if (!next || p.until < *next) {
      next = p.until;
    }
  }
  if (next) pause_timer_->arm(*next);
}

}  // namespace strata::tiering
