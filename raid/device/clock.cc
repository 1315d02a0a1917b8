#include "raid/device/clock.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace strata::device {
namespace {

// What a queued callback needs after its timer may be gone: the callback,
// and the arming it belongs to. A callback whose arming has been replaced,
// cancelled or destroyed finds a different generation and does nothing.
struct timer_state {
  std::function<void()> on_expiry;
  std::uint64_t generation = 0;
};

void fire_if_current(const std::shared_ptr<timer_state>& state, std::uint64_t generation) {
  if (state->generation == generation) {
    ++state->generation;  // fired: a second delivery of this arming is stale
    state->on_expiry();
  }
}

class asio_timer final : public timer {
 public:
  asio_timer(boost::asio::any_io_executor executor, std::function<void()> on_expiry)
      : timer_(std::move(executor)),
        state_(std::make_shared<timer_state>(timer_state{std::move(on_expiry), 0})) {}
  ~asio_timer() override { cancel(); }

  void arm(time_point deadline) noexcept override {
    const std::uint64_t generation = ++state_->generation;
    timer_.expires_at(deadline);
    timer_.async_wait([state = state_, generation](boost::system::error_code ec) {
      if (!ec) fire_if_current(state, generation);
    });
  }

  void cancel() noexcept override {
    ++state_->generation;
    timer_.cancel();
  }

 private:
  boost::asio::steady_timer timer_;
  std::shared_ptr<timer_state> state_;
};

}  // namespace

std::unique_ptr<timer> real_clock::make_timer(boost::asio::any_io_executor executor,
                                              std::function<void()> on_expiry) {
  return std::make_unique<asio_timer>(std::move(executor), std::move(on_expiry));
}

class virtual_clock::virtual_timer final : public timer {
 public:
  virtual_timer(virtual_clock& owner, boost::asio::any_io_executor executor,
                std::function<void()> on_expiry)
      : owner_(owner),
        executor_(std::move(executor)),
        state_(std::make_shared<timer_state>(timer_state{std::move(on_expiry), 0})) {}
  ~virtual_timer() override { cancel(); }

  void arm(time_point deadline) noexcept override {
    owner_.disarm(*this);
    ++state_->generation;
    armed_at_ = armed{deadline, owner_.next_sequence_++, this};
    owner_.armed_.insert(*armed_at_);
  }

  void cancel() noexcept override {
    owner_.disarm(*this);
    ++state_->generation;
  }

  // Called by the clock when the deadline is reached: delivery is posted,
  // as a real timer's would be.
  void expire() {
    armed_at_.reset();
    boost::asio::post(executor_, [state = state_, generation = state_->generation] {
      fire_if_current(state, generation);
    });
  }

  std::optional<armed> armed_at_;

 private:
  virtual_clock& owner_;
  boost::asio::any_io_executor executor_;
  std::shared_ptr<timer_state> state_;
};

std::unique_ptr<timer> virtual_clock::make_timer(boost::asio::any_io_executor executor,
                                                 std::function<void()> on_expiry) {
  return std::make_unique<virtual_timer>(*this, std::move(executor), std::move(on_expiry));
}

void virtual_clock::disarm(virtual_timer& t) {
  if (t.armed_at_) {
    armed_.erase(*t.armed_at_);
    t.armed_at_.reset();
  }
}

std::optional<time_point> virtual_clock::next_deadline() const {
  if (armed_.empty()) return std::nullopt;
  return armed_.begin()->deadline;
}

void virtual_clock::advance_to(time_point t) {
  while (!armed_.empty() && armed_.begin()->deadline <= t) {
    const armed next = *armed_.begin();
    armed_.erase(armed_.begin());
    if (next.deadline > now_) now_ = next.deadline;
    next.timer->expire();
  }
  if (t > now_) now_ = t;
}

}  // namespace strata::device
