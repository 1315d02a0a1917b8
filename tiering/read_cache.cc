#include "tiering/read_cache.h"

#include <bit>
#include <boost/asio/post.hpp>
#include <utility>

#include "tiering/records.h"

namespace strata::tiering {

using device::op;
using device::request;

struct read_cache::fill {
  read_cache* cache = nullptr;
  line_key line = 0;
  std::uint64_t slot = 0;
  bool cancelled = false;
  device::block_device* source = nullptr;
  device::aligned_buffer buffer;
  iovec segment{};
  request req;
};

std::expected<std::unique_ptr<read_cache>, error> read_cache::open(
    boost::asio::any_io_executor loop, device::block_device& device, metadata_store& store,
    device::clock& c, const read_cache_options& options) {
  const std::uint32_t block = device.geometry().logical_block_size_bytes;
  if (!std::has_single_bit(options.line_bytes) || options.line_bytes < block) {
    return std::unexpected(
        error(errc::invalid_argument,
              "read cache: the line size must be a power of two, at least the cache device's "
              "block size (" +
                  std::to_string(block) + " bytes)"));
  }
  const std::uint64_t slots = device.geometry().block_count * block / options.line_bytes;
  if (slots == 0)
    return std::unexpected(
        error(errc::invalid_argument, "read cache: the cache device holds no line"));
  auto policy = make_cache_policy(options.policy, slots);
  if (!policy) {
    return std::unexpected(error(
        errc::invalid_argument,
        "read cache: unknown replacement policy '" + options.policy + "' (or too many lines)"));
  }
  std::unique_ptr<read_cache> cache(
      new read_cache(loop, device, store, c, options, std::move(policy)));
  // Warm start: every entry on disk names a slot with the line's current data.
  std::vector<bool> used(slots, false);
  metadata_batch stale;
  std::error_code ec = store.scan(column::cache_index, [&](std::string_view k, std::string_view v) {
    const std::uint64_t slot = decode_cache_slot(v).value_or(slots);
    const std::optional<line_key> parsed = keys::parse_cache_line(k);
    if (!parsed || slot >= slots || used[slot]) {
      stale.erase(column::cache_index,
                  k);  // not ours (another device, a damaged record): forget it
      return;
    }
    used[slot] = true;
    const line_key line = *parsed;
    cache->lines_[line] = {slot, true, true, 0};
    // The policy learns the line as a resident one (+2hit admits on the second read).
    for (int i = 0; i < 3 && !cache->policy_->contains(line); ++i)
      cache->policy_->access(line, cache->evicted_);
  });
  if (ec) return std::unexpected(error(ec, "read cache: reading its index"));
  if (!stale.empty()) {
    if (auto w = store.write_now(stale))
      return std::unexpected(error(w, "read cache: dropping stale index entries"));
  }
  cache->evicted_.clear();
  for (std::uint64_t s = slots; s-- > 0;) {
    if (!used[s]) cache->free_slots_.push_back(s);
  }
  cache->arm_persist();
  return cache;
}

read_cache::read_cache(boost::asio::any_io_executor loop, device::block_device& device,
                       metadata_store& store, device::clock& c, const read_cache_options& options,
                       std::unique_ptr<cache_policy> policy)
    : loop_(loop),
      device_(device),
      store_(store),
      clock_(c),
      options_(options),
      policy_(std::move(policy)),
      device_blocks_per_line_(options.line_bytes / device.geometry().logical_block_size_bytes) {}

read_cache::~read_cache() = default;

std::optional<std::uint64_t> read_cache::lookup(line_key line, std::uint64_t offset_bytes) {
  if (failed_) return std::nullopt;
  auto it = lines_.find(line);
  if (it == lines_.end() || !it->second.valid) return std::nullopt;
  ++counters_.hits;
  policy_->access(line, evicted_);  // a hit: recency and frequency only
  evicted_.clear();
  ++slot_users_[it->second.slot];
  return it->second.slot * device_blocks_per_line_ +
         offset_bytes / device_.geometry().logical_block_size_bytes;
}

std::optional<std::uint64_t> read_cache::update_target(line_key line, std::uint64_t offset_bytes) {
  if (failed_) return std::nullopt;
  auto it = lines_.find(line);
  if (it == lines_.end() || !it->second.valid) return std::nullopt;
  ++slot_users_[it->second.slot];
  return it->second.slot * device_blocks_per_line_ +
         offset_bytes / device_.geometry().logical_block_size_bytes;
}

void read_cache::slot_io_done(std::uint64_t cache_lba) {
  const std::uint64_t slot = cache_lba / device_blocks_per_line_;
  auto it = slot_users_.find(slot);
  if (it == slot_users_.end() || --it->second > 0) return;
  slot_users_.erase(it);
  if (released_while_used_.erase(slot) > 0) free_slots_.push_back(slot);
}

void read_cache::release_slot(std::uint64_t slot) {
  // A read in flight from the slot must not meet another line's fill, nor
  // an update in flight to it another line's data.
  if (slot_users_.contains(slot)) {
    released_while_used_.insert(slot);
  } else {
    free_slots_.push_back(slot);
  }
}

void read_cache::note_read(line_key line, device::block_device& source, std::uint64_t source_lba) {
  if (failed_ || filling_.contains(line) || forgotten(line)) return;
  evicted_.clear();
  if (lines_.contains(line)) {
    // Valid, but the read spans lines and went to the HDDs: still a use.
    policy_->access(line, evicted_);
    evicted_.clear();
    return;
  }
  ++counters_.misses;
  const cache_policy::outcome o = policy_->access(line, evicted_);
  if (o.hit) return;  // resident but not valid: a fill is on its way
  std::vector<line_key> deletes;
  std::vector<std::uint64_t> free_after;
  for (line_key e : evicted_) drop(e, deletes, free_after);
  evicted_.clear();
  if (!o.admitted) return;
  if (writing_.contains(line) || fills_running_ >= options_.fills_in_flight) {
    policy_->invalidate(line);  // a write in flight would make the copy stale; or too busy
    if (!deletes.empty())
      write_deletes(std::move(deletes), std::move(free_after), [](std::error_code) {});
    return;
  }
  // The slot: a free one, or, once the evicted lines' index entries are
  // deleted (synced), one of theirs.
  ++fills_running_;
  auto begin = [this, line, &source, source_lba](std::error_code ec) {
    // A fill waiting for evicted lines' deletes may meet its volume's
    // deletion: the source extent may belong to another volume by now.
    if (ec || free_slots_.empty() || failed_ || writing_.contains(line) ||
        !policy_->contains(line) || forgotten(line)) {
      --fills_running_;
      ++counters_.cancelled_fills;
      if (policy_->contains(line)) policy_->invalidate(line);
      return;
    }
    const std::uint64_t slot = free_slots_.back();
    free_slots_.pop_back();
    start_fill(line, slot, source, source_lba);
  };
  if (deletes.empty()) {
    begin({});
  } else {
    write_deletes(std::move(deletes), std::move(free_after), begin);
  }
}

void read_cache::write_deletes(std::vector<line_key> lines, std::vector<std::uint64_t> free_after,
                               std::function<void(std::error_code)> done) {
  metadata_batch batch;
  for (line_key l : lines) {
    batch.erase(column::cache_index, keys::cache_line(l));
    ++deleting_[l];
  }
  store_.write(std::move(batch), true,
               [this, lines = std::move(lines), free_after = std::move(free_after),
                done = std::move(done)](std::error_code ec) {
                 // On failure the entries may still be on disk: the lines stay
                 // "deleting" and the slots are kept, for good (the pool
                 // stops writing once its store has failed).
                 if (!ec) {
                   for (line_key l : lines) {
                     if (auto it = deleting_.find(l); --it->second == 0) deleting_.erase(it);
                   }
                   for (std::uint64_t slot : free_after) release_slot(slot);
                 }
                 done(ec);
               });
}

bool read_cache::may_be_indexed(line_key line, const line_state& s) const noexcept {
  return s.persisted || deleting_.contains(line);
}

void read_cache::drop(line_key line, std::vector<line_key>& deletes,
                      std::vector<std::uint64_t>& free_after) {
  auto it = lines_.find(line);
  if (it == lines_.end()) return;
  const line_state s = it->second;
  lines_.erase(it);
  if (!may_be_indexed(line, s)) {
    release_slot(s.slot);
    return;
  }
  // The slot is reused only once no entry on disk names it: after a
  // delete of our own, synced, which the store applies after any delete
  // of the line already under way.
  deletes.push_back(line);
  free_after.push_back(s.slot);
}

void read_cache::start_fill(line_key line, std::uint64_t slot, device::block_device& source,
                            std::uint64_t source_lba) {
  std::unique_ptr<fill> owned;
  if (!fills_.empty()) {
    owned = std::move(fills_.back());
    fills_.pop_back();
  } else {
    owned = std::make_unique<fill>();
    owned->buffer = device::aligned_buffer(options_.line_bytes);
  }
  fill& f = *owned.release();
  f.cache = this;
  f.line = line;
  f.slot = slot;
  f.cancelled = false;
  f.source = &source;
  f.segment = {f.buffer.data(), options_.line_bytes};
  filling_[line] = &f;
  f.req = request{};
  f.req.operation = op::read;
  f.req.priority = device::io_class::background;
  f.req.lba = source_lba;
  f.req.block_count = options_.line_bytes / source.geometry().logical_block_size_bytes;
  f.req.buffers = {&f.segment, 1};
  f.req.context = &f;
  f.req.on_complete = [](request& r) noexcept {
    fill& fr = *static_cast<fill*>(r.context);
    read_cache& c = *fr.cache;
    if (r.result || fr.cancelled || c.failed_) {
      c.fill_done(fr, r.result ? r.result : make_error_code(errc::canceled));
      return;
    }
    fr.req = request{};
    fr.req.operation = op::write;
    fr.req.priority = device::io_class::background;
    fr.req.lba = fr.slot * c.device_blocks_per_line_;
    fr.req.block_count = c.device_blocks_per_line_;
    fr.req.buffers = {&fr.segment, 1};
    fr.req.context = &fr;
    fr.req.on_complete = [](request& w) noexcept {
      fill& fw = *static_cast<fill*>(w.context);
      if (w.result) fw.cache->device_failed();
      fw.cache->fill_done(fw, w.result);
    };
    c.device_.submit(fr.req);
  };
  source.submit(f.req);
}

void read_cache::fill_done(fill& f, std::error_code ec) {
  filling_.erase(f.line);
  --fills_running_;
  if (ec || f.cancelled || failed_ || forgotten(f.line)) {
    ++counters_.cancelled_fills;
    free_slots_.push_back(f.slot);  // nothing on disk names it
    if (policy_->contains(f.line)) policy_->invalidate(f.line);
  } else if (!policy_->contains(f.line)) {
    free_slots_.push_back(f.slot);  // evicted while it was filling
  } else {
    ++counters_.fills;
    lines_[f.line] = {f.slot, true, false, ++generation_};
    to_persist_.push_back({f.line, generation_});
  }
  fills_.emplace_back(&f);
}

bool read_cache::holds(line_key first, line_key last) const noexcept {
  if (failed_) return false;
  for (line_key l = first; l <= last; ++l) {
    auto it = lines_.find(l);
    if (it == lines_.end() || !it->second.valid) return false;
  }
  return true;
}

bool read_cache::begin_write(line_key first, line_key last, bool keep,
                             std::function<void(std::error_code)> ready) {
  std::vector<line_key> deletes;
  std::vector<std::uint64_t> free_after;
  for (line_key l = first; l <= last; ++l) {
    // Another write over the line is in flight: its copy to the slot and
    // this one's are two unordered writes to the cache device, which may
    // apply them in either order, whatever order the capacity tier keeps.
    // So the line is dropped rather than updated twice.
    const bool overlapped = ++writing_[l] > 1;
    if (auto f = filling_.find(l); f != filling_.end()) f->second->cancelled = true;
    auto it = lines_.find(l);
    if (it == lines_.end()) {
      // Dropped already, but its entry's delete may not be synced yet: the
      // write waits for one of ours, which the store applies after it.
      if (deleting_.contains(l)) deletes.push_back(l);
      continue;
    }
    if (keep && !failed_ && !overlapped) {
      // The slot's data is about to change: the index must not name it
      // until a flush after the update (end_write queues it again), and a
      // persist under way must not write the old generation's entry.
      ++counters_.updates;
      it->second.generation = ++generation_;
      if (may_be_indexed(l, it->second)) {
        it->second.persisted = false;
        deletes.push_back(l);
      }
      continue;
    }
    ++counters_.invalidations;
    policy_->invalidate(l);
    drop(l, deletes, free_after);
  }
  if (deletes.empty()) return true;
  write_deletes(std::move(deletes), std::move(free_after), std::move(ready));
  return false;
}

void read_cache::end_write(line_key first, line_key last, bool written) {
  std::vector<line_key> deletes;
  std::vector<std::uint64_t> free_after;
  for (line_key l = first; l <= last; ++l) {
    auto it = writing_.find(l);
    if (!written && lines_.contains(l)) {
      // The capacity tier may hold anything now: the copy must not outlive it.
      ++counters_.invalidations;
      policy_->invalidate(l);
      drop(l, deletes, free_after);
    }
    if (--it->second > 0) continue;
    writing_.erase(it);
    // An updated line: indexed again after the next flush of the device.
    if (auto line = lines_.find(l); line != lines_.end() && !line->second.persisted) {
      to_persist_.push_back({l, line->second.generation});
    }
  }
  if (!deletes.empty())
    write_deletes(std::move(deletes), std::move(free_after), [](std::error_code) {});
}

void read_cache::device_failed() {
  if (!failed_) ++counters_.device_errors;
  failed_ = true;
}

std::function<void(std::error_code)> read_cache::forget_volume(std::uint32_t volume,
                                                               metadata_batch& batch) {
  forgotten_.insert(volume);
  // fill_done frees a cancelled fill's slot and forgets its line in the policy.
  for (auto& [line, f] : filling_) {
    if (forgotten(line)) f->cancelled = true;
  }
  std::vector<line_key> mine;
  for (const auto& entry : lines_) {
    if (static_cast<std::uint32_t>(entry.first >> 40) == volume) mine.push_back(entry.first);
  }
  std::vector<line_key> deletes;
  std::vector<std::uint64_t> free_after;
  for (line_key l : mine) {
    ++counters_.invalidations;
    policy_->invalidate(l);
    drop(l, deletes, free_after);
  }
  // Lines dropped before, whose deletes are not synced yet, need nothing:
  // the store applies those before this batch.
  for (line_key l : deletes) {
    batch.erase(column::cache_index, keys::cache_line(l));
    ++deleting_[l];
  }
  return
      [this, deletes = std::move(deletes), free_after = std::move(free_after)](std::error_code ec) {
        // As write_deletes: on failure the entries may still be on disk, so the
        // lines stay "deleting" and their slots are kept.
        if (ec) return;
        for (line_key l : deletes) {
          if (auto it = deleting_.find(l); --it->second == 0) deleting_.erase(it);
        }
        for (std::uint64_t slot : free_after) release_slot(slot);
      };
}

void read_cache::arm_persist() {
  persist_timer_ = clock_.make_timer(loop_, [this] {
    persist([](std::error_code) {});
    persist_timer_->arm(clock_.now() + options_.persist_interval);
  });
  persist_timer_->arm(clock_.now() + options_.persist_interval);
}

void read_cache::persist(std::function<void(std::error_code)> done) {
  if (persisting_ || failed_ || to_persist_.empty()) {
    boost::asio::post(loop_, [done = std::move(done)] { done({}); });
    return;
  }
  // The lines filled or updated so far: their data must be durable on the
  // cache device, and on the groups they copy, before any entry names it.
  persisting_ = true;
  flush_.done = std::move(done);
  flush_.lines = std::exchange(to_persist_, {});
  flush_.reqs.assign(1 + sources_.size(), request{});
  flush_.outstanding = static_cast<unsigned>(flush_.reqs.size());
  flush_.device_error = false;
  flush_.error = {};
  for (std::size_t i = 0; i < flush_.reqs.size(); ++i) {
    request& f = flush_.reqs[i];
    f.operation = op::flush;
    f.priority = device::io_class::background;
    f.context = this;
    f.on_complete = [](request& r) noexcept {
      read_cache& c = *static_cast<read_cache*>(r.context);
      const bool device = &r == &c.flush_.reqs[0];
      // A lost group holds nothing to make durable (its volumes are offline).
      if (r.result && (device || r.result != errc::device_failed)) {
        c.flush_.device_error |= device;
        if (!c.flush_.error) c.flush_.error = r.result;
      }
      if (--c.flush_.outstanding == 0) c.flushed();
    };
  }
  // Devices never complete inside submit: the requests may all go now.
  device_.submit(flush_.reqs[0]);
  for (std::size_t i = 0; i < sources_.size(); ++i) sources_[i]->submit(flush_.reqs[1 + i]);
}

void read_cache::flushed() {
  auto finish = [this](std::error_code ec) {
    persisting_ = false;
    auto d = std::move(flush_.done);
    flush_.lines.clear();
    d(ec);
  };
  if (flush_.device_error) {
    device_failed();
    return finish(flush_.error);
  }
  if (flush_.error) {
    // A source could not flush: its copies may not be durable. The lines
    // stay cached, unindexed; the next persist tries again.
    to_persist_.insert(to_persist_.end(), flush_.lines.begin(), flush_.lines.end());
    return finish(flush_.error);
  }
  metadata_batch puts;
  for (const pending& p : flush_.lines) {
    auto it = lines_.find(p.line);
    if (it == lines_.end() || it->second.generation != p.generation || it->second.persisted)
      continue;
    it->second.persisted = true;
    puts.put(column::cache_index, keys::cache_line(p.line), encode_cache_slot(it->second.slot));
  }
  if (puts.empty()) return finish({});
  store_.write(std::move(puts), false, finish);
}

}  // namespace strata::tiering
