#include "controller/partner.h"

#include <boost/asio/post.hpp>
#include <cstdlib>

#include "controller/remote_management.h"

namespace strata::controller {

partner::partner(boost::asio::any_io_executor loop, config_store& config, event_log& events,
                 partner_link_options options)
    : loop_(loop),
      config_(config),
      events_(events),
      options_(options),
      link_(loop, std::move(options)) {
  link_.on_state = [this](bool up, const std::string& why) {
    if (up) {
      catch_up();  // note_state() says it is up
    } else {
      events_.record(severity::warning, "controllers/" + options_.partner,
                     "the partner link is down: " + why);
    }
    if (on_link) on_link(up);
    note_state();
  };
  link_.on_refused = [this](const std::string& what) {
    events_.record(severity::warning, "", what);
  };
  link_.handle(link_type::config_snapshot, [this](link_bytes, link_reply reply) {
    boost::asio::post(
        reader_, [this, reply = std::move(reply), alive = std::weak_ptr<int>(alive_)]() mutable {
          auto bytes = encode_records(array_wide_records(config_));
          boost::asio::post(loop_,
                            [reply = std::move(reply), bytes = std::move(bytes), alive]() mutable {
                              if (!alive.expired()) reply(std::move(bytes));
                            });
        });
  });
  link_.handle(link_type::config_apply, [this](link_bytes payload, link_reply reply) {
    auto change = decode_change(payload);
    if (!change) return reply(std::unexpected(change.error()));
    apply(std::move(*change), std::move(reply));
  });
  link_.handle(link_type::config_generation, [this](link_bytes, link_reply reply) {
    boost::asio::post(
        reader_, [this, reply = std::move(reply), alive = std::weak_ptr<int>(alive_)]() mutable {
          link_bytes bytes(8);
          const std::uint64_t g = generation_of(config_);
          for (int i = 0; i < 8; ++i)
            bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(g >> (8 * i));
          boost::asio::post(loop_,
                            [reply = std::move(reply), bytes = std::move(bytes), alive]() mutable {
                              if (!alive.expired()) reply(std::move(bytes));
                            });
        });
  });
}

namespace {

std::uint64_t generation_in(const config_change& c) {
  for (const auto& [key, value] : c) {
    if (key == generation_key && value) return std::strtoull(value->c_str(), nullptr, 10);
  }
  return 0;
}

}  // namespace

void partner::apply(config_change change, link_reply reply) {
  boost::asio::post(reader_, [this, change = std::move(change), reply = std::move(reply),
                              alive = std::weak_ptr<int>(alive_)]() mutable {
    const std::uint64_t mine = generation_of(config_);
    const std::uint64_t theirs = generation_in(change);
    std::expected<void, error> done;
    bool applied = false;
    bool behind = false;
    if (theirs <= mine) {
      // Held already (a catch-up brought it): nothing to do.
    } else if (theirs == mine + 1) {
      done = config_.commit(batch_of(change));
      applied = bool(done);
    } else {
      behind = true;  // a change missed: the whole configuration instead
    }
    boost::asio::post(loop_, [this, change = std::move(change), reply = std::move(reply), done,
                              applied, behind, alive, theirs]() mutable {
      if (alive.expired()) return;
      if (applied) note_generation(theirs);
      if (applied && on_applied) on_applied(change);
      if (behind) catch_up();
      reply(done ? std::expected<link_bytes, error>(link_bytes{}) : std::unexpected(done.error()));
    });
  });
}

void partner::catch_up() {
  link_.call(link_type::config_generation, {}, [this](std::expected<link_bytes, error> r) {
    if (!r || r->size() != 8) return;
    std::uint64_t theirs = 0;
    for (int i = 7; i >= 0; --i) theirs = (theirs << 8) | (*r)[static_cast<std::size_t>(i)];
    boost::asio::post(reader_, [this, theirs, alive = std::weak_ptr<int>(alive_)] {
      if (theirs <= generation_of(config_))
        return;  // this side is as new, or newer: the partner catches up from it
      boost::asio::post(loop_, [this, alive] {
        if (alive.expired()) return;
        link_.call(link_type::config_snapshot, {}, [this](std::expected<link_bytes, error> bytes) {
          if (!bytes) return;
          if (auto snapshot = decode_records(*bytes)) install(*snapshot);
        });
      });
    });
  });
}

void partner::install(const config_records& snapshot) {
  boost::asio::post(reader_, [this, snapshot, alive = std::weak_ptr<int>(alive_)]() mutable {
    std::uint64_t theirs = 0;
    for (const auto& [key, value] : snapshot) {
      if (key == generation_key) theirs = std::strtoull(value.c_str(), nullptr, 10);
    }
    const std::uint64_t mine = generation_of(config_);
    if (theirs <= mine) return;  // a change came first and brought it further
    const config_batch b = replace_with(config_, snapshot);
    auto done = config_.commit(b);
    config_change change = change_of(b);
    boost::asio::post(loop_, [this, change = std::move(change), done, theirs, mine, alive] {
      if (alive.expired()) return;
      if (!done) {
        events_.record(severity::error, "",
                       "catching up with controller " + options_.partner +
                           "'s configuration failed: " + done.error().message);
        return;
      }
      events_.record(severity::info, "",
                     "the configuration caught up with controller " + options_.partner +
                         "'s: generation " + std::to_string(mine) + " to " +
                         std::to_string(theirs));
      note_generation(theirs);
      if (on_applied) on_applied(change);
    });
  });
}

void partner::replicate(const config_batch& change,
                        std::function<void(std::expected<void, error>)> done) {
  link_.call(link_type::config_apply, encode_change(change_of(change)),
             [done = std::move(done)](std::expected<link_bytes, error> r) {
               if (!r) return done(std::unexpected(r.error()));
               done({});
             });
}

partner::liveness partner::state() const noexcept {
  if (link_.up()) return liveness::active;
  if (heartbeats_ && heartbeats_->partner() == partner_state::beating) return liveness::unreachable;
  return liveness::down;
}

const char* partner::to_string(liveness l) noexcept {
  switch (l) {
    case liveness::active:
      return "ACTIVE";
    case liveness::unreachable:
      return "UNREACHABLE";
    case liveness::down:
      return "DOWN";
  }
  return "DOWN";
}

void partner::note_state() {
  const liveness now = state();
  if (now == last_state_) return;
  last_state_ = now;
  if (on_liveness)
    boost::asio::post(loop_, [this, now, alive = std::weak_ptr<int>(alive_)] {
      if (!alive.expired() && on_liveness) on_liveness(now);
    });
  const std::string who = "controllers/" + options_.partner;
  switch (now) {
    case liveness::active:
      events_.record(severity::info, who, "ACTIVE: the partner link is up");
      break;
    case liveness::unreachable:
      events_.record(severity::warning, who,
                     "UNREACHABLE: the partner link is down, but its drive heartbeat beats (a cut "
                     "link: no takeover)");
      break;
    case liveness::down:
      events_.record(severity::error, who,
                     heartbeats_ && heartbeats_->partner() == partner_state::stopped
                         ? "DOWN: it stopped cleanly"
                         : "DOWN: its link and its drive heartbeat are silent");
      break;
  }
}

void partner::start_heartbeats(device::clock& clock, std::vector<heartbeat_drive> drives,
                               lease& own, std::uint64_t generation, std::function<void()> renewed,
                               std::function<void()> refused) {
  heartbeats_ = std::make_unique<drive_heartbeats>(clock, loop_, options_.self, options_.partner,
                                                   std::move(drives), own);
  heartbeats_->set_config_generation(generation);
  heartbeats_->on_renewed = std::move(renewed);
  heartbeats_->on_refused = std::move(refused);
  heartbeats_->on_partner = [this](partner_state) { note_state(); };
  heartbeats_->start();
}

void partner::stop_heartbeats(bool clean, std::function<void()> done) {
  if (!heartbeats_) return done();
  heartbeats_->stop(clean, std::move(done));
}

void partner::answer_calls(std::function<link_bytes(link_bytes, bool delegated)> answer) {
  for (const bool delegated : {false, true}) {
    link_.handle(delegated ? link_type::management_delegated : link_type::management_call,
                 [this, answer, delegated](link_bytes call, link_reply reply) {
                   if (!answering_)
                     return reply(std::unexpected(make_error(
                         errc::canceled, "controller " + options_.self + " is stopping")));
                   ++calls_in_flight_;
                   boost::asio::post(caller_, [this, answer, delegated, call = std::move(call),
                                               reply = std::move(reply),
                                               alive = std::weak_ptr<int>(alive_)]() mutable {
                     link_bytes bytes = answer(std::move(call), delegated);
                     --calls_in_flight_;  // before the reply is posted: the array's close waits on
                                          // the loop for this
                     boost::asio::post(loop_, [reply = std::move(reply), bytes = std::move(bytes),
                                               alive]() mutable {
                       if (!alive.expired()) reply(std::move(bytes));
                     });
                   });
                 });
  }
}

partner::~partner() {
  stop();
  caller_.join();
  reader_.join();
  alive_.reset();
}

void partner::stop() {
  link_.stop();
}

void partner::fetch_configuration(std::function<void(std::expected<config_records, error>)> done) {
  link_.call(link_type::config_snapshot, {},
             [done = std::move(done)](std::expected<link_bytes, error> r) {
               if (!r) return done(std::unexpected(r.error()));
               done(decode_records(*r));
             });
}

}  // namespace strata::controller
