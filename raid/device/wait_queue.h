// The waiters of a range lock, in arrival order: requests that conflict
// with one in flight (or with an older waiter) and must wait for it. The
// queue is intrusive -- each waiter links the next through its own member
// `T* next_waiting` -- so waiting allocates nothing on the per-request
// path. (T may be incomplete where the queue is declared.)
//
// What conflicts is the user's business (the 512e read-modify-write lock
// and the SCSI command interlock each have their own rule; locks whose
// rule is plain overlap use range_lock.h); the queue keeps the order and
// lets through, oldest first, every waiter that nothing blocks any more.
//
// Threads: one loop's; not reentrant (see admit()).
#pragma once

namespace strata::device {

template <class T>
class wait_queue {
 public:
  bool empty() const noexcept { return head_ == nullptr; }

  void push_back(T& waiter) noexcept {
    waiter.next_waiting = nullptr;
    (tail_ != nullptr ? tail_->next_waiting : head_) = &waiter;
    tail_ = &waiter;
  }

  // Whether `conflicts` holds for a waiter queued ahead of `stop` (for
  // every waiter when `stop` is not queued): a newcomer waits behind an
  // older waiter it conflicts with, so that conflicting requests run in
  // arrival order and a stream of one kind cannot starve another.
  template <class Conflicts>
  bool any_ahead_of(const T* stop, Conflicts conflicts) const {
    for (const T* w = head_; w != nullptr && w != stop; w = w->next_waiting) {
      if (conflicts(*w)) return true;
    }
    return false;
  }

  // Takes out, oldest first, each waiter `blocked` no longer holds back,
  // and hands it to `run`. A waiter let through counts as running for the
  // ones behind it (`blocked` sees it so). `run` must not come back into
  // admit() on this queue (it only submits); a caller whose `run` may
  // complete a request, and so admit again, guards against that itself.
  template <class Blocked, class Run>
  void admit(Blocked blocked, Run run) {
    T* previous = nullptr;
    for (T* w = head_; w != nullptr;) {
      T* next = w->next_waiting;
      if (blocked(*w)) {
        previous = w;
      } else {
        (previous != nullptr ? previous->next_waiting : head_) = next;
        if (tail_ == w) tail_ = previous;
        w->next_waiting = nullptr;
        run(*w);
      }
      w = next;
    }
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
};

}  // namespace strata::device
