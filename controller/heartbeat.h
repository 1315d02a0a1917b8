// The drive heartbeat: this controller's beat written to a few shared
// drives' controller areas (controller/controller_area.h) every interval,
// and its partner's read back from them. It is the half of failure
// detection that does not go through the partner link: a cut link with a
// beating partner is a cut link, not a dead partner, so it never makes two
// owners (README.md, "Two controllers").
//
// Each beat bumps the counter, writes this controller's slot on every
// heartbeat drive (write and flush, in parallel), renews the lease when at
// least one drive took it, and then reads the partner's slot from every
// drive: the highest counter found is the partner's. The partner is
// beating while its counter moves, silent once it has stood still for
// partner_silence, stopped when its last beat says it stopped cleanly.
//
// The beats go to the drives themselves, not through the gates the pools
// use: a controller whose lease lapsed must still be able to renew it.
//
// The echo: each beat also carries the partner's newest counter read
// here, but only as of a moment when no claim was open (claim(): a
// takeover between its last "partner down" check and its ownership
// records landing). So a partner that finds its own post-thaw counter
// echoed knows that any takeover begun here before its thaw was heard has
// its records on the drives, and any begun later saw it beating and gave
// up: only then does it read the records and confirm its pools
// (takeover.cc, confirm_ownership; docs/controller-area.md).
//
// Threads: the loop's (the drives'). Lifetime: stop() before destroying;
// the drives outlive it.
#pragma once

#include <boost/asio/post.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/controller_area.h"
#include "controller/lease.h"
#include "raid/device/block_device.h"
#include "raid/device/clock.h"

namespace strata::controller {

struct heartbeat_drive {
  device::block_device* drive = nullptr;
  std::uint64_t area_offset_bytes = 0;  // area::locate's answer
};

struct heartbeat_options {
  device::duration interval = std::chrono::milliseconds(250);
  // How long the partner's counter may stand still before it is silent.
  // Longer than the lease, so that a partner silent this long has lost its
  // lease (lease.h) 0.75 s earlier at least: the lease is 1 s from the
  // start of a beat, and a beat is seen no earlier than it started. With a
  // beat read every interval, a dead partner is silent within 2 s.
  device::duration partner_silence = std::chrono::milliseconds(1750);
};

enum class partner_state { unknown, beating, silent, stopped };
const char* to_string(partner_state s) noexcept;

class drive_heartbeats {
 public:
  drive_heartbeats(device::clock& clock, boost::asio::any_io_executor loop, std::string self,
                   std::string partner, std::vector<heartbeat_drive> drives, lease& lease,
                   heartbeat_options options = {});
  ~drive_heartbeats();
  drive_heartbeats(const drive_heartbeats&) = delete;
  drive_heartbeats& operator=(const drive_heartbeats&) = delete;

  // Beats now and every interval.
  void start();
  // Stops beating; with `clean`, a last beat says so (state stopped), and
  // the partner knows this controller handed its pools over rather than
  // died. `done` once that beat is written (or at once).
  void stop(bool clean, std::function<void()> done);

  // Written with every beat: the newest configuration change held here.
  void set_config_generation(std::uint64_t g) noexcept { config_generation_ = g; }

  // Opens a claim: until the returned token is dropped, beats echo no
  // partner counter read after this call.
  std::shared_ptr<void> claim();
  // The partner's echo of this controller's counter (0: none, or a
  // partner whose beats carry none).
  std::uint64_t echoed() const noexcept {
    return partner_beat_ ? partner_beat_->partner_counter_seen : 0;
  }

  partner_state partner() const noexcept { return partner_; }
  // The partner's newest beat read, if any.
  const std::optional<drive_heartbeat>& partner_beat() const noexcept { return partner_beat_; }
  // The last beat's count: its wall-clock ms, or one more than the one before.
  std::uint64_t beats() const noexcept { return counter_; }
  // Beats that reached no drive at all, in a row.
  unsigned failed_in_a_row() const noexcept { return failed_in_a_row_; }

  // The partner's state changed.
  std::function<void(partner_state)> on_partner;
  // A beat reached the drives and renewed the lease.
  std::function<void()> on_renewed;
  // A drive refused a beat for its persistent reservation: the partner
  // removed this controller's key there, as it does when it takes a pool
  // over (raid/device/reservations.h).
  std::function<void()> on_refused;

 private:
  void tick();
  void written(device::time_point started, unsigned reached);
  void read_back(std::vector<area_contents> found);
  void set_partner(partner_state s);
  void write_final();
  void next_count(std::int64_t wall_ms);

  device::clock& clock_;
  boost::asio::any_io_executor loop_;
  const std::string self_, partner_name_;
  const std::vector<heartbeat_drive> drives_;
  lease& lease_;
  const heartbeat_options options_;
  std::unique_ptr<device::timer> timer_;
  std::uint64_t counter_ = 0;
  std::uint64_t config_generation_ = 0;
  std::uint64_t echo_ = 0;  // written with every beat
  unsigned claims_ = 0;     // open claims: echo_ waits
  bool running_ = false;
  bool in_flight_ = false;  // a beat is still being written or read: the next tick skips
  unsigned failed_in_a_row_ = 0;
  partner_state partner_ = partner_state::unknown;
  std::optional<drive_heartbeat> partner_beat_;
  device::time_point partner_moved_{};  // when its counter last moved (or we started looking)
  std::function<void()> final_beat_;    // stop(clean)'s `done`, once the last beat is written
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace strata::controller
