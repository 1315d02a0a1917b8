// The partner link: the one TCP connection between controller A and
// controller B of an array, over which they exchange heartbeats,
// configuration changes, mirrored pool metadata and forwarded I/O
// (README.md, "Two controllers"). The frames and the handshake are in
// docs/partner-link.md.
//
// Who may use it: only the partner. Both controllers hold the array's link
// key (32 bytes); the handshake proves it both ways (HMAC-SHA256 over
// fresh nonces, never the key itself), and names the controllers: A's link
// takes only B, and the reverse. Anything else gets a `refuse` frame with
// the reason, is closed, and is reported through on_refused.
//
// Roles: the controller whose name sorts first dials, the other listens;
// the dialer redials while the link is down. A link that hears nothing for
// silence_limit (heartbeats go every heartbeat_interval both ways) is
// closed and reported down; calls waiting on it fail.
//
// Threads: everything runs on `loop`, and every call and callback is made
// there. Requests are answered in any order (each carries an id).
#pragma once

#include <array>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "raid/device/status.h"

namespace strata::controller {

using link_key = std::array<std::uint8_t, 32>;
using link_bytes = std::vector<std::uint8_t>;
// A request's answer: its payload, or why it failed (errc and words).
using link_reply = std::function<void(std::expected<link_bytes, error>)>;

struct partner_link_options {
  std::string self = "a";     // this controller's name
  std::string partner = "b";  // the only one it links with
  // The listener's address (the one whose name sorts second): where it
  // listens, and where the dialer dials. Port 0 lets the listener pick.
  boost::asio::ip::tcp::endpoint listen_at;
  // Where the dialer dials, when not listen_at: a relay between the two
  // (a test's, to cut the link while both controllers run).
  std::optional<boost::asio::ip::tcp::endpoint> dial_at;
  link_key key{};
  std::chrono::milliseconds heartbeat_interval{200};
  std::chrono::milliseconds silence_limit{1000};
  std::chrono::milliseconds redial_interval{250};
  std::chrono::milliseconds handshake_limit{2000};
};

class partner_link {
 public:
  // Application frame types start here; below are the link's own.
  static constexpr std::uint16_t first_user_type = 16;
  static constexpr std::uint32_t max_payload_bytes =
      (16u << 20) + 65536;  // a forwarded 16 MiB write and its command

  partner_link(boost::asio::any_io_executor loop, partner_link_options options);
  ~partner_link();
  partner_link(const partner_link&) = delete;
  partner_link& operator=(const partner_link&) = delete;

  // Listens, or starts dialing. Fails if the listener's address cannot be bound.
  std::expected<void, error> start();
  // Closes the link and stops listening or dialing; waiting calls fail.
  void stop();

  bool up() const noexcept { return current_ != nullptr; }
  bool dials() const noexcept { return options_.self < options_.partner; }
  // Where the listener listens (after start()).
  boost::asio::ip::tcp::endpoint listen_endpoint() const;

  // Requests of `type` (>= first_user_type) are given to `handler`, which
  // answers through the reply (at once or later).
  void handle(std::uint16_t type,
              std::function<void(link_bytes payload, link_reply reply)> handler);
  // Sends a request of `type` and calls `done` with the answer; errc::canceled
  // at once while the link is down, or when it goes down first;
  // invalid_argument at once for a payload over max_payload_bytes.
  void call(std::uint16_t type, link_bytes payload, link_reply done);
  // The link came up (`why` empty) or went down (`why`: what happened).
  std::function<void(bool up, const std::string& why)> on_state;
  // A connection that could not prove to be the partner, or refused us:
  // who and why, for the event log.
  std::function<void(const std::string& what)> on_refused;

 private:
  class connection;
  friend class connection;

  void accept();
  void dial();
  void authenticated(std::shared_ptr<connection> c);
  void lost(connection* c, const std::string& why);
  // Reports a refusal through on_refused, but not the same one twice in a
  // row (a dialer with the wrong key would fill the event log).
  void refused(const std::string& what);
  // The dialer waits longer after each refusal in a row, up to 5 s.
  std::chrono::milliseconds redial_delay() const;
  void redial_later();
  void track(const std::shared_ptr<connection>& c);

  boost::asio::any_io_executor loop_;
  partner_link_options options_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::unique_ptr<boost::asio::steady_timer> redial_;
  std::shared_ptr<connection> current_;  // the authenticated connection, if any
  std::shared_ptr<connection> dialing_;  // the dialer's connection being made
  std::vector<std::weak_ptr<connection>>
      unproven_;  // connections in their handshake: closed by stop()
  std::string last_refusal_;
  int refusals_in_a_row_ = 0;
  std::map<std::uint16_t, std::function<void(link_bytes, link_reply)>> handlers_;
  bool stopped_ = false;
  std::shared_ptr<int> alive_ =
      std::make_shared<int>(0);  // callbacks check it after the link is gone
};

}  // namespace strata::controller
