#include <algorithm>
#include <boost/asio/post.hpp>
#include <map>
#include <random>

#include "raid/device/invariant.h"
#include "raid/write_back.h"
#include "raid/write_back_parts.h"

// The log's own work: reclaim (checkpoints), format, open and replay, and
// the bookkeeping checks the tests run.
namespace strata::raid {

using device::op;
using device::request;

std::string write_back_device::debug_state() const {
  std::string o =
      "dirty " + std::to_string(dirty_blocks_) + " records " + std::to_string(records_.size()) +
      " unacked_from " + std::to_string(unacked_from_) + " index " + std::to_string(index_.size()) +
      " held " + std::to_string(held_.size()) + " waiters " +
      std::to_string(space_waiters_.size()) + " host " + std::to_string(host_in_flight_) +
      " orphans " + std::to_string(orphans_) + " failed " + std::to_string(log_failed_) +
      " retired " + std::to_string(retired_) + " cp " + std::to_string(checkpoint_in_flight_) +
      " flush " + std::to_string(log_flush_in_flight_) + " head " + std::to_string(head_) +
      " tail " + std::to_string(tail_);
  for (auto& j : jobs_) o += " job" + std::to_string(j->busy);
  for (std::size_t i = 0; i < records_.size() && i < 5; ++i) {
    const record* r = records_[i];
    o += " [seq " + std::to_string(r->seq) + " acked " + std::to_string(r->acked) + " io " +
         std::to_string(r->in_log_io) + " dirty " + std::to_string(r->dirty_blocks) + " pins " +
         std::to_string(r->pins) + "]";
  }
  return o;
}

std::string write_back_device::check_invariants() const {
  std::map<const record*, std::uint64_t> dirty;
  std::uint64_t total = 0;
  std::uint64_t prev_end = 0;
  for (const auto& [lba, e] : index_) {
    if (lba < prev_end) return "overlapping entries at " + std::to_string(lba);
    prev_end = lba + e.blocks;
    if (std::ranges::find(records_, e.rec) == records_.end())
      return "entry at " + std::to_string(lba) + " names a record not in the log";
    if (lba < e.rec->lba || lba + e.blocks > e.rec->lba + e.rec->blocks)
      return "entry outside its record at " + std::to_string(lba);
    if (e.log_block != wlog::physical(e.rec->position, data_blocks_) + 1 + (lba - e.rec->lba)) {
      return "entry at " + std::to_string(lba) + " points at the wrong log block";
    }
    if (e.dirty) {
      dirty[e.rec] += e.blocks;
      total += e.blocks;
    }
  }
  if (total != dirty_blocks_)
    return "dirty_blocks_ " + std::to_string(dirty_blocks_) + " != " + std::to_string(total);
  for (const record* r : records_) {
    if (r->dirty_blocks != dirty[r])
      return "record " + std::to_string(r->seq) + " dirty count wrong";
    if (r->position < tail_ || r->position + 1 + r->blocks > head_)
      return "record outside [tail, head)";
  }
  for (std::size_t i = 1; i < records_.size(); ++i) {
    if (records_[i]->seq != records_[i - 1]->next_seq) return "records out of sequence";
    if (records_[i]->position < records_[i - 1]->position + 1 + records_[i - 1]->blocks)
      return "records overlap in the log";
  }
  if (head_ - tail_ > data_blocks_) return "log over full";
  return "";
}

// ---------------------------------------------------------------------------
// Reclaim.

bool write_back_device::reclaimable(const record& rec) const noexcept {
  return rec.acked && !rec.in_log_io && rec.dirty_blocks == 0 && rec.pins == 0;
}

void write_back_device::maybe_checkpoint() {
  if (checkpoint_in_flight_ || stopping_ || (log_failed_ && (retired_ || retiring_elsewhere_)))
    return;
  if (!log_failed_ && options_.clock->now() < destage_paused_until_)
    return;  // the group's flush failed: later
  if (log_failed_ && options_.clock->now() < retire_retry_at_)
    return;  // the last checkpoint's group flush failed: later
  while (reclaimable_ < records_.size() && reclaimable_ < unacked_from_ &&
         reclaimable(*records_[reclaimable_])) {
    ++reclaimable_;
  }
  const std::size_t n = reclaimable_;
  // A failed log gets one last checkpoint, once nothing in it is needed.
  if (log_failed_ && (n < records_.size() || dirty_blocks_ > 0)) return;
  if (n == 0 && !log_failed_) return;
  const std::uint64_t new_tail = n == records_.size() ? head_ : records_[n]->position;
  const bool worth = !space_waiters_.empty() || (new_tail - tail_) * 8 >= data_blocks_ ||
                     (n == records_.size() && dirty_blocks_ == 0) ||
                     options_.clock->now() - last_checkpoint_ >= options_.destage_age;
  if (!worth) return;
  checkpoint_io& c = *checkpoint_;
  c.records = n;
  c.tail = new_tail;
  c.tail_seq = n == records_.size() ? next_seq_ : records_[n]->seq;
  c.at = checkpoint_io::step::group_flush;
  c.retire = log_failed_;
  checkpoint_in_flight_ = true;
  // The destaged data first: the log forgets it only once the group holds it durably.
  c.req = request{};
  c.req.operation = op::flush;
  c.req.priority = device::io_class::background;
  c.req.context = this;
  c.req.on_complete = [](request& r) noexcept {
    static_cast<write_back_device*>(r.context)->checkpoint_step(r.result);
  };
  group_.submit(c.req);
}

void write_back_device::checkpoint_step(std::error_code ec) {
  checkpoint_io& c = *checkpoint_;
  if (ec) {
    checkpoint_in_flight_ = false;
    if (!c.retire) {
      if (c.at == checkpoint_io::step::group_flush) {
        pause_destage("a flush of the group failed (" + ec.message() +
                      "): the write log keeps its data");
        group_unwritable(ec);
      } else {
        fail_log(ec);
      }
      maybe_checkpoint();  // a failed log's last one, if it is due
    } else if (c.at == checkpoint_io::step::group_flush && ec != errc::device_failed) {
      // The destaged data is not known to be on the group (a full backing
      // store, say): the log, which may still read, holds the only sure
      // copy. Neither retired nor the held writes let go, which a replay
      // would then revert: tried again later, as an ordinary checkpoint is
      // (issue 48, finding 7). A group that failed fails the held writes
      // as a write to it would (below).
      retire_retry_at_ = options_.clock->now() + std::chrono::seconds(5);
      age_timer_->arm(retire_retry_at_);
      note_event("the failed write log's last checkpoint could not flush the group (" +
                 ec.message() + "): tried again in 5 s; the writes waiting for it wait");
    } else {
      // The failed log cannot even be emptied. Should it read again at the
      // next start, its replay would bring back data older than the held
      // writes': the owner records, elsewhere, that it must not be
      // replayed, and then they go on.
      note_event(std::string("the failed write log could not be retired (") +
                 (c.at == checkpoint_io::step::group_flush ? "the group's flush failed: " : "") +
                 ec.message() + "): it must not be replayed");
      if (c.at == checkpoint_io::step::group_flush || !options_.persist_retirement) {
        release_held();
      } else {
        retiring_elsewhere_ = true;
        options_.persist_retirement(sb_generation_, [this](std::error_code recorded) {
          retiring_elsewhere_ = false;
          if (recorded && recorded != errc::permission_denied && !stopping_) {
            // Not recorded (the owner's store failed a write): letting
            // the waiting writes go would leave a log whose replay reverts
            // them. They wait; the checkpoint, and its record, are tried
            // again in 5 s, as after a failed group flush.
            retire_retry_at_ = options_.clock->now() + std::chrono::seconds(5);
            age_timer_->arm(retire_retry_at_);
            note_event("recording that the failed write log must not be replayed failed (" +
                       recorded.message() +
                       "): tried again in 5 s; the writes waiting for it wait");
            return check_idle();
          }
          // permission_denied: the pool is not this controller's to record
          // for (it stepped down), and the held writes fail at its gates.
          if (recorded)
            note_event("recording that the write log must not be replayed failed: " +
                       recorded.message());
          release_held();
          check_idle();
        });
      }
    }
    return check_idle();
  }
  auto next = [&](op o) {
    c.req = request{};
    c.req.operation = o;
    c.req.context = this;
    c.req.on_complete = [](request& r) noexcept {
      static_cast<write_back_device*>(r.context)->checkpoint_step(r.result);
    };
  };
  switch (c.at) {
    case checkpoint_io::step::group_flush: {
      wlog::superblock sb{.id = id_,
                          .generation = sb_generation_ + 1,
                          .data_blocks = data_blocks_,
                          .backing_blocks = geometry_.block_count,
                          .backing_block_bytes = geometry_.logical_block_size_bytes,
                          .tail_position = c.tail,
                          .tail_seq = c.tail_seq};
      wlog::encode(sb, c.block.bytes().first<wlog::block_bytes>());
      c.segment = c.block.segment();
      next(op::write);
      c.req.lba = sb.generation % 2;
      c.req.block_count = 1;
      c.req.buffers = std::span(&c.segment, 1);
      c.at = checkpoint_io::step::superblock;
      return log_.submit(c.req);
    }
    case checkpoint_io::step::superblock:
      next(op::flush);
      c.at = checkpoint_io::step::log_flush;
      return log_.submit(c.req);
    case checkpoint_io::step::log_flush:
      break;
  }
  // The new checkpoint is durable: the records before it are free.
  checkpoint_in_flight_ = false;
  last_checkpoint_ = options_.clock->now();
  ++sb_generation_;
  ++counters_.checkpoints;
  tail_ = c.tail;
  for (std::size_t i = 0; i < c.records; ++i) {
    record& rec = *records_.front();
    // Its clean index entries go: nothing a replay could bring back now.
    for (auto it = index_.lower_bound(rec.lba);
         it != index_.end() && it->first < rec.lba + rec.blocks;) {
      it = it->second.rec == &rec ? index_.erase(it) : std::next(it);
    }
    records_.pop_front();
    --unacked_from_;
    --reclaimable_;
    if (first_dirty_ > 0) --first_dirty_;
    record_slots_.release(rec);
  }
  wake_space_waiters();
  if (c.retire) {
    // Its tail is the head: the records the failure left unacknowledged
    // (written to the group directly since), perhaps whole on one mirror,
    // are behind it too, and no replay can bring them back.
    note_event("the failed write log is empty: every write goes to the group");
    release_held();
  }
  if (requested_ == cache_mode::write_through && drained() && !drain_announced_) {
    drain_announced_ = true;
    note_event("write cache drained: writing through");
  }
  maybe_checkpoint();
  maybe_destage();
  check_idle();
}

void write_back_device::group_unwritable(std::error_code why) {
  // A group lost (past its redundancy) takes no destage again: writes
  // waiting for log space would wait for ever. They fail as a write to
  // the group would.
  if (why != errc::device_failed) return;
  std::deque<host_io*> waiting = std::move(space_waiters_);
  space_waiters_.clear();
  for (host_io* h : waiting) host_part_done(*h, why);
}

void write_back_device::wake_space_waiters() {
  while (!space_waiters_.empty()) {
    host_io& h = *space_waiters_.front();
    const std::uint64_t end = h.outer->lba + h.outer->block_count;
    while (h.next_block < end && place_record(h)) {
    }
    if (h.next_block < end) return;
    space_waiters_.pop_front();
    host_part_done(h, {});
  }
}

// ---------------------------------------------------------------------------
// Format, open and replay.

namespace {

std::error_code check_sizes(const device::block_geometry& log,
                            const device::block_geometry& group) {
  if (log.logical_block_size_bytes != wlog::block_bytes ||
      group.logical_block_size_bytes != wlog::block_bytes ||
      log.block_count < wlog::data_start + 64) {
    return make_error_code(errc::invalid_argument);
  }
  return {};
}

}  // namespace

void write_back_device::format(device::block_device& log, const device::block_geometry& group,
                               const wlog::log_id& id, std::function<void(std::error_code)> done,
                               std::uint64_t after_generation) {
  // Both superblocks and a first header of zeros, then a flush.
  struct formatting {
    device::block_device* log = nullptr;
    std::shared_ptr<formatting> self;  // alive until done
    device::aligned_buffer blocks{3 * wlog::block_bytes};
    iovec segment{};
    request req;
    std::function<void(std::error_code)> done;
  };
  if (auto ec = check_sizes(log.geometry(), group)) {
    return boost::asio::post(log.executor(), [done = std::move(done), ec] { done(ec); });
  }
  auto f = std::make_shared<formatting>();
  f->log = &log;
  f->self = f;
  f->done = std::move(done);
  // A random first seq: a stale record of an earlier format of this log
  // is never taken for the first one.
  std::random_device entropy;
  const std::uint64_t first_seq = ((std::uint64_t{entropy()} << 32) | entropy()) >> 8;
  wlog::superblock sb{.id = id,
                      .generation = 0,
                      .data_blocks = log.geometry().block_count - wlog::data_start,
                      .backing_blocks = group.block_count,
                      .backing_block_bytes = group.logical_block_size_bytes,
                      .tail_position = 0,
                      .tail_seq = first_seq};
  auto all = f->blocks.bytes();
  // Generation g at block g % 2, where the checkpoints write it.
  for (std::uint64_t g = after_generation + 1; g <= after_generation + 2; ++g) {
    sb.generation = g;
    wlog::encode(
        sb, all.subspan((g % 2) * wlog::block_bytes, wlog::block_bytes).first<wlog::block_bytes>());
  }
  f->segment = f->blocks.segment();
  f->req.operation = op::write;
  f->req.lba = 0;
  f->req.block_count = 3;
  f->req.buffers = std::span(&f->segment, 1);
  f->req.context = f.get();
  f->req.on_complete = [](request& r) noexcept {
    auto* fm = static_cast<formatting*>(r.context);
    if (!r.result && r.operation == op::write) {
      const device::completion_fn again = r.on_complete;
      r = request{};
      r.operation = op::flush;
      r.context = fm;
      r.on_complete = again;
      return fm->log->submit(r);
    }
    auto keep = std::move(fm->self);
    fm->done(r.result);
  };
  log.submit(f->req);
}

void write_back_device::newest_generation(
    device::block_device& log, const wlog::log_id& id,
    std::function<void(std::expected<std::uint64_t, std::error_code>)> done) {
  struct reading {
    std::shared_ptr<reading> self;  // alive until done
    device::aligned_buffer blocks{2 * wlog::block_bytes};
    iovec segment{};
    request req;
    wlog::log_id id;
    std::function<void(std::expected<std::uint64_t, std::error_code>)> done;
  };
  auto r = std::make_shared<reading>();
  r->self = r;
  r->id = id;
  r->done = std::move(done);
  r->segment = r->blocks.segment();
  r->req.operation = op::read;
  r->req.lba = 0;
  r->req.block_count = 2;
  r->req.buffers = std::span(&r->segment, 1);
  r->req.context = r.get();
  r->req.on_complete = [](request& q) noexcept {
    auto* rd = static_cast<reading*>(q.context);
    auto keep = std::move(rd->self);
    if (q.result) return rd->done(std::unexpected(q.result));
    std::uint64_t newest = 0;
    for (std::size_t copy = 0; copy < 2; ++copy) {
      auto sb = wlog::decode_superblock(rd->blocks.bytes()
                                            .subspan(copy * wlog::block_bytes, wlog::block_bytes)
                                            .first<wlog::block_bytes>());
      if (sb && sb->id == rd->id) newest = std::max(newest, sb->generation);
    }
    rd->done(newest);
  };
  log.submit(r->req);
}

// Reads the superblocks, then the records from the checkpoint on, one
// header and its data at a time, into a new device's records and index.
class write_back_device::replayer {
 public:
  static void start(device::block_device& group, device::block_device& log, const wlog::log_id& id,
                    const write_back_options& options, std::function<void(opened)> done) {
    auto r = std::shared_ptr<replayer>(new replayer(group, log, id, options, std::move(done)));
    r->self_ = r;
    r->read(0, 2, &replayer::on_superblocks);
  }

