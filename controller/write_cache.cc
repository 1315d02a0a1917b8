#include "controller/write_cache.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <exception>
#include <optional>

#include "strata/v1/resources.pb.h"

namespace strata::controller {

namespace {

// Where the config store remembers that a group's failed log must not be
// replayed (write_back_options::persist_retirement).
std::string retired_key(const std::string& group_name) {
  return "write_logs/" + group_name.substr(group_name.rfind('/') + 1) + "/retired";
}

// Where it keeps the group's blocks lost with a failed log
// (write_back_options::persist_lost): "LBA+COUNT" ranges, comma-separated.
std::string lost_key(const std::string& group_name) {
  return "write_logs/" + group_name.substr(group_name.rfind('/') + 1) + "/lost";
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
  o.persist_retirement = [config = options_.config, writer = options_.writer, loop = options_.loop,
                          key = retired_key(c.name),
                          abandoned = abandoned_](std::function<void(std::error_code)> done) {
    if (*abandoned) {
      // Not this controller's to record: the held writes fail at the gates.
      return boost::asio::post(loop, [done] { done(make_error_code(errc::permission_denied)); });
    }
    boost::asio::post(writer, [config, loop, key, done = std::move(done)] {
      config_batch b;
      b.put(key, "1");
      auto committed = config->commit(b);
      const std::error_code ec = committed ? std::error_code{} : committed.error().code;
      boost::asio::post(loop, [done, ec] { done(ec); });
    });
  };
  if (const auto lost = options_.config->get(lost_key(c.name)))
    o.lost_at_open = decode_ranges(*lost);
  o.persist_lost = [config = options_.config, writer = options_.writer, events = options_.events,
                    subject = c.name, key = lost_key(c.name),
                    abandoned = abandoned_](const device::block_range_set& lost) {
    if (*abandoned) return;  // the new owner's list is the pool's
    // Encoded on the loop; written in call order by the one writer thread.
    boost::asio::post(writer, [config, events, subject, key, text = encode_ranges(lost)] {
      config_batch b;
      if (text.empty()) {
        b.erase(key);
      } else {
        b.put(key, text);
      }
      if (auto committed = config->commit(b); !committed) {
        events->record(severity::error, subject,
                       "write cache: its list of lost blocks could not be saved (" +
                           committed.error().message +
                           "): after a restart they would read as the group's older data");
      }
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
    const std::string retired = retired_key(g.name);
    const bool fresh_after_retirement = options.config->get(retired).has_value();
    auto format = [&]() -> std::expected<void, error> {
      std::optional<std::error_code> formatted;
      raid::write_back_device::format(*c->slice, g.group->device().geometry(), id,
                                      [&](std::error_code ec) { formatted = ec; });
      wait([&] { return formatted.has_value(); });
      if (*formatted)
        return std::unexpected(
            error{*formatted, g.name + ": formatting its write log on " + log_name + " failed"});
      return {};
    };
    if (fresh_after_retirement) {
      if (auto f = format(); !f) return std::unexpected(f.error());
      config_batch b;
      b.erase(retired);
      if (auto done = options.config->commit(b); !done) return std::unexpected(done.error());
      options.events->record(severity::warning, g.name,
                             "write cache: its retired write log was formatted anew");
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
      if (auto f = format(); !f) return std::unexpected(f.error());
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
