#include "target/scsi/task_set.h"

#include <cassert>

namespace strata::scsi {

bool task_set::may_start(const task& t) const noexcept {
  switch (t.attribute) {
    case task_attribute::head_of_queue:
      return true;
    case task_attribute::ordered:
      return !ordered_running_ && unordered_running_ == 0;
    case task_attribute::simple:
      break;
  }
  return !ordered_running_;
}

void task_set::count_running(const task& t) noexcept {
  if (t.attribute == task_attribute::ordered) {
    assert(!ordered_running_);
    ordered_running_ = true;
  } else {
    ++unordered_running_;
  }
}

bool task_set::enter(task& t) noexcept {
  // Nothing passes a held task but HEAD OF QUEUE: held ones are older.
  if ((held_count_ == 0 || t.attribute == task_attribute::head_of_queue) && may_start(t)) {
    count_running(t);
    return true;
  }
  t.task_set_state.next_held = nullptr;
  (held_tail_ != nullptr ? held_tail_->task_set_state.next_held : held_head_) = &t;
  held_tail_ = &t;
  ++held_count_;
  return false;
}

void task_set::leave(const task& t) noexcept {
  if (t.attribute == task_attribute::ordered) {
    assert(ordered_running_);
    ordered_running_ = false;
  } else {
    assert(unordered_running_ > 0);
    --unordered_running_;
  }
}

task* task_set::next_enabled() noexcept {
  task* t = held_head_;
  if (t == nullptr || !may_start(*t)) return nullptr;
  held_head_ = t->task_set_state.next_held;
  if (held_head_ == nullptr) held_tail_ = nullptr;
  t->task_set_state.next_held = nullptr;
  --held_count_;
  count_running(*t);
  return t;
}

}  // namespace strata::scsi
