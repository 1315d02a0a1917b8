#include "raid/write_intent.h"

#include <algorithm>
#include <boost/asio/post.hpp>

#include "raid/superblock_io.h"

namespace strata::raid {
namespace {

// Bit r is bit r % 8 of byte r / 8.
bool bit(const std::vector<std::byte>& bits, std::uint64_t i) noexcept {
  return (static_cast<unsigned>(bits[i / 8]) >> (i % 8)) & 1u;
}

void set_bit(std::vector<std::byte>& bits, std::uint64_t i, bool on) noexcept {
  const auto mask = static_cast<std::byte>(1u << (i % 8));
  bits[i / 8] = on ? (bits[i / 8] | mask) : (bits[i / 8] & ~mask);
}

}  // namespace

write_intent::write_intent(boost::asio::any_io_executor executor, member_watchdog& watchdog,
                           hooks h)
    : executor_(std::move(executor)),
      watchdog_(watchdog),
      hooks_(std::move(h)),
      self_(std::make_shared<write_intent*>(this)) {
  ticket_.assign(hooks_.members->size(), 0);
  watch_.resize(hooks_.members->size());
}

write_intent::~write_intent() {
  *self_ = nullptr;
  for (watched_io& w : watch_) watchdog_.stop(w);
}

std::uint64_t write_intent::bytes_for(std::uint64_t regions, std::uint64_t block_size) noexcept {
  return ((regions + 7) / 8 + block_size - 1) / block_size * block_size;
}

void write_intent::configure(std::uint64_t offset_blocks, std::uint64_t regions,
                             std::uint64_t block_size) {
  offset_blocks_ = offset_blocks;
  regions_ = regions;
  bytes_ = regions > 0 ? bytes_for(regions, block_size) : 0;
  wanted_.assign(bytes_, std::byte{0});
  durable_ = wanted_;
  writing_ = wanted_;
  set_.clear();
  writes_.assign(regions, 0);
  started_epoch_.assign(regions, 0);
  done_epoch_.assign(regions, 0);
}

void write_intent::begin(std::uint64_t region) {
  ++writes_[region];
  started_epoch_[region] = flush_epoch_;
  if (!bit(wanted_, region)) {
    set_bit(wanted_, region, true);
    set_.push_back(region);
  }
}

void write_intent::end(std::uint64_t region) {
  --writes_[region];
  done_epoch_[region] = flush_epoch_;
}

bool write_intent::durable(std::uint64_t region) const noexcept {
  // On disk, and not about to be cleared by the round in flight.
  return bit(durable_, region) && (!write_in_flight_ || bit(writing_, region));
}

void write_intent::wait(std::uint64_t region, void* op) {
  waiters_.emplace_back(region, op);
  if (write_in_flight_) {
    again_ = true;
  } else {
    start_round();
  }
}

// Writes the wanted image to every metadata member, each write followed by
// a flush; the round is done when all have answered (or failed out).
void write_intent::start_round() {
  write_in_flight_ = true;
  again_ = false;
  writing_ = wanted_;
  pending_ = 1;
  const auto& members = *hooks_.members;
  for (unsigned m = 0; m < members.size(); ++m) {
    if (!hooks_.holds_metadata(m)) continue;
    ++pending_;
    const std::uint64_t ticket = ++tickets_issued_;
    ticket_[m] = ticket;
    watchdog_.start(watch_[m], m, members[m]);
    write_reserved(*members[m], offset_blocks_, writing_,
                   [self = self_, m, ticket](std::error_code ec) {
                     if (write_intent* w = *self) w->member_written(m, ticket, ec);
                   });
  }
  if (--pending_ == 0)
    boost::asio::post(executor_, [self = self_] {
      if (write_intent* w = *self) w->round_done();
    });
}

void write_intent::member_written(unsigned m, std::uint64_t ticket, std::error_code ec) {
  if (ticket_[m] != ticket) return;  // the member failed meanwhile: not waited for
  ticket_[m] = 0;
  watchdog_.stop(watch_[m]);
  if (ec) hooks_.write_failed(m);  // its forget() finds no ticket: counted once, here
  if (--pending_ == 0) round_done();
}

void write_intent::forget(unsigned m) {
  if (m >= ticket_.size() || ticket_[m] == 0) return;
  ticket_[m] = 0;
  watchdog_.stop(watch_[m]);
  if (--pending_ == 0)
    boost::asio::post(executor_, [self = self_] {
      if (write_intent* w = *self) w->round_done();
    });
}

void write_intent::round_done() {
  write_in_flight_ = false;
  if (!round_left_member_out_) durable_ = writing_;
  round_left_member_out_ = false;
  if (again_ || wanted_ != durable_) start_round();
  auto after = std::move(after_round_);
  after_round_.clear();
  // Writes whose bits are on disk go ahead; the rest wait for the next round.
  std::vector<std::pair<std::uint64_t, void*>> waiting;
  waiting.swap(waiters_);
  for (auto& [region, op] : waiting) {
    if (durable(region)) {
      hooks_.resume(op);
    } else {
      waiters_.emplace_back(region, op);
    }
  }
  for (auto& f : after) f();
}

void write_intent::flush_done(std::uint64_t epoch, bool eager) {
  if (regions_ == 0) return;
  bool changed = false;
  for (std::size_t i = 0; i < set_.size();) {
    const std::uint64_t r = set_[i];
    // Every write to the region ended before this flush started, and (not
    // eager) none started since the flush before it: a hot region keeps
    // its bit instead of costing a bitmap write per flush.
    const bool covered = writes_[r] == 0 && done_epoch_[r] < epoch;
    const bool idle = eager || started_epoch_[r] + 1 < epoch;
    if (covered && idle) {
      set_bit(wanted_, r, false);
      set_[i] = set_.back();
      set_.pop_back();
      changed = true;
    } else {
      ++i;
    }
  }
  if (!changed) return;
  if (write_in_flight_) {
    again_ = true;
  } else {
    start_round();
  }
}

void write_intent::member_joined() {
  if (regions_ == 0) return;
  std::fill(durable_.begin(), durable_.end(), std::byte{0});
  if (write_in_flight_) {
    again_ = true;
    round_left_member_out_ = true;  // it cannot make anything durable on every member
  } else {
    start_round();
  }
}

void write_intent::write_now(std::function<void()> then) {
  if (write_in_flight_) {
    again_ = true;  // the next round writes the image as it is now
  } else {
    start_round();
  }
  when_settled(std::move(then));
}

void write_intent::mark_clean(device::block_device& group,
                              std::function<void(std::error_code)> done) {
  if (cleaning_) {
    boost::asio::post(executor_, [done = std::move(done)] { done(errc::invalid_argument); });
    return;
  }
  cleaning_ = true;
  clean_done_ = std::move(done);
  clean_req_ = device::request{};
  clean_req_.operation = device::op::flush;
  clean_req_.context = this;
  clean_req_.on_complete = [](device::request& r) noexcept {
    auto& self = *static_cast<write_intent*>(r.context);
    // The flush's completion cleared the bits in memory; done once that is on disk.
    self.when_settled([&self, result = r.result] {
      self.cleaning_ = false;
      auto finished = std::move(self.clean_done_);
      if (finished) finished(result);
    });
  };
  group.submit(clean_req_);
}

void write_intent::when_settled(std::function<void()> then) {
  if (!write_in_flight_) {
    then();
    return;
  }
  after_round_.push_back(
      [this, then = std::move(then)]() mutable { when_settled(std::move(then)); });
}

void write_intent::load(std::function<void(std::vector<std::uint64_t>)> then) {
  if (regions_ == 0) {
    then({});
    return;
  }
  auto pending = std::make_shared<unsigned>(1);
  auto all_read = [this, pending, then = std::move(then)] {
    if (--*pending > 0) return;
    set_.clear();
    for (std::uint64_t r = 0; r < regions_; ++r) {
      if (bit(wanted_, r)) set_.push_back(r);
    }
    // Bits beyond the last region (an all-ones stand-in) mean nothing.
    for (std::uint64_t r = regions_; r < bytes_ * 8; ++r) set_bit(wanted_, r, false);
    durable_ = wanted_;
    then(set_);
  };
  const auto& members = *hooks_.members;
  for (unsigned m = 0; m < members.size(); ++m) {
    if (!hooks_.holds_metadata(m)) continue;
    ++*pending;
    read_reserved(
        *members[m], offset_blocks_, bytes_,
        [self = self_, all_read](std::expected<std::vector<std::byte>, std::error_code> bits) {
          write_intent* w = *self;
          if (w == nullptr) return;
          for (std::size_t i = 0; i < w->wanted_.size(); ++i) {
            w->wanted_[i] |= bits ? (*bits)[i] : std::byte{0xff};
          }
          all_read();
        });
  }
  all_read();
}

}  // namespace strata::raid