 private:
  replayer(device::block_device& group, device::block_device& log, const wlog::log_id& id,
           const write_back_options& options, std::function<void(opened)> done)
      : group_(group), log_(log), id_(id), options_(options), done_(std::move(done)) {}

  void read(std::uint64_t lba, std::uint64_t blocks, void (replayer::*next)()) {
    if (buffer_.size() < blocks * wlog::block_bytes)
      buffer_ = device::aligned_buffer(blocks * wlog::block_bytes);
    segment_ = buffer_.segment(0, blocks * wlog::block_bytes);
    next_ = next;
    req_ = request{};
    req_.operation = op::read;
    req_.lba = lba;
    req_.block_count = blocks;
    req_.buffers = std::span(&segment_, 1);
    req_.context = this;
    req_.on_complete = [](request& q) noexcept {
      auto* self = static_cast<replayer*>(q.context);
      if (q.result) return self->fail(q.result, "the write log could not be read");
      (self->*(self->next_))();
    };
    log_.submit(req_);
  }

  void fail(std::error_code ec, const std::string& why) {
    if (device_) {
      // Nothing of it is in flight while the scan runs.
      device_.reset();
    }
    auto keep = std::move(self_);
    done_(std::unexpected(error{ec, why}));
  }

  void on_superblocks() {
    std::optional<wlog::superblock> best;
    for (std::size_t copy = 0; copy < 2; ++copy) {
      auto sb = wlog::decode_superblock(buffer_.bytes()
                                            .subspan(copy * wlog::block_bytes, wlog::block_bytes)
                                            .first<wlog::block_bytes>());
      if (sb && (!best || sb->generation > best->generation)) best = sb;
    }
    const auto invalid = make_error_code(errc::invalid_argument);
    if (!best) return fail(invalid, "no write log superblock on the log device");
    if (best->id != id_) return fail(invalid, "the write log belongs to another group");
    if (best->backing_blocks != group_.geometry().block_count ||
        best->backing_block_bytes != wlog::block_bytes ||
        best->data_blocks + wlog::data_start > log_.geometry().block_count ||
        best->data_blocks < 64) {
      return fail(invalid, "the write log was written for a group of another size");
    }
    if (auto ec = check_sizes(log_.geometry(), group_.geometry()))
      return fail(ec, "block sizes other than 4096");
    device_.reset(new write_back_device(group_, log_, *best, options_));
    expect_position_ = best->tail_position;
    expect_seq_ = best->tail_seq;
    wrapped_ = false;
    read_header();
  }

