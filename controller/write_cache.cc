#include "controller/write_cache.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <charconv>
#include <exception>
#include <optional>

#include "strata/v1/resources.pb.h"

namespace strata::controller {

namespace {

// The pool's metadata store's keys (column pool) for a group's log:
// "write_log/g1/retired" holds the generation of the newest superblock the
// failed log wrote (decimal); "write_log/g1/lost" the blocks lost with a
// failed log, "LBA+COUNT" ranges, comma-separated (docs/write-log.md).
std::string short_group(const std::string& group_name) {
  return group_name.substr(group_name.rfind('/') + 1);
}
std::string retired_key(const std::string& group_name) {
  return "write_log/" + short_group(group_name) + "/retired";
}
std::string lost_key(const std::string& group_name) {
  return "write_log/" + short_group(group_name) + "/lost";
}
// Where an older version kept them: the controller's own config store.
std::string legacy_retired_key(const std::string& group_name) {
  return "write_logs/" + short_group(group_name) + "/retired";
}
std::string legacy_lost_key(const std::string& group_name) {
  return "write_logs/" + short_group(group_name) + "/lost";
}

std::string encode_ranges(const device::block_range_set& set) {
  std::string text;
  set.for_each([&](std::uint64_t lba, std::uint64_t count) {
    text += (text.empty() ? "" : ",") + std::to_string(lba) + "+" + std::to_string(count);
  });
  return text;
}

// What encode_ranges wrote; a range it cannot read is skipped (the store's
// values are checksummed: this is a newer format, not a torn one).
device::block_range_set decode_ranges(const std::string& text) {
  device::block_range_set set;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string range = text.substr(at, end - at);
    const std::size_t plus = range.find('+');
    if (plus != std::string::npos) {
      try {
        set.insert(std::stoull(range.substr(0, plus)), std::stoull(range.substr(plus + 1)));
      } catch (const std::exception&) {
      }
    }
    at = end + 1;
  }
  return set;
}

// An older version kept a log's retirement and lost blocks in the
// controller's own config store, where only that controller saw them:
// moved into the pool's store (synced there first), then erased. A
// retirement recorded there said no generation: the log's newest now is
// the one it was recorded against (it was erased once the log was
// formatted).
std::expected<void, error> move_legacy_records(
    config_store& config, const tiering::metadata_store& store, const std::string& group_name,
    const std::function<std::expected<void, error>(tiering::metadata_batch)>& commit,
    const std::function<std::expected<std::uint64_t, error>()>& newest_generation) {
  const auto retired = config.get(legacy_retired_key(group_name));
  const auto lost = config.get(legacy_lost_key(group_name));
  if (!retired && !lost) return {};
  tiering::metadata_batch b;
  if (retired) {
    const auto newest = newest_generation();
    // Unreadable: a record no generation matches, so the log is formatted.
    b.put(tiering::column::pool, retired_key(group_name),
          newest ? std::to_string(*newest) : std::string("unknown"));
  }
  if (lost) {
    // With what the pool's store lists already (a move half done before).
    device::block_range_set set = decode_ranges(*lost);
    if (const auto listed = store.get(tiering::column::pool, lost_key(group_name))) {
      decode_ranges(*listed).for_each(
          [&](std::uint64_t lba, std::uint64_t count) { set.insert(lba, count); });
    }
    b.put(tiering::column::pool, lost_key(group_name), encode_ranges(set));
  }
  if (auto done = commit(std::move(b)); !done) return done;
  config_batch erase;
  erase.erase(legacy_retired_key(group_name));
  erase.erase(legacy_lost_key(group_name));
  if (auto done = config.commit(erase); !done) return std::unexpected(done.error());
  return {};
}

}  // namespace

raid::write_back_options write_cache::device_options(const cached& c) {
  raid::write_back_options o;
  o.clock = options_.clock;
  o.stripe_blocks = c.group->stripe_data_blocks();
  // A record is at most one full stripe (at least 1 MiB): long writes are
  // destaged whole.
  o.max_record_blocks = static_cast<std::uint32_t>(std::max<std::uint64_t>(256, o.stripe_blocks));
  const std::string subject = c.name;
  o.on_event = [events = options_.events, subject,
                abandoned = abandoned_](const std::string& what) {
    if (*abandoned) return;
    const bool lost = what.find("lost") != std::string::npos;
    events->record(lost ? severity::critical : severity::warning, subject, "write cache: " + what);
  };
  o.persist_retirement = [store = options_.pool_store, loop = options_.loop,
                          key = retired_key(c.name), abandoned = abandoned_](
                             std::uint64_t generation, std::function<void(std::error_code)> done) {
    if (*abandoned) {
      // Not this controller's to record: the held writes fail at the gates.
      return boost::asio::post(loop, [done] { done(make_error_code(errc::permission_denied)); });
    }
    // Synced: in the partner's copy too before the held writes go on, so
    // that a takeover formats this log rather than replay it.
    tiering::metadata_batch b;
    b.put(tiering::column::pool, key, std::to_string(generation));
    store->write(std::move(b), true, std::move(done));
  };
  if (const auto lost = options_.pool_store->get(tiering::column::pool, lost_key(c.name)))
    o.lost_at_open = decode_ranges(*lost);
  o.persist_lost = [store = options_.pool_store, events = options_.events, subject = c.name,
                    key = lost_key(c.name),
                    abandoned = abandoned_](const device::block_range_set& lost) {
    if (*abandoned) return;  // the new owner's list is the pool's
    // Applied in call order by the store's one thread.
    tiering::metadata_batch b;
    const std::string text = encode_ranges(lost);
    if (text.empty()) {
      b.erase(tiering::column::pool, key);
    } else {
      b.put(tiering::column::pool, key, text);
    }
    store->write(std::move(b), true, [events, subject](std::error_code ec) {
      if (!ec) return;
      events->record(severity::error, subject,
                     "write cache: its list of lost blocks could not be saved (" + ec.message() +
                         "): after a restart or a change of owner they would read as the "
                         "group's older data");
    });
  };
  return o;
}

