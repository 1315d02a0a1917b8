#include "raid/write_back.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cassert>
#include <cstring>
#include <random>

#include "raid/device/buffers.h"
#include "raid/device/invariant.h"
#include "raid/write_back_parts.h"

namespace strata::raid {

using device::op;
using device::request;

const char* to_string(cache_mode m) noexcept {
  return m == cache_mode::write_back ? "write-back" : "write-through";
}

write_back_device::write_back_device(device::block_device& group, device::block_device& log,
                                     const wlog::superblock& sb, const write_back_options& options)
    : forwarding_device(group),
      group_(group),
      log_(log),
      options_(options),
      geometry_(group.geometry()),
      id_(sb.id),
      data_blocks_(sb.data_blocks),
      sb_generation_(sb.generation),
      head_(sb.tail_position),
      tail_(sb.tail_position),
      next_seq_(sb.tail_seq),
      deferred_(group.executor()),
      zeros_(std::uint64_t{options.max_record_blocks} * wlog::block_bytes) {
  lost_ = options.lost_at_open;
  geometry_.max_segments = std::min(group.geometry().max_segments, log.geometry().max_segments - 1);
  options_.stripe_blocks = std::max<std::uint64_t>(1, options_.stripe_blocks);
  // A record must fit a small log several times over, or a write could wait for room forever.
  options_.max_record_blocks = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>((data_blocks_ - 1) / 4, 1, options_.max_record_blocks));
  if (options_.bypass_min_blocks == 0) {
    options_.bypass_min_blocks =
        std::max<std::uint64_t>((1u << 20) / wlog::block_bytes, options_.stripe_blocks);
  }
  for (unsigned i = 0; i < std::max(1u, options_.destage_stripes_in_flight); ++i) {
    auto j = std::make_unique<destage_job>();
    j->dev = this;
    j->buffer = device::aligned_buffer(options_.stripe_blocks * wlog::block_bytes);
    jobs_.push_back(std::move(j));
  }
  checkpoint_ = std::make_unique<checkpoint_io>();
  age_timer_ = options_.clock->make_timer(group.executor(), [this] {
    maybe_destage();
    maybe_checkpoint();
  });
}

write_back_device::~write_back_device() {
  // In every build: a device destroyed with log or destage I/O in flight
  // would be written into after it is freed (stop() it, and wait).
  STRATA_INVARIANT(idle());
}

std::string write_back_device::write_through_reason() const {
  if (log_failed_) return "the write log cannot be written";
  if (log_degraded_) return "the write log's group has lost its redundancy";
  if (requested_ == cache_mode::write_through) return "an administrator asked for write-through";
  return "";
}

bool write_back_device::drained() const noexcept {
  return dirty_blocks_ == 0 && records_.empty() && host_in_flight_ == 0;
}

bool write_back_device::idle() const noexcept {
  if (host_in_flight_ != 0 || checkpoint_in_flight_ || log_flush_in_flight_ || orphans_ != 0 ||
      retiring_elsewhere_) {
    return false;
  }
  if (std::ranges::any_of(jobs_, [](const auto& j) { return j->busy; })) return false;
  return std::ranges::none_of(records_, [](const record* r) { return r->in_log_io || !r->acked; });
}

void write_back_device::stop(std::function<void()> done) {
  stopping_ = true;
  age_timer_->cancel();
  on_stopped_ = std::move(done);
  check_idle();
}

void write_back_device::check_idle() {
  if (!stopping_ || !on_stopped_ || !idle()) return;
  boost::asio::post(group_.executor(), std::move(on_stopped_));
  on_stopped_ = nullptr;
}

void write_back_device::note_event(const std::string& what) {
  if (options_.on_event) options_.on_event(what);
}

void write_back_device::set_mode(cache_mode m) {
  if (m == requested_) return;
  requested_ = m;
  drain_announced_ = false;
  if (m == cache_mode::write_through && dirty_blocks_ > 0) {
    note_event("write cache set to write-through: destaging " +
               std::to_string(dirty_blocks_ * wlog::block_bytes >> 20) +
               " MiB of dirty data first");
  } else {
    note_event(std::string("write cache set to ") + to_string(m));
  }
  maybe_destage();
}

void write_back_device::set_log_degraded(bool degraded) {
  if (degraded == log_degraded_) return;
  log_degraded_ = degraded;
  note_event(degraded
                 ? "the write log's group lost its redundancy: writing through, destaging the log"
                 : "the write log's group is redundant again: write-back resumes");
  maybe_destage();
}