  void read_header() {
    const std::uint64_t d = device_->data_blocks_;
    if (expect_position_ - device_->tail_ >= d)
      return end_of_log();  // a whole lap: nothing more can be live
    read(wlog::physical(expect_position_, d), 1, &replayer::on_header);
  }

  // The next record, at the expected position, or at the next lap's start.
  bool try_next_lap() {
    const std::uint64_t d = device_->data_blocks_;
    if (wrapped_ || expect_position_ % d == 0) return false;
    wrapped_ = true;
    expect_position_ = (expect_position_ / d + 1) * d;
    return true;
  }

  void on_header() {
    const std::uint64_t d = device_->data_blocks_;
    header_ = wlog::decode_record(buffer_.bytes().first<wlog::block_bytes>());
    const bool ours = header_ && header_->id == id_ && header_->seq == expect_seq_ &&
                      header_->position == expect_position_ &&
                      expect_position_ % d + 1 + header_->data_blocks <= d &&
                      header_->lba + header_->data_blocks <= group_.geometry().block_count;
    if (!ours) {
      if (try_next_lap()) return read_header();
      return end_of_log();
    }
    // A whole record written after the suspect one was acknowledged: that
    // one is damaged, not torn (records are acknowledged in order, and a
    // torn one never was).
    if (suspect_ && header_->acked_below > suspect_->seq) {
      accept_damaged();
      for (const wlog::record_header& h : pending_) record_whole(h);
      pending_.clear();
    }
    if (header_->data_blocks == 0) return taken();
    read(wlog::physical(expect_position_, d) + 1, header_->data_blocks, &replayer::on_data);
  }