std::expected<std::unique_ptr<write_cache>, error> write_cache::open(
    disk_group& log, const std::string& log_name, const std::vector<cached_group>& groups,
    const write_cache_options& options, const waiter& wait) {
  std::unique_ptr<write_cache> w(new write_cache(log, options));
  // The groups' logs opened before a later one fails are stopped (their
  // destage may be under way) before they go.
  struct stop_on_failure {
    std::unique_ptr<write_cache>& cache;
    const waiter& wait;
    ~stop_on_failure() {
      if (cache) cache->stop(wait);
    }
  } stop_opened{w, wait};
  const std::uint64_t slice_blocks = log.device().geometry().block_count / slices;
  unsigned next_slice = 0;
  for (const cached_group& g : groups) {
    if (g.group->kind() != group_kind::raid6) continue;
    if (next_slice == slices) {
      options.events->record(severity::warning, g.name,
                             "write cache: the write log " + log_name +
                                 " has four slices, all taken: this group writes through");
      continue;
    }
    auto c = std::make_unique<cached>();
    c->group = g.group;
    c->name = g.name;
    c->slice = std::make_unique<device::slice_device>(log.device(), next_slice * slice_blocks,
                                                      slice_blocks);
    ++next_slice;
    const raid::wlog::log_id id = g.group->id();
    auto format = [&](std::uint64_t after_generation) -> std::expected<void, error> {
      std::optional<std::error_code> formatted;
      raid::write_back_device::format(
          *c->slice, g.group->device().geometry(), id, [&](std::error_code ec) { formatted = ec; },
          after_generation);
      wait([&] { return formatted.has_value(); });
      if (*formatted)
        return std::unexpected(
            error{*formatted, g.name + ": formatting its write log on " + log_name + " failed"});
      return {};
    };
    auto newest_generation = [&]() -> std::expected<std::uint64_t, error> {
      std::optional<std::expected<std::uint64_t, std::error_code>> read;
      raid::write_back_device::newest_generation(
          *c->slice, id, [&](std::expected<std::uint64_t, std::error_code> r) { read = r; });
      wait([&] { return read.has_value(); });
      if (!*read)
        return std::unexpected(
            error{read->error(), g.name + ": its write log on " + log_name + " could not be read"});
      return **read;
    };
    // A synced batch in the pool's store (the partner's copy holds it
    // once it is done), waited for.
    auto commit = [&](tiering::metadata_batch b) -> std::expected<void, error> {
      std::optional<std::error_code> done;
      options.pool_store->write(std::move(b), true, [&](std::error_code ec) { done = ec; });
      wait([&] { return done.has_value(); });
      if (*done)
        return std::unexpected(error{*done, g.name + ": its write log's records could not be "
                                                     "written to the pool's metadata"});
      return {};
    };
    if (options.config != nullptr) {
      if (auto moved = move_legacy_records(*options.config, *options.pool_store, g.name, commit,
                                           newest_generation);
          !moved) {
        return std::unexpected(moved.error());
      }
    }
    // A retired log is formatted anew, never replayed: its records are
    // older than the writes that went to the group once it failed. Only
    // the log it was recorded against, though: one whose superblocks are
    // newer than the record's generation (plus the one checkpoint that
    // may have landed) was formatted since, and may hold the partner's
    // acknowledged writes (a failback after a takeover).
    if (const auto retired = options.pool_store->get(tiering::column::pool, retired_key(g.name))) {
      std::uint64_t at = 0;
      const bool known =
          std::from_chars(retired->data(), retired->data() + retired->size(), at).ec == std::errc{};
      const auto newest = newest_generation();
      if (!known || !newest || *newest <= at + 1) {
        if (auto f = format(std::max(at, newest.value_or(0)) + 1); !f)
          return std::unexpected(f.error());
        options.events->record(severity::warning, g.name,
                               "write cache: its retired write log was formatted anew");
      } else {
        options.events->record(severity::info, g.name,
                               "write cache: its write log was retired at generation " +
                                   std::to_string(at) + " and formatted since (generation " +
                                   std::to_string(*newest) +
                                   " now): it is opened, the retirement record dropped");
      }
      tiering::metadata_batch b;
      b.erase(tiering::column::pool, retired_key(g.name));
      if (auto done = commit(std::move(b)); !done) return std::unexpected(done.error());
    }
    std::optional<raid::write_back_device::opened> opened;
    auto try_open = [&] {
      opened.reset();
      raid::write_back_device::open(
          g.group->device(), *c->slice, id, w->device_options(*c),
          [&](raid::write_back_device::opened r) { opened = std::move(r); });
      wait([&] { return opened.has_value(); });
    };
    try_open();
    if (!*opened && opened->error().message.find("no write log superblock") != std::string::npos) {
      // Blank: the first start with this log (a new array, or a log group
      // added to the pool).
      if (auto f = format(0); !f) return std::unexpected(f.error());
      try_open();
    }
    if (!*opened)
      return std::unexpected(error{opened->error().code, g.name + ": its write log on " + log_name +
                                                             ": " + opened->error().message});
    c->device = std::move(**opened);
    if (const std::uint64_t replayed = c->device->counters().records_replayed; replayed > 0) {
      options.events->record(
          severity::info, g.name,
          "write cache: replayed " + std::to_string(replayed) + " records of its write log (" +
              std::to_string(c->device->dirty_blocks() * raid::wlog::block_bytes >> 20) +
              " MiB dirty)");
    }
    w->cached_.push_back(std::move(c));
  }
  w->redundancy_changed();
  return w;  // moved out (the implicit move): nothing for the guard to stop
}