// ---------------------------------------------------------------------------
// Requests from above.

void write_back_device::submit(request& req) noexcept {
  if (auto ec = device::validate(geometry_, req)) return deferred_.complete_later(req, ec);
  host_io& h = ios_.acquire();
  h.dev = this;
  h.outer = &req;
  h.result = {};
  h.pending = 1;  // held while it starts
  ++host_in_flight_;
  submitting_ = true;
  switch (req.operation) {
    case op::read:
      start_read(h);
      break;
    case op::write:
    case op::discard:
      start_write(h);
      break;
    case op::flush:
      if (log_failed_ || direct_writes_since_flush_ > 0 || group_flushes_in_flight_ > 0) {
        // Writes went to the group directly: they need its flush. Logged
        // ones were durable when acknowledged. A group flush already on
        // its way covers the direct writes before it, but is not done: a
        // flush behind it may not be answered first, so it sends its own.
        direct_writes_since_flush_ = 0;
        ++group_flushes_in_flight_;
        h.direct = request{};
        h.direct.operation = op::flush;
        h.direct.priority = req.priority;
        h.direct.context = &h;
        h.direct.on_complete = &write_back_device::on_direct_written;
        ++h.pending;
        group_.submit(h.direct);
      }
      break;
  }
  host_part_done(h, {});
  submitting_ = false;
}

void write_back_device::host_part_done(host_io& h, std::error_code result) {
  if (result && !h.result) h.result = result;
  if (--h.pending > 0) return;
  request& outer = *h.outer;
  const std::error_code r = h.result;
  h.outer = nullptr;
  ios_.release(h);
  --host_in_flight_;
  if (submitting_) {
    deferred_.complete_later(outer, r);
  } else {
    device::complete(outer, r);
  }
  check_idle();
}

void write_back_device::start_read(host_io& h) {
  const request& outer = *h.outer;
  const std::uint64_t end = outer.lba + outer.block_count;
  if (!lost_.empty() && lost_.intersects(outer.lba, outer.block_count)) {
    // Dirty data the failed log could not give back: the group's copy is
    // older than what was acknowledged.
    h.result = make_error_code(errc::media_error);
    return;
  }
  // The pieces: runs the index holds dirty come from the log, the rest
  // from the group. Counted first, so that no piece moves once submitted.
  std::vector<read_span>& spans = read_spans_;  // scratch, reused: nothing allocated per read
  spans.clear();
  std::uint64_t b = outer.lba;
  auto it = index_.upper_bound(b);
  if (it != index_.begin()) {
    auto p = std::prev(it);
    if (p->first + p->second.blocks > b) it = p;
  }
  while (b < end) {
    while (it != index_.end() && it->first < end &&
           (!it->second.dirty || it->first + it->second.blocks <= b))
      ++it;
    if (it == index_.end() || it->first >= end) {
      spans.push_back({b, end - b, 0, nullptr});
      break;
    }
    if (it->first > b) {
      spans.push_back({b, it->first - b, 0, nullptr});
      b = it->first;
    }
    const std::uint64_t stop = std::min(end, it->first + it->second.blocks);
    spans.push_back({b, stop - b, it->second.log_block + (b - it->first), it->second.rec});
    b = stop;
    ++it;
  }
  h.pieces.resize(spans.size());
  const std::uint32_t bs = geometry_.logical_block_size_bytes;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    host_io::piece& p = h.pieces[i];
    p.owner = &h;
    p.pinned = spans[i].rec;
    p.segments.clear();
    device::for_each_piece(outer.buffers, (spans[i].lba - outer.lba) * bs, spans[i].blocks * bs,
                           [&](std::byte* d, std::uint64_t n) {
                             p.segments.push_back({d, n});
                           });
    p.req = request{};
    p.req.operation = op::read;
    p.req.priority = outer.priority;
    p.req.lba = p.pinned != nullptr ? spans[i].log_block : spans[i].lba;
    p.req.block_count = spans[i].blocks;
    p.req.buffers = p.segments;
    p.req.context = &p;
    p.req.on_complete = &write_back_device::on_read_piece;
    if (p.pinned != nullptr) {
      ++p.pinned->pins;
      ++counters_.reads_from_log;
    }
  }
  h.pending += static_cast<unsigned>(spans.size());
  for (host_io::piece& p : h.pieces) (p.pinned != nullptr ? log_ : group_).submit(p.req);
}