  // The record just read is whole: replayed, or, while a suspect record's
  // fate is open, kept until it is known.
  void taken() {
    if (suspect_) {
      pending_.push_back(*header_);
    } else {
      record_whole(*header_);
    }
    advance_past(*header_);
    read_header();
  }

  void advance_past(const wlog::record_header& h) {
    expect_position_ = h.position + 1 + h.data_blocks;
    expect_seq_ = h.next_seq;
    wrapped_ = false;
  }

  void on_data() {
    const iovec data = buffer_.segment(0, std::uint64_t{header_->data_blocks} * wlog::block_bytes);
    if (wlog::data_crc(std::span(&data, 1), data.iov_len) != header_->data_crc) {
      // Torn (written, never acknowledged: the log ends here) or damaged
      // (acknowledged since): a whole record after it whose header says
      // it was acknowledged tells which. A second bad record before that
      // ends the log at the first.
      if (suspect_) return end_of_log();
      suspect_ = header_;
      advance_past(*header_);
      return read_header();
    }
    taken();
  }

  // The log ends at the suspect record, if there is one (it was torn), or
  // where the next record was expected.
  void end_of_log() {
    if (suspect_) {
      expect_position_ = suspect_->position;
      expect_seq_ = suspect_->seq;
      suspect_.reset();
      pending_.clear();  // never acknowledged either: after the torn one
    }
    finish();
  }

