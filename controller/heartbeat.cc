#include "controller/heartbeat.h"

#include <algorithm>

#include "controller/record_writer.h"

namespace strata::controller {

const char* to_string(partner_state s) noexcept {
  switch (s) {
    case partner_state::unknown:
      return "unknown";
    case partner_state::beating:
      return "beating";
    case partner_state::silent:
      return "silent";
    case partner_state::stopped:
      return "stopped";
  }
  return "unknown";
}

drive_heartbeats::drive_heartbeats(device::clock& clock, boost::asio::any_io_executor loop,
                                   std::string self, std::string partner,
                                   std::vector<heartbeat_drive> drives, lease& lease,
                                   heartbeat_options options)
    : clock_(clock),
      loop_(std::move(loop)),
      self_(std::move(self)),
      partner_name_(std::move(partner)),
      drives_(std::move(drives)),
      lease_(lease),
      options_(options) {}

drive_heartbeats::~drive_heartbeats() {
  alive_.reset();
}

void drive_heartbeats::start() {
  if (running_) return;
  running_ = true;
  partner_moved_ = clock_.now();  // silence is counted from here until a beat is seen
  timer_ = clock_.make_timer(loop_, [this] { tick(); });
  tick();
}

void drive_heartbeats::stop(bool clean, std::function<void()> done) {
  running_ = false;
  if (timer_) timer_->cancel();
  if (!clean || drives_.empty()) {
    boost::asio::post(loop_, std::move(done));
    return;
  }
  final_beat_ = std::move(done);
  if (!in_flight_)
    write_final();  // else after the beat in flight: two writes to one slot could land in either
                    // order
}

void drive_heartbeats::tick() {
  if (!running_) return;
  timer_->arm(clock_.now() + options_.interval);
  if (in_flight_) return;  // a slow drive: this beat is skipped, not stacked
  if (drives_.empty()) return;
  in_flight_ = true;
  const device::time_point started = clock_.now();
  const std::int64_t wall_ms = unix_ms_now();
  next_count(wall_ms);
  const drive_heartbeat h{self_, counter_, wall_ms, controller_state::running, config_generation_,
                          echo_};
  const auto record = area::encode(h, counter_);
  auto left = std::make_shared<std::size_t>(drives_.size());
  auto reached = std::make_shared<unsigned>(0);
  for (const heartbeat_drive& d : drives_) {
    area::write(
        *d.drive, d.area_offset_bytes, *area::heartbeat_slot(self_), record,
        [this, alive = std::weak_ptr<int>(alive_), started, left, reached](std::error_code e) {
          if (alive.expired()) return;
          if (!e) ++*reached;
          if (e == errc::reservation_conflict && on_refused) on_refused();
          if (--*left == 0) written(started, *reached);
        });
  }
}

void drive_heartbeats::written(device::time_point started, unsigned reached) {
  if (reached > 0) {
    lease_.renew(started);
    failed_in_a_row_ = 0;
    if (on_renewed) on_renewed();
  } else {
    ++failed_in_a_row_;
  }
  auto found = std::make_shared<std::vector<area_contents>>();
  auto left = std::make_shared<std::size_t>(drives_.size());
  for (const heartbeat_drive& d : drives_) {
    area::read(*d.drive, d.area_offset_bytes,
               [this, alive = std::weak_ptr<int>(alive_), found, left](auto r) {
                 if (alive.expired()) return;
                 if (r) found->push_back(std::move(*r));
                 if (--*left == 0) read_back(std::move(*found));
               });
  }
}

void drive_heartbeats::read_back(std::vector<area_contents> found) {
  in_flight_ = false;
  std::optional<drive_heartbeat> newest;
  for (const area_contents& c : found) {
    const auto& beat = partner_name_ == "a" ? c.heartbeat_a : c.heartbeat_b;
    if (beat && (!newest || beat->counter > newest->counter)) newest = beat;
  }
  const device::time_point now = clock_.now();
  if (newest && (!partner_beat_ || newest->counter != partner_beat_->counter)) {
    // The first beat seen may be an old one, left by a partner long gone:
    // beating only once it moves.
    if (partner_beat_) {
      partner_moved_ = now;
      set_partner(newest->state == controller_state::stopped ? partner_state::stopped
                                                             : partner_state::beating);
    } else if (newest->state == controller_state::stopped) {
      set_partner(partner_state::stopped);
    }
    partner_beat_ = newest;
  } else if (partner_beat_ && partner_beat_->state == controller_state::stopped) {
    set_partner(partner_state::stopped);
  } else if (now - partner_moved_ >= options_.partner_silence) {
    set_partner(partner_state::silent);
  }
  if (partner_beat_ && claims_ == 0) echo_ = partner_beat_->counter;
  if (final_beat_) write_final();
}

std::shared_ptr<void> drive_heartbeats::claim() {
  ++claims_;
  return std::shared_ptr<void>(nullptr, [this, alive = std::weak_ptr<int>(alive_)](void*) {
    if (alive.expired() || --claims_ > 0) return;
    if (partner_beat_) echo_ = partner_beat_->counter;  // read before the claim ended
  });
}

void drive_heartbeats::write_final() {
  in_flight_ = true;
  const std::int64_t wall_ms = unix_ms_now();
  next_count(wall_ms);
  const auto record =
      area::encode(drive_heartbeat{self_, counter_, wall_ms, controller_state::stopped,
                                   config_generation_, echo_},
                   counter_);
  auto left = std::make_shared<std::size_t>(drives_.size());
  for (const heartbeat_drive& d : drives_) {
    area::write(*d.drive, d.area_offset_bytes, *area::heartbeat_slot(self_), record,
                [this, alive = std::weak_ptr<int>(alive_), left](std::error_code) {
                  if (alive.expired() || --*left > 0) return;
                  in_flight_ = false;
                  lease_.end();  // stopped: it owns nothing from now on
                  if (auto done = std::exchange(final_beat_, nullptr)) done();
                });
  }
}

void drive_heartbeats::next_count(std::int64_t wall_ms) {
  // The wall clock's milliseconds, or one more than the last count: a
  // restarted controller's beats count past its earlier ones (beats are
  // 250 ms apart), so a drive that missed the new beats (failing writes)
  // and still holds an old count cannot make a live controller look silent.
  counter_ = std::max(counter_ + 1, static_cast<std::uint64_t>(std::max<std::int64_t>(wall_ms, 0)));
}

void drive_heartbeats::set_partner(partner_state s) {
  if (s == partner_) return;
  partner_ = s;
  if (on_partner) on_partner(s);
}

}  // namespace strata::controller