void write_back_device::on_read_piece(request& r) noexcept {
  host_io::piece& p = *static_cast<host_io::piece*>(r.context);
  host_io& h = *p.owner;
  write_back_device& d = *h.dev;
  std::error_code result = r.result;
  if (p.pinned != nullptr) {
    --p.pinned->pins;
    p.pinned = nullptr;
    if (result) {
      // The mirrored log could not give the data back (both copies): the
      // log is failed, and the read an error rather than older data.
      d.fail_log(result);
      result = make_error_code(errc::media_error);
    }
  }
  d.host_part_done(h, result);
  d.maybe_checkpoint();
}

void write_back_device::start_write(host_io& h) {
  const request& outer = *h.outer;
  if (log_failed_) return write_after_failure(h, outer.lba);
  const bool bypass = outer.block_count >= options_.bypass_min_blocks;
  if ((bypass || outer.write_through || mode() == cache_mode::write_through) &&
      !index_overlaps(outer.lba, outer.block_count)) {
    return write_direct(h, outer.lba);
  }
  ++counters_.writes_logged;
  h.next_block = outer.lba;
  if (!space_waiters_.empty()) {
    // Behind the writes already waiting for room: in arrival order.
    ++counters_.writes_waited_for_space;
    ++h.pending;  // held while it waits: its records so far may all be acknowledged meanwhile
    space_waiters_.push_back(&h);
    return;
  }
  log_next_records(h);
}

void write_back_device::log_next_records(host_io& h) {
  const std::uint64_t end = h.outer->lba + h.outer->block_count;
  while (h.next_block < end) {
    if (!place_record(h)) {
      ++counters_.writes_waited_for_space;
      ++h.pending;  // held while it waits
      space_waiters_.push_back(&h);
      maybe_destage();
      maybe_checkpoint();
      return;
    }
  }
}

bool write_back_device::place_record(host_io& h) {
  const request& outer = *h.outer;
  const std::uint64_t end = outer.lba + outer.block_count;
  const std::uint32_t n = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(options_.max_record_blocks, end - h.next_block));
  const std::uint64_t need = 1 + n;
  const std::uint64_t at = wlog::place(head_, need, data_blocks_);
  // One block stays free for the marker a restart appends.
  if (at + need - tail_ > data_blocks_ - 1) return false;
  record& rec = record_slots_.acquire();
  rec.dev = this;
  rec.owner = &h;
  rec.seq = next_seq_++;
  rec.next_seq = next_seq_;
  rec.position = at;
  rec.lba = h.next_block;
  rec.blocks = n;
  rec.dirty_blocks = 0;
  rec.pins = 0;
  rec.written = rec.acked = rec.redo = false;
  rec.redo_result = {};
  rec.in_log_io = true;
  const std::uint32_t bs = geometry_.logical_block_size_bytes;
  rec.segments.clear();
  rec.segments.push_back(rec.header.segment());
  if (outer.operation == op::discard) {
    rec.segments.push_back(zeros_.segment(0, std::uint64_t{n} * bs));
  } else {
    device::for_each_piece(outer.buffers, (h.next_block - outer.lba) * bs, std::uint64_t{n} * bs,
                           [&](std::byte* d, std::uint64_t len) {
                             rec.segments.push_back({d, len});
                           });
  }
  wlog::record_header hdr{
      .id = id_,
      .seq = rec.seq,
      .next_seq = rec.next_seq,
      .position = at,
      .lba = rec.lba,
      .data_blocks = n,
      .data_crc = wlog::data_crc(std::span(rec.segments).subspan(1), std::uint64_t{n} * bs),
      .acked_below = acked_below_};
  wlog::encode(hdr, rec.header.bytes().first<wlog::block_bytes>());
  head_ = at + need;
  h.next_block += n;
  records_.push_back(&rec);
  ++h.pending;
  ++counters_.records;
  rec.req = request{};
  rec.req.operation = op::write;
  rec.req.priority = outer.priority;
  rec.req.lba = wlog::physical(at, data_blocks_);
  rec.req.block_count = need;
  rec.req.buffers = rec.segments;
  rec.req.context = &rec;
  rec.req.on_complete = &write_back_device::on_record_written;
  log_.submit(rec.req);
  return true;
}