  // The suspect record was acknowledged and its data is damaged: its
  // place in the log is kept (so is the evidence: no marker overwrites
  // it), nothing of it is replayed, and its blocks read as media errors
  // until written again, as blocks of a log that cannot be read do.
  void accept_damaged() {
    const wlog::record_header h = *std::exchange(suspect_, std::nullopt);
    write_back_device& dv = *device_;
    logged(h);
    ++dv.counters_.records_damaged;
    damaged_.insert(h.lba, h.data_blocks);
    dv.lose(h.lba, h.data_blocks,
            "a record of the write log failed its checksum, and whole records follow it: "
            "media damage, not a torn tail (seq " +
                std::to_string(h.seq) + ")");
  }

  // A record read from the log, in its place: acknowledged (it is on the
  // log), clean until its blocks go into the index; the head past it.
  record& logged(const wlog::record_header& h) {
    write_back_device& dv = *device_;
    record& rec = dv.record_slots_.acquire();
    rec.dev = &dv;
    rec.owner = nullptr;
    rec.seq = h.seq;
    rec.next_seq = h.next_seq;
    rec.position = h.position;
    rec.lba = h.lba;
    rec.blocks = h.data_blocks;
    rec.dirty_blocks = 0;
    rec.pins = 0;
    rec.in_log_io = false;
    rec.written = rec.acked = true;
    rec.redo = false;
    rec.acked_at = options_.clock->now();
    dv.records_.push_back(&rec);
    dv.unacked_from_ = dv.records_.size();
    dv.head_ = rec.position + 1 + rec.blocks;
    return rec;
  }

