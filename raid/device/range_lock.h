// A lock over ranges of blocks, with one conflict rule: two requests
// conflict when their ranges overlap, unless both only read (shared). A
// request that conflicts with one holding the lock, or with an older one
// waiting for it, waits; it runs once nothing it conflicts with is ahead of
// it. Conflicting requests so run in arrival order, and a stream of one
// kind cannot starve another.
//
// Each request carries its own `range_lock_entry lock_entry` member, so
// locking allocates nothing. Holders and waiters sit in one list per
// bucket, in arrival order. With one bucket any ranges may be locked; with
// more, a range must lie inside one granule (RAID-6 locks a stripe at a
// time), and only the requests in its granule's bucket are compared.
//
// Users: RAID-6's stripe lock (a range of one stripe, every operation
// exclusive) and RAID-1's overlapping writes (one bucket). The 512e
// read-modify-write lock and the SCSI command interlock keep their own
// rules over device::wait_queue.
//
// Threads: one loop's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::device {

struct range_lock_entry {
  std::uint64_t begin = 0;  // [begin, end), in the lock's units
  std::uint64_t end = 0;
  bool shared = false;   // reads only: shares the range with other shared entries
  bool holding = false;  // holds the lock (else waits for it)
  bool linked = false;
  range_lock_entry* prev = nullptr;
  range_lock_entry* next = nullptr;
  range_lock_entry* next_ready = nullptr;  // admitted by release(), not yet run
  void* owner = nullptr;                   // the request this entry is part of
};

template <class T, range_lock_entry T::*Entry>
class range_lock {
 public:
  explicit range_lock(std::size_t buckets = 1, std::uint64_t granule = 1)
      : heads_(buckets, nullptr), tails_(buckets, nullptr), granule_(granule) {}

  // Takes [begin, end) for `t`: true if it holds the range now; false if it
  // waits, and release() of what blocks it will call run(t).
  bool acquire(T& t, std::uint64_t begin, std::uint64_t end, bool shared = false) {
    range_lock_entry& e = t.*Entry;
    e.begin = begin;
    e.end = end;
    e.shared = shared;
    e.next_ready = nullptr;
    e.owner = &t;
    const std::size_t b = bucket(e);
    e.holding = !conflicts_ahead(heads_[b], nullptr, e);
    e.prev = tails_[b];
    e.next = nullptr;
    (e.prev != nullptr ? e.prev->next : heads_[b]) = &e;
    tails_[b] = &e;
    e.linked = true;
    return e.holding;
  }

  bool holds(const T& t) const noexcept { return (t.*Entry).linked && (t.*Entry).holding; }

  // Calls fn(o) for every request ahead of waiting `t` (holding, or
  // waiting before it) that it conflicts with: what `t` waits for.
  template <class Fn>
  void for_each_ahead(T& t, Fn fn) {
    range_lock_entry& e = t.*Entry;
    for (range_lock_entry* o = heads_[bucket(e)]; o != nullptr && o != &e; o = o->next) {
      if (conflict(*o, e)) fn(owner(*o));
    }
  }

  // Gives up `t`'s range, and runs, oldest first, each waiter nothing holds
  // back any more. `run` may acquire and release (it may complete requests):
  // the waiters it frees are run by that inner release.
  template <class Run>
  void release(T& t, Run run) {
    range_lock_entry& e = t.*Entry;
    const std::size_t b = bucket(e);
    unlink(b, e);
    // Admit first, run after: a waiter let through counts as holding for
    // the ones behind it, and running one may change the list.
    range_lock_entry* ready = nullptr;
    range_lock_entry** ready_tail = &ready;
    for (range_lock_entry* w = heads_[b]; w != nullptr; w = w->next) {
      if (w->holding || conflicts_ahead(heads_[b], w, *w)) continue;
      w->holding = true;
      *ready_tail = w;
      ready_tail = &w->next_ready;
    }
    while (ready != nullptr) {
      range_lock_entry* w = ready;
      ready = w->next_ready;
      w->next_ready = nullptr;
      run(owner(*w));
    }
  }

 private:
  static bool conflict(const range_lock_entry& a, const range_lock_entry& b) noexcept {
    return a.begin < b.end && b.begin < a.end && !(a.shared && b.shared);
  }
  // Whether an entry from `from` up to (not including) `stop` conflicts with `e`.
  static bool conflicts_ahead(const range_lock_entry* from, const range_lock_entry* stop,
                              const range_lock_entry& e) noexcept {
    for (const range_lock_entry* o = from; o != nullptr && o != stop; o = o->next) {
      if (o != &e && conflict(*o, e)) return true;
    }
    return false;
  }
  std::size_t bucket(const range_lock_entry& e) const noexcept {
    return static_cast<std::size_t>((e.begin / granule_) % heads_.size());
  }
  void unlink(std::size_t b, range_lock_entry& e) noexcept {
    (e.prev != nullptr ? e.prev->next : heads_[b]) = e.next;
    (e.next != nullptr ? e.next->prev : tails_[b]) = e.prev;
    e.prev = e.next = nullptr;
    e.linked = false;
    e.holding = false;
  }
  static T& owner(range_lock_entry& e) noexcept { return *static_cast<T*>(e.owner); }

  std::vector<range_lock_entry*> heads_;
  std::vector<range_lock_entry*> tails_;
  std::uint64_t granule_;
};

}  // namespace strata::device