void write_back_device::on_record_written(request& r) noexcept {
  record& rec = *static_cast<record*>(r.context);
  write_back_device& d = *rec.dev;
  rec.in_log_io = false;
  if (rec.orphan) {
    // Redone directly after the log failed: the host waited for this write
    // to end as well, since it reads the host's buffers.
    if (rec.acked) {
      if (host_io* h = std::exchange(rec.owner, nullptr)) d.host_part_done(*h, rec.redo_result);
    }
    d.release_orphan(rec);
  } else if (r.result) {
    d.fail_log(r.result);  // redoes rec, and every record not yet durable, directly
  } else if (!d.log_failed_) {
    rec.written = true;
    rec.written_epoch = d.flush_epoch_;
    d.issue_log_flush();
  }
  d.maybe_checkpoint();
  d.check_idle();
}

void write_back_device::issue_log_flush() {
  if (log_flush_in_flight_ || log_failed_) return;
  const bool waiting =
      std::any_of(records_.begin() + static_cast<std::ptrdiff_t>(unacked_from_), records_.end(),
                  [&](const record* r) {
                    return r->written && r->written_epoch >= durable_epoch_ && !r->acked;
                  });
  if (!waiting) return;
  ++flush_epoch_;
  log_flush_in_flight_ = true;
  ++counters_.log_flushes;
  log_flush_ = request{};
  log_flush_.operation = op::flush;
  log_flush_.context = this;
  log_flush_.on_complete = &write_back_device::on_log_flush;
  log_.submit(log_flush_);
}

void write_back_device::on_log_flush(request& r) noexcept {
  write_back_device& d = *static_cast<write_back_device*>(r.context);
  d.log_flush_in_flight_ = false;
  if (r.result) {
    d.fail_log(r.result);
  } else {
    d.durable_epoch_ = d.flush_epoch_;
    d.acknowledge_durable();
    d.issue_log_flush();  // for the records written while it ran
  }
  d.check_idle();
}

// Acknowledges, in log order, every record the last flush made durable: a
// replay stops at the first torn record, so none after a record still in
// flight may be acknowledged before it.
void write_back_device::acknowledge_durable() {
  const device::time_point now = options_.clock->now();
  while (unacked_from_ < records_.size()) {
    record& rec = *records_[unacked_from_];
    if (!rec.written || rec.written_epoch >= durable_epoch_) break;
    ++unacked_from_;
    rec.acked = true;
    rec.acked_at = now;
    acked_below_ = std::max(acked_below_, rec.seq + 1);
    if (rec.blocks > 0) {
      index_insert(rec, rec.lba, rec.blocks, wlog::physical(rec.position, data_blocks_) + 1);
      forget_lost(rec.lba, rec.blocks);
    }
    if (host_io* h = std::exchange(rec.owner, nullptr)) {
      host_part_done(*h, {});
    } else if (rec.blocks == 0 && marker_done_) {
      std::exchange(marker_done_, nullptr)({});
    }
  }
  maybe_destage();
  maybe_checkpoint();
}

// ---------------------------------------------------------------------------
// Writing through.

void write_back_device::lock(lock_user& u, std::uint64_t lba, std::uint64_t blocks) {
  if (group_lock_.acquire(u, lba, lba + blocks)) u.granted(*this, u);
}

void write_back_device::unlock(lock_user& u) {
  group_lock_.release(u, [this](lock_user& w) { w.granted(*this, w); });
}

void write_back_device::write_direct(host_io& h, std::uint64_t from) {
  ++counters_.writes_direct;
  h.direct_from = from;
  ++h.pending;
  h.granted = [](write_back_device& d, lock_user& u) noexcept {
    host_io& w = static_cast<host_io&>(u);
    const request& outer = *w.outer;
    const std::uint32_t bs = d.geometry_.logical_block_size_bytes;
    w.direct_segments.clear();
    if (outer.operation == op::write) {
      device::for_each_piece(outer.buffers, (w.direct_from - outer.lba) * bs,
                             (outer.lba + outer.block_count - w.direct_from) * bs,
                             [&](std::byte* b, std::uint64_t n) {
                               w.direct_segments.push_back({b, n});
                             });
    }
    w.direct = request{};
    w.direct.operation = outer.operation;
    w.direct.priority = outer.priority;
    w.direct.lba = w.direct_from;
    w.direct.block_count = outer.lba + outer.block_count - w.direct_from;
    w.direct.buffers = w.direct_segments;
    w.direct.context = &w;
    w.direct.on_complete = &write_back_device::on_direct_written;
    d.group_.submit(w.direct);
  };
  lock(h, from, h.outer->lba + h.outer->block_count - from);
}