  // A whole record, replayed: its blocks are dirty in the log again.
  void record_whole(const wlog::record_header& h) {
    write_back_device& dv = *device_;
    record& rec = logged(h);
    if (rec.blocks > 0) {
      dv.index_insert(rec, rec.lba, rec.blocks, wlog::physical(rec.position, dv.data_blocks_) + 1);
      // Blocks of a damaged record written again by a later one are whole.
      for (std::uint64_t b = rec.lba; !damaged_.empty() && b < rec.lba + rec.blocks; ++b) {
        if (damaged_.count_in(b, 1) == 0) continue;
        damaged_.erase(b, 1);
        dv.forget_lost(b, 1);
      }
    }
    ++dv.counters_.records_replayed;
  }

  // The log ends here. A marker goes where the next record would: its
  // next_seq skips past every seq a record written before the crash can
  // carry, so none of those beyond this point is ever taken for a later one.
  void finish() {
    write_back_device& dv = *device_;
    dv.next_seq_ = expect_seq_;
    if (dv.head_ < dv.tail_) dv.head_ = dv.tail_;
    if (dv.records_.empty()) dv.head_ = dv.tail_;
    dv.marker_done_ = [self = self_](std::error_code) {
      // A marker the log could not take leaves the device writing
      // through, its dirty data destaged from the log if it reads.
      auto keep = std::move(self->self_);
      self->device_->maybe_destage();
      self->done_(std::move(self->device_));
    };
    if (dv.head_ - dv.tail_ >= dv.data_blocks_) {
      // Full: the block writers leave free holds the marker of an earlier
      // restart, and no reclaim has freed space since (two restarts with a
      // full log). No record can have been placed past it, so there is
      // nothing stale there to guard against, and that marker's seq jump
      // stands: no new marker (there is no room for one).
      std::exchange(dv.marker_done_, nullptr)({});
      return;
    }
    dv.append_marker();
  }

