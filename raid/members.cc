#include "raid/members.h"

#include <algorithm>
#include <string>

namespace strata::raid {

std::optional<error> check_members(std::span<device::block_device* const> members,
                                   unsigned min_members, unsigned max_members,
                                   std::string_view kind) {
  const std::size_t m = members.size();
  if (m < min_members || m > max_members) {
    return make_error(errc::invalid_argument,
                      std::string(kind) + " needs " + std::to_string(min_members) + " to " +
                          std::to_string(max_members) + " members, not " + std::to_string(m));
  }
  for (std::size_t i = 0; i < m; ++i) {
    if (members[i] == nullptr) {
      return make_error(errc::invalid_argument, "member " + std::to_string(i) + " is missing");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (members[j] == members[i]) {
        return make_error(errc::invalid_argument, "member " + std::to_string(i) + " is member " +
                                                      std::to_string(j) + " again");
      }
    }
  }
  const device::block_geometry& first = members[0]->geometry();
  for (std::size_t i = 1; i < m; ++i) {
    const device::block_geometry& g = members[i]->geometry();
    if (g.logical_block_size_bytes != first.logical_block_size_bytes) {
      return make_error(errc::invalid_argument, "member " + std::to_string(i) + " has " +
                                                    std::to_string(g.logical_block_size_bytes) +
                                                    "-byte blocks, member 0 has " +
                                                    std::to_string(first.logical_block_size_bytes));
    }
    if (g.block_count != first.block_count) {
      return make_error(errc::invalid_argument,
                        "member " + std::to_string(i) + " has " + std::to_string(g.block_count) +
                            " blocks, member 0 has " + std::to_string(first.block_count) +
                            ": members must be the same size");
    }
    if (members[i]->executor() != members[0]->executor()) {
      return make_error(errc::invalid_argument,
                        "member " + std::to_string(i) + " lives on another loop");
    }
  }
  return std::nullopt;
}

member_set::member_set(std::vector<device::block_device*> devices,
                       const member_set_options& options, hooks h)
    : devices_(std::move(devices)),
      health_(devices_.size()),
      budget_(options.budget),
      read_error_limit_(options.read_error_limit),
      on_member_event_(options.on_member_event),
      hooks_(std::move(h)),
      watchdog_(options.clock, options.timeout, devices_[0]->executor(),
                [this](unsigned member, const device::block_device* device) {
                  on_overdue(member, device);
                }),
      deferred_(devices_[0]->executor()),
      log_(devices_[0]->executor(), watchdog_,
           membership_log::hooks{
               .members = &devices_,
               .holds_metadata = [this](unsigned m) { return whole(m); },
               .describe = [this](unsigned m) { return hooks_.describe(m); },
               .write_failed = [this](unsigned m) { fail(m, member_failure::metadata); },
               .outcome =
                   [this] {
                     return group_failed() ? make_error_code(errc::device_failed)
                                           : std::error_code{};
                   },
           }) {}

unsigned member_set::failed_count() const noexcept {
  return static_cast<unsigned>(
      std::count_if(health_.begin(), health_.end(),
                    [](const member_health& h) { return h.failure != member_failure::none; }));
}

unsigned member_set::whole_count() const noexcept {
  unsigned whole_members = 0;
  for (unsigned m = 0; m < size(); ++m) whole_members += whole(m) ? 1 : 0;
  return whole_members;
}

bool member_set::group_failed() const noexcept {
  const unsigned rebuilding = budget_.rebuilding_counts_as_lost && rebuilding_ != none ? 1 : 0;
  return failed_count() + rebuilding > budget_.members_lost_survived;
}

void member_set::fail(unsigned member, member_failure reason) {
  if (member >= size() || failed(member)) return;
  health_[member].failure = reason;
  log_.forget(member);
  if (intent_ != nullptr) intent_->forget(member);
  if (hooks_.failed) hooks_.failed(member);
  log_.changed();
  if (on_member_event_) on_member_event_(member_event{member, reason, log_.events()});
}

void member_set::note_error(unsigned member, const device::block_device* answered,
                            device::op operation, std::error_code ec) {
  if (!ec || devices_[member] != answered) return;
  if (ec == errc::no_space) {
    ++health_[member].no_space_errors;
  } else if (ec == errc::device_failed) {
    fail(member, member_failure::device_failed);
  } else if (operation == device::op::write) {
    fail(member, member_failure::write_error);
  } else if (operation == device::op::flush) {
    fail(member, member_failure::flush_error);
  } else if (operation == device::op::read && ec != errc::timed_out &&
             ++health_[member].read_errors > read_error_limit_) {
    fail(member, member_failure::read_errors);
  }
}

void member_set::on_overdue(unsigned member, const device::block_device* device) {
  deferring_acks_ = true;
  if (devices_[member] == device) {
    ++health_[member].timeouts;
    fail(member, member_failure::timed_out);
  }
  watchdog_.abandon_all(device);
  deferring_acks_ = false;
}

void member_set::begin_rebuild(unsigned member, device::block_device* spare) {
  devices_[member] = spare;
  health_[member] = {};
  rebuilding_ = member;
}

void member_set::end_rebuild(std::error_code result, std::function<void(std::error_code)> done) {
  const unsigned member = rebuilding_;
  rebuilding_ = none;
  log_.report_after_record(std::move(done), result);
  if (result) {
    health_[member].failure = member_failure::none;  // so that fail() records it anew
    fail(member, member_failure::rebuild);           // only partly rebuilt: not to be trusted
  } else {
    if (intent_ != nullptr) intent_->member_joined();  // it holds the bitmap from now on
    log_.changed();                                    // a whole member now: its superblock says so
  }
}

void member_set::assembled(std::span<const member_failure> failures,
                           std::vector<std::unique_ptr<device::block_device>> stand_ins) {
  for (unsigned m = 0; m < size(); ++m) health_[m].failure = failures[m];
  stand_ins_ = std::move(stand_ins);
}

// ---- Flushes ----

void member_set::flush(device::request& outer) {
  flush_op& f = flushes_.acquire();
  f.set = this;
  f.outer = &outer;
  f.result = {};
  f.epoch = intent_ != nullptr ? intent_->flush_started() : 0;
  f.eager = intent_ != nullptr && intent_->is_clean_flush(outer);
  f.members.resize(size());
  f.pending = 1;  // held until every member's flush is submitted
  for (unsigned m = 0; m < size(); ++m) {
    if (failed(m)) continue;
    member_flush& mf = f.members[m];
    mf.flush = &f;
    mf.member = m;
    mf.req = device::request{};
    mf.req.operation = device::op::flush;
    mf.req.priority = outer.priority;
    mf.req.context = &mf;
    mf.req.on_complete = &member_set::on_flush_done;
    mf.watch.owner = &mf;
    mf.watch.expire = &member_set::expire_flush;
    watchdog_.start(mf.watch, m, devices_[m]);
    ++f.pending;
    devices_[m]->submit(mf.req);
  }
  if (--f.pending == 0) {  // every member has failed
    flushes_.release(f);
    deferred_.complete_later(outer, errc::device_failed);
  }
}

void member_set::on_flush_done(device::request& r) noexcept {
  member_flush& mf = *static_cast<member_flush*>(r.context);
  flush_op& f = *mf.flush;
  member_set& s = *f.set;
  if (mf.watch.abandoned) {
    // The late answer of a flush given up on: its state may go now.
    mf.watch.abandoned = false;
    s.abandoned_answered();
    if (--f.abandoned == 0 && f.finished) {
      f.finished = false;
      s.flushes_.release(f);
    }
    return;
  }
  s.watchdog_.stop(mf.watch);
  s.member_flush_done(mf, r.result);
}

void member_set::expire_flush(watched_io& w) {
  member_flush& mf = *static_cast<member_flush*>(w.owner);
  ++mf.flush->abandoned;
  mf.flush->set->count_abandoned();
  mf.flush->set->member_flush_done(mf, errc::timed_out);
}

void member_set::member_flush_done(member_flush& mf, std::error_code result) {
  flush_op& f = *mf.flush;
  if (result == errc::no_space) f.result = result;
  note_error(mf.member, mf.watch.device, device::op::flush, result);
  if (--f.pending > 0) return;
  device::request& outer = *f.outer;
  const std::uint64_t epoch = f.epoch;
  const bool eager = f.eager;
  const std::error_code outcome = group_failed() ? make_error_code(errc::device_failed) : f.result;
  if (f.abandoned > 0) {
    f.finished = true;
  } else {
    flushes_.release(f);
  }
  if (!outcome && intent_ != nullptr) intent_->flush_done(epoch, eager);
  acknowledge(outer, outcome);
}

void member_set::acknowledge(device::request& req, std::error_code result) {
  if (log_.hold(req, result)) return;
  if (deferring_acks_) {
    deferred_.complete_later(req, result);
    return;
  }
  device::complete(req, result);
}

}  // namespace strata::raid