void write_back_device::on_direct_written(request& r) noexcept {
  host_io& h = *static_cast<host_io*>(r.context);
  write_back_device& d = *h.dev;
  if (r.operation == op::flush) {
    --d.group_flushes_in_flight_;
  } else {
    if (!r.result) {
      d.forget_lost(r.lba, r.block_count);
      ++d.direct_writes_since_flush_;
    }
    d.unlock(h);
  }
  d.host_part_done(h, r.result);
  d.maybe_destage();
}

// The log failed: nothing more is appended. Every record not yet
// acknowledged, and every write waiting for room, goes to the group
// directly -- except over blocks a record still in the log covers: a
// replay of the log at the next start would bring that record back over
// the direct write. Those wait until the dirty data is destaged (from the
// log, while it reads) and a last checkpoint empties the log ("retired").
void write_back_device::fail_log(std::error_code why) {
  if (log_failed_) return;
  log_failed_ = true;
  note_event("the write log failed (" + why.message() + "): writing through; " +
             std::to_string(dirty_blocks_ * wlog::block_bytes >> 20) +
             " MiB of dirty data to destage from it");
  // The records not yet durable leave the log's list: no replay needs
  // them, and the last checkpoint must not wait for them.
  std::vector<record*> unacked(records_.begin() + static_cast<std::ptrdiff_t>(unacked_from_),
                               records_.end());
  records_.resize(unacked_from_);
  for (record* rec : unacked) {
    rec->orphan = true;
    ++orphans_;
    if (rec->blocks == 0) {
      rec->acked = true;  // a marker: open() hands over a device that writes through
      if (marker_done_) std::exchange(marker_done_, nullptr)(why);
      release_orphan(*rec);
      continue;
    }
    rec->redo = true;
    if (index_overlaps(rec->lba, rec->blocks)) {
      held_.push_back([this, rec] { redo_direct(*rec); });
    } else {
      redo_direct(*rec);
    }
  }
  std::deque<host_io*> waiting = std::move(space_waiters_);
  space_waiters_.clear();
  for (host_io* h : waiting) {
    write_after_failure(*h, h->next_block);
    host_part_done(*h, {});
  }
  maybe_destage();
  maybe_checkpoint();
}

void write_back_device::release_orphan(record& rec) {
  if (rec.in_log_io || !rec.acked) return;  // its log write, or its write to the group, still runs
  rec.orphan = false;
  --orphans_;
  record_slots_.release(rec);
  check_idle();
}

void write_back_device::write_after_failure(host_io& h, std::uint64_t from) {
  const std::uint64_t end = h.outer->lba + h.outer->block_count;
  if (!retired_ && index_overlaps(from, end - from)) {
    ++h.pending;  // held: not answered before it is written
    held_.push_back([this, &h, from] {
      write_direct(h, from);
      host_part_done(h, {});
    });
    return;
  }
  write_direct(h, from);
}

void write_back_device::release_held() {
  retired_ = true;
  std::vector<std::function<void()>> held = std::move(held_);
  held_.clear();
  for (auto& go : held) go();
}

void write_back_device::redo_direct(record& rec) {
  rec.granted = [](write_back_device& d, lock_user& u) noexcept {
    record& w = static_cast<record&>(u);
    w.direct = request{};
    w.direct.operation = op::write;
    w.direct.lba = w.lba;
    w.direct.block_count = w.blocks;
    w.direct.buffers = std::span(w.segments).subspan(1);
    w.direct.context = &w;
    w.direct.on_complete = [](request& r) noexcept {
      record& x = *static_cast<record*>(r.context);
      write_back_device& dv = *x.dev;
      if (!r.result) {
        dv.forget_lost(x.lba, x.blocks);
        ++dv.direct_writes_since_flush_;
      }
      dv.unlock(x);
      x.acked = true;
      x.redo_result = r.result;
      // The host's buffers are free once it is answered: not while the
      // record's log write, which reads them too, still runs (on_record_written
      // answers it then).
      if (!x.in_log_io) {
        if (host_io* h = std::exchange(x.owner, nullptr)) dv.host_part_done(*h, r.result);
      }
      dv.release_orphan(x);
      dv.maybe_checkpoint();
      dv.maybe_destage();
    };
    d.group_.submit(w.direct);
  };
  ++counters_.writes_direct;
  lock(rec, rec.lba, rec.blocks);
}

// ---------------------------------------------------------------------------
// The dirty index.

