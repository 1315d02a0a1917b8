// The engine under the block commands: per-command state reused, the
// range interlock, and the pieces each command moves to and from the
// volume (what Linux-IO keeps in target_core_transport.c).
#include <algorithm>
#include <boost/asio/post.hpp>
#include <cassert>
#include <cstring>
#include <limits>
#include <new>

#include "raid/device/aligned_buffer.h"
#include "raid/device/status.h"
#include "target/scsi/big_endian.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/unit_internal.h"

namespace strata::scsi {

using namespace detail;

// ---------------------------------------------------------------------------
// The piece engine

logical_unit::command& logical_unit::acquire() {
  command* c = nullptr;
  if (free_commands_.empty()) {
    free_commands_.reserve(commands_.size() + 1);  // so that release() cannot throw
    commands_.push_back(std::make_unique<command>());
    c = commands_.back().get();
    c->owner = this;
    for (command::piece& p : c->pieces) p.req.bind<&command::on_piece_done>(c);
  } else {
    c = free_commands_.back();
    free_commands_.pop_back();
  }
  ++in_flight_;
  return *c;
}

void logical_unit::release(command& c) noexcept {
  c.t = nullptr;
  c.lba = 0;
  c.returns_data = false;
  c.compare = command::comparison::none;
  c.expected = {};
  c.step_count = 0;
  c.step_index = 0;
  c.ranges.clear();
  // Buffers go back at once, so that idle slots pin no memory.
  c.scratch = device::aligned_buffer();
  c.bounce = device::aligned_buffer();
  c.locating = false;
  c.first_failure = {};
  c.piece_failure = {};
  c.between_steps = command::merge::none;
  c.miscompare_offset.reset();
  if (c.lock == command::access::exclusive || c.lock == command::access::atomic)
    --exclusive_commands_;
  if (c.lock == command::access::atomic) --atomic_commands_;
  c.lock = command::access::none;
  c.locked = {};
  c.running = false;
  free_commands_.push_back(&c);
  --in_flight_;
  // Its range is free: commands that waited for it may go.
  waiting_.admit([this](const command& w) { return blocked(w); },
                 [this](command& w) {
                   run(w);
                 });  // only submits: nothing completes, so the queue stays as it is
}

// ---------------------------------------------------------------------------
// The range interlock
//
// COMPARE AND WRITE and ORWRITE (exclusive commands) need their range to
// themselves from their read to their write; every other command that
// writes (WRITE, WRITE AND VERIFY, WRITE SAME, UNMAP) must stay off it
// meanwhile. WRITE ATOMIC (atomic) needs it from reads as well: a read
// overlapping it must see its blocks all old or all new. Two commands
// conflict when their ranges overlap and either is exclusive or atomic
// while the other writes, or either is atomic while the other reads:
// plain writes never conflict with each other, nor reads with anything
// else (they run concurrently, as before). A command waits if it conflicts
// with one that is running or with one that waits ahead of it, so that
// conflicting commands run in arrival order and a stream of writes (or of
// reads) cannot starve a COMPARE AND WRITE (or a WRITE ATOMIC).
//
// Cost: a write checks one counter and goes while no exclusive or atomic
// command is running or waiting; a read checks another and goes while no
// WRITE ATOMIC is. Only then are the running commands scanned (the
// per-command slots: as many as the peak number of commands in flight).
// Waiting commands are linked through their own state, so nothing is
// allocated.

namespace {

bool overlap(std::uint64_t a_lba, std::uint64_t a_blocks, std::uint64_t b_lba,
             std::uint64_t b_blocks) noexcept {
  return a_lba < b_lba + b_blocks && b_lba < a_lba + a_blocks;
}

}  // namespace

void logical_unit::start(command& c) {
  if (c.lock == command::access::exclusive || c.lock == command::access::atomic)
    ++exclusive_commands_;
  if (c.lock == command::access::atomic) ++atomic_commands_;
  // Most commands find nothing that could conflict with them.
  const bool may_conflict = c.lock == command::access::read
                                ? atomic_commands_ != 0
                                : c.lock != command::access::none && exclusive_commands_ != 0;
  if (!may_conflict || !blocked(c)) return run(c);
  waiting_.push_back(c);
}

bool logical_unit::blocked(const command& c) const noexcept {
  auto conflict = [&c](const command& other) {
    if (!command::conflicting(c.lock, other.lock)) return false;
    for (const command::range& a : c.locked_ranges()) {
      for (const command::range& b : other.locked_ranges()) {
        if (overlap(a.lba, a.block_count, b.lba, b.block_count)) return true;
      }
    }
    return false;
  };
  for (const auto& other : commands_) {
    if (other->running && other->lock != command::access::none && conflict(*other)) return true;
  }
  // Those waiting ahead of it: all of them for a command not yet queued.
  return waiting_.any_ahead_of(&c, conflict);
}

// ---------------------------------------------------------------------------

void logical_unit::run(command& c) {
  assert(c.step_count > 0);
  c.running = true;
  c.step_index = 0;
  c.range_index = 0;
  c.next_lba = c.steps[0].ranges[0].lba;
  c.next_sequence = 0;
  c.in_flight = 0;
  c.stopped = false;
  // Every step has at least one block to move (or is a flush), so this
  // submits at least one request: nothing completes inside execute().
  issue(c);
}

void logical_unit::issue(command& c) {
  const command::step& s = c.steps[c.step_index];
  const std::uint32_t bs = block_size_bytes();
  while (!c.stopped && c.in_flight < max_pieces_in_flight && c.range_index < s.range_count) {
    const command::range& r = s.ranges[c.range_index];
    const std::uint64_t end_lba = r.lba + r.block_count;
    const std::uint64_t n = std::min(s.piece_blocks, end_lba - c.next_lba);
    command::piece* p = nullptr;
    for (command::piece& candidate : c.pieces) {
      if (!candidate.busy) {
        p = &candidate;
        break;
      }
    }
    p->busy = true;
    p->sequence = c.next_sequence++;
    device::request& req = p->req;
    req.operation = s.operation;
    req.priority = device::io_class::foreground;
    req.result = {};
    if (s.operation == device::op::flush) {
      req.lba = 0;
      req.block_count = 0;
      req.buffers = {};
    } else {
      req.lba = c.next_lba;
      req.block_count = n;
      if (s.data != nullptr) {
        const std::uint64_t offset_bytes = s.repeat ? 0 : (c.next_lba - s.ranges[0].lba) * bs;
        p->segment = iovec{s.data + offset_bytes, n * bs};
        req.buffers = {&p->segment, 1};
      } else {
        req.buffers = {};
      }
    }
    c.next_lba += n;
    if (c.next_lba == end_lba && ++c.range_index < s.range_count)
      c.next_lba = s.ranges[c.range_index].lba;
    ++c.in_flight;
    volume_.submit(req);  // never completes inside submit: the loop goes on
  }
  if (c.in_flight == 0) step_done(c);
}

void logical_unit::on_piece_done(device::request& req) noexcept {
  auto& c = *static_cast<command*>(req.context);
  command::piece* p = nullptr;
  for (command::piece& candidate : c.pieces) {
    if (&candidate.req == &req) p = &candidate;
  }
  p->busy = false;
  --c.in_flight;
  if (req.result) {
    c.stopped = true;
    command::failure& f = c.first_failure;
    if (!f.error || p->sequence < f.sequence) {
      f.error = req.result;
      f.operation = req.operation;
      f.lba = req.lba;
      f.block_count = req.block_count;
      f.data = req.buffers.empty() ? nullptr : static_cast<std::byte*>(req.buffers[0].iov_base);
      f.sequence = p->sequence;
    }
  }
  issue(c);
}

void logical_unit::step_done(command& c) {
  command::failure& f = c.first_failure;
  if (f.error) {
    // A read piece failed on the medium: read it again in the smallest
    // pieces the buffer alignment allows, to report the first bad LBA
    // itself (and to fill the good blocks before it), as a disk does.
    if (!c.locating && f.operation == device::op::read && f.error == errc::media_error &&
        f.block_count > align_blocks_) {
      c.locating = true;
      c.piece_failure = f;
      c.steps[c.step_index] = command::step{};
      command::step& s = c.steps[c.step_index];
      s.operation = device::op::read;
      s.data = c.piece_failure.data;
      s.piece_blocks = align_blocks_;
      s.single = command::range{c.piece_failure.lba, c.piece_failure.block_count};
      s.ranges = &s.single;
      s.range_count = 1;
      const std::uint64_t sequence_base = c.piece_failure.sequence;
      f = {};
      c.range_index = 0;
      c.next_lba = s.single.lba;
      c.stopped = false;
      // Keep sequence order meaningful: these pieces all come after the
      // pieces before the failed one, which succeeded.
      c.next_sequence = sequence_base;
      issue(c);
      return;
    }
    return finish(c);  // when locating: the first bad block found
  }
  if (c.locating) {
    // Every block of the failed piece read this time: report the piece.
    f = c.piece_failure;
    return finish(c);
  }
  if (c.step_index == 0 && c.between_steps == command::merge::compare) {
    // COMPARE AND WRITE: the medium, read under the range interlock, against
    // the verify half of the Data-Out. A difference ends the command before
    // anything is written; INFORMATION is its offset into the Data-Out.
    const std::span<const std::byte> medium(c.scratch.data(), c.expected.size());
    const auto [a, b] = std::mismatch(medium.begin(), medium.end(), c.expected.begin());
    if (a != medium.end()) {
      c.miscompare_offset = static_cast<std::uint64_t>(a - medium.begin());
      return finish(c);
    }
  } else if (c.step_index == 0 && c.between_steps == command::merge::bitwise_or) {
    // ORWRITE: the write step writes from the buffer just read into.
    std::byte* medium = c.scratch.data();
    for (std::size_t i = 0; i < c.expected.size(); ++i) medium[i] |= c.expected[i];
  }
  if (++c.step_index < c.step_count) {
    c.range_index = 0;
    c.next_lba = c.steps[c.step_index].ranges[0].lba;
    c.stopped = false;
    issue(c);
    return;
  }
  finish(c);
}

void logical_unit::finish(command& c) noexcept {
  task& t = *c.t;
  const command::failure& f = c.first_failure;
  const std::uint32_t bs = block_size_bytes();
  if (f.error) {
    t.result = status_for(f.error);
    if (t.result == status::check_condition) {
      const bool has_lba = f.operation != device::op::flush;
      t.sense_data = sense_for(f.error, f.operation, has_lba ? std::optional(f.lba) : std::nullopt);
    }
    // Every block before the failed one was read: the transport may send them.
    t.data_in_bytes = c.returns_data && f.operation == device::op::read
                          ? static_cast<std::uint32_t>((f.lba - c.lba) * bs)
                          : 0;
  } else {
    t.result = status::good;
    t.data_in_bytes =
        c.returns_data ? static_cast<std::uint32_t>(c.steps[0].single.block_count * bs) : 0;
    if (c.miscompare_offset) {
      set_check_condition(
          t, make_sense(sense_key::miscompare, asc::miscompare_during_verify, c.miscompare_offset));
    }
    if (c.compare != command::comparison::none) {
      // The first byte that differs, as an offset into the verified data
      // (SBC-3: the INFORMATION field of MISCOMPARE DURING VERIFY OPERATION).
      const std::span<const std::byte> medium(c.scratch.data(), c.scratch.size());
      std::optional<std::uint64_t> mismatch_offset;
      if (c.compare == command::comparison::whole) {
        const auto [a, b] = std::mismatch(medium.begin(), medium.end(), c.expected.begin());
        if (a != medium.end()) mismatch_offset = static_cast<std::uint64_t>(a - medium.begin());
      } else {
        for (std::size_t at = 0; at < medium.size() && !mismatch_offset; at += bs) {
          const auto block = medium.subspan(at, bs);
          const auto [a, b] = std::mismatch(block.begin(), block.end(), c.expected.begin());
          if (a != block.end())
            mismatch_offset = at + static_cast<std::uint64_t>(a - block.begin());
        }
      }
      if (mismatch_offset) {
        set_check_condition(
            t, make_sense(sense_key::miscompare, asc::miscompare_during_verify, mismatch_offset));
      }
    }
  }
  release(c);
  t.on_complete(t);  // last: it may destroy this unit
}

}  // namespace strata::scsi
