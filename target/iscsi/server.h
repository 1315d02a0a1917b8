// The iSCSI target's portal: a TCP listener on one loop, and the
// connections it accepts, each a coroutine on the same loop.
//
// A connection logs in (security stage without authentication for now,
// then operational negotiation, text.h), and in the full feature phase
// turns SCSI Command PDUs and their Data-Out into scsi::task's for the
// target's LUN map, and their outcomes into Data-In, R2T and SCSI Response
// PDUs. Discovery sessions answer SendTargets. One connection per session,
// ErrorRecoveryLevel 0: a broken connection ends its session, and the
// tasks in flight finish into nothing.
//
// Threads: everything runs on the loop given to the server, the loop of
// the LUNs' devices. Not thread-safe; reach it by posting to that loop.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "raid/device/status.h"
#include "target/iscsi/text.h"

namespace strata::scsi {
class lun_map;
}

namespace strata::iscsi {

struct target_node {
  std::string name;           // its IQN, e.g. iqn.2026-11.io.strata:array
  scsi::lun_map* luns = nullptr;  // what initiators see through it
};

struct server_options {
  target_offer offer;
  // Commands a session may have outstanding: the CmdSN window.
  std::uint32_t command_window = 128;
};

class connection;

class server {
 public:
  server(boost::asio::any_io_executor loop, std::vector<target_node> targets, const server_options& options);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Binds and listens at `at` (port 0: any free port), and starts accepting.
  std::expected<void, error> listen(const boost::asio::ip::tcp::endpoint& at);
  boost::asio::ip::tcp::endpoint local_endpoint() const;
  // Stops accepting and closes every connection; their tasks finish in the background.
  void stop();

  const std::vector<target_node>& targets() const noexcept { return targets_; }
  const server_options& options() const noexcept { return options_; }
  const target_node* find_target(std::string_view name) const noexcept;
  std::uint16_t next_tsih() noexcept;
  std::size_t connections() const noexcept { return live_.size(); }

 private:
  friend class connection;
  void accept();

  boost::asio::any_io_executor loop_;
  std::vector<target_node> targets_;
  server_options options_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::set<std::shared_ptr<connection>> live_;
  std::uint16_t tsih_ = 0;
  // Expires with the server: connections and a late accept handler check it
  // before touching the server.
  std::shared_ptr<void> alive_ = std::make_shared<int>(0);
};

}  // namespace strata::iscsi
