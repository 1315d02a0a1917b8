// The NVMe/TCP target's port: a TCP listener on one loop, the connections
// it accepts (one queue each: the admin queue or an I/O queue), and the
// controllers they make (NVMe over Fabrics 1.1, the dynamic controller
// model: each admin queue Connect makes a controller, and its host's I/O
// queue Connects join it by controller ID).
//
// A subsystem (`subsystem`) is an NQN, the hosts allowed in by their host
// NQN, and namespaces that are Strata volumes, reached through their
// units (nvm.h says why through the unit). The discovery subsystem
// (nqn.2014-08.org.nvmexpress.discovery) answers on the same port with
// the discovery log page: every subsystem at this port and at the ports
// `server_options::referrals` names (the partner controller's).
//
// ANA: each namespace belongs to one ANA group (the controller that owns
// its pool), and this port reports each group's state (`set_ana_states`);
// a change reaches connected hosts as an ANA change event.
//
// Threads: the server's own loop accepts, and holds the configuration
// (set_subsystem, set_ana_states are called there); each connection lives
// on one loop of server_options::connection_loops, taken in turn, and a
// controller on its admin queue's. A command's data, digests and PDUs are
// its connection's loop's work; its unit runs on the server's loop. The
// I/O path takes no lock: each connection keeps its own copy of its
// subsystem, replaced by posting when the subsystem changes. Connect,
// admin commands and the configuration take short locks.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "raid/device/status.h"
#include "target/nvme/log_pages.h"
#include "target/nvme/nvm.h"
#include "target/nvme/write_budget.h"

namespace strata::nvme {

inline constexpr std::string_view discovery_nqn = "nqn.2014-08.org.nvmexpress.discovery";

// A subsystem: its NQN, and what each host sees in it. A host's
// controllers see its own namespaces (a host's LUN map, in iSCSI terms),
// so that one array's volumes are masked per host as its LUNs are.
struct subsystem {
  std::string nqn;  // nqn.2026-11.io.strata:array
  // The hosts allowed in, by host NQN (exact match, as NQNs are compared),
  // each with the namespaces it sees (NSIDs unique, from 1).
  std::map<std::string, std::vector<namespace_config>, std::less<>> hosts;
  // What any other host sees; none: other hosts are refused.
  std::optional<std::vector<namespace_config>> anyone;

  bool allows(std::string_view host_nqn) const {
    return anyone.has_value() || hosts.contains(host_nqn);
  }
  // The namespaces `host_nqn` sees (none if it is not allowed).
  std::span<const namespace_config> namespaces_of(std::string_view host_nqn) const noexcept;
  const namespace_config* find(std::string_view host_nqn, std::uint32_t nsid) const noexcept;
};

// A port where the subsystems are reached, as hosts address it, for the
// discovery log page: this server's (port_id its own: the address hosts
// reach it at, where that is not the one they came in on: NAT, a service
// address), or another's (the partner controller's port).
struct referral {
  std::string address;  // "127.0.0.2"
  std::uint16_t port = 4420;
  std::uint16_t port_id = 2;
};

struct server_options {
  // This port's identifier (PORTID in the discovery log; the relative
  // target port of its hosts' nexuses in the SCSI layer): 1 on controller
  // a, 2 on b. Controller IDs are unique within a subsystem across both
  // controllers: this port hands out port_id << 12 | n.
  std::uint16_t port_id = 1;
  std::vector<referral> referrals;
  std::string serial = "STRATA0001";  // SN of the subsystem's controllers
  std::string model = "Strata hybrid array";
  std::string firmware = "0001";
  // MDTS: the most one command moves, and the deepest queue a host may create.
  std::uint32_t max_transfer_bytes = 1u << 20;
  std::uint32_t max_queue_entries = 128;
  std::uint16_t max_io_queues = 64;
  // In-capsule data a command may carry (IOCCSZ); MAXH2CDATA, the most one
  // H2CData PDU may carry.
  std::uint32_t in_capsule_data_bytes = 8192;
  std::uint32_t max_h2c_data_bytes = 128u * 1024;
  // ANA groups, numbered from 1: one per controller that may own a pool.
  std::uint32_t ana_groups = 2;
  // A connection that has sent no ICReq, or no Connect, by then is closed.
  std::chrono::seconds connect_timeout{15};
  // Write data waiting for its command to run (what R2Ts ask for; each
  // write's buffer is allocated when its R2T goes out): the most one queue,
  // and one host across all its controllers and queues, may hold. A write
  // past them waits for its R2T until others finish. Each at least twice
  // max_transfer_bytes (a smaller one is raised to it): a fused Compare and
  // Write by R2T reserves both halves at once.
  std::uint64_t write_buffer_bytes_per_queue = 8u << 20;
  std::uint64_t write_buffer_bytes_per_host = 64u << 20;
  // An R2T whose data stops coming for this long ends its connection
  // (C2HTermReq, PDU Sequence Error): its buffer is not held for ever. 0:
  // never.
  std::chrono::milliseconds h2c_data_timeout{30000};
  // The controllers one host may have at this port at once (each has up to
  // max_io_queues queues of in-capsule buffers): a Connect past it is
  // refused as Controller Busy.
  std::size_t max_controllers_per_host = 16;
  // Told, in words for an administrator, why a Connect was refused and
  // why a connection or controller ended. Called on the server's loop.
  std::function<void(std::string_view)> log;
  // The loops connections go to, in turn (each its socket, its PDUs, its
  // digests and copies); empty: the server's own. A connection reaches its
  // namespaces' units by posting to their loop, which must be the
  // server's: the subsystem a command found its unit in is checked there,
  // against the current one, before the unit runs it.
  std::vector<boost::asio::any_io_executor> connection_loops;
};

class connection;
class controller;

class server {
 public:
  server(boost::asio::any_io_executor loop, std::vector<subsystem> subsystems,
         server_options options);
  // REQUIRES: connections() == 0, or the connections' loops still run (a
  // connection closes on its own loop): stop(), and let the server's loop
  // run until connections() is 0, before their loops stop.
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Binds and listens at `at` (port 0: any free port), and starts accepting.
  std::expected<void, error> listen(const boost::asio::ip::tcp::endpoint& at);
  boost::asio::ip::tcp::endpoint local_endpoint() const;
  // Stops accepting and closes every connection; commands the units run
  // finish into nothing.
  void stop();
  // Closes every connection (it goes on accepting), discarding what their
  // sockets hold unread; `done` on the server's loop once each is closed
  // on its own loop: every command they posted before is ahead of it
  // there (controller/README.md, "Fencing after a freeze").
  void close_connections(std::function<void()> done);

