// The NVMe/TCP connection and controller of `server.h`, shared by the
// files that implement them: `connection.cc` (the PDU reader and writer,
// a command's data in and out: in-capsule data, R2T and H2CData, C2HData,
// the response capsule), `fabrics.cc` (Connect, Property Get and Set,
// Disconnect, the controller's life and its keep alive), `admin.cc` (the
// admin commands), `io.cc` (the NVM commands, through the units). Internal
// to target/nvme: nothing outside includes it.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "target/nvme/command.h"
#include "target/nvme/features.h"
#include "target/nvme/nvm.h"
#include "target/nvme/registers.h"
#include "target/nvme/server.h"
#include "target/nvme/status.h"
#include "target/nvme/tcp_pdu.h"
#include "target/scsi/task.h"
#include "target/stream_reader.h"

namespace strata::nvme {

namespace asio = boost::asio;
using asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// Status codes of the SGL checks (NVMe Base 2.0, generic).
namespace code {
constexpr std::uint8_t data_sgl_length_invalid = 0x0f;
constexpr std::uint8_t sgl_descriptor_type_invalid = 0x11;
}  // namespace code

// One command of a queue, from its capsule to its response: a slot of the
// queue's fixed set (as deep as the queue), reused. Its index is the
// transfer tag of its R2T, so an H2CData finds it at once.
struct slot {
  std::uint16_t index = 0;
  bool busy = false;
  std::array<std::uint8_t, sqe_bytes> sqe{};
  command_view command() const noexcept {
    return command_view(std::span<const std::uint8_t, sqe_bytes>(sqe));
  }
  std::uint16_t cid = 0;
  std::uint16_t sq_head = 0;  // SQHD as of its capsule

  // Data from the host: all of it before the command runs.
  device::aligned_buffer data;
  std::uint32_t data_bytes = 0;
  std::uint32_t received_bytes = 0;
  bool data_ready = false;
  bool digest_failed = false;  // a data digest did not match: the command fails, transiently

  // A fused Compare and Write (NVMe Base 2.0, 3.4.2): the other half (the
  // compare's is the write, and the write's the compare), from the
  // Write's capsule until the pair is answered. Neither half is answered
  // before the other's capsule and data are in, so that neither outlives
  // the other's slot.
  slot* fused_with = nullptr;
  // A fused half that never runs (its other half is missing or failed):
  // answered with `result` (or Transient Transport Error, if its own data
  // digest failed) once its data is in.
  bool fused_failed = false;

  // Write data the host sends on an R2T: the bytes reserved for it in the
  // queue's and the host's budgets (0: none; in-capsule data takes none),
  // and when its data last moved (the R2T, or an H2CData).
  bool waiting_for_buffer = false;  // queued for a reservation: no R2T yet
  std::uint32_t reserved_bytes = 0;
  bool reserved_from_host = false;  // the host's budget holds them too (none before Connect)
  std::chrono::steady_clock::time_point data_moved_at{};

  // The NVM command, as the unit runs it.
  const namespace_config* ns = nullptr;
  std::shared_ptr<const subsystem> subsys;  // keeps `ns` alive while the unit runs it
  nvm_command nvm;
  scsi::task task;
  // While a unit runs it (or it is written): its connection stays.
  std::shared_ptr<connection> hold;
  bool on_unit = false;     // a unit runs its task: it cannot be taken back
  bool responding = false;  // its response is queued: the writer frees it once written

  // The answer.
  status result = success;
  std::uint64_t result_dword = 0;
  std::vector<std::uint8_t> to_host;  // an admin command's data
};

class controller;

// One PDU on its way out: the header (digest and pad included), the data
// and its digest if enabled. A slot named in `release` is free again once
// written (its data is what this PDU carries).
struct outgoing {
  outgoing_header header;
  std::span<const std::uint8_t> data;
  bool data_digest = false;
  slot* release = nullptr;
  bool close_after = false;
};

class connection : public std::enable_shared_from_this<connection> {
 public:
  connection(server& s, tcp::socket socket);
  void start();
  // Closes the socket: the reader and writer end, commands the units run
  // finish into nothing.
  void close();
  bool closed() const noexcept { return closed_; }
  asio::any_io_executor executor() const { return executor_; }
  std::uint16_t queue_id() const noexcept { return qid_; }
  // Its controller's subsystem, as it is now (posted by the controller).
  void update_subsystem(std::shared_ptr<const subsystem> fresh) { subsys_ = std::move(fresh); }
  const std::shared_ptr<controller>& owner() const noexcept { return ctrl_; }
  // Sends the response for `s` (its data first, if any), freeing it.
  void respond(slot& s);
  // Completes an Asynchronous Event Request left outstanding on this (admin) queue.
  void complete_async_event(const async_completion& done);
  std::string peer() const { return peer_; }
  std::string local_address() const { return local_address_; }

