// The partner controller, as this controller sees it: the partner link
// (partner_link.h) with the requests each side answers, and the events
// its state makes: the array-wide configuration (config_sync.h) copied to
// a joining controller b, each change replicated before it is
// acknowledged, and a controller that comes back with an older
// generation brought up to date; the partner's liveness from both
// heartbeats. The pools' metadata copies and the hand-overs add their own
// frames to link() (metadata_mirror.h, takeover.cc). To come (README.md,
// "Two controllers"): forwarded I/O.
//
// Threads: the loop's. Reading the config store blocks, so the snapshot is
// read on a thread of its own and answered from the loop.
#pragma once

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <functional>
#include <memory>
#include <string>

#include "controller/config_store.h"
#include "controller/config_sync.h"
#include "controller/event_log.h"
#include "controller/heartbeat.h"
#include "controller/partner_link.h"

namespace strata::controller {

namespace link_type {
// Request: a hot spare's disk name ("disks/ssd-05"), which the sender
// would put in place of a failed member of one of its groups. Answer: one
// byte, 1 (granted: the receiver dropped it from its spares) or 0 (taken:
// a member of one of the receiver's groups); busy while the receiver's
// drive bay is not open yet (controller/drive_bay.h answer_claim).
constexpr std::uint16_t spare_claim = partner_link::first_user_type + 10;
}  // namespace link_type

class partner {
 public:
  partner(boost::asio::any_io_executor loop, config_store& config, event_log& events,
          partner_link_options options);
  ~partner();
  partner(const partner&) = delete;
  partner& operator=(const partner&) = delete;

  std::expected<void, error> start() { return link_.start(); }
  // Closes the link; the snapshot reader finishes what it read.
  void stop();
  bool up() const noexcept { return link_.up(); }
  const std::string& name() const noexcept { return options_.partner; }

  // How the partner is, from both its heartbeats: ACTIVE (the link is
  // up), UNREACHABLE (the link is down but its drive heartbeat beats: a
  // cut link, never a reason to take over), DOWN (both silent, or it
  // stopped cleanly). Without drive heartbeats, the link alone.
  enum class liveness { active, unreachable, down };
  // The configuration generation the partner's newest drive beat names
  // (what it held when it last beat); none before one was read.
  std::optional<std::uint64_t> beat_generation() const {
    if (!heartbeats_ || !heartbeats_->partner_beat()) return std::nullopt;
    return heartbeats_->partner_beat()->config_generation;
  }
  liveness state() const noexcept;
  // The drive heartbeat's echo (heartbeat.h): a claim held from a
  // takeover's last "partner down" check until its ownership records are
  // written; this controller's newest beat; the partner's echo of it.
  // Without drive heartbeats: no claim, 0, 0.
  std::shared_ptr<void> claim() { return heartbeats_ ? heartbeats_->claim() : nullptr; }
  std::uint64_t own_beat() const noexcept { return heartbeats_ ? heartbeats_->beats() : 0; }
  std::uint64_t echoed() const noexcept { return heartbeats_ ? heartbeats_->echoed() : 0; }
  // The partner's drive heartbeat has stood still (or it stopped).
  bool beats_silent() const noexcept {
    return heartbeats_ && heartbeats_->partner() != partner_state::beating;
  }
  static const char* to_string(liveness l) noexcept;
  // Starts this controller's drive heartbeat on `drives` (heartbeat.h),
  // renewing `own`, carrying configuration `generation`, and watching the
  // partner's; `renewed` runs on the loop after each beat that renewed `own`,
  // `refused` after each drive that refused one for its reservation.
  void start_heartbeats(device::clock& clock, std::vector<heartbeat_drive> drives, lease& own,
                        std::uint64_t generation, std::function<void()> renewed,
                        std::function<void()> refused = {});
  // Stops it; with `clean`, a last beat says this controller stopped.
  void stop_heartbeats(bool clean, std::function<void()> done);
  // The newest configuration generation held here, for the drive
  // heartbeat to carry (a controller starting alone compares it).
  void note_generation(std::uint64_t g) {
    if (heartbeats_) heartbeats_->set_config_generation(g);
  }

  // Asks the partner for its array-wide records.
  void fetch_configuration(std::function<void(std::expected<config_records, error>)> done);
  // Sends a change this controller committed (its generation bump
  // included) and calls `done` once the partner has committed it too; an
  // error if it could not (the link went down: the partner catches up by
  // generation when it is back).
  void replicate(const config_batch& change, std::function<void(std::expected<void, error>)> done);
  // Any request to the partner (link_type's), answered in any order.
  void call(std::uint16_t type, link_bytes payload, link_reply done) {
    link_.call(type, std::move(payload), std::move(done));
  }
  // Management calls from the partner (link_type::management_call, and
  // management_delegated: `delegated` true): `answer` runs on a thread of
  // its own (it blocks), one call at a time, and its bytes are the reply.
  void answer_calls(std::function<link_bytes(link_bytes, bool delegated)> answer);
  // No management call of the partner's is being made here: one waits for
  // the loop, so the array's close drives the loop until this holds.
  bool idle() const noexcept { return calls_in_flight_ == 0; }
  // The partner's management calls are refused from now on (this
  // controller is stopping: its pools are closing under them).
  void stop_answering() noexcept { answering_ = false; }

  // The partner's changes (and catch-ups), once committed here: the keys
  // they touched, for the array to apply what it serves. On the loop.
  std::function<void(const config_change&)> on_applied;
  // The link came up or went down; the partner's liveness changed. On the loop.
  std::function<void(bool up)> on_link;
  std::function<void(liveness)> on_liveness;
  // The link itself, for the services that add their own frames
  // (metadata_mirror.h).
  partner_link& link() noexcept { return link_; }

 private:
  boost::asio::any_io_executor loop_;
  config_store& config_;
  event_log& events_;
  const partner_link_options options_;
  partner_link link_;
  // Applies a change from the partner, or installs its snapshot, on the
  // store thread; `done` on the loop.
  void apply(config_change change, link_reply reply);
  // Records an event when state() changed.
  void note_state();
  liveness last_state_ = liveness::down;
  std::unique_ptr<drive_heartbeats> heartbeats_;
  void catch_up();
  void install(const config_records& snapshot);
  // The config store's thread: snapshots read, and the partner's changes
  // committed, one at a time in arrival order (so a change and a catch-up
  // never cross).
  boost::asio::thread_pool reader_{1};
  boost::asio::thread_pool caller_{1};
  std::atomic<int> calls_in_flight_{0};
  bool answering_ = true;  // the loop's  // the partner's management calls, which wait for the loop
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace strata::controller