void write_back_device::index_cut(std::uint64_t a, std::uint64_t b) {
  auto it = index_.upper_bound(a);
  if (it != index_.begin()) {
    auto p = std::prev(it);
    if (p->first + p->second.blocks > a) it = p;
  }
  while (it != index_.end() && it->first < b) {
    const std::uint64_t s = it->first;
    extent e = it->second;
    const std::uint64_t en = s + e.blocks;
    const std::uint64_t removed = std::min(en, b) - std::max(s, a);
    if (en > b) index_.emplace(b, extent{en - b, e.log_block + (b - s), e.rec, e.dirty});
    if (e.dirty) {
      e.rec->dirty_blocks -= removed;
      dirty_blocks_ -= removed;
    }
    if (s < a) {
      it->second.blocks = a - s;
      ++it;
    } else {
      it = index_.erase(it);
    }
  }
}

void write_back_device::index_insert(record& rec, std::uint64_t lba, std::uint64_t blocks,
                                     std::uint64_t log_block) {
  // Cut at stripe boundaries: destage takes a stripe's entries whole.
  const std::uint64_t u = options_.stripe_blocks;
  for (std::uint64_t a = lba; a < lba + blocks;) {
    const std::uint64_t b = std::min(lba + blocks, (a / u + 1) * u);
    index_cut(a, b);
    index_.emplace(a, extent{b - a, log_block + (a - lba), &rec, true});
    rec.dirty_blocks += b - a;
    dirty_blocks_ += b - a;
    a = b;
  }
}

bool write_back_device::index_overlaps(std::uint64_t lba, std::uint64_t blocks) const {
  auto it = index_.upper_bound(lba);
  if (it != index_.begin() && std::prev(it)->first + std::prev(it)->second.blocks > lba)
    return true;
  return it != index_.end() && it->first < lba + blocks;
}

std::uint64_t write_back_device::dirty_blocks_in(std::uint64_t lba, std::uint64_t blocks) const {
  const std::uint64_t end = lba + blocks;
  std::uint64_t n = 0;
  auto it = index_.upper_bound(lba);
  if (it != index_.begin()) --it;
  for (; it != index_.end() && it->first < end; ++it) {
    const std::uint64_t a = std::max(it->first, lba),
                        b = std::min(it->first + it->second.blocks, end);
    if (it->second.dirty && a < b) n += b - a;
  }
  return n;
}

void write_back_device::mark_clean(const record* rec, std::uint64_t lba, std::uint64_t blocks) {
  for (auto it = index_.lower_bound(lba); it != index_.end() && it->first < lba + blocks;) {
    extent& e = it->second;
    if (e.rec != rec || !e.dirty) {
      ++it;
      continue;
    }
    e.dirty = false;
    e.rec->dirty_blocks -= e.blocks;
    dirty_blocks_ -= e.blocks;
    ++it;
  }
}

void write_back_device::pause_destage(const std::string& why) {
  destage_paused_until_ = options_.clock->now() + std::chrono::seconds(5);
  age_timer_->arm(destage_paused_until_);
  note_event(why);
}

void write_back_device::lose(std::uint64_t lba, std::uint64_t blocks, const std::string& why) {
  lost_.insert(lba, blocks);
  counters_.blocks_lost += blocks;
  if (options_.persist_lost) options_.persist_lost(lost_);
  note_event("dirty data lost: blocks " + std::to_string(lba) + "+" + std::to_string(blocks) +
             " of the group read as media errors until written again (" + why + ")");
}

void write_back_device::forget_lost(std::uint64_t lba, std::uint64_t blocks) {
  if (lost_.empty() || !lost_.intersects(lba, blocks)) return;
  lost_.erase(lba, blocks);
  if (options_.persist_lost) options_.persist_lost(lost_);
}

// ---------------------------------------------------------------------------
// Destage.

bool write_back_device::want_destage() const noexcept {
  if (dirty_blocks_ == 0 || stopping_) return false;
  if (options_.clock->now() < destage_paused_until_) return false;
  if (mode() == cache_mode::write_through || !space_waiters_.empty()) return true;
  if (static_cast<double>(head_ - tail_) >
      options_.destage_above_fraction * static_cast<double>(data_blocks_)) {
    return true;
  }
  const std::size_t i = first_dirty();
  return i < unacked_from_ && options_.clock->now() - records_[i]->acked_at >= options_.destage_age;
}

std::size_t write_back_device::first_dirty() const noexcept {
  while (first_dirty_ < unacked_from_ && records_[first_dirty_]->dirty_blocks == 0) ++first_dirty_;
  return first_dirty_;
}

