// Forwarded I/O: every LUN is reached through both controllers' ports
// (README.md, "Two controllers": ALUA). The controller that serves a
// volume's pool runs its logical_unit; the other presents a
// forwarded_unit, which sends each task over the partner link to the
// owner's unit and brings the outcome back, and forward_receiver is the
// owner's end. So reservations, unit attentions, the range interlock and
// the task set are the owner's unit's alone, whichever port a command
// came through: a host's nexus through the forwarding controller's port is
// one more nexus there (its relative target port says which).
//
// Path states (what REPORT TARGET PORT GROUPS says, and what a command
// meets when it cannot be forwarded):
//   forwarding     the link is up: active/non-optimized, every command goes
//                  to the owner
//   transitioning  the link is down and the partner may be dead, or is
//                  being taken over, or the owner does not serve the volume
//                  (a hand-over under way): NOT READY 04/0A ASYMMETRIC
//                  ACCESS STATE TRANSITION, which initiators retry (Linux:
//                  with a delay, for as long as the command's time allows)
//   unavailable    the link is down while the partner is alive (its drive
//                  heartbeat beats): NOT READY 04/0C TARGET PORT IN
//                  UNAVAILABLE STATE, a path error, so multipath uses the
//                  owner's own ports
// A command whose answer the link lost ends in 04/0A as well: the
// initiator sends it again, here or on another path, and a write sent
// twice lands the same data.
//
// Threads: everything on the controller's loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "controller/partner_link.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/unit_interface.h"

namespace strata::controller {

namespace link_type {
// Request: a SCSI command for a volume the receiver serves (format in
// docs/partner-link.md, "Forwarded I/O"). Answer: its outcome; not_found
// when the receiver does not serve the volume (the sender's path is then
// transitioning).
constexpr std::uint16_t scsi_command = partner_link::first_user_type + 7;
// Request: an I_T nexus event for a volume's unit (created, lost, reset,
// a unit attention established or cleared). Answer: empty.
constexpr std::uint16_t scsi_nexus_event = partner_link::first_user_type + 8;
}  // namespace link_type

enum class forwarding_state : std::uint8_t { forwarding, transitioning, unavailable };

// What a forwarded unit needs of its controller.
struct forwarding_path {
  boost::asio::any_io_executor loop;
  // A request to the partner (the link's call()).
  std::function<void(std::uint16_t type, link_bytes payload, link_reply done)> call;
  // Where the path stands now (above).
  std::function<forwarding_state()> state;
  // The target port groups: this controller's and the partner's (ids and
  // their relative ports), for REPORT TARGET PORT GROUPS answered here
  // while the owner cannot be asked.
  scsi::target_port_group own_group;
  scsi::target_port_group partner_group;
};

class forwarded_unit final : public scsi::unit_interface {
 public:
  // `volume`: the volume's full name ("POOL/volumes/NAME"). `path` outlives the unit.
  forwarded_unit(std::string volume, const forwarding_path& path);
  ~forwarded_unit() override;

  void execute(scsi::task& t) noexcept override;
  boost::asio::any_io_executor executor() const noexcept override { return path_.loop; }
  std::size_t commands_in_flight() const noexcept override { return in_flight_; }
  void nexus_created(const scsi::i_t_nexus& n) override;
  void nexus_lost(const scsi::i_t_nexus& n) override;
  void reset(const scsi::i_t_nexus& by) override;
  void establish_unit_attention(const scsi::i_t_nexus& n, scsi::additional_sense code) override;
  void clear_unit_attention(const scsi::i_t_nexus& n, scsi::additional_sense code) override;

  // The link came up again, or the partner now serves the volume: the
  // owner's unit hears of every nexus announced here that it may have
  // missed (it reports 29/00 or 29/07 to them, as after any reset).
  void reannounce();
  const std::string& volume() const noexcept { return volume_; }

 private:
  enum class event : std::uint8_t { created = 1, lost = 2, reset = 3, establish = 4, clear = 5 };
  void send_event(event e, const scsi::i_t_nexus& n, scsi::additional_sense code = {});
  // Ends `t` here, later, with what the path's state says.
  void answer_here(scsi::task& t, forwarding_state state);
  // Every answer from the owner: after a refusal for a volume it did not
  // serve yet, the first good answer announces the nexuses again.
  void owner_answered(const std::expected<link_bytes, error>& answer);

  const std::string volume_;
  const forwarding_path& path_;
  std::size_t in_flight_ = 0;
  // The nexuses announced and not lost (initiator port, relative port).
  std::map<std::pair<std::string, std::uint16_t>, int> nexuses_;
  bool owner_missed_ = false;  // the owner refused an event or command as not serving the volume
  // Nexus losses and resets the owner did not hear of (the link was down),
  // said again by reannounce() before the live nexuses.
  std::vector<std::pair<event, std::pair<std::string, std::uint16_t>>> missed_events_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

// The owner's end: runs forwarded commands on its own units.
class forward_receiver {
 public:
  // `unit_of`: the logical unit serving a volume here, or null.
  using unit_lookup = std::function<scsi::logical_unit*(const std::string& volume)>;
  explicit forward_receiver(unit_lookup unit_of) : unit_of_(std::move(unit_of)) {}
  // REQUIRES: in_flight() == 0.
  ~forward_receiver();
  forward_receiver(const forward_receiver&) = delete;
  forward_receiver& operator=(const forward_receiver&) = delete;

  // The handlers for the two link types.
  void command(link_bytes payload, link_reply reply);
  void nexus_event(link_bytes payload, link_reply reply);
  // Forwarded commands running on units here.
  std::size_t in_flight() const noexcept { return in_flight_; }

 private:
  struct remote_command;
  static void completed(scsi::task& t) noexcept;

  unit_lookup unit_of_;
  std::size_t in_flight_ = 0;
};

}  // namespace strata::controller
