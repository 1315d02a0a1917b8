// The one clock that model devices, fault delays (and later heat decay, the
// migrator and failover timers) read time through, so the same code sleeps
// for real in the demo and in benchmarks and runs in simulated time in tests.
//
// real_clock: std::chrono::steady_clock, timers on Asio steady_timers.
// virtual_clock: time stands still until the test advances it; advancing
//   fires due timers by posting their callbacks to their executors.
//
// Threads: a clock's timers are used from their executor's thread. A
// virtual_clock, its timers and the loop that runs them share one thread.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>

namespace strata::device {

using time_point = std::chrono::steady_clock::time_point;
using duration = std::chrono::nanoseconds;

// A one-shot timer with a fixed callback, re-armable at will. The callback
// runs on the executor the timer was made with, never inside arm().
class timer {
 public:
  virtual ~timer() = default;
  // Fires once at `deadline` (at once if it has passed), replacing any
  // earlier arming that has not fired.
  virtual void arm(time_point deadline) noexcept = 0;
  virtual void cancel() noexcept = 0;
};

class clock {
 public:
  virtual ~clock() = default;
  virtual time_point now() const noexcept = 0;
  // Destroying the timer cancels it; its callback never runs afterwards.
  virtual std::unique_ptr<timer> make_timer(boost::asio::any_io_executor executor,
                                            std::function<void()> on_expiry) = 0;
};

class real_clock final : public clock {
 public:
  time_point now() const noexcept override { return std::chrono::steady_clock::now(); }
  std::unique_ptr<timer> make_timer(boost::asio::any_io_executor executor,
                                    std::function<void()> on_expiry) override;
};

class virtual_clock final : public clock {
 public:
  time_point now() const noexcept override { return now_; }
  std::unique_ptr<timer> make_timer(boost::asio::any_io_executor executor,
                                    std::function<void()> on_expiry) override;

  // The earliest armed deadline, if any timer is armed.
  std::optional<time_point> next_deadline() const;
  // Moves time forward to `t` (never back) and fires every timer due by
  // then, in deadline order.
  void advance_to(time_point t);
  void advance_by(duration d) { advance_to(now_ + d); }

 private:
  class virtual_timer;
  struct armed {
    time_point deadline;
    std::uint64_t sequence;  // equal deadlines fire in arming order
    virtual_timer* timer;
    auto operator<=>(const armed&) const = default;
  };
  void disarm(virtual_timer& t);

  time_point now_{};
  std::uint64_t next_sequence_ = 0;
  std::set<armed> armed_;
};

}  // namespace strata::device