 private:
  friend class controller;
  asio::awaitable<void> run();
  asio::awaitable<void> writer();
  asio::awaitable<void> connect_watchdog();
  // Reads exactly `into`; false (and the connection closing) if the host went away.
  asio::awaitable<bool> read(std::span<std::uint8_t> into);
  // Reads a PDU's data part: the pad, `into`, the digest; false if the
  // host went away. A digest that does not match sets `digest_failed`.
  asio::awaitable<bool> read_data(const pdu_layout& l, std::span<std::uint8_t> into,
                                  bool& digest_failed);
  void terminate(const fatal& why, std::span<const std::uint8_t> offending);
  asio::awaitable<bool> on_ic_req(std::span<const std::uint8_t> header);
  asio::awaitable<bool> on_capsule(const pdu_layout& l, std::span<const std::uint8_t> header);
  asio::awaitable<bool> on_h2c_data(const pdu_layout& l, std::span<const std::uint8_t> header);
  // The data `s` needs from the host, or the status to answer at once.
  std::expected<std::uint32_t, status> data_needed(const command_view& c);
  // Runs `s` once its data is here (or pairs a fused command first).
  void data_arrived(slot& s);
  // A fused half that cannot run: answered now if its data is in, else
  // once it is.
  void fail_fused(slot& half, status why);
  // Reserves write buffers for the commands waiting for them, in order,
  // and sends each its R2T; stops at the first that does not fit.
  void grant_buffers();
  void grant_buffers_soon();
  // Ends the connection when a host leaves an R2T unanswered.
  asio::awaitable<void> data_watch();
  void execute(slot& s);
  void execute_io(slot& s);
  void execute_fused(slot& compare);
  void run_on_unit(slot& s);
  // Hands s.task to its namespace's unit, its on_complete set: on the
  // unit's loop, after checking there that the namespace is still that
  // unit in the current subsystem (this connection's copy may be behind).
  void hand_to_unit(slot& s);
  static void on_task_done(scsi::task& t) noexcept;
  void task_done(slot& s);
  void finish(slot& s, status st, std::uint64_t result = 0);
  slot* free_slot();
  void release(slot& s);
  void send(outgoing o);
  void log(const std::string& what) const;

  // fabrics.cc
  void on_fabrics(slot& s);
  void on_connect(slot& s);
  void on_property(slot& s, bool set);
  // admin.cc
  void on_admin(slot& s);
  void identify(slot& s);
  void identify_namespace(slot& s, const namespace_config& ns);
  void namespace_capacity_read(slot& s);
  void get_log_page(slot& s);

