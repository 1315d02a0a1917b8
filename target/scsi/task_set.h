// A logical unit's task set: which of its tasks may run now, by their SAM-5
// task attributes (task.h). One set per logical unit, shared by every I_T
// nexus (the control mode page's TST 000b), as Linux-IO keeps it per
// se_device (target_core_transport.c, target_handle_task_attr).
//
// - SIMPLE tasks run at once and together, unless an ORDERED task is
//   running or any task is held: then they wait their turn.
// - An ORDERED task runs once every task older than it has completed, and
//   no newer SIMPLE or ORDERED task starts until it has completed.
// - A HEAD OF QUEUE task runs at once, even past a running ORDERED task;
//   an ORDERED task that arrives after it waits for it, as for any older
//   task.
//
// Held tasks wait in arrival order, linked through the tasks themselves
// (task::task_set_state): nothing is allocated. A task with no ORDERED one
// around costs two counter updates. Threads: the unit's loop only.
#pragma once

#include <cstddef>

#include "target/scsi/task.h"

namespace strata::scsi {

class task_set {
 public:
  // `t` enters the set: true if it may run now (it counts as running),
  // false if it is held (next_enabled() hands it out in its turn).
  bool enter(task& t) noexcept;
  // `t`, which was running, has completed.
  void leave(const task& t) noexcept;
  // The oldest held task if its turn has come (it counts as running from
  // now), else null. Call until null after each leave().
  task* next_enabled() noexcept;

  std::size_t held() const noexcept { return held_count_; }
  // Tasks entered and not yet left: running or held.
  std::size_t size() const noexcept {
    return unordered_running_ + (ordered_running_ ? 1 : 0) + held_count_;
  }

 private:
  bool may_start(const task& t) const noexcept;
  void count_running(const task& t) noexcept;

  std::size_t unordered_running_ = 0;  // SIMPLE and HEAD OF QUEUE
  bool ordered_running_ = false;
  task* held_head_ = nullptr;
  task* held_tail_ = nullptr;
  std::size_t held_count_ = 0;
};

}  // namespace strata::scsi