  device::block_device& group_;
  device::block_device& log_;
  wlog::log_id id_;
  write_back_options options_;
  std::function<void(opened)> done_;
  std::shared_ptr<replayer> self_;
  std::unique_ptr<write_back_device> device_;
  device::aligned_buffer buffer_{2 * wlog::block_bytes};
  iovec segment_{};
  request req_;
  void (replayer::*next_)() = nullptr;
  std::optional<wlog::record_header> header_;
  // A record whose data failed its checksum, until the next header says
  // whether it was torn or damaged.
  std::optional<wlog::record_header> suspect_;
  std::vector<wlog::record_header> pending_;  // whole records after the suspect, until it is known
  device::block_range_set damaged_;  // the blocks of damaged records not written again since
  std::uint64_t expect_position_ = 0;
  std::uint64_t expect_seq_ = 0;
  bool wrapped_ = false;
};

void write_back_device::open(device::block_device& group, device::block_device& log,
                             const wlog::log_id& id, const write_back_options& options,
                             std::function<void(opened)> done) {
  replayer::start(group, log, id, options, std::move(done));
}

void write_back_device::append_marker() {
  const std::uint64_t at = wlog::place(head_, 1, data_blocks_);
  STRATA_INVARIANT(at + 1 - tail_ <= data_blocks_);  // writers leave one block for it
  record& rec = record_slots_.acquire();
  rec.dev = this;
  rec.owner = nullptr;
  rec.seq = next_seq_;
  rec.next_seq = next_seq_ + data_blocks_ + 2;
  next_seq_ = rec.next_seq;
  rec.position = at;
  rec.lba = 0;
  rec.blocks = 0;
  rec.dirty_blocks = 0;
  rec.pins = 0;
  rec.written = rec.acked = rec.redo = false;
  rec.in_log_io = true;
  // Every record before it was read back whole, or acknowledged.
  acked_below_ = std::max(acked_below_, rec.seq);
  wlog::encode(wlog::record_header{.id = id_,
                                   .seq = rec.seq,
                                   .next_seq = rec.next_seq,
                                   .position = at,
                                   .acked_below = acked_below_},
               rec.header.bytes().first<wlog::block_bytes>());
  rec.segments.assign(1, rec.header.segment());
  head_ = at + 1;
  records_.push_back(&rec);
  rec.req = request{};
  rec.req.operation = op::write;
  rec.req.lba = wlog::physical(at, data_blocks_);
  rec.req.block_count = 1;
  rec.req.buffers = rec.segments;
  rec.req.context = &rec;
  rec.req.on_complete = &write_back_device::on_record_written;
  log_.submit(rec.req);
}

}  // namespace strata::raid