  server& server_;
  tcp::socket socket_;
  target::stream_reader reader_;  // what socket_ received: PDUs are read from it
  asio::any_io_executor executor_;
  std::weak_ptr<void> server_alive_;
  std::string peer_;
  std::string local_address_;
  connection_terms terms_;
  std::uint8_t host_pdu_data_alignment_ = 0;
  std::shared_ptr<controller> ctrl_;
  // The subsystem as this connection last heard of it: what its I/O
  // commands find their namespaces in, without a lock.
  std::shared_ptr<const subsystem> subsys_;
  std::uint16_t qid_ = 0;
  std::uint32_t queue_entries_ = 32;
  bool sq_flow_control_ = true;
  std::uint16_t sq_head_ = 0;
  std::vector<std::unique_ptr<slot>> slots_;
  // A fused Compare waiting for its Write's capsule.
  slot* fused_compare_ = nullptr;
  // The last capsule was a fused Compare refused at once: a Write fused to
  // it is aborted as the second half of a failed fused command.
  bool failed_fused_first_ = false;
  // Write buffers (server_options::write_buffer_bytes_per_queue): reserved
  // by this queue's commands, and the commands waiting for one, in order.
  std::uint64_t reserved_bytes_ = 0;
  std::deque<slot*> waiting_for_buffer_;
  bool grant_posted_ = false;
  bool host_wake_kept_ = false;  // the host's budget holds a wake for this queue
  // Reserves `s`'s write buffer and sends its R2T (false: it did not fit).
  bool grant(slot& s);
  std::deque<outgoing> queue_;
  std::vector<asio::const_buffer> write_buffers_;  // the writer's gather list
  std::vector<std::array<std::uint8_t, digest_bytes>> write_digests_;
  asio::steady_timer write_wake_;
  asio::steady_timer connect_timer_;
  asio::steady_timer data_timer_;  // data_watch()
  bool closed_ = false;
  bool closing_ = false;  // a last PDU is queued; nothing is read or sent after it
};

// A controller: made by an admin queue's Connect, joined by its host's I/O
// queues, ended when its admin queue goes, its host's keep alive lapses,
// or the subsystem stops allowing its host.
//
// Threads: it lives on its admin queue's loop (its keep alive timer, its
// end), and its I/O queues may be on other loops: what they share with it
// (registers, features, events, queues, its subsystem) is under `mutex`,
// which only Connect, admin commands and events take. The I/O path reads
// nothing of it but heard(), which is atomic.
class controller : public std::enable_shared_from_this<controller> {
 public:
  controller(server& s, asio::any_io_executor loop, std::shared_ptr<const subsystem> subsys,
             std::uint16_t id, connect_data host, std::uint32_t keep_alive_ms);
  // Starts the keep alive watch.
  void start();
  // Closes every queue's connection, and leaves the server. From any loop.
  void end(const std::string& why);
  bool ended() const noexcept { return ended_.load(); }
  // A command came on one of its queues (traffic-based keep alive). From any loop.
  void heard() noexcept { last_heard_ns_.store(now_ns(), std::memory_order_relaxed); }
  // An event for the host: completes an outstanding request, or waits. From any loop.
  void raise(const async_event& e);
  // Closes its I/O queues (a controller reset or shutdown). From any loop.
  void drop_io_queues();
  // Its subsystem changed (`changed`: the namespaces this host sees that
  // were added, went, or moved): each queue gets the new one, and the host
  // a namespace attribute notice. From any loop.
  void subsystem_changed(std::shared_ptr<const subsystem> fresh,
                         const std::vector<std::uint32_t>& changed);
  bool discovery() const noexcept { return discovery_; }
  const std::string& subsystem_nqn() const noexcept { return subsystem_nqn_; }

  server& server_;
  std::weak_ptr<void> server_alive_;
  const std::uint16_t id;
  const connect_data host;
  // Its hosts' nexus in the SCSI layer: the host NQN and host identifier
  // ("<host NQN>,hostid,0x<32 hex digits>"), and this port.
  const std::string initiator_port;

  // Under `mutex`.
  std::mutex mutex;
  std::shared_ptr<const subsystem> subsys;  // null: the discovery controller
  controller_registers registers;
  controller_features features;
  async_events events;
  std::vector<std::uint32_t> changed_namespaces;  // since the host last read the page
  std::weak_ptr<connection> admin;
  std::map<std::uint16_t, std::weak_ptr<connection>> io_queues;

  // Its host's write budget, shared with the host's other controllers at
  // this port (set at its Connect, before any I/O queue can join it).
  std::shared_ptr<write_budget> budget;

 private:
  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  asio::awaitable<void> keep_alive_watch();
  void end_here(const std::string& why);
  const bool discovery_;
  const std::string subsystem_nqn_;
  asio::any_io_executor loop_;
  asio::steady_timer keep_alive_;
  std::atomic<std::int64_t> last_heard_ns_{now_ns()};
  std::atomic<bool> ended_{false};
};

}  // namespace strata::nvme
