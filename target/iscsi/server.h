// The iSCSI target's portal: a TCP listener on one loop, and the
// connections it accepts, each a coroutine on the same loop.
//
// A connection logs in (the security stage: CHAP and mutual CHAP, chap.h,
// or none where a target allows it; then operational negotiation, text.h),
// and in the full feature phase
// turns SCSI Command PDUs and their Data-Out into scsi::task's for the
// target's LUN map, and their outcomes into Data-In, R2T and SCSI Response
// PDUs, through the LUN map its initiator is given (LUN masking).
// Discovery sessions answer SendTargets, listing only the targets the
// initiator may log in to. A session may have several connections (MC/S,
// up to the MaxConnections it negotiates): the CmdSN window is the
// session's, and commands reach the units in CmdSN order whichever
// connection they come on; each command's data and response go on its own
// connection. ErrorRecoveryLevel 0: a broken connection takes its own
// tasks with it (those in flight finish into nothing), and the session
// lives on while it has a connection; the initiator recovers by logging
// in again (session or connection reinstatement).
//
// Threads: the server lives on the loop given to it, which is also the
// units' loop (the LUN maps' executor): call its methods there. Each
// connection runs on one of `server_options::connection_loops`, and a
// session's connections all on one (target/iscsi/README.md, "Loops").
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "raid/device/status.h"
#include "target/iscsi/chap.h"
#include "target/iscsi/text.h"

namespace strata::scsi {
class lun_map;
}

namespace strata::iscsi {

// What one initiator may do with a target: what it must prove, and what it sees.
struct initiator_access {
  // Its view of the target's units, with its own LUN numbers (LUN masking:
  // units not in its map do not exist for it).
  scsi::lun_map* luns = nullptr;
  // What the initiator must prove (CHAP); none: it logs in with AuthMethod=None.
  std::optional<chap_credentials> chap;
  // What the target proves to an initiator that asks (mutual CHAP); none:
  // an initiator asking for it is refused. Only with `chap`.
  std::optional<chap_credentials> mutual_chap;
};

struct target_node {
  std::string name;  // its IQN, e.g. iqn.2026-11.io.strata:array
  // The initiators allowed in, by iSCSI name (compared case-insensitively,
  // as RFC 3722 normalises names to lower case).
  std::map<std::string, initiator_access> initiators;
  // Any initiator not listed; none: such initiators are refused (login
  // status 02/02, not authorised) and do not see the target in SendTargets.
  std::optional<initiator_access> anyone;

  // What `initiator` may do here; null if it may not log in.
  const initiator_access* access_for(std::string_view initiator) const;
};

struct server_options {
  target_offer offer;
  // Commands a session may have outstanding: the CmdSN window.
  std::uint32_t command_window = 128;
  // The most write data one connection may hold for commands not yet
  // answered (up to 16 MiB each): its CmdSN window closes at this, so that
  // one initiator cannot pin the memory every other session needs.
  std::size_t max_held_write_bytes = 64u << 20;
  // This server's target portal group tag (the TargetPortalGroupTag of its
  // logins), which is also its SCSI target port's relative target port
  // identifier (task::nexus): on a dual-controller array, 1 on controller
  // a and 2 on b, so that a host logged in to both is two I_T nexuses and
  // ALUA tells the two paths apart.
  std::uint16_t relative_target_port = 1;
  // The portals SendTargets names in TargetAddress, each "host:port" (a
  // DNS name, an IPv4 address or an [IPv6] one) in this server's portal
  // group, or "host:port,TAG" in another's (the partner controller's):
  // the addresses initiators reach the target at, where that is not the
  // one they came in on (NAT, a service address, several interfaces).
  // Empty: the address the discovery connection came in on.
  std::vector<std::string> portals;
  // What a discovery session must prove, and may ask the target to prove;
  // no `chap`: discovery is open to anyone. `luns` is unused.
  initiator_access discovery;
  // Told, in words for an administrator, why a login failed (unknown
  // target, not authorised, wrong CHAP response, malformed keys) and why a
  // connection was dropped (login too slow, initiator presumed dead).
  std::function<void(std::string_view)> log;
  // A connection that has not finished logging in by then is closed, so
  // that half-open logins cannot pile up.
  std::chrono::seconds login_timeout{15};
  // After this long with nothing from the initiator, the target pings it
  // (NOP-In); with no PDU within ping_timeout more, the initiator is taken
  // for dead and its connection closed, ending its tasks. 0: no pings.
  std::chrono::seconds ping_interval{15};
  std::chrono::seconds ping_timeout{15};
  // TARGET COLD RESET ends every session of the target, other initiators'
  // too (RFC 7143 11.5.1); an array shared by hosts may refuse it (TMF
  // response 6, function authorization failed).
  bool allow_target_cold_reset = true;
  // The loops connections go to, in turn (the server's own among them, or
  // not): a connection's socket, PDUs, digests and copies run on its loop,
  // and a session's connections share their first one's. Empty: the
  // server's loop. Each must run until connections() is 0 after stop().
  std::vector<boost::asio::any_io_executor> connection_loops;
};

// Checks a target's configuration: CHAP secrets' lengths, mutual secrets
// that repeat the initiator's, initiators with no LUN map. Empty if it is fine.
std::optional<std::string> check_target(const target_node& target);

class connection;
class session;

class server {
 public:
  server(boost::asio::any_io_executor loop, std::vector<target_node> targets,
         const server_options& options);
  // REQUIRES: connections() == 0 where connections run on loops other
  // than the server's (stop(), then run the loop until they have ended).
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Binds and listens at `at` (port 0: any free port), and starts accepting.
  std::expected<void, error> listen(const boost::asio::ip::tcp::endpoint& at);
  boost::asio::ip::tcp::endpoint local_endpoint() const;
  // Stops accepting and closes every connection; their tasks finish in the background.
  void stop();
  // Closes every connection (it goes on accepting), discarding what their
  // sockets hold unread; `done` on the server's loop once each is closed
  // on its own loop: every command they passed on before was posted ahead
  // of it. A controller that was frozen and lost pools meanwhile resets
  // its hosts' connections this way, as a rebooted one would.
  void close_connections(std::function<void()> done);
  // Asks every initiator in the full feature phase to log out within
  // `within` (Asynchronous Message, event 1), as before a planned
  // shutdown or failover; connections still there after that are closed.
  void request_logout(std::chrono::seconds within);

