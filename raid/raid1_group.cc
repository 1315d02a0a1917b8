#include "raid/raid1_group.h"

#include <algorithm>
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
  const std::uint64_t reserved_blocks =
      (options.reserved_bytes + first.logical_block_size_bytes - 1) / first.logical_block_size_bytes;
  if (first.block_count <= reserved_blocks) {
    return std::unexpected(make_error(
        errc::too_small, "members of " + std::to_string(first.size_bytes()) +
                             " bytes cannot hold the reserved area and any data"));
  }
  return std::unique_ptr<raid1_group>(new raid1_group(std::move(members), reserved_blocks));
}

raid1_group::raid1_group(std::vector<block_device*> members, std::uint64_t data_offset_blocks)
    : members_(std::move(members)),
      data_offset_blocks_(data_offset_blocks),
      failed_(members_.size(), false),
      in_flight_(members_.size(), 0),
      reads_served_(members_.size(), 0),
      rejected_(members_[0]->executor()) {
  const device::block_geometry& member = members_[0]->geometry();
  geometry_ = member;
  geometry_.block_count = member.block_count - data_offset_blocks;
  geometry_.buffer_alignment_bytes = member.logical_block_size_bytes;
  geometry_.max_segments = std::min<std::uint32_t>(member.max_segments, 64);
  for (block_device* m : members_) {
    geometry_.max_segments = std::min(geometry_.max_segments, m->geometry().max_segments);
  }
}

unsigned raid1_group::working_members() const noexcept {
  return static_cast<unsigned>(std::count(failed_.begin(), failed_.end(), false));
}

void raid1_group::fail_member(unsigned member) {
  if (member < failed_.size()) failed_[member] = true;
}

void raid1_group::submit(request& req) noexcept {
  if (auto ec = device::validate(geometry_, req)) {
    rejected_.complete_later(req, ec);
    return;
  }
  if (working_members() == 0) {
    rejected_.complete_later(req, errc::device_failed);
    return;
  }
  mirror_op& o = ops_.acquire();
  o.group = this;
  o.outer = &req;
  o.reqs.resize(members_.size());
  o.pending = 0;
  o.succeeded = 0;
  o.last_error = {};
  o.range_lba = req.lba;
  o.range_blocks = req.block_count;
  o.range_buffers = req.buffers;
  o.tried.assign(members_.size(), false);
  o.bad.clear();
  o.narrow = false;
  o.writes_before = writes_started_;
  // A working member exists, so both paths submit to one: nothing completes here.
  if (req.operation == op::read) {
    read_range(o);
  } else {
    if (req.operation != op::flush) ++writes_started_;
    fan_out(o, req.operation);
  }
}

void raid1_group::prepare(mirror_op& o, unsigned member, op operation, device::completion_fn done) {
  request& r = o.reqs[member];
  r = request{};
  r.operation = operation;
  r.priority = o.outer->priority;
  if (operation != op::flush) {
    r.lba = o.range_lba + data_offset_blocks_;
    r.block_count = o.range_blocks;
  }
  if (operation == op::read || operation == op::write) r.buffers = o.range_buffers;
  r.context = &o;
  r.on_complete = done;
  ++in_flight_[member];
}

void raid1_group::read_range(mirror_op& o) {
  // The least busy working member not yet asked; ties go round the members.
  const unsigned m = static_cast<unsigned>(members_.size());
  unsigned chosen = m;
  for (unsigned k = 0; k < m; ++k) {
    const unsigned i = (next_read_ + k) % m;
    if (failed_[i] || o.tried[i]) continue;
    if (chosen == m || in_flight_[i] < in_flight_[chosen]) chosen = i;
  }
  if (chosen == m) {
    range_unreadable(o);
    return;
  }
  next_read_ = (chosen + 1) % m;
  o.tried[chosen] = true;
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
    if (r.result == errc::device_failed) {
      g.failed_[member] = true;
    } else {
      o.bad.push_back(member);  // unreadable here; rewrite it once read elsewhere
    }
    g.read_range(o);
    return;
  }
  ++g.reads_served_[member];
  // The range's buffers hold good data now: write it over the copies that
  // could not be read, before handing the buffers back -- unless a write
  // has started since, which this data might be older than (the next read
  // finds any block still bad).
  if (g.writes_started_ != o.writes_before) o.bad.clear();
  o.pending = 0;
  for (unsigned bad : o.bad) {
    if (g.failed_[bad]) continue;
    g.prepare(o, bad, op::write, &raid1_group::on_repair_done);
    ++o.pending;
    g.members_[bad]->submit(o.reqs[bad]);
  }
  if (o.pending == 0) g.range_done(o);
}

void raid1_group::on_repair_done(request& r) noexcept {
  mirror_op& o = *static_cast<mirror_op*>(r.context);
  raid1_group& g = *o.group;
  const auto member = static_cast<unsigned>(&r - o.reqs.data());
  --g.in_flight_[member];
  if (r.result) {
    g.failed_[member] = true;  // cannot even rewrite: the member is done for
  } else {
    g.repaired_blocks_ += r.block_count;
  }
  if (--o.pending == 0) g.range_done(o);
}

void raid1_group::set_range(mirror_op& o, std::uint64_t block) {
  const std::uint32_t block_size = geometry_.logical_block_size_bytes;
  o.range_lba = o.outer->lba + block;
  o.range_blocks = 1;
  // Segments are whole blocks (validate() checks), so a block is in one piece.
  o.block_segment = {device::contiguous_at(o.outer->buffers, block * block_size, block_size), block_size};
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

void raid1_group::fan_out(mirror_op& o, op operation) {
  // Members never complete inside submit, so counting as we go is safe.
  o.pending = 0;
  for (unsigned i = 0; i < members_.size(); ++i) {
    if (failed_[i]) continue;
    prepare(o, i, operation, &raid1_group::on_fan_out_done);
    ++o.pending;
    members_[i]->submit(o.reqs[i]);
  }
}

void raid1_group::on_fan_out_done(request& r) noexcept {
  mirror_op& o = *static_cast<mirror_op*>(r.context);
  raid1_group& g = *o.group;
  const auto member = static_cast<unsigned>(&r - o.reqs.data());
  --g.in_flight_[member];
  if (!r.result) {
    ++o.succeeded;
  } else {
    o.last_error = r.result;
    // A member that cannot write or flush no longer holds what the group
    // holds. A discard it cannot do changes nothing.
    if (r.operation != op::discard || r.result == errc::device_failed) g.failed_[member] = true;
  }
  if (--o.pending > 0) return;
  std::error_code result;
  if (o.succeeded == 0) result = o.last_error ? o.last_error : make_error_code(errc::device_failed);
  g.finish(o, result);
}

void raid1_group::finish(mirror_op& o, std::error_code result) {
  request& outer = *o.outer;
  ops_.release(o);
  device::complete(outer, result);
}

}  // namespace strata::raid
