#include "raid/raid1_group.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <string>

#include "raid/device/buffers.h"
#include "raid/members.h"

namespace strata::raid {

using device::block_device;
using device::op;
using device::request;

std::expected<std::unique_ptr<raid1_group>, error> raid1_group::create(
    std::vector<block_device*> members, const raid1_options& options) {
  if (auto problem = check_members(members, 1, 255, "RAID-1")) return std::unexpected(*problem);
  const device::block_geometry& first = members[0]->geometry();
  const std::uint32_t block_size = first.logical_block_size_bytes;
  const std::uint64_t reserved_blocks = (options.reserved_bytes + block_size - 1) / block_size;
  if (first.block_count <= reserved_blocks) {
    return std::unexpected(
        make_error(errc::too_small, "members of " + std::to_string(first.size_bytes()) +
                                        " bytes cannot hold the reserved area and any data"));
  }
  if (options.sync_chunk_bytes < block_size || options.sync_chunk_bytes % block_size != 0) {
    return std::unexpected(make_error(
        errc::invalid_argument, "sync chunk of " + std::to_string(options.sync_chunk_bytes) +
                                    " bytes is not whole blocks of " + std::to_string(block_size)));
  }
  if (options.sync_mb_per_s < 0) {
    return std::unexpected(make_error(errc::invalid_argument, "sync rate must not be negative"));
  }
  return std::unique_ptr<raid1_group>(
      new raid1_group(std::move(members), reserved_blocks, options));
}

raid1_group::raid1_group(std::vector<block_device*> members, std::uint64_t data_offset_blocks,
                         const raid1_options& options)
    : members_(members,  // copied, not moved: its size is read in the same call
               member_set_options{
                   .budget = {.members_lost_survived = static_cast<unsigned>(members.size()) - 1,
                              .rebuilding_counts_as_lost = true},
                   .clock = options.clock,
                   .timeout = options.member_timeout,
                   .read_error_limit = options.member_read_error_limit,
                   .on_member_event = options.on_member_event,
               },
               member_set::hooks{
                   .describe = [this](unsigned m) { return describe(m); },
                   .failed = [this](unsigned m) { source_failed(m); },
               }),
      data_offset_blocks_(data_offset_blocks),
      in_flight_(members_.size(), 0),
      reads_served_(members_.size(), 0),
      rejected_(members_.executor()),
      clock_(options.clock),
      sync_chunk_blocks_(options.sync_chunk_bytes /
                         members_[0]->geometry().logical_block_size_bytes),
      sync_mb_per_s_(options.sync_mb_per_s),
      intent_(
          members_.executor(), members_.watchdog(),
          write_intent::hooks{
              .members = &members_.devices(),
              .holds_metadata = [this](unsigned m) { return members_.whole(m); },
              .write_failed = [this](unsigned m) { members_.fail(m, member_failure::metadata); },
              .resume =
                  [this](void* op) {
                    auto& o = *static_cast<mirror_op*>(op);
                    if (members_.group_failed()) {
                      finish(o, errc::device_failed);
                    } else {
                      start_write(o);
                    }
                  },
          }) {
  members_.attach(intent_);
  const device::block_geometry& member = members_[0]->geometry();
  geometry_ = member;
  geometry_.block_count = member.block_count - data_offset_blocks;
  geometry_.buffer_alignment_bytes = member.logical_block_size_bytes;
  geometry_.max_segments = std::min<std::uint32_t>(member.max_segments, 64);
  for (block_device* m : members_.devices()) {
    geometry_.max_segments = std::min(geometry_.max_segments, m->geometry().max_segments);
  }
  sync_.tried.assign(members_.size(), false);
  sync_.writes.resize(members_.size());
  // The write-intent bitmap follows the superblock copies, with regions as
  // small as asked and the reserved area allows.
  const std::uint64_t block_size = member.logical_block_size_bytes;
  const std::uint64_t offset_bytes = 2 * superblock::size_bytes;
  // The bitmap's room: the reserved area up to the controller's part of it.
  const std::uint64_t reserved_bytes =
      controller_area::room_before(data_offset_blocks * block_size);
  if (reserved_bytes >= offset_bytes + block_size) {
    std::uint64_t region_blocks =
        std::max<std::uint64_t>(1, options.bitmap_region_bytes / block_size);
    auto regions = [&](std::uint64_t per_region) {
      return (geometry_.block_count + per_region - 1) / per_region;
    };
    while (write_intent::bytes_for(regions(region_blocks), block_size) >
           reserved_bytes - offset_bytes) {
      region_blocks *= 2;
    }
    intent_region_blocks_ = region_blocks;
    intent_.configure(offset_bytes / block_size, regions(region_blocks), block_size);
  }
}

raid1_group::~raid1_group() = default;

void raid1_group::source_failed(unsigned member) {
  if (sync_.running && !sync_.rebuild && member == sync_.source) {
    // The resync's source is gone: the next working member wins instead,
    // and answers the reads of the regions not yet resynced.
    sync_.source = ~0u;
    for (unsigned m = 0; m < members_.size() && sync_.source == ~0u; ++m) {
      if (!members_.failed(m)) sync_.source = m;
    }
  }
}

void raid1_group::submit(request& req) noexcept {
  if (auto ec = device::validate(geometry_, req)) {
    rejected_.complete_later(req, ec);
    return;
  }
  if (members_.group_failed()) {
    rejected_.complete_later(req, errc::device_failed);
    return;
  }
  if (req.operation == op::flush) {
    members_.flush(req);
    return;
  }
  mirror_op& o = ops_.acquire();
  o.group = this;
  o.outer = &req;
  o.reqs.resize(members_.size());
  o.watches.resize(members_.size());
  o.pending = 0;
  o.succeeded = 0;
  o.abandoned = 0;
  o.finished = false;
  o.last_error = {};
  o.out_of_space = false;
  o.range_lba = req.lba;
  o.range_blocks = req.block_count;
  o.range_buffers = req.buffers;
  o.tried.assign(members_.size(), false);
  o.bad.clear();
  o.narrow = false;
  o.writes_before = writes_started_;
  o.intent = false;
  // A working member exists, so every path submits to one or waits: nothing completes here.
  if (req.operation == op::read) {
    read_range(o);
    return;
  }
  ++writes_started_;
  start_write(o);
}

void raid1_group::prepare(mirror_op& o, unsigned member, op operation, device::completion_fn done) {
  request& r = o.reqs[member];
  r = request{};
  r.operation = operation;
  r.priority = o.outer->priority;
  r.lba = o.range_lba + data_offset_blocks_;
  r.block_count = o.range_blocks;
  if (operation == op::read || operation == op::write) r.buffers = o.range_buffers;
  r.context = &o;
  r.on_complete = done;
  ++in_flight_[member];
}

// ---- Reads ----

bool raid1_group::unsynced(std::uint64_t lba, std::uint64_t blocks) const noexcept {
  if (!sync_.running || sync_.rebuild) return false;
  for (std::uint64_t r = lba / intent_region_blocks_;
       r <= (lba + blocks - 1) / intent_region_blocks_; ++r) {
    if (sync_.regions[r]) return true;
  }
  return false;
}

bool raid1_group::torn(std::uint64_t lba, std::uint64_t blocks) const noexcept {
  if (torn_regions_ == 0) return false;
  for (std::uint64_t r = lba / intent_region_blocks_;
       r <= (lba + blocks - 1) / intent_region_blocks_; ++r) {
    if (torn_[r]) return true;
  }
  return false;
}

unsigned raid1_group::divergent_reader() const noexcept {
  if (sync_.running && !sync_.rebuild && sync_.source < members_.size() &&
      !members_.failed(sync_.source)) {
    return sync_.source;
  }
  for (unsigned m = 0; m < members_.size(); ++m) {
    if (members_.whole(m)) return m;
  }
  return 0;
}

bool raid1_group::may_read(unsigned member, std::uint64_t lba,
                           std::uint64_t blocks) const noexcept {
  if (member == members_.rebuilding()) return lba + blocks <= sync_.next_lba;
  // Not yet resynced, or torn: the members may disagree, so one of them answers.
  if (member != sync_.source && unsynced(lba, blocks)) return false;
  if (torn(lba, blocks) && member != divergent_reader()) return false;
  return true;
}

void raid1_group::tear(std::uint64_t lba, std::uint64_t blocks) {
  if (!intent_.enabled() || members_.size() < 2) return;  // one copy cannot diverge
  if (torn_.empty()) torn_.assign(intent_.regions(), false);
  for (std::uint64_t r = lba / intent_region_blocks_;
       r <= (lba + blocks - 1) / intent_region_blocks_; ++r) {
    if (torn_[r]) continue;
    torn_[r] = true;
    ++torn_regions_;
    // Never ended: mark_clean leaves it set, for the next assembly's resync
    // (on disk already: the write waited for it).
    if (members_.log().formatted()) intent_.begin(r);
  }
}

void raid1_group::read_range(mirror_op& o) {
  // The least busy member that may serve the range and has not tried it;
  // ties go round the members. If the resync's source cannot, any
  // member may (the rebuild's new member never above its mark).
  const unsigned m = static_cast<unsigned>(members_.size());
  unsigned chosen = m;
  for (int pass = 0; pass < 2 && chosen == m; ++pass) {
    for (unsigned k = 0; k < m; ++k) {
      const unsigned i = (next_read_ + k) % m;
      if (members_.failed(i) || o.tried[i]) continue;
      const bool allowed =
          pass == 0 ? may_read(i, o.range_lba, o.range_blocks) : i != members_.rebuilding();
      if (!allowed) continue;
      if (chosen == m || in_flight_[i] < in_flight_[chosen]) chosen = i;
    }
  }
  if (chosen == m) {
    range_unreadable(o);
    return;
  }
  next_read_ = (chosen + 1) % m;
  o.tried[chosen] = true;
  o.watches[chosen].device = members_[chosen];  // who answers (reads are not timed)
  prepare(o, chosen, op::read, &raid1_group::on_read_done);
  members_[chosen]->submit(o.reqs[chosen]);
}

void raid1_group::on_read_done(request& r) noexcept {
  mirror_op& o = *static_cast<mirror_op*>(r.context);
  raid1_group& g = *o.group;
  const auto member = static_cast<unsigned>(&r - o.reqs.data());
  --g.in_flight_[member];
  if (r.result) {
    o.last_error = r.result;
    if (g.members_[member] != o.watches[member].device) {
      // A late answer from a device since replaced says nothing of its
      // successor, which may serve the range.
      o.tried[member] = false;
    } else {
      // Unreadable here: rewrite it once read elsewhere (unless the member is gone).
      if (r.result != errc::device_failed) o.bad.push_back(member);
      g.members_.note_error(member, o.watches[member].device, op::read, r.result);
    }
    g.read_range(o);
    return;
  }
  ++g.reads_served_[member];
  // The range's buffers hold good data now: write it over the copies that
  // could not be read, before handing the buffers back -- unless a write
  // has started since, which this data might be older than (the next read
  // finds any block still bad).
  if (g.writes_started_ != o.writes_before || g.overlaps_write(o.range_lba, o.range_blocks))
    o.bad.clear();
  o.pending = 0;
  for (unsigned bad : o.bad) {
    if (g.members_.failed(bad) || g.members_[bad] != o.watches[bad].device) continue;
    g.prepare(o, bad, op::write, &raid1_group::on_repair_done);
    ++o.pending;
    g.members_[bad]->submit(o.reqs[bad]);
  }
  if (o.pending == 0) {
    g.range_done(o);
    return;
  }
  g.repairing_.push_back(&o);
}

bool raid1_group::overlaps_write(std::uint64_t lba, std::uint64_t blocks) const noexcept {
  for (const mirror_op* w = writes_head_; w != nullptr; w = w->write_next) {
    if (w->outer->lba < lba + blocks && lba < w->outer->lba + w->outer->block_count) return true;
  }
  return false;
}

void raid1_group::on_repair_done(request& r) noexcept {
  mirror_op& o = *static_cast<mirror_op*>(r.context);
  raid1_group& g = *o.group;
  const auto member = static_cast<unsigned>(&r - o.reqs.data());
  --g.in_flight_[member];
  // A member that cannot even rewrite is done for; a full store leaves the
  // bad copy bad (the next read tries again); a device since replaced says
  // nothing of its successor.
  g.members_.note_error(member, o.watches[member].device, op::write, r.result);
  if (!r.result && g.members_[member] == o.watches[member].device)
    g.repaired_blocks_ += r.block_count;
  if (--o.pending > 0) return;
  std::erase(g.repairing_, &o);
  // Writes that waited for this repair go now; the read goes on.
  std::vector<mirror_op*> blocked;
  blocked.swap(g.repair_blocked_);
  g.range_done(o);
  for (mirror_op* w : blocked) g.start_write(*w);
}

void raid1_group::set_range(mirror_op& o, std::uint64_t block) {
  const std::uint32_t block_size = geometry_.logical_block_size_bytes;
  o.range_lba = o.outer->lba + block;
  o.range_blocks = 1;
  // Segments are whole blocks (validate() checks), so a block is in one piece.
  o.block_segment = {device::contiguous_at(o.outer->buffers, block * block_size, block_size),
                     block_size};
  o.range_buffers = {&o.block_segment, 1};
  o.tried.assign(members_.size(), false);
  o.bad.clear();
}

void raid1_group::range_done(mirror_op& o) {
  const request& outer = *o.outer;
  const std::uint64_t next_block = o.range_lba + 1 - outer.lba;
  if (!o.narrow || next_block == outer.block_count) {
    finish(o, {});
    return;
  }
  set_range(o, next_block);
  read_range(o);
}

void raid1_group::range_unreadable(mirror_op& o) {
  // Every member failed the whole read, some with unreadable blocks: maybe
  // not the same ones. Retry block by block.
  if (!o.narrow && !o.bad.empty() && o.outer->block_count > 1) {
    o.narrow = true;
    set_range(o, 0);
    read_range(o);
    return;
  }
  finish(o, o.last_error ? o.last_error : make_error_code(errc::device_failed));
}

// ---- Writes, discards and flushes ----

std::pair<std::uint64_t, std::uint64_t> raid1_group::regions_of(const mirror_op& o) const noexcept {
  const request& outer = *o.outer;
  return {outer.lba / intent_region_blocks_,
          (outer.lba + outer.block_count - 1) / intent_region_blocks_};
}

bool raid1_group::overlaps_chunk(const mirror_op& o) const noexcept {
  const request& outer = *o.outer;
  return outer.lba < sync_.chunk_end && sync_.next_lba < outer.lba + outer.block_count;
}

void raid1_group::start_write(mirror_op& o) {
  const op operation = o.outer->operation;
  if (intent_.enabled() && members_.log().formatted()) {
    const auto [first, last] = regions_of(o);
    if (!o.intent) {
      o.intent = true;
      for (std::uint64_t r = first; r <= last; ++r) intent_.begin(r);
    }
    for (std::uint64_t r = first; r <= last; ++r) {
      if (!intent_.durable(r)) {
        intent_.wait(r, &o);  // resumed here once its bit is on disk
        return;
      }
    }
  }
  for (const mirror_op* repair : repairing_) {
    if (repair->range_lba < o.outer->lba + o.outer->block_count &&
        o.outer->lba < repair->range_lba + repair->range_blocks) {
      leave_overlap_lock(o);
      repair_blocked_.push_back(&o);  // after the repair, so the newer data lands last
      return;
    }
  }
  if (sync_.chunk_locked && overlaps_chunk(o)) {
    leave_overlap_lock(o);
    sync_.blocked.push_back(&o);  // after the chunk's copy
    return;
  }
  // Woken from the lock, it holds it already.
  if (!overlapping_writes_.holds(o) &&
      !overlapping_writes_.acquire(o, o.outer->lba, o.outer->lba + o.outer->block_count)) {
    return;  // started again once the overlapping writes ahead of it end
  }
  o.write_prev = nullptr;
  o.write_next = writes_head_;
  if (writes_head_ != nullptr) writes_head_->write_prev = &o;
  writes_head_ = &o;
  o.in_write_list = true;
  fan_out(o, operation);
}

void raid1_group::leave_overlap_lock(mirror_op& o) {
  // Woken from the lock, then stopped by a repair or the sync chunk: the
  // writes behind it need not wait for that too. It takes the lock again
  // when it goes on; members still see overlapping writes one at a time,
  // in the order they reach them.
  if (overlapping_writes_.holds(o)) {
    overlapping_writes_.release(o, [this](mirror_op& next) { start_write(next); });
  }
}

void raid1_group::fan_out(mirror_op& o, op operation) {
  // Members never complete inside submit, so counting as we go is safe.
  o.pending = 0;
  for (unsigned i = 0; i < members_.size(); ++i) {
    if (members_.failed(i)) continue;
    prepare(o, i, operation, &raid1_group::on_fan_out_done);
    watched_io& w = o.watches[i];
    w.owner = &o;
    w.expire = &raid1_group::expire_fan_out;
    w.abandonable = operation != op::write;  // a write's buffers are the caller's
    members_.watchdog().start(w, i, members_[i], &o.reqs[i]);
    ++o.pending;
    members_[i]->submit(o.reqs[i]);
  }
  if (o.pending == 0) finish(o, errc::device_failed);  // every member failed while it waited
}

void raid1_group::on_fan_out_done(request& r) noexcept {
  mirror_op& o = *static_cast<mirror_op*>(r.context);
  raid1_group& g = *o.group;
  const auto member = static_cast<unsigned>(&r - o.reqs.data());
  watched_io& w = o.watches[member];
  if (w.abandoned) {
    // The late answer of an I/O given up on: the op may go now.
    w.abandoned = false;
    g.members_.abandoned_answered();
    --g.in_flight_[member];
    if (--o.abandoned == 0 && o.finished) {
      o.finished = false;
      g.ops_.release(o);
    }
    return;
  }
  g.members_.watchdog().stop(w);
  --g.in_flight_[member];
  g.fan_out_done(o, member, r.result);
}

void raid1_group::expire_fan_out(watched_io& w) {
  mirror_op& o = *static_cast<mirror_op*>(w.owner);
  ++o.abandoned;
  o.group->members_.count_abandoned();
  o.group->fan_out_done(o, w.member, errc::timed_out);
}

void raid1_group::fan_out_done(mirror_op& o, unsigned member, std::error_code result) {
  const op operation = o.reqs[member].operation;
  if (!result) {
    // A member being rebuilt holds part of the group only: its taking a
    // write is not the group's taking it.
    if (member != members_.rebuilding()) ++o.succeeded;
  } else {
    // A full backing store is not the disk's fault: the member stays, and
    // the I/O fails (below).
    o.last_error = result;
    if (result == errc::no_space) o.out_of_space = true;
    members_.note_error(member, o.watches[member].device, operation, result);
  }
  if (--o.pending > 0) return;
  std::error_code outcome;
  if (o.succeeded == 0)
    outcome = o.last_error ? o.last_error : make_error_code(errc::device_failed);
  if (o.out_of_space && !members_.group_failed()) {
    // Some members may hold the new data and some the old: not a write
    // the group took. The group is whole even if no member took it (the
    // others failed out meanwhile): a full store, not a lost group.
    outcome = errc::no_space;
    tear(o.outer->lba, o.outer->block_count);
  }
  finish(o, outcome);
}

void raid1_group::finish(mirror_op& o, std::error_code result) {
  if (o.intent) {
    const auto [first, last] = regions_of(o);
    for (std::uint64_t r = first; r <= last; ++r) intent_.end(r);
    o.intent = false;
  }
  if (o.in_write_list) {
    (o.write_prev != nullptr ? o.write_prev->write_next : writes_head_) = o.write_next;
    if (o.write_next != nullptr) o.write_next->write_prev = o.write_prev;
    o.in_write_list = false;
    // The chunk being copied waited for this write.
    if (sync_.chunk_locked && sync_.chunk_waiting > 0 && overlaps_chunk(o) &&
        --sync_.chunk_waiting == 0) {
      copy_chunk();
    }
  }
  if (overlapping_writes_.holds(o)) {
    overlapping_writes_.release(o, [this](mirror_op& next) { start_write(next); });
  }
  request& outer = *o.outer;
  if (o.abandoned > 0) {
    o.finished = true;  // its request slots stay until the abandoned I/Os answer
  } else {
    ops_.release(o);
  }
  members_.acknowledge(outer, result);
}

// ---- Rebuild and resync ----

std::optional<error> raid1_group::replace_member(unsigned member, block_device* spare,
                                                 std::function<void(std::error_code)> done) {
  if (member >= members_.size()) {
    return make_error(errc::invalid_argument, "no member " + std::to_string(member));
  }
  if (sync_.running) {
    return make_error(
        errc::busy, sync_.rebuild ? "member " + std::to_string(members_.rebuilding()) +
                                        " is being rebuilt already"
                                  : std::string("the resync after an unclean shutdown is running; "
                                                "replace the member after it"));
  }
  if (!members_.failed(member)) {
    return make_error(errc::invalid_argument, "member " + std::to_string(member) +
                                                  " is working: fail it before replacing it");
  }
  if (members_.whole_count() == 0) {
    return make_error(errc::device_failed, "no working member to copy from");
  }
  std::vector<block_device*> check = members_.devices();
  check[member] = spare;
  if (auto problem = check_members(check, 1, 255, "RAID-1")) {
    return make_error(errc::invalid_argument, "the spare does not fit: " + problem->message);
  }
  members_.begin_rebuild(member, spare);
  sync_.rebuild = true;
  sync_.source = ~0u;
  sync_.bytes_total = geometry_.size_bytes();
  sync_.done = std::move(done);
  start_sync();
  sync_.target_steps.claim(*spare, data_offset_blocks_, this, [](void* group, std::error_code ec) {
    raid1_group& g = *static_cast<raid1_group*>(group);
    if (!g.sync_.error) g.sync_.error = ec;
    g.sync_next();  // ends it unless a chunk is being copied (which calls it again)
  });
  return std::nullopt;
}

void raid1_group::start_sync() {
  sync_.running = true;
  sync_.paused = false;
  sync_.next_lba = 0;
  sync_.chunk_locked = false;
  sync_.bytes_done = 0;
  sync_.error = {};
  sync_.started = clock_ != nullptr ? clock_->now() : device::time_point{};
  const std::uint64_t chunk_bytes = sync_chunk_blocks_ * geometry_.logical_block_size_bytes;
  if (sync_.buffer.size() != chunk_bytes) sync_.buffer = device::aligned_buffer(chunk_bytes);
  if (clock_ != nullptr && !sync_.pacing)
    sync_.pacing = clock_->make_timer(executor(), [this] { sync_next(); });
  // Start from the loop: the caller gets its answer first.
  boost::asio::post(executor(), [this] { sync_next(); });
}

rebuild_progress raid1_group::rebuild_status() const {
  rebuild_progress p;
  if (!sync_.running || !sync_.rebuild) return p;
  p.running = true;
  p.bytes_done = sync_.bytes_done;
  p.bytes_total = sync_.bytes_total;
  if (clock_ != nullptr && p.bytes_done > 0) {
    const device::duration elapsed = clock_->now() - sync_.started;
    p.eta = device::duration(static_cast<std::int64_t>(
        static_cast<double>(elapsed.count()) * static_cast<double>(p.bytes_total - p.bytes_done) /
        static_cast<double>(p.bytes_done)));
  }
  return p;
}

rebuild_progress raid1_group::resync_status() const {
  rebuild_progress p;
  if (sync_.rebuild) return p;
  p.running = sync_.running;
  p.bytes_done = sync_.bytes_done;
  p.bytes_total = sync_.bytes_total;
  return p;
}

void raid1_group::cancel_rebuild() {
  if (!sync_.running || !sync_.rebuild || sync_.error) return;
  sync_.error = make_error_code(errc::canceled);
  boost::asio::post(executor(), [this] { sync_next(); });  // ends it unless a chunk is being copied
}

// Locks the next chunk: writes already over it are waited for, new ones
// wait for its copy.
void raid1_group::sync_next() {
  if (!sync_.running || sync_.chunk_locked || sync_.paused)
    return;  // ended, paused, or a late pacing tick
  if (sync_.error || (sync_.rebuild && members_.failed(members_.rebuilding())) ||
      members_.group_failed()) {
    end_sync(sync_.error ? sync_.error : make_error_code(errc::device_failed));
    return;
  }
  const std::uint64_t blocks = geometry_.block_count;
  std::uint64_t& next = sync_.next_lba;
  if (!sync_.rebuild) {
    while (next < blocks && !sync_.regions[next / intent_region_blocks_]) {
      next = (next / intent_region_blocks_ + 1) * intent_region_blocks_;
    }
  }
  if (next >= blocks) {
    end_sync({});
    return;
  }
  if (clock_ != nullptr && sync_mb_per_s_ > 0) {
    const auto allowed =
        sync_.started + device::duration(static_cast<std::int64_t>(
                            static_cast<double>(sync_.bytes_done) * 1e3 / sync_mb_per_s_));
    if (clock_->now() < allowed) {
      sync_.pacing->arm(allowed);
      return;
    }
  }
  sync_.chunk_end = std::min(next + sync_chunk_blocks_, blocks);
  if (!sync_.rebuild) {
    sync_.chunk_end =
        std::min(sync_.chunk_end, (next / intent_region_blocks_ + 1) * intent_region_blocks_);
  }
  sync_.chunk_locked = true;
  sync_.tried.assign(members_.size(), false);
  sync_.chunk_waiting = 0;
  for (mirror_op* w = writes_head_; w != nullptr; w = w->write_next) {
    sync_.chunk_waiting += overlaps_chunk(*w) ? 1 : 0;
  }
  if (sync_.chunk_waiting == 0) copy_chunk();
}

void raid1_group::copy_chunk() {
  // The source: a resync keeps to its own while it can read; a rebuild
  // takes the least busy working member.
  const unsigned m = static_cast<unsigned>(members_.size());
  unsigned source = m;
  if (!sync_.rebuild && sync_.source < m && !members_.failed(sync_.source) &&
      !sync_.tried[sync_.source]) {
    source = sync_.source;
  }
  for (unsigned i = 0; i < m && source == m; ++i) {
    if (!members_.whole(i) || sync_.tried[i]) continue;
    source = i;
  }
  if (source == m) {
    // No member can read the chunk: a rebuild cannot finish; a resync
    // leaves it as it is (the members' own copies, each unreadable).
    if (sync_.rebuild) sync_.error = errc::media_error;
    chunk_done();
    return;
  }
  sync_.tried[source] = true;
  sync_.reading_from = source;
  const std::uint32_t block_size = geometry_.logical_block_size_bytes;
  sync_.segment = {sync_.buffer.data(), (sync_.chunk_end - sync_.next_lba) * block_size};
  request& r = sync_.read;
  r = request{};
  r.operation = op::read;
  // Not deferred behind the hosts (io_scheduler.h): a rebuild ends the
  // degraded window, a resync the one where the mirrors may differ.
  r.priority = device::io_class::foreground;
  r.lba = sync_.next_lba + data_offset_blocks_;
  r.block_count = sync_.chunk_end - sync_.next_lba;
  r.buffers = {&sync_.segment, 1};
  r.context = this;
  r.on_complete = &raid1_group::on_sync_read;
  members_[source]->submit(r);
}

void raid1_group::on_sync_read(request& r) noexcept {
  raid1_group& g = *static_cast<raid1_group*>(r.context);
  const unsigned source = g.sync_.reading_from;
  if (r.result) {
    g.members_.note_error(source, g.members_[source], op::read, r.result);
    g.copy_chunk();  // another source
    return;
  }
  g.sync_.pending = 1;
  for (unsigned i = 0; i < g.members_.size(); ++i) {
    const bool target = g.sync_.rebuild ? i == g.members_.rebuilding() : i != source;
    if (!target || g.members_.failed(i)) continue;
    request& w = g.sync_.writes[i];
    w = request{};
    w.operation = op::write;
    w.priority = device::io_class::foreground;
    w.lba = r.lba;
    w.block_count = r.block_count;
    w.buffers = {&g.sync_.segment, 1};
    w.context = &g;
    w.on_complete = &raid1_group::on_sync_written;
    ++g.sync_.pending;
    g.members_[i]->submit(w);
  }
  if (--g.sync_.pending == 0) g.chunk_done();
}

void raid1_group::on_sync_written(request& r) noexcept {
  raid1_group& g = *static_cast<raid1_group*>(r.context);
  const auto member = static_cast<unsigned>(&r - g.sync_.writes.data());
  g.members_.note_error(member, g.members_[member], op::write, r.result);
  if (r.result == errc::no_space) {
    // Not the disk's fault: it stays. A rebuild cannot finish without the
    // copy; a resync leaves the chunk's region torn, for the next assembly.
    if (g.sync_.rebuild) {
      if (!g.sync_.error) g.sync_.error = r.result;
    } else {
      g.tear(g.sync_.next_lba, g.sync_.chunk_end - g.sync_.next_lba);
    }
  }
  if (--g.sync_.pending == 0) g.chunk_done();
}

void raid1_group::chunk_done() {
  const std::uint64_t end = sync_.chunk_end;
  sync_.bytes_done += (end - sync_.next_lba) * geometry_.logical_block_size_bytes;
  if (!sync_.rebuild && (end % intent_region_blocks_ == 0 || end == geometry_.block_count)) {
    const std::uint64_t region = (end - 1) / intent_region_blocks_;
    sync_.regions[region] = false;
    intent_.end(region);  // resynced: the next flushes may clear it
  }
  sync_.next_lba = end;
  sync_.chunk_locked = false;
  // The writes that waited for the chunk go now.
  std::vector<mirror_op*> blocked;
  blocked.swap(sync_.blocked);
  for (mirror_op* o : blocked) start_write(*o);
  sync_next();
}

void raid1_group::end_sync(std::error_code result) {
  if (sync_.rebuild) {
    const auto resume = [](void* group, std::error_code flushed) {
      raid1_group& g = *static_cast<raid1_group*>(group);
      g.end_sync(flushed                                      ? flushed
                 : g.sync_.error                              ? g.sync_.error
                 : g.members_.failed(g.members_.rebuilding()) ? make_error_code(errc::device_failed)
                                                              : std::error_code{});
    };
    if (!sync_.target_steps.ready(result, *members_[members_.rebuilding()], this, resume)) return;
  }
  const bool rebuild = sync_.rebuild;
  sync_.running = false;
  sync_.rebuild = false;
  sync_.source = ~0u;
  if (sync_.pacing) sync_.pacing->cancel();
  if (!rebuild) {
    mark_clean([](std::error_code) {});  // the bits go once a flush covers the copies
    return;
  }
  members_.end_rebuild(result, std::move(sync_.done));
}

// ---- Superblocks, the bitmap, assembly ----

superblock raid1_group::describe(unsigned member) const {
  superblock sb;
  sb.level = group_level::raid1;
  sb.member_count = static_cast<std::uint32_t>(members_.size());
  sb.member_index = member;
  sb.logical_block_size_bytes = geometry_.logical_block_size_bytes;
  sb.member_block_count = members_[member]->geometry().block_count;
  sb.data_offset_blocks = data_offset_blocks_;
  sb.stripes = geometry_.block_count;  // RAID-1: the group's blocks
  // A member being rebuilt is not whole until its rebuild is recorded: if
  // it was a member before (a rebuild in place), its old superblock must
  // not pass for one merely behind in events after a crash.
  for (unsigned i = 0; i < members_.size(); ++i) sb.failed[i] = !members_.whole(i);
  if (intent_.enabled()) {
    sb.bitmap_offset_blocks = intent_.offset_blocks();
    sb.bitmap_region_stripes = intent_region_blocks_;  // RAID-1: blocks per bit
  }
  return sb;
}

void raid1_group::format(std::function<void(std::optional<error>)> done) {
  if (!intent_.enabled()) {
    boost::asio::post(executor(), [done = std::move(done)] {
      done(make_error(errc::too_small,
                      "the reserved area cannot hold two superblock copies and a bitmap block"));
    });
    return;
  }
  check_blank(
      members_.devices(), [this, done = std::move(done)](std::optional<error> problem) mutable {
        if (problem) {
          done(std::move(problem));
          return;
        }
        // A clear bitmap first (the disks may hold anything there), then the
        // superblocks that point at it.
        intent_.write_now([this, done = std::move(done)]() mutable {
          members_.log().format([done = std::move(done)](std::error_code ec) {
            done(ec ? std::optional<error>(error{ec, "the superblocks could not be written"})
                    : std::nullopt);
          });
        });
      });
}

void raid1_group::mark_clean(std::function<void(std::error_code)> done) {
  // A clean shutdown does not wait for a whole resync: the regions not yet
  // copied keep their bits (held since assembly) for the next start.
  if (sync_.running && !sync_.rebuild) sync_.paused = true;
  intent_.mark_clean(*this, std::move(done));
}

void raid1_group::assemble(std::vector<block_device*> devices, const raid1_options& options,
                           std::function<void(assembled)> done) {
  auto survives = [](unsigned members) { return members - 1; };
  plan_assembly(
      std::move(devices), group_level::raid1, survives,
      [options, done = std::move(done)](std::expected<assembly_plan, error> plan) {
        assembled result =
            plan ? from_plan(std::move(*plan), options) : std::unexpected(plan.error());
        if (!result) {
          done(std::move(result));
          return;
        }
        raid1_group& g = **result;
        auto shared_result = std::make_shared<assembled>(std::move(result));
        g.intent_.load([shared_result, &g, done](std::vector<std::uint64_t> marked) {
          // With two or more working members, the marked regions
          // may differ between them: copy the first over the rest.
          const bool resync = !marked.empty() && g.members_.whole_count() > 1;
          if (resync) {
            g.sync_.regions.assign(g.intent_.regions(), false);
            g.sync_.bytes_total = 0;
            for (std::uint64_t r : marked) {
              g.sync_.regions[r] = true;
              g.intent_.begin(r);  // held marked until resynced
              const std::uint64_t first = r * g.intent_region_blocks_;
              g.sync_.bytes_total +=
                  (std::min(g.geometry_.block_count, first + g.intent_region_blocks_) - first) *
                  g.geometry_.logical_block_size_bytes;
            }
            for (unsigned m = 0; m < g.members_.size() && g.sync_.source == ~0u; ++m) {
              if (!g.members_.failed(m)) g.sync_.source = m;
            }
            g.sync_.rebuild = false;
            g.start_sync();
            g.intent_.write_now([] {});  // every member gets the union
          }
          // Recorded as an event before the group is handed out.
          g.members_.log().after(
              [shared_result, done](std::error_code) { done(std::move(*shared_result)); });
          g.members_.log().changed();
        });
      });
}

raid1_group::assembled raid1_group::from_plan(assembly_plan plan, const raid1_options& options) {
  const superblock& newest = plan.newest;
  raid1_options layout_options = options;
  layout_options.reserved_bytes = newest.data_offset_blocks * newest.logical_block_size_bytes;
  auto group = create(plan.members, layout_options);
  if (!group) return std::unexpected(group.error());
  raid1_group& g = **group;
  if (g.geometry_.block_count != newest.stripes) {
    return std::unexpected(make_error(errc::invalid_argument,
                                      "the members' geometry does not match their superblocks"));
  }
  if (auto problem = check_bitmap_placement(newest)) return std::unexpected(*problem);
  if (newest.bitmap_offset_blocks == 0) {
    g.intent_.configure(0, 0, 0);  // formatted without a bitmap: nothing to resync from
  } else {
    g.intent_region_blocks_ = newest.bitmap_region_stripes;
    g.intent_.configure(newest.bitmap_offset_blocks,
                        (newest.stripes + g.intent_region_blocks_ - 1) / g.intent_region_blocks_,
                        newest.logical_block_size_bytes);
  }
  g.members_.log().adopt(newest.group_id, newest.events);
  g.members_.assembled(member_failures(plan), std::move(plan.stand_ins));
  return group;
}

}  // namespace strata::raid
