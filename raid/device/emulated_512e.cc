#include "raid/device/emulated_512e.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <new>

#include "raid/device/buffers.h"

namespace strata::device {

// The state of one request in flight. A request becomes at most three
// inner requests at once: the head and tail reads of a read-modify-write,
// or a discard's head write, middle discard and tail write.
struct emulated_512e::slot {
  emulated_512e* owner = nullptr;
  request* outer = nullptr;
  // The 4 KiB blocks the request touches: [first_physical, end_physical).
  std::uint64_t first_physical = 0;
  std::uint64_t end_physical = 0;
  bool head_partial = false;  // its first 4 KiB block is covered only in part
  bool tail_partial = false;  // its last one
  bool bounced = false;       // data goes through `bounce`, not the caller's buffers
  bool rmw = false;           // reads partial 4 KiB blocks before writing them
  bool locks = false;         // changes the medium: holds the range lock
  bool running = false;       // issued: counts against requests that start after it
  phase current = phase::transferring;
  unsigned pending = 0;
  std::error_code error;
  aligned_buffer bounce;
  std::array<request, 3> inner{};
  std::array<iovec, 3> segments{};
  slot* next_waiting = nullptr;

  void on_done(request& r) noexcept { owner->on_inner_done(r); }
  std::uint64_t physical_count() const noexcept { return end_physical - first_physical; }
  // Where the tail's 4 KiB block sits in `bounce`: after the whole range
  // for reads and writes; in the second 4 KiB for a discard, which bounces
  // only its partial blocks.
  std::size_t tail_offset_bytes() const noexcept {
    return outer->operation == op::discard ? physical_block_bytes
                                           : (physical_count() - 1) * physical_block_bytes;
  }
  // Where the caller's first block sits in `bounce` (reads and writes).
  std::size_t data_offset_bytes() const noexcept {
    return (outer->lba % blocks_per_physical) * logical_block_bytes;
  }
  bool single_physical() const noexcept { return physical_count() == 1; }
};

emulated_512e::emulated_512e(block_device& inner) : inner_(inner), rejected_(inner.executor()) {
  assert(inner.geometry().logical_block_size_bytes == physical_block_bytes);
  geometry_.logical_block_size_bytes = logical_block_bytes;
  geometry_.buffer_alignment_bytes = logical_block_bytes;
  geometry_.max_segments = inner.geometry().max_segments;
  geometry_.block_count = inner.geometry().block_count * blocks_per_physical;
}

emulated_512e::~emulated_512e() {
  assert(std::all_of(slots_.begin(), slots_.end(),
                     [](const auto& s) { return s->outer == nullptr; }) &&
         "emulated_512e destroyed with requests in flight");
}

const block_geometry& emulated_512e::geometry() const noexcept {
  // The inner device may grow (a thin volume); on the loop thread only, as
  // every call here is.
  geometry_.block_count = inner_.geometry().block_count * blocks_per_physical;
  return geometry_;
}

allocation_run emulated_512e::allocation_at(std::uint64_t lba,
                                            std::uint64_t max_blocks) const noexcept {
  const std::uint64_t first = lba / blocks_per_physical;
  const std::uint64_t end = (lba + max_blocks + blocks_per_physical - 1) / blocks_per_physical;
  const allocation_run run = inner_.allocation_at(first, end - first);
  const std::uint64_t run_end_lba =
      (first + std::max<std::uint64_t>(run.block_count, 1)) * blocks_per_physical;
  return {run.state, std::min(max_blocks, run_end_lba - lba)};
}

emulated_512e::slot& emulated_512e::acquire() {
  if (free_.empty()) {
    free_.reserve(slots_.size() + 1);  // so that release() cannot throw
    slots_.push_back(std::make_unique<slot>());
    slot& s = *slots_.back();
    s.owner = this;
    for (request& r : s.inner) r.bind<&slot::on_done>(&s);
    return s;
  }
  slot* s = free_.back();
  free_.pop_back();
  return *s;
}

void emulated_512e::release(slot& s) noexcept {
  if (s.rmw) --rmw_holders_;
  s.outer = nullptr;
  s.running = false;
  s.rmw = false;
  s.locks = false;
  s.bounced = false;
  s.error = {};
  s.pending = 0;
  free_.push_back(&s);
  // Its range is free: requests that waited for it may go (they only submit).
  waiting_.admit(
      [this](const slot& w) { return blocked(w); },
      [this](slot& w) { run(w); });  // only submits: nothing completes, so the queue stays as it is
}

void emulated_512e::submit(request& req) noexcept {
  if (const std::error_code ec = validate(geometry(), req))
    return rejected_.complete_later(req, ec);
  slot* acquired = nullptr;
  try {
    acquired = &acquire();
  } catch (const std::bad_alloc&) {
    return rejected_.complete_later(req, errc::busy);
  }
  slot& s = *acquired;
  s.outer = &req;
  s.current = phase::transferring;
  if (req.operation == op::flush) return start(s);

  const std::uint64_t end_lba = req.lba + req.block_count;
  s.first_physical = req.lba / blocks_per_physical;
  s.end_physical = (end_lba + blocks_per_physical - 1) / blocks_per_physical;
  s.head_partial = req.lba % blocks_per_physical != 0;
  s.tail_partial = end_lba % blocks_per_physical != 0;
  const bool whole_blocks = !s.head_partial && !s.tail_partial;
  // The caller's buffers can go to the inner device as they are when each
  // segment is aligned for it and whole 4 KiB blocks long.
  const std::uint32_t inner_alignment = inner_.geometry().buffer_alignment_bytes;
  const bool buffers_fit = std::all_of(req.buffers.begin(), req.buffers.end(), [&](const iovec& v) {
    return reinterpret_cast<std::uintptr_t>(v.iov_base) % inner_alignment == 0 &&
           v.iov_len % physical_block_bytes == 0;
  });
  s.locks = req.operation != op::read;
  s.rmw = s.locks && !whole_blocks;
  s.bounced = req.operation != op::discard && !(whole_blocks && buffers_fit);
  if (s.bounced || s.rmw) {
    const std::size_t needed_bytes = req.operation == op::discard
                                         ? 2 * physical_block_bytes
                                         : s.physical_count() * physical_block_bytes;
    if (s.bounce.size() < needed_bytes) {
      try {
        s.bounce = aligned_buffer(needed_bytes,
                                  std::max<std::size_t>(physical_block_bytes, inner_alignment));
      } catch (const std::bad_alloc&) {
        s.rmw = false;  // not counted yet
        release(s);
        return rejected_.complete_later(req, errc::busy);
      }
    }
  }
  if (s.rmw) {
    ++rmw_holders_;
    ++read_modify_writes_;
  }
  start(s);
}

// ---------------------------------------------------------------------------
// The range lock. Two requests conflict when both change the medium, their
// 4 KiB ranges overlap, and either does a read-modify-write. A request
// waits if it conflicts with one running or one waiting ahead of it, so
// that conflicting requests run in arrival order.

namespace {
bool overlap(std::uint64_t a_first, std::uint64_t a_end, std::uint64_t b_first,
             std::uint64_t b_end) noexcept {
  return a_first < b_end && b_first < a_end;
}
}  // namespace

bool emulated_512e::blocked(const slot& s) const noexcept {
  auto conflict = [&s](const slot& other) {
    return other.locks && (s.rmw || other.rmw) &&
           overlap(s.first_physical, s.end_physical, other.first_physical, other.end_physical);
  };
  for (const auto& other : slots_) {
    if (other.get() != &s && other->running && conflict(*other)) return true;
  }
  return waiting_.any_ahead_of(&s, conflict);
}

void emulated_512e::start(slot& s) noexcept {
  if (s.locks && rmw_holders_ != 0 && blocked(s)) {
    waiting_.push_back(s);
    return;
  }
  run(s);
}

void emulated_512e::run(slot& s) noexcept {
  s.running = true;
  if (s.rmw || (s.bounced && s.outer->operation == op::read)) return issue_fetch(s);
  if (s.bounced) {  // a write of whole blocks from buffers the inner device cannot take
    copy_from_buffers(s.outer->buffers, 0, s.bounce.data() + s.data_offset_bytes(),
                      s.outer->block_count * logical_block_bytes);
  }
  issue_transfer(s);
}

// ---------------------------------------------------------------------------

void emulated_512e::issue_inner(slot& s, op operation, std::uint64_t physical_lba,
                                std::uint64_t physical_blocks, std::byte* data) noexcept {
  const unsigned i = s.pending++;
  assert(i < s.inner.size());
  request& r = s.inner[i];
  r.operation = operation;
  r.priority = s.outer->priority;
  r.lba = physical_lba;
  r.block_count = physical_blocks;
  r.result = {};
  if (data != nullptr) {
    s.segments[i] = iovec{data, physical_blocks * physical_block_bytes};
    r.buffers = {&s.segments[i], 1};
  } else {
    r.buffers = {};
  }
  inner_.submit(r);
}

void emulated_512e::issue_fetch(slot& s) noexcept {
  s.current = phase::fetching;
  const request& req = *s.outer;
  if (req.operation == op::read) {
    // Every 4 KiB block it touches, into the bounce buffer.
    return issue_inner(s, op::read, s.first_physical, s.physical_count(), s.bounce.data());
  }
  // A write or discard: only the partial 4 KiB blocks at its ends. A
  // request inside one 4 KiB block reads it once, as its head.
  if (s.head_partial) issue_inner(s, op::read, s.first_physical, 1, s.bounce.data());
  if (s.tail_partial && !(s.head_partial && s.single_physical())) {
    issue_inner(s, op::read, s.end_physical - 1, 1, s.bounce.data() + s.tail_offset_bytes());
  }
  assert(s.pending > 0);
}

void emulated_512e::issue_transfer(slot& s) noexcept {
  s.current = phase::transferring;
  request& req = *s.outer;
  if (req.operation == op::flush) {
    return issue_inner(s, op::flush, 0, 0, nullptr);
  }
  if (req.operation == op::read) {  // whole blocks, the caller's buffers as they are
    request& r = s.inner[s.pending++];
    copy_io(req, r);
    r.lba = s.first_physical;
    r.block_count = s.physical_count();
    r.result = {};
    return inner_.submit(r);
  }
  if (req.operation == op::write) {
    if (s.bounced)
      return issue_inner(s, op::write, s.first_physical, s.physical_count(), s.bounce.data());
    request& r = s.inner[s.pending++];
    copy_io(req, r);
    r.lba = s.first_physical;
    r.block_count = s.physical_count();
    r.result = {};
    return inner_.submit(r);
  }
  // A discard: zeros over the partial ends (read already), the whole
  // 4 KiB blocks between them deallocated.
  const std::uint64_t end_lba = req.lba + req.block_count;
  const std::uint64_t first_whole = s.head_partial ? s.first_physical + 1 : s.first_physical;
  const std::uint64_t end_whole = s.tail_partial ? s.end_physical - 1 : s.end_physical;
  if (s.head_partial) {
    const std::uint64_t from = req.lba % blocks_per_physical;
    const std::uint64_t to =
        s.single_physical() && s.tail_partial ? end_lba % blocks_per_physical : blocks_per_physical;
    std::memset(s.bounce.data() + from * logical_block_bytes, 0, (to - from) * logical_block_bytes);
    issue_inner(s, op::write, s.first_physical, 1, s.bounce.data());
  }
  if (s.tail_partial && !(s.head_partial && s.single_physical())) {
    std::byte* tail = s.bounce.data() + s.tail_offset_bytes();
    std::memset(tail, 0, (end_lba % blocks_per_physical) * logical_block_bytes);
    issue_inner(s, op::write, s.end_physical - 1, 1, tail);
  }
  if (first_whole < end_whole)
    issue_inner(s, op::discard, first_whole, end_whole - first_whole, nullptr);
  assert(s.pending > 0);
}

void emulated_512e::on_inner_done(request& inner) noexcept {
  slot& s = *static_cast<slot*>(inner.context);
  if (inner.result && !s.error) s.error = inner.result;
  if (--s.pending == 0) phase_done(s);
}

void emulated_512e::phase_done(slot& s) noexcept {
  if (s.error || s.current == phase::transferring) return finish(s);
  request& req = *s.outer;
  if (req.operation == op::read) {
    copy_to_buffers(req.buffers, 0, s.bounce.data() + s.data_offset_bytes(),
                    req.block_count * logical_block_bytes);
    return finish(s);
  }
  if (req.operation == op::write) {
    copy_from_buffers(req.buffers, 0, s.bounce.data() + s.data_offset_bytes(),
                      req.block_count * logical_block_bytes);
  }
  issue_transfer(s);
}

void emulated_512e::finish(slot& s) noexcept {
  request& req = *s.outer;
  const std::error_code result = s.error;
  release(s);
  complete(req, result);  // last: it may destroy this device
}

}  // namespace strata::device
