#include "raid/raid6_group.h"

#include <algorithm>
#include <array>
#include <bit>
#include <boost/asio/post.hpp>
#include <cstring>
#include <random>
#include <string>

#include "raid/assembly.h"
#include "raid/device/buffers.h"
#include "raid/members.h"
#include "raid/superblock_io.h"

namespace strata::raid {

using device::block_device;
using device::op;
using device::request;

std::expected<std::unique_ptr<raid6_group>, error> raid6_group::create(
    std::vector<block_device*> members, const raid6_options& options) {
  if (auto problem = check_members(members, 4, pq_codec::max_data_strips + 2, "RAID-6")) {
    return std::unexpected(*problem);
  }
  const std::size_t m = members.size();
  const device::block_geometry& first = members[0]->geometry();
  const std::uint32_t block_size = first.logical_block_size_bytes;
  if (!std::has_single_bit(options.strip_size_bytes) || options.strip_size_bytes < block_size) {
    return std::unexpected(make_error(errc::invalid_argument,
                                      "strip size " + std::to_string(options.strip_size_bytes) +
                                          " is not a power of two of at least one block (" +
                                          std::to_string(block_size) + " bytes)"));
  }
  raid6_layout layout;
  layout.members = static_cast<unsigned>(m);
  layout.strip_blocks = options.strip_size_bytes / block_size;
  layout.data_offset_blocks = (options.reserved_bytes + block_size - 1) / block_size;
  if (first.block_count <= layout.data_offset_blocks ||
      (first.block_count - layout.data_offset_blocks) / layout.strip_blocks == 0) {
    return std::unexpected(
        make_error(errc::too_small, "members of " + std::to_string(first.size_bytes()) +
                                        " bytes cannot hold the reserved area and one strip"));
  }
  layout.stripes = (first.block_count - layout.data_offset_blocks) / layout.strip_blocks;
  auto codec = pq_codec::create(layout.data_strips());
  if (!codec) return std::unexpected(codec.error());
  if (options.rebuild_mb_per_s < 0) {
    return std::unexpected(make_error(errc::invalid_argument, "rebuild rate must not be negative"));
  }
  return std::unique_ptr<raid6_group>(
      new raid6_group(std::move(members), layout, std::move(*codec), options));
}

raid6_group::raid6_group(std::vector<block_device*> members, const raid6_layout& layout,
                         pq_codec codec, const raid6_options& options)
    : members_(
          std::move(members),
          member_set_options{
              .budget = {.members_lost_survived = 2, .rebuilding_counts_as_lost = false},
              .clock = options.clock,
              .timeout = options.member_timeout,
              .read_error_limit = options.member_read_error_limit,
              .on_member_event = options.on_member_event,
          },
          member_set::hooks{.describe = [this](unsigned m) { return describe(m); }, .failed = {}}),
      layout_(layout),
      codec_(std::move(codec)),
      rejected_(members_.executor()),
      intent_(
          members_.executor(), members_.watchdog(),
          write_intent::hooks{
              .members = &members_.devices(),
              .holds_metadata = [this](unsigned m) { return members_.whole(m); },
              .write_failed = [this](unsigned m) { members_.fail(m, member_failure::metadata); },
              .resume =
                  [this](void* op) {
                    auto& o = *static_cast<stripe_op*>(op);
                    if (group_failed()) {
                      finish(o, errc::device_failed);
                    } else {
                      run(o);
                    }
                  },
          }),
      clock_(options.clock),
      rebuild_mb_per_s_(options.rebuild_mb_per_s),
      on_resync_stopped_(options.on_resync_stopped),
      rebuild_in_flight_max_(std::max(1u, options.rebuild_stripes_in_flight)) {
  members_.attach(intent_);
  torn_resync_interval_ = options.torn_resync_interval;
  const device::block_geometry& member = members_[0]->geometry();
  geometry_.logical_block_size_bytes = member.logical_block_size_bytes;
  geometry_.buffer_alignment_bytes = member.logical_block_size_bytes;
  geometry_.block_count = layout_.block_count();
  geometry_.max_segments = 64;
  // The write-intent bitmap follows the superblock copies, with regions as
  // small as asked and the reserved area allows.
  const std::uint64_t block_size = geometry_.logical_block_size_bytes;
  const std::uint64_t offset_bytes = 2 * superblock::size_bytes;
  // The bitmap's room: the reserved area up to the controller's part of it.
  const std::uint64_t reserved_bytes =
      controller_area::room_before(layout_.data_offset_blocks * block_size);
  if (reserved_bytes >= offset_bytes + block_size) {
    const std::uint64_t strip_bytes = layout_.strip_blocks * block_size;
    std::uint64_t region_stripes =
        std::max<std::uint64_t>(1, options.bitmap_region_bytes / strip_bytes);
    auto bytes = [&](std::uint64_t per_region) {
      return write_intent::bytes_for((layout_.stripes + per_region - 1) / per_region, block_size);
    };
    while (bytes(region_stripes) > reserved_bytes - offset_bytes) {
      region_stripes *= 2;
    }
    set_intent_geometry(offset_bytes / block_size, region_stripes);
  }
}

void raid6_group::set_intent_geometry(std::uint64_t offset_blocks, std::uint64_t region_stripes) {
  intent_region_stripes_ = region_stripes;
  intent_.configure(offset_blocks, (layout_.stripes + region_stripes - 1) / region_stripes,
                    geometry_.logical_block_size_bytes);
}

raid6_group::~raid6_group() = default;

void raid6_group::submit(request& req) noexcept {
  if (auto ec = device::validate(geometry_, req)) {
    rejected_.complete_later(req, ec);
    return;
  }
  if (group_failed()) {
    rejected_.complete_later(req, errc::device_failed);
    return;
  }
  if (req.operation == op::flush) {
    members_.flush(req);
    return;
  }
  start_request(req);
}

void raid6_group::start_request(request& req) {
  parent& p = parents_.acquire();
  p.outer = &req;
  p.result = {};
  const std::uint64_t per_stripe = layout_.stripe_data_blocks();
  const std::uint64_t first_stripe = req.lba / per_stripe;
  const std::uint64_t last_stripe = (req.lba + req.block_count - 1) / per_stripe;
  // Count first, so that no stripe can finish the request before all start.
  p.pending = static_cast<unsigned>(last_stripe - first_stripe + 1) + 1;
  const std::uint32_t block_size = geometry_.logical_block_size_bytes;
  const std::uint64_t strip_bytes = layout_.strip_blocks * block_size;
  for (std::uint64_t stripe = first_stripe; stripe <= last_stripe; ++stripe) {
    stripe_op& o = ops_.acquire();
    o.group = this;
    o.owner = &p;
    o.stripe = stripe;
    const std::uint64_t stripe_start = stripe * per_stripe;
    o.begin = std::max(req.lba, stripe_start) - stripe_start;
    o.end = std::min(req.lba + req.block_count, stripe_start + per_stripe) - stripe_start;
    o.caller_offset_bytes = (stripe_start + o.begin - req.lba) * block_size;
    o.purpose = purpose_of(req);
    o.abandoned = 0;
    o.finished = false;
    o.intent = false;
    o.out_of_space = false;
    o.expedited = false;
    if (o.strips.size() != (layout_.data_strips() + 2) * strip_bytes) {
      o.strips = device::aligned_buffer((layout_.data_strips() + 2) * strip_bytes);
    }
    o.ios.resize(members_.size());
    o.direct.assign(layout_.data_strips(), nullptr);
    lock_and_run(o);
  }
  // Drop the hold; if every stripe already finished (they cannot have: their
  // members complete later), complete from the loop, not inside submit.
  if (--p.pending == 0) {
    request& outer = *p.outer;
    const std::error_code result = p.result;
    parents_.release(p);
    rejected_.complete_later(outer, result);
  }
}

raid6_group::stripe_purpose raid6_group::purpose_of(const request& req) const noexcept {
  if (&req == &scrub_.req) return stripe_purpose::scrub;
  if (&req == &resync_.req) return stripe_purpose::resync;
  if (!rebuild_.reqs.empty() && &req >= rebuild_.reqs.data() &&
      &req < rebuild_.reqs.data() + rebuild_.reqs.size()) {
    return stripe_purpose::rebuild;
  }
  switch (req.operation) {
    case op::write:
      return stripe_purpose::write;
    case op::discard:
      return stripe_purpose::discard;
    default:
      return stripe_purpose::read;
  }
}

void raid6_group::lock_and_run(stripe_op& o) {
  o.unlocked = false;
  if (o.purpose == stripe_purpose::read) {
    bool healthy = true;
    for (unsigned s = 0; s < layout_.data_strips() && healthy; ++s) {
      healthy = !touches(o, s) || !unusable(layout_.data_member(o.stripe, s), o.stripe);
    }
    if (healthy) {
      o.unlocked = true;
      run(o);
      return;
    }
  }
  run_locked(o);
}

void raid6_group::run_locked(stripe_op& o) {
  o.unlocked = false;
  if (stripes_.acquire(o, o.stripe, o.stripe + 1)) {
    run(o);
  } else if (!background(o)) {
    stripes_.for_each_ahead(o, [this](stripe_op& ahead) { expedite_op(ahead); });
  }
}

void raid6_group::expedite_op(stripe_op& holder) {
  if (holder.owner->outer->priority != device::io_class::background || holder.expedited) return;
  holder.expedited = true;
  for (member_io& io : holder.ios) {
    if (io.in_flight && members_[io.member] == io.device) members_[io.member]->expedite(io.req);
  }
}

std::byte* raid6_group::strip_data(stripe_op& o, unsigned strip, std::uint64_t row) const noexcept {
  const std::uint64_t block_size = geometry_.logical_block_size_bytes;
  return o.strips.data() + (strip * layout_.strip_blocks + row) * block_size;
}

bool raid6_group::touches(const stripe_op& o, unsigned data_strip) const noexcept {
  const std::uint64_t start = data_strip * layout_.strip_blocks;
  return o.begin < start + layout_.strip_blocks && o.end > start;
}

std::pair<std::uint64_t, std::uint64_t> raid6_group::rows_of(const stripe_op& o,
                                                             unsigned data_strip) const noexcept {
  const std::uint64_t start = data_strip * layout_.strip_blocks;
  return {std::max(o.begin, start) - start, std::min(o.end, start + layout_.strip_blocks) - start};
}

std::pair<std::uint64_t, std::uint64_t> raid6_group::touched_rows(
    const stripe_op& o) const noexcept {
  const unsigned first = static_cast<unsigned>(o.begin / layout_.strip_blocks);
  const unsigned last = static_cast<unsigned>((o.end - 1) / layout_.strip_blocks);
  if (first == last) return rows_of(o, first);
  return {
      0,
      layout_.strip_blocks};  // rows [a, end) of one strip and [0, b) of the next cover every row
}

void raid6_group::run(stripe_op& o) {
  const op operation = o.owner->outer->operation;
  if ((operation == op::write || operation == op::discard) && await_intent(o)) return;
  const unsigned n = layout_.data_strips();
  o.lost.assign(n + 2, false);
  o.repair.assign(n + 2, false);
  unsigned lost = 0;
  for (unsigned s = 0; s < n + 2; ++s) {
    if (unusable(layout_.member_of(o.stripe, s), o.stripe)) {
      o.lost[s] = true;
      ++lost;
    }
  }
  if (lost > 2) {
    finish(o, errc::device_failed);
    return;
  }
  const request& outer = *o.owner->outer;
  o.reconstructing = false;
  o.rmw = false;
  if (outer.operation == op::read) {
    for (unsigned s = 0; s < n; ++s) o.reconstructing |= o.lost[s] && touches(o, s);
    o.reconstructing |= background(o);  // every strip, parity too
    start_reads(o);
    return;
  }
  if (o.begin == 0 && o.end == layout_.stripe_data_blocks()) {
    // A full stripe: parity from the new data alone. Where each strip lies
    // in one piece of the caller's buffers, parity is computed from them and
    // the strips are written from them: no copy.
    const std::uint64_t strip_bytes = layout_.strip_blocks * geometry_.logical_block_size_bytes;
    std::vector<std::byte*>& pointers = o.pointers;
    pointers.clear();
    for (unsigned s = 0; s < n; ++s) {
      std::byte* caller =
          zeros(o) ? nullptr
                   : device::contiguous_at(outer.buffers, o.caller_offset_bytes + s * strip_bytes,
                                           strip_bytes);
      o.direct[s] = caller;
      if (caller == nullptr) {
        if (zeros(o)) {
          std::memset(strip_data(o, s, 0), 0, strip_bytes);
        } else {
          device::copy_from_buffers(outer.buffers, o.caller_offset_bytes + s * strip_bytes,
                                    strip_data(o, s, 0), strip_bytes);
        }
      }
      pointers.push_back(caller != nullptr ? caller : strip_data(o, s, 0));
    }
    pointers.push_back(strip_data(o, n, 0));
    pointers.push_back(strip_data(o, n + 1, 0));
    (void)codec_.encode(pointers, strip_bytes);
    start_writes(o);
    return;
  }
  // A partial write touching k data strips: read-modify-write reads k + 2
  // strips, reconstruct-write the n data strips. RMW needs the whole stripe
  // readable.
  unsigned touched = 0;
  for (unsigned s = 0; s < n; ++s) touched += touches(o, s) ? 1 : 0;
  // A stripe the resync has not reached may have parity that disagrees
  // with its data: recompute it rather than update it.
  o.rmw = lost == 0 && touched + 2 < n && !needs_resync(o.stripe);
  o.reconstructing = !o.rmw;
  start_reads(o);
}

void raid6_group::issue(stripe_op& o, unsigned strip, op operation, std::uint64_t row_begin,
                        std::uint64_t row_end) {
  const unsigned member = layout_.member_of(o.stripe, strip);
  member_io& io = o.ios[member];
  io.op = &o;
  io.member = member;
  io.device = members_[member];
  const std::uint32_t block_size = geometry_.logical_block_size_bytes;
  // A full stripe's data strips are written from the caller's buffers.
  const bool from_caller =
      strip < o.direct.size() && o.direct[strip] != nullptr && operation == op::write;
  std::byte* base =
      from_caller ? o.direct[strip] + row_begin * block_size : strip_data(o, strip, row_begin);
  io.segment = {base, (row_end - row_begin) * block_size};
  io.req = request{};
  io.req.operation = operation;
  io.req.priority = o.expedited ? device::io_class::foreground : o.owner->outer->priority;
  io.req.lba = layout_.member_lba(o.stripe, row_begin);
  io.req.block_count = row_end - row_begin;
  io.req.buffers = {&io.segment, 1};
  io.req.context = &io;
  io.req.on_complete = &raid6_group::on_member_done;
  io.watch.owner = &io;
  io.watch.expire = &raid6_group::expire_member_io;
  io.watch.abandonable = !from_caller;
  members_.watchdog().start(io.watch, member, members_[member], &io.req);
  ++o.pending;
  io.in_flight = true;
  members_[member]->submit(io.req);
}

void raid6_group::start_reads(stripe_op& o) {
  const unsigned n = layout_.data_strips();
  // A second pass (a read failed) may come after the membership changed:
  // a member failed since the op began, or a spare took its place that
  // holds nothing of this stripe yet. Its strip is lost now; read from the
  // spare, it would be taken for data.
  for (unsigned s = 0; s < n + 2; ++s) {
    o.lost[s] = o.lost[s] || unusable(layout_.member_of(o.stripe, s), o.stripe);
  }
  o.pending = 1;  // held while issuing
  o.wide = false;
  if (!o.reconstructing) {
    for (unsigned s = 0; s < n; ++s) {
      if (!touches(o, s)) continue;
      const auto [first, last] = rows_of(o, s);
      issue(o, s, op::read, first, last);
    }
    if (o.rmw) {
      const auto [first, last] = touched_rows(o);
      issue(o, n, op::read, first, last);
      issue(o, n + 1, op::read, first, last);
    }
  } else {
    // The touched rows of every surviving strip. Parity is needed only to
    // rebuild lost data; a reconstruct-write recomputes it.
    bool data_lost = false;
    for (unsigned s = 0; s < n; ++s) data_lost |= o.lost[s];
    const auto [first, last] = touched_rows(o);
    o.wide = data_lost || background(o);
    for (unsigned s = 0; s < n + 2; ++s) {
      if (o.lost[s] || (s >= n && !o.wide)) continue;
      issue(o, s, op::read, first, last);
    }
  }
  if (--o.pending == 0) after_reads(o);
}

void raid6_group::on_member_done(request& r) noexcept {
  member_io& io = *static_cast<member_io*>(r.context);
  io.in_flight = false;
  stripe_op& o = *io.op;
  raid6_group& g = *o.group;
  if (io.watch.abandoned) {
    // The late answer of an I/O given up on: the op's buffers may go now.
    io.watch.abandoned = false;
    g.members_.abandoned_answered();
    if (--o.abandoned == 0 && o.finished) g.release_op(o);
    return;
  }
  g.members_.watchdog().stop(io.watch);
  g.member_io_done(io, r.result);
}

void raid6_group::expire_member_io(watched_io& w) {
  member_io& io = *static_cast<member_io*>(w.owner);
  ++io.op->abandoned;
  io.op->group->members_.count_abandoned();
  io.op->group->member_io_done(io, errc::timed_out);
}

void raid6_group::release_op(stripe_op& o) {
  o.finished = false;
  ops_.release(o);
}

void raid6_group::member_io_done(member_io& io, std::error_code result) {
  stripe_op& o = *io.op;
  raid6_group& g = *this;
  const op operation = io.req.operation;
  if (result == errc::no_space && operation != op::read) {
    // The strip is as it was (or partly written): the member still serves
    // the stripe, which is torn now.
    g.members_.note_error(io.member, io.device, operation, result);
    o.out_of_space = true;
  } else if (result) {
    g.members_.note_error(io.member, io.device, operation, result);
    for (unsigned s = 0; s < g.layout_.data_strips() + 2; ++s) {
      if (g.layout_.member_of(o.stripe, s) != io.member) continue;
      o.lost[s] = true;
      o.repair[s] = operation == op::read && !g.members_.failed(io.member);
    }
  }
  if (--o.pending > 0) return;
  if (operation == op::read) {
    g.after_reads(o);
  } else {
    // The stripe survives if at most two of its members cannot serve it
    // (strips lost to read errors were rewritten and are whole again).
    unsigned unusable = 0;
    for (unsigned s = 0; s < g.layout_.data_strips() + 2; ++s) {
      unusable += g.unusable(g.layout_.member_of(o.stripe, s), o.stripe) ? 1 : 0;
    }
    if (unusable > 2) {
      g.finish(o, errc::device_failed);
    } else if (o.out_of_space && o.purpose != stripe_purpose::read &&
               o.purpose != stripe_purpose::scrub) {
      // A caller's write or a resync changed the stripe on some members
      // only. (A read's or scrub's repair that could not land left a strip
      // as it was, still unreadable or wrong: the read's data is good, and
      // the next read or scrub tries again. A rebuild's strip is missing:
      // the rebuild fails.)
      if (o.purpose != stripe_purpose::rebuild) g.tear(o.stripe);
      g.finish(o, errc::no_space);
    } else {
      g.finish(o, {});
    }
  }
}

void raid6_group::after_reads(stripe_op& o) {
  const unsigned n = layout_.data_strips();
  std::array<unsigned, 3> lost_strips{};  // a third lost strip ends the operation
  std::size_t lost_count = 0;
  for (unsigned s = 0; s < n + 2 && lost_count < lost_strips.size(); ++s) {
    if (o.lost[s]) lost_strips[lost_count++] = s;
  }
  if (lost_count > 2) {
    finish(o, errc::device_failed);
    return;
  }
  const std::span<const unsigned> lost(lost_strips.data(), lost_count);
  if (o.unlocked && !lost.empty()) {
    // A read beside the lock lost a strip: rebuilding it needs the stripe
    // held (parity must match the data it is rebuilt from). Again, locked.
    run_locked(o);
    return;
  }
  if (o.rmw && !lost.empty()) {
    // A read failed: the stripe is not whole, so reconstruct instead.
    o.rmw = false;
    o.reconstructing = true;
    start_reads(o);
    return;
  }
  const request& outer = *o.owner->outer;
  const std::uint32_t block_size = geometry_.logical_block_size_bytes;
  if (o.rmw) {
    read_modify_write(o);
    return;
  }
  const auto [first, last] = touched_rows(o);
  std::vector<std::byte*>& pointers = o.pointers;  // every strip, from the first touched row
  pointers.clear();
  for (unsigned s = 0; s < n + 2; ++s) pointers.push_back(strip_data(o, s, first));
  const std::uint64_t row_bytes = (last - first) * block_size;

  // Lost data that matters: for a plain read, only the strips it touches;
  // a write recomputes parity from every data strip, a scrub or rebuild
  // checks or writes whole stripes.
  const bool whole_stripe = o.purpose != stripe_purpose::read;
  bool data_lost = false;
  for (unsigned s : lost) data_lost |= s < n && (whole_stripe || touches(o, s));
  // A scrub reads every strip and rewrites what it could not read, parity
  // included, so it rebuilds whatever it lost.
  if (data_lost || (background(o) && !lost.empty())) {
    if (!o.wide) {
      // A read that lost a strip only now (a member's read error) read
      // less than a rebuild needs: read every survivor's touched rows.
      o.reconstructing = true;
      start_reads(o);
      return;
    }
    (void)codec_.rebuild(pointers, lost, row_bytes);
    if (o.purpose == stripe_purpose::read && needs_resync(o.stripe) &&
        !rebuilt_verified(lost, pointers, row_bytes)) {
      // The resync has not reached this stripe, so a crash may have torn
      // it, and the other parity does not vouch for what this one rebuilt:
      // returned or written back, it could be neither the old data nor the
      // new. Nothing is returned or written; the resync deals with the
      // stripe (docs/raid-write-hole.md).
      finish(o, errc::media_error);
      return;
    }
  }

  switch (o.purpose) {
    case stripe_purpose::resync:
      resync_stripe(o, lost, row_bytes);
      return;
    case stripe_purpose::rebuild:
      // A torn stripe (the resync has not reached it, or a full store tore
      // it) may have parity that disagrees with its data: what the new
      // member gets from it is the degraded write hole's, unless the other
      // parity vouches for it. Counted, as the resync counts its own.
      if (needs_resync(o.stripe) && !rebuilt_verified(lost, pointers, row_bytes)) {
        ++rebuild_unverifiable_;
        ++unverifiable_stripes_;
      }
      write_rebuilt_strip(o);
      return;
    case stripe_purpose::scrub:
      scrub_stripe(o, lost, row_bytes);
      return;
    case stripe_purpose::read:
      for (unsigned s = 0; s < n; ++s) {
        if (!touches(o, s)) continue;
        const auto [a, b] = rows_of(o, s);
        device::copy_to_buffers(
            outer.buffers,
            o.caller_offset_bytes + (s * layout_.strip_blocks + a - o.begin) * block_size,
            strip_data(o, s, a), (b - a) * block_size);
      }
      // The caller's data is ready, but the stripe stays locked until the
      // repair is done.
      write_back_repairs(o, first, last);
      return;
    case stripe_purpose::write:
    case stripe_purpose::discard:
      // A write over a stripe the resync has not reached, rebuilding a
      // lost strip the other parity does not vouch for: the new parity
      // takes in what a torn stripe left there, and the resync will find
      // it consistent. The degraded write hole's, so counted as the
      // resync counts its own (a write-back cache destaging its replayed
      // log right after a restart does this).
      if (data_lost && needs_resync(o.stripe) && !rebuilt_verified(lost, pointers, row_bytes)) {
        ++resync_.progress.unverifiable;
        ++unverifiable_stripes_;
      }
      break;
  }
  // A reconstruct-write: the new data over the old, then parity over the rows.
  for (unsigned s = 0; s < n; ++s) {
    if (!touches(o, s)) continue;
    const auto [a, b] = rows_of(o, s);
    if (zeros(o)) {
      std::memset(strip_data(o, s, a), 0, (b - a) * block_size);
    } else {
      device::copy_from_buffers(
          outer.buffers,
          o.caller_offset_bytes + (s * layout_.strip_blocks + a - o.begin) * block_size,
          strip_data(o, s, a), (b - a) * block_size);
    }
  }
  (void)codec_.encode(pointers, row_bytes);
  start_writes(o);
}

bool raid6_group::unusable(unsigned member, std::uint64_t stripe) const noexcept {
  return members_.failed(member) || (member == members_.rebuilding() && !rebuild_.rebuilt[stripe]);
}

superblock raid6_group::describe(unsigned member) const {
  superblock sb;
  sb.level = group_level::raid6;
  sb.member_count = layout_.members;
  sb.member_index = member;
  sb.logical_block_size_bytes = geometry_.logical_block_size_bytes;
  sb.member_block_count = members_[member]->geometry().block_count;
  sb.data_offset_blocks = layout_.data_offset_blocks;
  sb.strip_blocks = layout_.strip_blocks;
  sb.stripes = layout_.stripes;
  // A member being rebuilt is not whole until its rebuild is recorded: if
  // it was a member before (a rebuild in place), its old superblock must
  // not pass for one merely behind in events after a crash.
  for (unsigned i = 0; i < members_.size(); ++i) sb.failed[i] = !members_.whole(i);
  if (intent_.enabled()) {
    sb.bitmap_offset_blocks = intent_.offset_blocks();
    sb.bitmap_region_stripes = intent_region_stripes_;
  }
  return sb;
}

void raid6_group::assemble(std::vector<block_device*> devices, const raid6_options& options,
                           std::function<void(assembled)> done) {
  auto survives = [](unsigned) { return 2u; };
  plan_assembly(std::move(devices), group_level::raid6, survives,
                [options, done = std::move(done)](std::expected<assembly_plan, error> plan) {
                  assembled result =
                      plan ? from_plan(std::move(*plan), options) : std::unexpected(plan.error());
                  if (!result) {
                    done(std::move(result));
                    return;
                  }
                  raid6_group& g = **result;
                  auto shared_result = std::make_shared<assembled>(std::move(result));
                  // Every assembly is recorded (a new event, as md does):
                  // members found missing or stale are failed on every
                  // current member before the group is handed out, so a
                  // later assembly agrees.
                  g.read_intents([shared_result, &g, done] {
                    g.members_.log().after([shared_result, &g, done](std::error_code) {
                      if (g.resync_.running)
                        boost::asio::post(g.executor(), [&g] { g.resync_next(); });
                      done(std::move(*shared_result));
                    });
                    g.members_.log().changed();
                  });
                });
}

raid6_group::assembled raid6_group::from_plan(assembly_plan plan, const raid6_options& options) {
  const superblock& newest = plan.newest;
  raid6_options layout_options = options;
  layout_options.strip_size_bytes = newest.strip_blocks * newest.logical_block_size_bytes;
  layout_options.reserved_bytes = newest.data_offset_blocks * newest.logical_block_size_bytes;
  auto group = create(plan.members, layout_options);
  if (!group) return std::unexpected(group.error());
  if ((*group)->layout_.stripes != newest.stripes) {
    return std::unexpected(make_error(errc::invalid_argument,
                                      "the members' geometry does not match their superblocks"));
  }
  raid6_group& g = **group;
  if (auto problem = check_bitmap_placement(newest)) return std::unexpected(*problem);
  if (newest.bitmap_offset_blocks == 0) {
    g.intent_.configure(0, 0, 0);  // formatted without a bitmap: nothing to resync from
  } else {
    g.set_intent_geometry(newest.bitmap_offset_blocks, newest.bitmap_region_stripes);
  }
  g.members_.log().adopt(newest.group_id, newest.events);
  g.members_.assembled(member_failures(plan), std::move(plan.stand_ins));
  return group;
}

void raid6_group::format(std::function<void(std::optional<error>)> done) {
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

// ---- The write-intent bitmap (docs/raid-write-hole.md) ----

bool raid6_group::await_intent(stripe_op& o) {
  if (!intent_.enabled() || !members_.log().formatted())
    return false;  // not formatted: nothing to resync after all
  const std::uint64_t region = o.stripe / intent_region_stripes_;
  if (!o.intent) {
    o.intent = true;
    intent_.begin(region);
  }
  if (intent_.durable(region)) return false;
  intent_.wait(region, &o);
  return true;
}

void raid6_group::mark_clean(std::function<void(std::error_code)> done) {
  pause_resync();
  intent_.mark_clean(*this, std::move(done));
}

bool raid6_group::rebuilt_verified(std::span<const unsigned> lost,
                                   std::span<std::byte* const> strips, std::uint64_t row_bytes) {
  const unsigned n = layout_.data_strips();
  unsigned lost_data = 0;
  for (unsigned s : lost) lost_data += s < n ? 1 : 0;
  if (lost_data == 0) return true;  // the data is as read
  // With one strip lost the other parity vouches for it; with two nothing can.
  return lost.size() == 1 &&
         codec_.check(strips, row_bytes).verdict == pq_check_result::kind::consistent;
}

void raid6_group::write_back_repairs(stripe_op& o, std::uint64_t first, std::uint64_t last) {
  o.pending = 1;
  for (unsigned s = 0; s < layout_.data_strips() + 2; ++s) {
    if (!o.repair[s] || members_.failed(layout_.member_of(o.stripe, s))) continue;
    repaired_blocks_ += last - first;
    issue(o, s, op::write, first, last);
  }
  if (--o.pending == 0) finish(o, {});
}

void raid6_group::read_modify_write(stripe_op& o) {
  const request& outer = *o.owner->outer;
  const unsigned n = layout_.data_strips();
  const std::uint32_t block_size = geometry_.logical_block_size_bytes;
  for (unsigned s = 0; s < n; ++s) {
    if (!touches(o, s)) continue;
    const auto [a, b] = rows_of(o, s);
    std::byte* data = strip_data(o, s, a);
    const std::uint64_t offset =
        o.caller_offset_bytes + (s * layout_.strip_blocks + a - o.begin) * block_size;
    const std::uint64_t bytes = (b - a) * block_size;
    // old XOR new, folded into P and Q; then the new data, to be written.
    if (!zeros(o)) device::xor_from_buffers(outer.buffers, offset, data, bytes);
    (void)codec_.update(s, data, strip_data(o, n, a), strip_data(o, n + 1, a), bytes);
    if (zeros(o)) {
      std::memset(data, 0, bytes);
    } else {
      device::copy_from_buffers(outer.buffers, offset, data, bytes);
    }
  }
  start_writes(o);
}

void raid6_group::start_writes(stripe_op& o) {
  const unsigned n = layout_.data_strips();
  const auto [first, last] = touched_rows(o);
  o.pending = 1;
  for (unsigned s = 0; s < n; ++s) {
    const bool repairing = o.repair[s] && !members_.failed(layout_.member_of(o.stripe, s));
    if (repairing) {
      // Rebuilt over the touched rows (with any new data laid over them):
      // rewrite them all, which repairs the member's unreadable blocks.
      repaired_blocks_ += last - first;
      issue(o, s, op::write, first, last);
      continue;
    }
    if (o.lost[s] || !touches(o, s)) continue;
    const auto [a, b] = rows_of(o, s);
    issue(o, s, op::write, a, b);
  }
  for (unsigned s = n; s < n + 2; ++s) {
    if (!o.lost[s] || (o.repair[s] && !members_.failed(layout_.member_of(o.stripe, s)))) {
      if (o.repair[s]) repaired_blocks_ += last - first;
      issue(o, s, op::write, first, last);
    }
  }
  if (--o.pending == 0) finish(o, {});
}

void raid6_group::finish(stripe_op& o, std::error_code result) {
  parent& p = *o.owner;
  if (o.intent) {
    intent_.end(o.stripe / intent_region_stripes_);
    o.intent = false;
  }
  if (result && !p.result) p.result = result;
  // The new member holds this stripe now: say so before the lock passes on,
  // so the next writer of the stripe writes the new member too.
  if (o.purpose == stripe_purpose::rebuild && !result && !members_.failed(members_.rebuilding()) &&
      !rebuild_.rebuilt[o.stripe]) {
    rebuild_.rebuilt[o.stripe] = true;
    ++rebuild_.rebuilt_count;
  }
  const bool wrote =
      !result && (o.purpose == stripe_purpose::write || o.purpose == stripe_purpose::discard);
  // Hand the stripe to the next operation waiting for it.
  if (!o.unlocked) stripes_.release(o, [this](stripe_op& next) { run(next); });
  if (o.abandoned > 0) {
    o.finished = true;  // its buffers stay until the abandoned I/Os answer
  } else {
    ops_.release(o);
  }
  if (wrote && torn_regions_ > 0) resync_torn();  // a write landed: the store may have room again
  if (--p.pending > 0) return;
  request& outer = *p.outer;
  const std::error_code final_result = p.result;
  parents_.release(p);
  members_.acknowledge(outer, final_result);
}

}  // namespace strata::raid
