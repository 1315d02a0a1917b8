#include "raid/membership_log.h"

#include <boost/asio/post.hpp>
#include <random>

#include "raid/superblock_io.h"

namespace strata::raid {

membership_log::membership_log(boost::asio::any_io_executor executor, member_watchdog& watchdog,
                               hooks h)
    : executor_(std::move(executor)),
      watchdog_(watchdog),
      hooks_(std::move(h)),
      self_(std::make_shared<membership_log*>(this)) {
  ticket_.assign(hooks_.members->size(), 0);
  watch_.resize(hooks_.members->size());
}

membership_log::~membership_log() {
  *self_ = nullptr;
  for (watched_io& w : watch_) watchdog_.stop(w);
}

void membership_log::format(std::function<void(std::error_code)> done) {
  std::random_device random;
  for (auto& byte : group_id_) byte = static_cast<std::uint8_t>(random());
  events_ = 0;
  updating_ = false;
  after_.push_back(std::move(done));
  ++events_;
  start_update();
}

void membership_log::adopt(const std::array<std::uint8_t, 16>& group_id, std::uint64_t events) {
  group_id_ = group_id;
  events_ = events;
}

void membership_log::changed() {
  if (!formatted()) return;  // nothing to record
  ++events_;
  if (updating_) {
    again_ = true;
    return;
  }
  start_update();
}

void membership_log::start_update() {
  updating_ = true;
  pending_ = 1;
  const auto& members = *hooks_.members;
  for (unsigned m = 0; m < members.size(); ++m) {
    // A member being rebuilt gets its superblock when it is whole: until
    // then an assembly must not take it for current.
    if (!hooks_.holds_metadata(m)) continue;
    ++pending_;
    const std::uint64_t ticket = ++tickets_issued_;
    ticket_[m] = ticket;
    watchdog_.start(watch_[m], m, members[m]);
    superblock sb = hooks_.describe(m);
    sb.group_id = group_id_;
    sb.events = events_;
    write_superblock(*members[m], sb, [self = self_, m, ticket](std::error_code ec) {
      if (membership_log* log = *self) log->member_written(m, ticket, ec);
    });
  }
  if (--pending_ == 0) {
    boost::asio::post(executor_, [self = self_] {
      if (membership_log* log = *self) log->update_done();
    });
  }
}

void membership_log::member_written(unsigned m, std::uint64_t ticket, std::error_code ec) {
  if (ticket_[m] != ticket) return;  // the member failed meanwhile: not waited for
  ticket_[m] = 0;
  watchdog_.stop(watch_[m]);
  // A member that cannot record membership is not a member; its failure is
  // recorded by another round, as this one is in flight.
  if (ec) hooks_.write_failed(m);
  if (--pending_ == 0) update_done();
}

void membership_log::forget(unsigned m) {
  if (m >= ticket_.size() || ticket_[m] == 0) return;
  ticket_[m] = 0;
  watchdog_.stop(watch_[m]);
  if (--pending_ == 0) {
    boost::asio::post(executor_, [self = self_] {
      if (membership_log* log = *self) log->update_done();
    });
  }
}

void membership_log::update_done() {
  if (again_) {
    again_ = false;
    start_update();
    return;
  }
  updating_ = false;
  const std::error_code result = hooks_.outcome();
  auto waiters = std::move(after_);
  after_.clear();
  auto held = std::move(held_);
  held_.clear();
  for (auto& waiter : waiters) waiter(result);
  for (auto& [req, ec] : held) device::complete(*req, ec);
}

void membership_log::report_after_record(std::function<void(std::error_code)> done,
                                         std::error_code result) {
  if (!done) return;
  if (formatted()) {
    // Work that succeeded is done only once recorded: a member rebuilt
    // whose superblock never landed is not a member after a restart.
    after([done = std::move(done), result](std::error_code recorded) {
      done(result ? result : recorded);
    });
  } else {
    boost::asio::post(executor_, [done = std::move(done), result] { done(result); });
  }
}

bool membership_log::hold(device::request& req, std::error_code result) {
  if (!updating_) return false;
  held_.emplace_back(&req, result);
  return true;
}

}  // namespace strata::raid