  // Replaces the target named target.name, or adds it: logins from now on
  // get its new access. A live session keeps what it logged in with (its
  // CHAP was proven then), unless its initiator may no longer log in or now
  // sees another LUN map: such sessions are closed, and the initiator
  // logs in again to whatever it may now do.
  void set_target(target_node target);
  // The units behind `luns` changed (a LUN mapped or unmapped). Each live
  // session that sees `luns` announces its I_T nexus to the units new to
  // it, tells the units no longer there that its nexus is gone, and gets
  // REPORTED LUNS DATA HAS CHANGED (3F/0E) on every unit it now sees
  // (SPC-4 6.33, as Linux-IO does). Call it before a unit that left the
  // map is destroyed. REQUIRES: the units run on this server's loop.
  // `inventory_changed` false: the same volumes behind the same LUNs, each
  // now reached through another unit (a controller took its pool over or
  // handed it back): the nexuses are announced to the new units, and no
  // 3F/0E is reported.
  void luns_changed(const scsi::lun_map& luns, bool inventory_changed = true);

  // From any loop (logins and SendTargets read them on theirs).
  std::vector<std::shared_ptr<const target_node>> targets() const;
  const server_options& options() const noexcept { return options_; }
  std::shared_ptr<const target_node> find_target(std::string_view name) const;
  // Connections open, whichever loop they run on.
  std::size_t connections() const noexcept { return live_.size(); }

 private:
  friend class connection;
  friend class session;
  void accept();
  // A connection on `socket`'s loop; on the server's loop.
  void start_connection(boost::asio::ip::tcp::socket socket);
  // `c` has ended (from its loop): it leaves live_ on the server's loop.
  void connection_ended(std::shared_ptr<connection> c);
  // Closes every connection to the target named `target` but `except`
  // (TARGET COLD RESET).
  void close_sessions_of(std::string_view target, const connection* except);
  // The loop of the session with TSIH `tsih`, if there is one: where a
  // connection joining it must run. From any loop.
  std::optional<boost::asio::any_io_executor> session_loop(std::uint16_t tsih) const;
  // A TSIH no live session has, never 0. REQUIRES: mutex_ held.
  std::uint16_t next_tsih_locked() noexcept;

  boost::asio::any_io_executor loop_;
  server_options options_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::size_t next_loop_ = 0;  // of options_.connection_loops, in turn
  // On the server's loop: every connection, whichever loop it runs on.
  std::set<std::shared_ptr<connection>> live_;
  // What logins on every loop read and change.
  mutable std::mutex mutex_;
  // Shared: a session keeps the node it logged in with alive (its access,
  // its LUN map) after set_target() replaced it. Under mutex_.
  std::vector<std::shared_ptr<const target_node>> targets_;
  // Each session leaves when it ends. Under mutex_.
  std::map<session*, std::weak_ptr<session>> sessions_;
  std::uint16_t tsih_ = 0;  // under mutex_
  // Expires with the server: connections and a late accept handler check it
  // before touching the server.
  std::shared_ptr<void> alive_ = std::make_shared<int>(0);
};

}  // namespace strata::iscsi