write_cache::~write_cache() = default;

device::block_device& write_cache::device_for(const disk_group& g) const noexcept {
  for (const auto& c : cached_) {
    if (c->group == &g) return *c->device;
  }
  return g.device();
}

const raid::write_back_device* write_cache::cache_of(const disk_group& g) const noexcept {
  for (const auto& c : cached_) {
    if (c->group == &g) return c->device.get();
  }
  return nullptr;
}

void write_cache::set_mode(raid::cache_mode m) {
  for (auto& c : cached_) c->device->set_mode(m);
}

void write_cache::redundancy_changed() {
  // A member being rebuilt holds only part of the log yet.
  const bool degraded = log_.failed_members() > 0 || log_.rebuild_status().running;
  for (auto& c : cached_) c->device->set_log_degraded(degraded);
}

void write_cache::stop(const waiter& wait) {
  for (auto& c : cached_) {
    bool stopped = false;
    c->device->stop([&] { stopped = true; });
    wait([&] { return stopped; });
  }
}

void write_cache::sample(double seconds) {
  std::uint64_t destaged = 0;
  for (auto& c : cached_) {
    const std::uint64_t now = c->device->counters().blocks_destaged;
    destaged += now - c->destaged_blocks_seen;
    c->destaged_blocks_seen = now;
  }
  if (seconds > 0)
    destage_mb_per_second_ =
        static_cast<double>(destaged * raid::wlog::block_bytes) / 1e6 / seconds;
}

void write_cache::statistics(v1::PoolStatistics& out) const {
  std::string reason;
  bool write_back = !cached_.empty();
  for (auto& c : cached_) {
    const raid::write_back_device& d = *c->device;
    const raid::write_back_counters& k = d.counters();
    if (d.mode() != raid::cache_mode::write_back) {
      write_back = false;
      if (reason.empty()) reason = c->name + ": " + d.write_through_reason();
    }
    out.set_dirty_bytes(out.dirty_bytes() + d.dirty_blocks() * raid::wlog::block_bytes);
    out.set_write_log_bytes(out.write_log_bytes() +
                            d.log_capacity_blocks() * raid::wlog::block_bytes);
    out.set_write_log_used_bytes(out.write_log_used_bytes() +
                                 d.log_used_blocks() * raid::wlog::block_bytes);
    out.set_writes_logged(out.writes_logged() + k.writes_logged);
    out.set_writes_through(out.writes_through() + k.writes_direct);
    out.set_full_stripe_destages(out.full_stripe_destages() + k.full_stripe_writes);
    out.set_writes_waited_for_log(out.writes_waited_for_log() + k.writes_waited_for_space);
    out.set_dirty_bytes_lost(out.dirty_bytes_lost() + k.blocks_lost * raid::wlog::block_bytes);
  }
  if (cached_.empty()) return;
  out.set_write_cache(write_back ? "write-back" : "write-through");
  out.set_write_through_reason(reason);
  out.set_destage_mb_per_second(destage_mb_per_second_);
}

}  // namespace strata::controller