  // Replaces the subsystem of that NQN, or adds it. Controllers of hosts
  // no longer allowed are ended; the others see the new namespaces, and
  // get a namespace attribute notice (changed namespace list) for those
  // added, removed, or now reached through another unit.
  void set_subsystem(subsystem s);
  // Each ANA group's state as this port reports it (groups absent: optimized).
  // A change raises an ANA change event on every controller.
  void set_ana_states(std::map<std::uint32_t, ana_state> states);

  const server_options& options() const noexcept { return options_; }
  // From any loop (the configuration is under a lock, off the data path).
  std::shared_ptr<const subsystem> find_subsystem(std::string_view nqn) const;
  ana_state ana_state_of(std::uint32_t group) const;
  std::uint64_t ana_change_count() const;
  // The discovery log's entries for `host_nqn`, which came in at
  // `local_address`: the discovery subsystem itself, then each subsystem
  // that allows the host, here and at each referral.
  std::vector<discovery_entry> discovery_entries(std::string_view host_nqn,
                                                 const std::string& local_address) const;
  std::uint64_t discovery_generation() const;
  health_counters health() const noexcept;
  // On the server's loop.
  std::size_t connections() const noexcept { return live_.size(); }
  std::size_t controllers() const;

 private:
  friend class connection;
  friend class controller;
  void accept();
  // A new controller's ID, unique among this port's live ones (0: none
  // left), and the controller registered under it.
  std::uint16_t add_controller(
      const std::function<std::shared_ptr<controller>(std::uint16_t id)>& make);
  std::shared_ptr<controller> find_controller(std::uint16_t id) const;
  // The write budget of the host `host_nqn`, shared by its controllers.
  std::shared_ptr<write_budget> write_budget_of(const std::string& host_nqn);
  // How many live controllers the host `host_nqn` has at this port.
  std::size_t controllers_of(std::string_view host_nqn) const;
  void remove_controller(std::uint16_t id);
  // The subsystem as it is now, read without the lock: on loop_ only
  // (where it changes).
  std::shared_ptr<const subsystem> subsystem_here(std::string_view nqn) const {
    const auto it = subsystems_.find(nqn);
    return it == subsystems_.end() ? nullptr : it->second;
  }
  // A connection ended, on its loop: it leaves live_ on the server's.
  void connection_ended(std::shared_ptr<connection> c);
  // What the last READ CAPACITY of the volume with `serial` said (0 blocks: never asked).
  struct capacity {
    std::uint64_t blocks = 0;
    bool thin = true;
  };
  capacity known_capacity(const std::string& serial) const;
  void remember_capacity(const std::string& serial, capacity c);
  // From any loop: said on the server's loop, where options_.log is called.
  void log(const std::string& what) const;

  boost::asio::any_io_executor loop_;
  server_options options_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::uint16_t listening_port_ = 0;
  std::size_t next_loop_ = 0;  // the loop the next connection goes to (options_.connection_loops)
  std::set<std::shared_ptr<connection>> live_;  // on loop_
  // The configuration and the controllers' registry: read by connections
  // on every loop when they connect and answer admin commands, changed on
  // loop_. Never taken on the I/O path.
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const subsystem>, std::less<>> subsystems_;
  std::map<std::uint16_t, std::weak_ptr<controller>> controllers_;
  std::map<std::string, std::weak_ptr<write_budget>, std::less<>> write_budgets_;
  std::uint16_t controller_counter_ = 0;
  std::map<std::uint32_t, ana_state> ana_states_;
  std::uint64_t ana_change_count_ = 1;
  std::uint64_t discovery_generation_ = 1;
  std::map<std::string, capacity, std::less<>> known_capacities_;
  // Counted by the I/O queues of every loop.
  struct {
    std::atomic<std::uint64_t> bytes_read{0}, bytes_written{0}, read_commands{0}, write_commands{0};
  } health_;
  std::shared_ptr<void> alive_ = std::make_shared<int>(0);
};

}  // namespace strata::nvme
