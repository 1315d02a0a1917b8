// Building blocks for decorator devices that hold requests for a while:
// a pool of per-request slots and a queue of deadlines on one timer.
#pragma once

#include <array>
#include <deque>
#include <functional>
#include <queue>
#include <vector>

#include "raid/device/clock.h"

namespace strata::device {

// Per-request state for a decorator. Grows to the largest number of requests
// ever in flight at once and stays there, so a steady load allocates nothing.
// Slots never move.
template <class Slot>
class slot_pool {
 public:
  Slot& acquire() {
    if (free_.empty()) {
      all_.emplace_back();
      return all_.back();
    }
    Slot* s = free_.back();
    free_.pop_back();
    return *s;
  }
  void release(Slot& s) { free_.push_back(&s); }
  std::size_t in_use() const noexcept { return all_.size() - free_.size(); }

 private:
  std::deque<Slot> all_;
  std::vector<Slot*> free_;
};

// Items that fall due at given times, handed back in deadline order (equal
// deadlines in push order) through one timer of the injected clock.
template <class Item>
class deadline_queue {
 public:
  deadline_queue(clock& c, boost::asio::any_io_executor executor, std::function<void(Item&)> on_due)
      : clock_(c),
        on_due_(std::move(on_due)),
        timer_(c.make_timer(std::move(executor), [this] { deliver_due(); })) {}

  void push(time_point deadline, Item& item) {
    const bool new_earliest = heap_.empty() || deadline < heap_.top().deadline;
    heap_.push(entry{deadline, sequence_++, &item});
    if (new_earliest) timer_->arm(deadline);
  }

  bool empty() const noexcept { return heap_.empty(); }
  std::size_t size() const noexcept { return heap_.size(); }

 private:
  struct entry {
    time_point deadline;
    std::uint64_t sequence;
    Item* item;
    bool operator>(const entry& other) const {
      return deadline != other.deadline ? deadline > other.deadline : sequence > other.sequence;
    }
  };

  // Takes up to a batch of due items, re-arms for what remains, then hands
  // the batch out, touching nothing of the queue after that: an item's
  // callback may complete the last request in flight, whose owner may then
  // destroy the device that owns this queue. More due items than a batch
  // leave the timer armed in the past, so the rest follow at once.
  void deliver_due() {
    std::array<Item*, 64> due;
    std::size_t count = 0;
    const time_point now = clock_.now();
    while (count < due.size() && !heap_.empty() && heap_.top().deadline <= now) {
      due[count++] = heap_.top().item;
      heap_.pop();
    }
    if (!heap_.empty()) timer_->arm(heap_.top().deadline);
    const std::function<void(Item&)> on_due = on_due_;
    for (std::size_t i = 0; i < count; ++i) on_due(*due[i]);
  }

  clock& clock_;
  std::function<void(Item&)> on_due_;
  std::priority_queue<entry, std::vector<entry>, std::greater<>> heap_;
  std::uint64_t sequence_ = 0;
  std::unique_ptr<timer> timer_;
};

}  // namespace strata::device
