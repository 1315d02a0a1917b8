#include "tiering/volume.h"

#include <algorithm>
#include <bit>
#include <boost/asio/post.hpp>
#include <cassert>
#include <cstring>

#include "raid/device/buffers.h"
#include "raid/device/invariant.h"
#include "tiering/pool.h"

namespace strata::tiering {

using device::op;
using device::request;

namespace {

// Why the pool gives a group up when its I/O fails with device_failed.
constexpr const char* group_gone =
    "its I/O fails with device_failed (more members lost than its redundancy)";

source source_of(tier t) noexcept {
  switch (t) {
    case tier::performance:
      return source::performance;
    case tier::capacity:
      return source::capacity;
    case tier::cold:
      return source::cold;
  }
  return source::capacity;
}

// extent_location packed in 64 bits, 0 meaning "never written":
// bit 63 set, group in bits 48..62, the group's extent in bits 0..47.
constexpr std::uint64_t mapped_bit = 1ull << 63;
std::uint64_t pack(extent_location l) noexcept {
  return mapped_bit | (std::uint64_t{l.group} << 48) | l.extent;
}
extent_location unpack(std::uint64_t v) noexcept {
  return {static_cast<std::uint16_t>((v >> 48) & 0x7fff), v & ((1ull << 48) - 1)};
}

}  // namespace

// An extent being allocated (its first write) or unmapped (a discard):
// pieces that meet it wait, then run against what it became.
struct volume::transition {
  std::vector<piece*> waiting;
};

volume::volume(pool& owner, const volume_record& record, const device::block_geometry& geometry)
    : pool_(owner),
      record_(record),
      geometry_(geometry),
      extent_blocks_(owner.extent_size_bytes() / record.block_size_bytes),
      group_blocks_per_block_(0),
      map_((record.block_count + extent_blocks_ - 1) / extent_blocks_, 0),
      heat_(map_.size(), extent_blocks_, record.block_size_bytes, owner.options().heat,
            owner.clock()),
      deferred_(owner.executor(), [this](const request& r) { return refusal(r.operation); }) {
  // Every group's block size divides the volume's (the pool checked).
  group_blocks_per_block_ =
      record.block_size_bytes / owner.group(0).geometry().logical_block_size_bytes;
  writes_in_flight_.assign(map_.size(), 0);
}

volume::~volume() {
  assert(idle());
}

boost::asio::any_io_executor volume::executor() const noexcept {
  return pool_.executor();
}

std::optional<extent_location> volume::location(std::uint64_t volume_extent) const noexcept {
  const std::uint64_t v = map_[volume_extent];
  if (v == 0) return std::nullopt;
  return unpack(v);
}

device::allocation_run volume::allocation_at(std::uint64_t lba,
                                             std::uint64_t max_blocks) const noexcept {
  const bool mapped = map_[lba / extent_blocks_] != 0;
  const std::uint64_t limit = lba + max_blocks;
  std::uint64_t end = lba;
  while (end < limit && (map_[end / extent_blocks_] != 0) == mapped)
    end = (end / extent_blocks_ + 1) * extent_blocks_;
  return {mapped ? device::allocation::mapped : device::allocation::deallocated,
          std::min(end, limit) - lba};
}

void volume::load_mapping(std::uint64_t volume_extent, extent_location where) noexcept {
  if (map_[volume_extent] == 0) {
    ++mapped_;
  } else {
    --mapped_on(unpack(map_[volume_extent]));
  }
  ++mapped_on(where);
  map_[volume_extent] = pack(where);
}

std::uint64_t& volume::mapped_on(extent_location l) noexcept {
  return mapped_on_[static_cast<int>(pool_.tier_of(l.group))];
}

void volume::grow(std::uint64_t block_count) {
  assert(block_count >= record_.block_count);
  record_.block_count = block_count;
  geometry_.block_count = block_count;
  map_.resize((block_count + extent_blocks_ - 1) / extent_blocks_, 0);
  writes_in_flight_.resize(map_.size(), 0);
  heat_.grow(map_.size());
}

void volume::submit(request& req) noexcept {
  if (auto ec = device::validate(geometry_, req)) {
    deferred_.complete_later(req, ec);
    return;
  }
  if (!online()) {
    deferred_.complete_later(req, errc::device_failed);
    return;
  }
  if (req.operation != op::read && req.operation != op::flush) {
    // The metadata's state on disk is unknown, or a backing store is full:
    // change nothing more.
    if (const std::error_code refused = pool_.write_refusal()) {
      deferred_.complete_later(req, refused);
      return;
    }
  }
  outer_io& o = ios_.acquire();
  o.vol = this;
  o.outer = &req;
  o.result = {};
  o.pending = 1;  // held while the pieces start
  o.epoch = pool_.begin_io();
  o.sequential = false;
  o.started = pool_.clock().now();
  ++in_flight_;
  submitting_ = true;
  if (req.operation == op::flush) {
    flush_groups(o);
  } else {
    o.sequential = heat_.record(req.operation, req.lba, req.block_count);
    const std::uint32_t block_size = geometry_.logical_block_size_bytes;
    std::uint64_t lba = req.lba;
    const std::uint64_t end = req.lba + req.block_count;
    while (lba < end) {
      const std::uint64_t e = lba / extent_blocks_;
      const std::uint64_t first = lba % extent_blocks_;
      const std::uint64_t n = std::min(end - lba, extent_blocks_ - first);
      start_piece(o, e, first, n, (lba - req.lba) * block_size);
      lba += n;
    }
  }
  op_done(o);  // still submitting: a request finished already completes from the loop
  submitting_ = false;
}

void volume::start_piece(outer_io& o, std::uint64_t volume_extent, std::uint64_t first_block,
                         std::uint64_t block_count, std::uint64_t buffer_offset_bytes) {
  dispatch(new_piece(o, volume_extent, first_block, block_count, buffer_offset_bytes));
}

volume::piece& volume::new_piece(outer_io& o, std::uint64_t volume_extent,
                                 std::uint64_t first_block, std::uint64_t block_count,
                                 std::uint64_t buffer_offset_bytes) {
  piece& p = pieces_.acquire();
  p.owner = &o;
  p.vol = this;
  p.extent = volume_extent;
  p.first_block = first_block;
  p.block_count = block_count;
  p.buffer_offset_bytes = buffer_offset_bytes;
  p.allocated.reset();
  p.counted_write = false;
  p.from_cache = false;
  p.skip_cache = false;
  p.cache_write = false;
  p.read_from.reset();
  p.updates_pending = 0;
  p.capacity_done = false;
  ++o.pending;
  return p;
}

void volume::dispatch(piece& p) {
  if (auto it = transitions_.find(p.extent); it != transitions_.end()) {
    it->second->waiting.push_back(&p);
    return;
  }
  if (!online())
    return piece_done(p, errc::device_failed);  // it waited, and the volume went offline
  const op operation = p.owner->outer->operation;
  if (operation != op::read) {
    // After a metadata failure the extent map on disk is unknown (a synced
    // write failed, perhaps the very transition this piece waited for):
    // sending it to the mapping in memory could acknowledge a write that
    // the next start does not see. A full store refuses it too.
    if (const std::error_code refused = pool_.write_refusal()) return piece_done(p, refused);
  }
  const std::optional<extent_location> where = location(p.extent);
  const bool whole_extent = p.first_block == 0 && p.block_count == extent_blocks_;
  if (where && (operation == op::write || (operation == op::discard && !whole_extent))) {
    // Counted until it completes: a move of the extent (running, or
    // starting while this is in flight) copies what it touched again then,
    // and commits only once it has drained.
    STRATA_INVARIANT(writes_in_flight_[p.extent] < UINT16_MAX);  // far above any queue depth
    ++writes_in_flight_[p.extent];
    p.counted_write = true;
  } else if (operation == op::discard && whole_extent && moves_.contains(p.extent)) {
    after_move_[p.extent].push_back(&p);  // unmapping must not race the commit
    return;
  }
  switch (operation) {
    case op::read:
      if (where) {
        if (!read_via_cache(p, *where)) submit_to_group(p, op::read, *where, false);
      } else {
        read_zeros(p);
      }
      return;
    case op::write:
      if (where) {
        write_capacity(p, *where, false);
      } else {
        allocate_and_write(p);
      }
      return;
    case op::discard:
      if (!where) {
        piece_done(p, {});  // never written: reads return zeros already
      } else if (p.first_block == 0 && p.block_count == extent_blocks_) {
        unmap(p);
      } else {
        write_capacity(p, *where, true);
      }
      return;
    case op::flush:
      break;
  }
  piece_done(p, errc::invalid_argument);
}

void volume::count(source s, piece& p) noexcept {
  const bool write = p.owner->outer->operation != op::read;
  volume_counters::served& c = counters_.by_source[static_cast<int>(s)][write ? 1 : 0];
  ++c.ios;
  c.bytes += p.block_count * geometry_.logical_block_size_bytes;
  if (!write) {
    p.read_from = s;
    p.read_sent = pool_.clock().now();
  }
}

void volume::read_zeros(piece& p) {
  count(source::unmapped, p);
  device::for_each_piece(p.owner->outer->buffers, p.buffer_offset_bytes,
                         p.block_count * geometry_.logical_block_size_bytes,
                         [](std::byte* b, std::uint64_t n) { std::memset(b, 0, n); });
  piece_done(p, {});
}

void volume::submit_to_group(piece& p, op operation, extent_location where, bool zeros) {
  const std::uint64_t bytes = p.block_count * geometry_.logical_block_size_bytes;
  count(source_of(pool_.tier_of(where.group)), p);
  p.group = where.group;
  p.segments.clear();
  if (zeros) {
    p.segments.push_back({pool_.zeros(), bytes});
  } else {
    device::for_each_piece(p.owner->outer->buffers, p.buffer_offset_bytes, bytes,
                           [&](std::byte* b, std::uint64_t n) {
                             p.segments.push_back({b, n});
                           });
  }
  const std::uint64_t group_extent_blocks = extent_blocks_ * group_blocks_per_block_;
  p.req = request{};
  p.req.operation = operation;
  p.req.priority = p.owner->outer->priority;
  p.req.write_through = write_through_ && operation == op::write;
  p.req.lba = where.extent * group_extent_blocks + p.first_block * group_blocks_per_block_;
  p.req.block_count = p.block_count * group_blocks_per_block_;
  p.req.buffers = p.segments;
  p.req.context = &p;
  p.req.on_complete = &volume::on_group_done;
  pool_.group(where.group).submit(p.req);
}

std::pair<std::uint64_t, std::uint64_t> volume::cache_lines(
    std::uint64_t volume_extent, std::uint64_t first_block,
    std::uint64_t block_count) const noexcept {
  const std::uint64_t line_bytes = pool_.cache()->line_bytes();
  const std::uint64_t block_size = geometry_.logical_block_size_bytes;
  const std::uint64_t start = (volume_extent * extent_blocks_ + first_block) * block_size;
  const std::uint64_t end = start + block_count * block_size;
  return {read_cache::key(record_.id, start / line_bytes),
          read_cache::key(record_.id, (end - 1) / line_bytes)};
}

bool volume::read_via_cache(piece& p, extent_location where) {
  read_cache* cache = pool_.cache();
  if (cache == nullptr || p.skip_cache || !read_cached(pool_.tier_of(where.group)) ||
      !cache->enabled()) {
    return false;
  }
  const auto [first, last] = cache_lines(p.extent, p.first_block, p.block_count);
  const std::uint64_t block_size = geometry_.logical_block_size_bytes;
  const std::uint64_t line_bytes = cache->line_bytes();
  if (cache->holds(first, last)) {
    // A hit. Each line has a slot of its own: one cache read per line,
    // the first in this piece, the others in pieces of their own (counted
    // here, once, as the one read they are).
    count(source::cache, p);
    const std::uint64_t line_blocks = line_bytes / block_size;
    const std::uint64_t start = p.extent * extent_blocks_ + p.first_block;  // in the volume
    const std::uint64_t end = start + p.block_count;
    const std::uint64_t first_end = std::min(end, (start / line_blocks + 1) * line_blocks);
    for (std::uint64_t b = first_end; b < end; b += line_blocks) {
      piece& q = new_piece(*p.owner, p.extent, b - p.extent * extent_blocks_,
                           std::min(line_blocks, end - b),
                           p.buffer_offset_bytes + (b - start) * block_size);
      read_line_from_cache(q, first + (b - start + start % line_blocks) / line_blocks);
    }
    p.block_count = first_end - start;
    read_line_from_cache(p, first);
    return true;
  }
  if (!p.owner->sequential) {
    // Random reads are what the cache may admit; a line is filled from
    // where the extent lives now.
    const std::uint64_t extent_start_line = p.extent * extent_blocks_ * block_size / line_bytes;
    const std::uint64_t group_blocks_per_line =
        line_bytes / pool_.group(where.group).geometry().logical_block_size_bytes;
    const std::uint64_t group_extent_blocks = extent_blocks_ * group_blocks_per_block_;
    for (std::uint64_t l = first; l <= last; ++l) {
      const std::uint64_t line_in_extent = (l & ((1ull << 40) - 1)) - extent_start_line;
      cache->note_read(l, pool_.group(where.group),
                       where.extent * group_extent_blocks + line_in_extent * group_blocks_per_line);
    }
  }
  return false;
}

void volume::read_line_from_cache(piece& p, read_cache::line_key line) {
  read_cache& cache = *pool_.cache();
  const std::uint64_t block_size = geometry_.logical_block_size_bytes;
  const std::uint64_t offset_in_line =
      ((p.extent * extent_blocks_ + p.first_block) * block_size) % cache.line_bytes();
  const std::optional<std::uint64_t> lba = cache.lookup(line, offset_in_line);
  assert(lba);  // holds() said so, and nothing ran since
  const std::uint64_t bytes = p.block_count * block_size;
  p.segments.clear();
  device::for_each_piece(p.owner->outer->buffers, p.buffer_offset_bytes, bytes,
                         [&](std::byte* b, std::uint64_t n) {
                           p.segments.push_back({b, n});
                         });
  p.from_cache = true;
  const std::uint64_t cache_blocks_per_block =
      block_size / cache.device().geometry().logical_block_size_bytes;
  p.req = request{};
  p.req.operation = op::read;
  p.req.priority = p.owner->outer->priority;
  p.req.lba = *lba;
  p.req.block_count = p.block_count * cache_blocks_per_block;
  p.req.buffers = p.segments;
  p.req.context = &p;
  p.req.on_complete = &volume::on_group_done;
  cache.device().submit(p.req);
}

void volume::write_capacity(piece& p, extent_location where, bool zeros) {
  read_cache* cache = pool_.cache();
  if (cache == nullptr || !read_cached(pool_.tier_of(where.group)))
    return submit_to_group(p, op::write, where, zeros);
  const auto [first, last] = cache_lines(p.extent, p.first_block, p.block_count);
  p.cache_write = true;
  const bool now = cache->begin_write(first, last, !zeros,
                                      [this, &p, where, zeros, first, last](std::error_code ec) {
                                        if (ec) {
                                          pool_.cache()->end_write(first, last, false);
                                          p.cache_write = false;
                                          return write_completed(p, ec);
                                        }
                                        if (!zeros) update_cache(p);
                                        submit_to_group(p, op::write, where, zeros);
                                      });
  if (!now) return;
  if (!zeros) update_cache(p);
  submit_to_group(p, op::write, where, zeros);
}

void volume::update_cache(piece& p) {
  read_cache& cache = *pool_.cache();
  const std::uint64_t block_size = geometry_.logical_block_size_bytes;
  const std::uint64_t line_blocks = cache.line_bytes() / block_size;
  const std::uint64_t start = p.extent * extent_blocks_ + p.first_block;  // in the volume
  const std::uint64_t end = start + p.block_count;
  const auto [first, last] = cache_lines(p.extent, p.first_block, p.block_count);
  const std::uint64_t cache_blocks_per_block =
      block_size / cache.device().geometry().logical_block_size_bytes;
  p.updates.clear();
  p.updates.reserve(last - first + 1);  // no reallocation once requests point into it
  for (read_cache::line_key l = first; l <= last; ++l) {
    const std::uint64_t from = std::max(start, (start / line_blocks + (l - first)) * line_blocks);
    const std::uint64_t to = std::min(end, (start / line_blocks + (l - first) + 1) * line_blocks);
    const std::optional<std::uint64_t> lba =
        cache.update_target(l, (from % line_blocks) * block_size);
    if (!lba) continue;
    piece::cache_update& u = p.updates.emplace_back();
    u.owner = &p;
    device::for_each_piece(p.owner->outer->buffers,
                           p.buffer_offset_bytes + (from - start) * block_size,
                           (to - from) * block_size, [&](std::byte* b, std::uint64_t n) {
                             u.segments.push_back({b, n});
                           });
    u.req.operation = op::write;
    u.req.priority = p.owner->outer->priority;
    u.req.lba = *lba;
    u.req.block_count = (to - from) * cache_blocks_per_block;
    u.req.buffers = u.segments;
    u.req.context = &u;
    u.req.on_complete = &volume::on_cache_update_done;
  }
  p.updates_pending = static_cast<unsigned>(p.updates.size());
  for (piece::cache_update& u : p.updates) cache.device().submit(u.req);
}

void volume::on_cache_update_done(request& r) noexcept {
  piece& p = *static_cast<piece::cache_update*>(r.context)->owner;
  volume& v = *p.vol;
  v.pool_.cache()->slot_io_done(r.lba);
  // A failed copy disables the cache (no read is served from it again);
  // the data is safe on the capacity tier, which decides the outcome.
  if (r.result) v.pool_.cache()->device_failed();
  if (--p.updates_pending == 0 && p.capacity_done) on_group_done(p.req);
}

void volume::allocate_and_write(piece& p) {
  const std::optional<extent_location> where = pool_.allocate(record_.placement);
  if (!where) {
    piece_done(p, errc::no_space);
    return;
  }
  transitions_.emplace(p.extent, std::make_unique<transition>());
  p.allocated = where;
  p.group = where->group;
  count(source_of(pool_.tier_of(where->group)), p);
  // The whole extent: zeros, the data, zeros. A later read of the rest of
  // the extent must see zeros, whatever the group held there before.
  const std::uint32_t block_size = geometry_.logical_block_size_bytes;
  const std::uint64_t before = p.first_block * block_size;
  const std::uint64_t data = p.block_count * block_size;
  const std::uint64_t after = (extent_blocks_ - p.first_block - p.block_count) * block_size;
  p.segments.clear();
  if (before > 0) p.segments.push_back({pool_.zeros(), before});
  device::for_each_piece(p.owner->outer->buffers, p.buffer_offset_bytes, data,
                         [&](std::byte* b, std::uint64_t n) {
                           p.segments.push_back({b, n});
                         });
  if (after > 0) p.segments.push_back({pool_.zeros(), after});
  p.req = request{};
  p.req.operation = op::write;
  p.req.priority = p.owner->outer->priority;
  p.req.write_through = write_through_;
  p.req.lba = where->extent * extent_blocks_ * group_blocks_per_block_;
  p.req.block_count = extent_blocks_ * group_blocks_per_block_;
  p.req.buffers = p.segments;
  p.req.context = &p;
  p.req.on_complete = &volume::on_group_done;
  pool_.group(where->group).submit(p.req);
}

void volume::unmap(piece& p) {
  const extent_location old = *location(p.extent);
  transitions_.emplace(p.extent, std::make_unique<transition>());
  // The read cache forgets the extent's lines; the store applies writes in
  // order, so their deletion is on disk before the unmapping is.
  const bool drops_lines = pool_.cache() != nullptr && read_cached(pool_.tier_of(old.group));
  if (drops_lines) {
    const auto [first, last] = cache_lines(p.extent, 0, extent_blocks_);
    pool_.cache()->begin_write(first, last, false, [](std::error_code) {});
    p.cache_write = true;
  }
  metadata_batch batch;
  batch.erase(column::extent_map, keys::extent(record_.id, p.extent));
  pool_.store().write(std::move(batch), true, [this, &p, old](std::error_code ec) {
    if (p.cache_write) {
      p.cache_write = false;
      const auto [first, last] = cache_lines(p.extent, 0, extent_blocks_);
      pool_.cache()->end_write(first, last, true);
    }
    if (!ec) {
      map_[p.extent] = 0;
      --mapped_;
      --mapped_on(old);
      heat_.clear(p.extent);
      pool_.free_after_io(old);
    }
    finish_transition(p.extent);
    piece_done(p, ec);
  });
}

void volume::on_group_done(request& r) noexcept {
  piece& p = *static_cast<piece*>(r.context);
  volume& v = *p.vol;
  if (p.from_cache) {
    p.from_cache = false;
    v.pool_.cache()->slot_io_done(r.lba);
    if (!r.result) return v.piece_done(p, {});
    // The cache SSD failed: it is disabled, and the read goes to the HDDs.
    v.pool_.cache()->device_failed();
    p.skip_cache = true;
    return v.dispatch(p);
  }
  if ((r.operation == op::write || r.operation == op::discard) &&
      v.pool_.tier_of(p.group) == tier::cold) {
    if (v.cold_written_.size() <= p.group) v.cold_written_.resize(v.pool_.group_count());
    v.cold_written_[p.group] = true;
  }
  if (p.updates_pending > 0) {
    p.capacity_done = true;  // the cache's copies finish the piece
    return;
  }
  v.note_group_result(p.group, r.result);
  if (p.cache_write) {
    p.cache_write = false;
    const auto [first, last] = v.cache_lines(p.extent, p.first_block, p.block_count);
    v.pool_.cache()->end_write(first, last, !r.result);
  }
  if (p.counted_write) return v.write_completed(p, r.result);
  if (!p.allocated) {
    v.piece_done(p, r.result);
    return;
  }
  // A new extent's data is on its group, perhaps only in the disks' write
  // caches: flush the group, then write the mapping, synced. A mapping on
  // disk must never name an extent whose zeros a power cut could still
  // lose: what the extent held before, another volume's data, would show.
  const extent_location where = *p.allocated;
  if (r.result) {
    v.pool_.free_after_io(where);
    v.finish_transition(p.extent);
    v.piece_done(p, r.result);
    return;
  }
  if (r.operation == op::write) {
    p.req = request{};
    p.req.operation = op::flush;
    p.req.priority = p.owner->outer->priority;
    p.req.context = &p;
    p.req.on_complete = &volume::on_group_done;
    v.pool_.group(where.group).submit(p.req);
    return;
  }
  metadata_batch batch;
  batch.put(column::extent_map, keys::extent(v.record_.id, p.extent), encode(where));
  v.pool_.store().write(std::move(batch), true, [&v, &p, where](std::error_code ec) {
    if (!ec) {
      v.map_[p.extent] = pack(where);
      ++v.mapped_;
      ++v.mapped_on(where);
      // Lost while its mapping was committed: too late to refuse it.
      if (!v.pool_.group_usable(where.group))
        v.take_offline(v.pool_.lost_group_status(where.group));
    }
    // On failure the extent stays allocated: the mapping may be on disk.
    v.finish_transition(p.extent);
    v.piece_done(p, ec);
  });
}

bool volume::has_extent_on(std::uint16_t group) const noexcept {
  return std::ranges::any_of(
      map_, [group](std::uint64_t packed) { return packed != 0 && unpack(packed).group == group; });
}

void volume::take_offline(std::string reason) {
  offline_reason_ = std::move(reason);
}

void volume::write_completed(piece& p, std::error_code result) {
  const std::uint64_t e = p.extent;
  STRATA_INVARIANT(p.counted_write && writes_in_flight_[e] > 0);
  p.counted_write = false;
  const bool drained = --writes_in_flight_[e] == 0;
  // Its data is at the old place now (all of it, or, if it failed, any
  // part): a copy that read those granules before may have missed it.
  if (auto m = moves_.find(e); m != moves_.end())
    m->second->write_landed(p.first_block, p.block_count);
  piece_done(p, result);
  if (!drained) return;
  if (auto m = moves_.find(e); m != moves_.end()) m->second->writes_drained();
}

unsigned volume::writes_in_flight(std::uint64_t volume_extent) const noexcept {
  return writes_in_flight_[volume_extent];
}

void volume::hold_requests(std::uint64_t volume_extent) {
  const bool held = transitions_.emplace(volume_extent, std::make_unique<transition>()).second;
  STRATA_INVARIANT(held);
}

std::uint64_t volume::group_lba(extent_location where, std::uint64_t first_block) const noexcept {
  return (where.extent * extent_blocks_ + first_block) * group_blocks_per_block_;
}

void volume::note_group_result(std::uint16_t group, std::error_code result) {
  if (pool_.tier_of(group) == tier::cold) {
    // A cold-tier group is a cluster that keeps its own redundancy: an
    // error there is an outage (timed out, full, down) that ends, not a
    // lost group. This I/O fails; the group takes no moves for a while;
    // every volume stays online, and the rest of the pool serves.
    if (result == errc::device_failed || result == errc::timed_out || result == errc::io_error ||
        result == errc::no_space) {
      pool_.pause_group(group, "its I/O failed: " + result.message());
    }
    return;
  }
  if (result == errc::device_failed) {
    pool_.group_failed(group, group_gone);
  } else if (result == errc::no_space) {
    pool_.stop_writes(group);  // the group's backing store is full: not a lost group
  }
}

void volume::move_extent(std::uint64_t volume_extent, tier to,
                         std::function<void(std::error_code)> done) {
  auto refuse = [&](std::error_code ec) {
    boost::asio::post(pool_.executor(), [done = std::move(done), ec] { done(ec); });
  };
  const std::optional<extent_location> from =
      volume_extent < map_.size() ? location(volume_extent) : std::nullopt;
  if (const std::error_code refused = pool_.write_refusal()) return refuse(refused);
  if (!online() || (from && !pool_.group_usable(from->group))) return refuse(errc::device_failed);
  if (from && !pool_.takes_extents(from->group))
    return refuse(errc::busy);  // paused: its store is out of reach
  if (!from || moves_.contains(volume_extent) || transitions_.contains(volume_extent) ||
      pool_.tier_of(from->group) == to) {
    return refuse(errc::invalid_argument);
  }
  const std::optional<extent_location> dest = pool_.allocate_on(to);
  if (!dest) return refuse(errc::no_space);
  if (pool_.cache() != nullptr && read_cached(pool_.tier_of(from->group))) {
    // The cache holds capacity-tier data only: the extent's lines go now
    // (their deletion reaches the store before the commit does), and none
    // is filled while the move runs. move_ended lets them go.
    const auto [first, last] = cache_lines(volume_extent, 0, extent_blocks_);
    pool_.cache()->begin_write(first, last, false, [](std::error_code) {});
  }
  auto m = std::make_unique<extent_move>(*this, volume_extent, *from, *dest, std::move(done));
  extent_move& ref = *m;
  moves_.emplace(volume_extent, std::move(m));
  ++in_flight_;  // the move counts as I/O in flight: the volume is not idle
  ref.start();
}

void volume::move_committed(std::uint64_t volume_extent, extent_location from, extent_location to) {
  map_[volume_extent] = pack(to);
  --mapped_on(from);
  ++mapped_on(to);
  pool_.free_after_io(from);
  if (!pool_.group_usable(to.group)) take_offline(pool_.lost_group_status(to.group));
}

void volume::move_ended(std::uint64_t volume_extent) {
  auto it = moves_.find(volume_extent);
  STRATA_INVARIANT(it != moves_.end());
  const bool held = it->second->holds_requests();
  if (pool_.cache() != nullptr && read_cached(pool_.tier_of(it->second->from().group))) {
    const auto [first, last] = cache_lines(volume_extent, 0, extent_blocks_);
    pool_.cache()->end_write(first, last, true);
  }
  std::vector<piece*> after;
  if (auto a = after_move_.find(volume_extent); a != after_move_.end()) {
    after = std::move(a->second);
    after_move_.erase(a);
  }
  moves_.erase(it);
  --in_flight_;
  if (held) finish_transition(volume_extent);
  for (piece* p : after) dispatch(*p);
}

void volume::finish_transition(std::uint64_t volume_extent) {
  auto it = transitions_.find(volume_extent);
  assert(it != transitions_.end());
  std::vector<piece*> waiting = std::move(it->second->waiting);
  transitions_.erase(it);
  for (piece* w : waiting) dispatch(*w);
}

void volume::piece_done(piece& p, std::error_code result) {
  outer_io& o = *p.owner;
  if (result && !o.result) o.result = result;
  if (p.read_from && !result) {
    counters_.read_latency[static_cast<int>(*p.read_from)].add(
        p.block_count * geometry_.logical_block_size_bytes, pool_.clock().now() - p.read_sent);
  }
  p.owner = nullptr;
  pieces_.release(p);
  op_done(o);
}

void volume::flush_groups(outer_io& o) {
  o.flushes.resize(pool_.group_count());
  cold_written_.resize(pool_.group_count());
  for (std::uint16_t g = 0; g < pool_.group_count(); ++g) {
    if (!pool_.group_usable(g)) continue;  // nothing of an online volume's is there
    if (pool_.tier_of(g) == tier::cold) {
      // A cold group is flushed only for the host's own writes there that
      // completed since the last flush (moves flush their copies
      // themselves): so a Ceph outage stalls no flush of a volume that
      // wrote nothing there. A failed flush keeps the mark for the next.
      if (!cold_written_[g]) continue;
      cold_written_[g] = false;
    }
    request& f = o.flushes[g];
    f = request{};
    f.operation = op::flush;
    f.priority = o.outer->priority;
    f.context = &o;
    f.on_complete = [](request& r) noexcept {
      outer_io& fo = *static_cast<outer_io*>(r.context);
      volume& v = *fo.vol;
      std::error_code result = r.result;
      const auto group = static_cast<std::uint16_t>(&r - fo.flushes.data());
      if (result && v.pool_.tier_of(group) == tier::cold) v.cold_written_[group] = true;
      v.note_group_result(group, result);
      if (result == errc::device_failed && v.online())
        result = {};  // the volume had nothing there to flush
      if (result && !fo.result) fo.result = result;
      v.op_done(fo);
    };
    ++o.pending;
    pool_.group(g).submit(f);
  }
}

std::error_code volume::refusal(op operation) const noexcept {
  if ((operation == op::write || operation == op::discard) && pool_.metadata_failed()) {
    // A synced metadata write failed while this was in flight, its outcome
    // unknown: the pool acknowledges no write from then on
    // (docs/tiering-keys.md). Its data may be on disk; an error says so.
    return errc::io_error;
  }
  return {};
}

void volume_counters::requests::add(std::uint64_t request_bytes, device::duration took) noexcept {
  ++count;
  bytes += request_bytes;
  latency += took;
  const double seconds = std::chrono::duration<double>(took).count();
  const auto bound = std::lower_bound(latency_bucket_bounds_seconds.begin(),
                                      latency_bucket_bounds_seconds.end(), seconds);
  ++latency_buckets[static_cast<std::size_t>(bound - latency_bucket_bounds_seconds.begin())];
}

void volume::op_done(outer_io& o) {
  if (--o.pending > 0) return;
  request& outer = *o.outer;
  const std::error_code result = o.result;
  if (outer.operation == op::read || outer.operation == op::write) {
    const device::duration latency = pool_.clock().now() - o.started;
    pool_.note_foreground_latency(latency);
    counters_.whole[outer.operation == op::write ? 1 : 0].add(
        outer.block_count * geometry_.logical_block_size_bytes, latency);
  } else if (outer.operation == op::flush) {
    counters_.whole[2].add(0, pool_.clock().now() - o.started);
  }
  pool_.end_io(o.epoch);
  --in_flight_;
  o.outer = nullptr;
  ios_.release(o);
  if (submitting_) {
    // Answered from the loop, later: a metadata failure may become known
    // before then, so deferred_ decides a success's answer as it delivers it.
    deferred_.complete_later(outer, result);
  } else {
    device::complete(outer, result ? result : refusal(outer.operation));
  }
}

}  // namespace strata::tiering