void write_back_device::maybe_destage() {
  while (want_destage()) {
    auto free_job = std::ranges::find_if(jobs_, [](const auto& j) { return !j->busy; });
    if (free_job == jobs_.end()) return;
    // The oldest dirty record's first stripe no other job has: destaging
    // oldest first frees the log's tail soonest.
    std::optional<std::uint64_t> stripe;
    std::size_t looked = 0;
    for (std::size_t i = first_dirty(); i < unacked_from_ && looked < 256 && !stripe; ++i) {
      const record* r = records_[i];
      if (r->dirty_blocks == 0) continue;
      ++looked;
      for (auto it = index_.lower_bound(r->lba);
           it != index_.end() && it->first < r->lba + r->blocks; ++it) {
        if (it->second.rec != r || !it->second.dirty) continue;
        const std::uint64_t s = it->first / options_.stripe_blocks;
        if (std::ranges::find(stripes_destaging_, s) == stripes_destaging_.end()) {
          stripe = s;
          break;
        }
      }
    }
    if (!stripe) break;
    destage_job& j = **free_job;
    j.busy = true;
    j.stripe = *stripe;
    j.begin = *stripe * options_.stripe_blocks;
    j.end = std::min(j.begin + options_.stripe_blocks, geometry_.block_count);
    stripes_destaging_.push_back(*stripe);
    j.granted = [](write_back_device& d, lock_user& u) noexcept {
      d.destage_locked(static_cast<destage_job&>(u));
    };
    lock(j, j.begin, j.end - j.begin);
  }
  // Old dirty data is destaged even with no write to prompt it.
  if (dirty_blocks_ > 0 && !stopping_)
    age_timer_->arm(options_.clock->now() + options_.destage_age);
}

// The stripe is locked: no direct write or other destage runs over it, and
// what the index says of it is what this job writes.
void write_back_device::destage_locked(destage_job& j) {
  j.parts.clear();
  for (auto it = index_.lower_bound(j.begin); it != index_.end() && it->first < j.end; ++it) {
    if (!it->second.dirty) continue;
    j.parts.push_back({it->first, it->second.blocks, it->second.log_block, it->second.rec});
    ++it->second.rec->pins;
  }
  if (j.parts.empty()) return destage_done(j);
  j.error = {};
  j.ios.resize(j.parts.size());
  j.segments.resize(j.parts.size());
  const std::uint32_t bs = geometry_.logical_block_size_bytes;
  // Behind the hosts, unless writes wait for room.
  const device::io_class priority =
      space_waiters_.empty() ? device::io_class::background : device::io_class::foreground;
  for (std::size_t i = 0; i < j.parts.size(); ++i) {
    const destage_job::part& p = j.parts[i];
    j.segments[i] = j.buffer.segment((p.lba - j.begin) * bs, p.blocks * bs);
    request& r = j.ios[i];
    r = request{};
    r.operation = op::read;
    r.priority = priority;
    r.lba = p.log_block;
    r.block_count = p.blocks;
    r.buffers = std::span(&j.segments[i], 1);
    r.context = &j;
    r.on_complete = &write_back_device::on_destage_read;
  }
  j.pending = static_cast<unsigned>(j.ios.size());
  for (request& r : j.ios) log_.submit(r);
}

// One of a destage job's requests completed: the job once its last one has
// (its first error kept), else nothing.
write_back_device::destage_job* write_back_device::destage_job_step(request& r) noexcept {
  destage_job& j = *static_cast<destage_job*>(r.context);
  if (r.result && !j.error) j.error = r.result;
  return --j.pending == 0 ? &j : nullptr;
}

