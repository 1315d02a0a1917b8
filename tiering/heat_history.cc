#include "tiering/heat_history.h"

#include <algorithm>

namespace strata::tiering {

namespace {

bool cooler(const heat_snapshot::hot_extent& a, const heat_snapshot::hot_extent& b) {
  return a.score > b.score;  // for the min-heap: the coolest on top
}

}  // namespace

void heat_snapshot_builder::offer(const heat_snapshot::hot_extent& e) {
  ++tracked_;
  total_.read_ios += e.heat.read_ios;
  total_.write_ios += e.heat.write_ios;
  total_.read_bytes += e.heat.read_bytes;
  total_.write_bytes += e.heat.write_bytes;
  if (limit_ == 0 || e.score <= 0) return;
  if (heap_.size() < limit_) {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), cooler);
  } else if (e.score > heap_.front().score) {
    std::pop_heap(heap_.begin(), heap_.end(), cooler);
    heap_.back() = e;
    std::push_heap(heap_.begin(), heap_.end(), cooler);
  }
}

heat_snapshot heat_snapshot_builder::finish(std::int64_t taken_unix_seconds) {
  heat_snapshot s;
  s.taken_unix_seconds = taken_unix_seconds;
  s.extents_tracked = tracked_;
  s.total = total_;
  std::sort_heap(heap_.begin(), heap_.end(), cooler);  // hottest first
  s.hottest = std::move(heap_);
  return s;
}

std::expected<heat_history, error> heat_history::open(metadata_store& store,
                                                      const heat_history_options& options) {
  if (options.keep == 0 || options.interval <= device::duration::zero()) {
    return std::unexpected(make_error(
        errc::invalid_argument,
        "heat history: it must keep at least one snapshot, taken at a positive interval"));
  }
  heat_history h(options);
  const auto first = store.first_key(column::heat_history);
  const auto last = store.last_key(column::heat_history);
  if (first && last) {
    const auto f = keys::parse_history(*first);
    const auto l = keys::parse_history(*last);
    if (f && l && f->header) {
      h.first_ = f->sequence;
      h.next_ = l->sequence + 1;
    } else {
      // Diagnostics only: a damaged history is dropped, not a reason to
      // keep the pool from opening. Every key is at most 20 bytes.
      metadata_batch clear;
      clear.erase_range(column::heat_history, "", std::string(21, '\xff'));
      if (auto ec = store.write_now(clear)) {
        return std::unexpected(
            error{ec, "heat history: cannot drop a damaged history: " + ec.message()});
      }
    }
  }
  return h;
}

metadata_batch heat_history::record(heat_snapshot& snap) {
  snap.sequence = next_++;
  metadata_batch batch;
  batch.put(column::heat_history, keys::history_snapshot(snap.sequence),
            encode(history_header{snap.taken_unix_seconds, snap.extents_tracked,
                                  heat_map::encode(snap.total)}));
  for (const auto& e : snap.hottest) {
    batch.put(column::heat_history,
              keys::history_extent(snap.sequence, e.volume_id, e.volume_extent),
              encode(history_entry{e.where, heat_map::encode(e.heat)}));
  }
  if (next_ - first_ > options_.keep) {
    const std::uint64_t new_first = next_ - options_.keep;
    batch.erase_range(column::heat_history, keys::history_snapshot(first_),
                      keys::history_snapshot(new_first));
    first_ = new_first;
  }
  return batch;
}

std::expected<std::vector<heat_snapshot>, error> heat_history::read(const metadata_store& store) {
  std::vector<heat_snapshot> out;
  bool damaged = false;
  const std::error_code ec =
      store.scan(column::heat_history, [&](std::string_view k, std::string_view v) {
        const auto key = keys::parse_history(k);
        if (!key) {
          damaged = true;
          return;
        }
        if (key->header) {
          const auto h = decode_history_header(v);
          const auto total = h ? heat_map::decode(h->total_heat) : std::nullopt;
          if (!total) {
            damaged = true;
            return;
          }
          out.push_back({key->sequence, h->taken_unix_seconds, h->extents_tracked, *total, {}});
          return;
        }
        const auto e = decode_history_entry(v);
        const auto heat = e ? heat_map::decode(e->heat) : std::nullopt;
        if (!heat || out.empty() || out.back().sequence != key->sequence) {
          damaged = true;
          return;
        }
        out.back().hottest.push_back(
            {key->volume, key->volume_extent, e->where, *heat, heat_map::score(*heat)});
      });
  if (ec)
    return std::unexpected(
        error{ec, "heat history: cannot read the metadata store: " + ec.message()});
  if (damaged)
    return std::unexpected(make_error(errc::io_error, "heat history: a record is damaged"));
  // Keys sort by volume within a snapshot: put each back in heat order.
  for (auto& s : out) {
    std::stable_sort(s.hottest.begin(), s.hottest.end(),
                     [](const auto& a, const auto& b) { return a.score > b.score; });
  }
  return out;
}

}  // namespace strata::tiering