void write_back_device::on_destage_read(request& r) noexcept {
  destage_job* last = destage_job_step(r);
  if (last == nullptr) return;
  destage_job& j = *last;
  write_back_device& d = *j.dev;
  if (j.error) {
    // Both copies of the log are unreadable here: what the index still
    // holds dirty of these parts is lost.
    d.fail_log(j.error);
    for (const destage_job::part& p : j.parts) {
      for (auto it = d.index_.lower_bound(p.lba);
           it != d.index_.end() && it->first < p.lba + p.blocks;) {
        if (it->second.rec != p.rec || !it->second.dirty) {
          ++it;
          continue;
        }
        // Kept, clean: the failed log is still retired before a write
        // goes direct over these blocks (should it read again later).
        const std::uint64_t lba = it->first, blocks = it->second.blocks;
        ++it;
        d.mark_clean(p.rec, lba, blocks);
        d.lose(lba, blocks, "the write log could not be read: " + j.error.message());
      }
    }
    return d.destage_done(j);
  }
  // One write per stripe: the dirty parts, and the clean blocks between
  // them read from the group (the lock keeps them as they are). A span of
  // half the stripe or more grows to the whole stripe: one full-stripe
  // write, no read-modify-write in the group. Several small writes to one
  // stripe would each be a read-modify-write, one after the other.
  const std::uint32_t bs = d.geometry_.logical_block_size_bytes;
  j.write_begin = j.parts.front().lba;
  j.write_end = j.parts.back().lba + j.parts.back().blocks;
  if (j.parts.size() > 1 && (j.write_end - j.write_begin) * 2 >= j.end - j.begin) {
    j.write_begin = j.begin;
    j.write_end = j.end;
  }
  const device::io_class priority = j.ios.front().priority;
  j.ios.resize(j.parts.size() + 1);  // no request is in flight now
  j.segments.resize(j.parts.size() + 1);
  std::size_t gaps = 0;
  std::uint64_t at = j.write_begin;
  auto gap = [&](std::uint64_t from, std::uint64_t to) {
    if (from >= to) return;
    j.segments[gaps] = j.buffer.segment((from - j.begin) * bs, (to - from) * bs);
    request& g = j.ios[gaps];
    g = request{};
    g.operation = op::read;
    g.priority = priority;
    g.lba = from;
    g.block_count = to - from;
    g.buffers = std::span(&j.segments[gaps], 1);
    g.context = &j;
    g.on_complete = &write_back_device::on_gaps_read;
    ++gaps;
  };
  for (const destage_job::part& p : j.parts) {
    gap(at, p.lba);
    at = p.lba + p.blocks;
  }
  gap(at, j.write_end);
  if (gaps == 0) return d.write_destage(j);
  j.pending = static_cast<unsigned>(gaps);
  for (std::size_t i = 0; i < gaps; ++i) d.group_.submit(j.ios[i]);
}

void write_back_device::on_gaps_read(request& r) noexcept {
  destage_job* last = destage_job_step(r);
  if (last == nullptr) return;
  destage_job& j = *last;
  write_back_device& d = *j.dev;
  if (j.error) {
    // The group could not read its own blocks: nothing was written, the
    // data stays dirty in the log, and destage tries again later.
    d.pause_destage("destage could not read the group (" + j.error.message() +
                    "): the data stays in the write log");
    return d.destage_done(j);
  }
  d.write_destage(j);
}

void write_back_device::write_destage(destage_job& j) {
  const std::uint32_t bs = geometry_.logical_block_size_bytes;
  j.segments[0] =
      j.buffer.segment((j.write_begin - j.begin) * bs, (j.write_end - j.write_begin) * bs);
  request& w = j.ios[0];
  const device::io_class priority = w.priority;
  w = request{};
  w.operation = op::write;
  w.priority = priority;
  w.lba = j.write_begin;
  w.block_count = j.write_end - j.write_begin;
  w.buffers = std::span(&j.segments[0], 1);
  w.context = &j;
  w.on_complete = &write_back_device::on_destage_written;
  if (j.write_begin == j.begin && j.write_end == j.end) ++counters_.full_stripe_writes;
  j.pending = 1;
  group_.submit(w);
}

void write_back_device::on_destage_written(request& r) noexcept {
  destage_job* last = destage_job_step(r);
  if (last == nullptr) return;
  destage_job& j = *last;
  write_back_device& d = *j.dev;
  if (j.error) {
    // The group failed the write: the data stays dirty in the log (reads
    // are served from it), and destage tries again later.
    d.pause_destage("destage to the group failed (" + j.error.message() +
                    "): the data stays in the write log");
    d.group_unwritable(j.error);
  } else {
    ++d.counters_.stripes_destaged;
    for (const destage_job::part& p : j.parts) {
      d.counters_.blocks_destaged += p.blocks;
      d.mark_clean(p.rec, p.lba, p.blocks);
    }
  }
  d.destage_done(j);
}

void write_back_device::destage_done(destage_job& j) {
  // Pinned until now, not just while their data was read: a record freed
  // meanwhile could give its slot to a new one, which mark_clean would
  // then take for the record this job wrote.
  for (destage_job::part& p : j.parts) --p.rec->pins;
  j.parts.clear();
  unlock(j);
  std::erase(stripes_destaging_, j.stripe);
  j.busy = false;
  maybe_checkpoint();
  maybe_destage();
  check_idle();
}

}  // namespace strata::raid
