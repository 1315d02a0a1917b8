// The iSCSI connection and session of `server.h`, shared by the files
// that implement them along RFC 7143's phases, as Linux-IO cuts its target:
// `login.cc` (security and operational negotiation, entering or joining a
// session), `connection.cc` (the PDU reader and writer, the full feature
// phase: commands, data, text, NOP, logout, the watchdog),
// `task_management.cc` (ABORT TASK, the resets and the waiting for
// aborted tasks). Internal to target/iscsi: nothing outside includes it.
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "target/iscsi/chap.h"
#include "target/iscsi/pdu.h"
#include "target/iscsi/server.h"
#include "target/iscsi/text.h"
#include "target/scsi/lun_map.h"
#include "target/scsi/sense.h"
#include "target/scsi/task.h"
#include "target/stream_reader.h"

namespace strata::iscsi {

namespace asio = boost::asio;
using asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
// The most write data Strata holds for one command, above any unit's
// transfer limit, so that the unit is the one to refuse a longer command.
constexpr std::uint32_t max_command_bytes = 16u << 20;
// The most key=value text one login or text exchange may spread over
// several PDUs (C bit): far above what any key set needs.
constexpr std::size_t max_text_bytes = 65536;

// The task attribute of a SCSI Command PDU (RFC 7143 11.3.1, ATTR in the
// low 3 bits of byte 1): 0 untagged and 1 simple are SIMPLE; 2 ORDERED; 3
// HEAD OF QUEUE; 4 ACA, which needs NACA support this target does not
// have, and the reserved values run as SIMPLE, as Linux-IO runs them.
inline scsi::task_attribute task_attribute_of(std::uint8_t flags) noexcept {
  switch (flags & 0x07) {
    case 2:
      return scsi::task_attribute::ordered;
    case 3:
      return scsi::task_attribute::head_of_queue;
    default:
      return scsi::task_attribute::simple;
  }
}

// Login status (RFC 7143 11.13.5): class << 8 | detail.
namespace login_status {
constexpr std::uint16_t success = 0x0000;
constexpr std::uint16_t initiator_error = 0x0200;
constexpr std::uint16_t authentication_failed = 0x0201;
constexpr std::uint16_t not_authorized = 0x0202;
constexpr std::uint16_t not_found = 0x0203;
constexpr std::uint16_t unsupported_version = 0x0205;
constexpr std::uint16_t too_many_connections = 0x0206;
constexpr std::uint16_t missing_parameter = 0x0207;
constexpr std::uint16_t session_type_not_supported = 0x0209;
constexpr std::uint16_t session_does_not_exist = 0x020a;
constexpr std::uint16_t invalid_during_login = 0x020b;
}  // namespace login_status

// iSCSI names compare without regard to case (RFC 3722 normalises them to
// lower case).
inline bool same_name(std::string_view a, std::string_view b) {
  return std::ranges::equal(a, b, [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

// The LUN a PDU's 8-byte LUN field names. One Strata cannot address (not
// single-level) reaches no unit: the map answers LOGICAL UNIT NOT SUPPORTED.
inline std::uint64_t lun_of(std::uint64_t lun_field) {
  std::array<std::uint8_t, 8> bytes;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<std::uint8_t>(lun_field >> (56 - 8 * i));
  return scsi::decode_lun(bytes).value_or(scsi::unaddressable_lun);
}

// A SCSI Response's data segment for CHECK CONDITION: SenseLength, then
// fixed-format sense data (RFC 7143 11.4.7.2).
inline std::vector<std::uint8_t> sense_segment(const scsi::sense& s) {
  const auto sense = scsi::fixed_sense(s);
  std::vector<std::uint8_t> out(2 + sense.size());
  out[0] = static_cast<std::uint8_t>(sense.size() >> 8);
  out[1] = static_cast<std::uint8_t>(sense.size());
  std::copy(sense.begin(), sense.end(), out.begin() + 2);
  return out;
}

// One PDU on its way out: the header, and a data segment that stays valid
// until it is written (kept alive by `owner`).
struct outgoing {
  bhs header;
  std::span<const std::uint8_t> data;
  std::vector<std::uint8_t> own_data;  // when the PDU carries its own bytes
  std::shared_ptr<void> owner;
  bool close_after = false;
  // Whether digests apply, as of when it was queued: they start with the
  // full feature phase, after the last login response.
  bool header_digest = false;
  bool data_digest = false;
};

class connection;
class session;

// A task management function waiting for the tasks it aborted, which
// the unit cannot stop, to finish: its response goes only after them,
// so that no aborted write lands after the initiator was told it is gone.
struct pending_tmf {
  bhs response;
  std::weak_ptr<connection> conn;  // where the response goes
  std::size_t tasks = 0;
  std::function<void()>
      then;  // after the response is queued: a reset's unit attentions, a cold reset's closing
  bool close_after = false;  // a cold reset's: the connection ends once the response is written
};

// A SCSI command in flight: its task, and the write data it gathers.
struct command : std::enable_shared_from_this<command> {
  // Its connection (allegiance, RFC 7143 6.3.3): its Data-Out come and
  // its response goes there, whichever connection of the session it is.
  std::weak_ptr<connection> conn;
  std::uint32_t itt = 0;
  std::uint64_t lun_field = 0;
  bool reads = false;
  bool writes = false;
  // Delivered in CmdSN order: its turn has come (every command before it
  // in CmdSN order has arrived), and all its data is here. It runs once both hold.
  bool in_turn = false;
  bool ready = false;
  std::uint32_t expected_bytes = 0;
  device::aligned_buffer out;  // the write data, expected_bytes long
  std::uint32_t received_bytes = 0;
  bool unsolicited_pending = false;  // unsolicited Data-Out still to come
  // Longer than Strata holds for one command: the data is read and
  // dropped, and the unit, given none, fails the command.
  bool discard = false;
  std::uint32_t data_sn = 0;         // the next Data-Out's, within its sequence
  std::uint32_t ttt = reserved_tag;  // of the R2T outstanding
  std::uint32_t r2t_sn = 0;
  std::uint32_t r2t_end = 0;  // the outstanding R2T asks up to here
  scsi::task task;
  // Held while the SCSI layer runs it: the command, and its session.
  std::shared_ptr<command> self;
  std::shared_ptr<session> sess;
  // Aborted by a task management function while the unit ran it: the
  // function's response waits for it, and it has none of its own.
  std::shared_ptr<pending_tmf> aborted_by;
  std::shared_ptr<const std::string> port;  // the initiator port name task.nexus points into
  std::size_t held_bytes = 0;               // of the session's write-data budget
};

// What RFC 7143 keeps per session, shared by the session's connections
// (several, MC/S): the CmdSN window and the order of delivery, the
// commands by initiator task tag (unique across the session; each answered
// on the connection it came on), the I_T nexus, and the budget of write
// data held. ErrorRecoveryLevel 0: a connection that fails takes its own
// tasks with it, and the session goes on on the others; the initiator
// recovers by reinstating the session or the connection.
//
// Threads: a session lives on its connections' loop (`loop`, all of them
// on one). What the units were told of its nexus lives on the units' loop
// (the LUN map's executor): announce_nexus(), reannounce_nexus() and the
// end of end() run there. The fields set before it is listed in the
// server's sessions_ (target, access, params, isid, tsih, initiator_port,
// loop) never change, and any loop may read them.
class session : public std::enable_shared_from_this<session> {
 public:
  session(server& s, std::weak_ptr<void> server_alive, asio::any_io_executor on)
      : server_(s), server_alive_(std::move(server_alive)), loop(std::move(on)) {}

  server& server_;
  std::weak_ptr<void> server_alive_;
  const asio::any_io_executor loop;
  std::shared_ptr<const target_node> target;  // null: a discovery session
  const initiator_access* access = nullptr;   // within *target
  session_params params;                      // as negotiated on the leading connection
  std::array<std::uint8_t, 6> isid{};
  std::uint16_t tsih = 0;
  // The SCSI initiator port name (RFC 7143 13.6.1: name, ",i,0x", ISID),
  // which keys unit attentions and reservations in the SCSI layer.
  std::shared_ptr<const std::string> initiator_port;
  std::uint32_t exp_cmd_sn = 0;
  std::vector<connection*> connections;  // joined, in the full feature phase or logging in to it
  std::map<std::uint32_t, std::shared_ptr<command>> commands;  // by initiator task tag
  // CmdSNs of commands an ABORT TASK named before they arrived (RFC 7143
  // 11.5.1, RefCmdSN): taken when they come, never run.
  std::vector<std::uint32_t> cancelled_cmd_sns;
  // Commands handed to a unit and not yet finished: changed on the
  // session's loop, read by a login reinstating it from another.
  std::atomic<std::size_t> executing{0};
  // Commands whose turn has come (CmdSN order) and that are not yet handed
  // to their unit, oldest first. A unit's task set orders tasks by when
  // they reach it (scsi/task_set.h), and a command reaches it only once
  // its data is here, so a command with an ORDERED task attribute waits
  // until every older one has gone to its unit, and no newer one but HEAD
  // OF QUEUE passes it (SAM-5 8.6): the task set then sees the initiator's
  // order. SIMPLE commands pass each other here as before.
  std::deque<std::shared_ptr<command>> entering;
  bool admitting = false;
  std::size_t held_write_bytes = 0;  // write data buffered for commands not yet answered
  bool ended = false;
  // Ended, and the units have heard its nexus is gone (set on their
  // loop): a session reinstating it may announce the same nexus.
  std::atomic<bool> units_released{false};

  // Takes a PDU that carries a CmdSN in order (RFC 7143 3.2.2.1): an
  // immediate one, or the one ExpCmdSN names, runs `at_turn` now (and
  // then each PDU held for the CmdSNs after it); one ahead of ExpCmdSN
  // within the window is held until the PDUs before it arrive, on any
  // connection. False (the PDU is ignored) outside the window or for a
  // CmdSN already taken, unless `even_outside`: then `at_turn` runs now.
  bool order(const bhs& h, std::uint32_t window, std::function<void()> at_turn,
             bool even_outside = false) {
    const std::uint32_t sn = h.u32(field::cmd_sn);
    if (h.immediate()) {
      at_turn();
      return true;
    }
    if (sn_less(sn, exp_cmd_sn) || sn_less(exp_cmd_sn + window - 1, sn) || ahead_.contains(sn)) {
      if (even_outside) at_turn();
      return even_outside;
    }
    if (sn != exp_cmd_sn) {
      ahead_.emplace(sn, std::move(at_turn));
      return true;
    }
    ++exp_cmd_sn;
    at_turn();
    for (auto next = ahead_.find(exp_cmd_sn); next != ahead_.end() && !ended;
         next = ahead_.find(exp_cmd_sn)) {
      auto f = std::move(next->second);
      ahead_.erase(next);
      ++exp_cmd_sn;
      f();
    }
    return true;
  }
  // Whether `c` (in `entering`) may go to its unit now, as far as task
  // order goes.
  bool may_enter(const command& c) const {
    if (c.task.attribute == scsi::task_attribute::head_of_queue) return true;
    for (const auto& older : entering) {
      if (older.get() == &c) return true;
      if (!waiting_to_enter(*older)) continue;  // aborted, or its connection gone
      if (c.task.attribute == scsi::task_attribute::ordered ||
          older->task.attribute == scsi::task_attribute::ordered)
        return false;
    }
    return true;
  }
  bool waiting_to_enter(const command& c) const {
    const auto it = commands.find(c.itt);
    return it != commands.end() && it->second.get() == &c && c.task.on_complete == nullptr &&
           !c.conn.expired();
  }
  // Gives back the write-data budget a command held.
  void release(command& c) noexcept {
    held_write_bytes -= c.held_bytes;
    c.held_bytes = 0;
  }
  // Targets are compared by name: set_target() may have replaced the node.
  bool is(std::string_view name, const std::array<std::uint8_t, 6>& id, const target_node* t,
          session_type type) const {
    const bool same_target =
        target == nullptr ? t == nullptr : t != nullptr && t->name == target->name;
    return same_target && params.type == type && id == isid &&
           same_name(params.initiator_name, name);
  }
  connection* connection_with(std::uint16_t cid) const;
  // Tells the units its I_T nexus exists, on their loop (after the login
  // response, before any command of it reaches them).
  void announce_nexus() {
    if (target == nullptr) return;
    scsi::lun_map* luns = access->luns;
    to_units(
        [self = shared_from_this(), luns] {
          for (const std::uint16_t l : luns->luns()) {
            scsi::unit_interface* unit = luns->find(l);
            unit->nexus_created(self->nexus());
            self->announced_.push_back(unit);
          }
          self->nexus_announced_ = true;
        },
        /*at_once=*/true);
  }
  // This session's I_T nexus: its initiator port, the server's target port.
  scsi::i_t_nexus nexus() const {
    return scsi::i_t_nexus{*initiator_port, server_.options().relative_target_port};
  }
  // The units behind access->luns changed (server::luns_changed). On the
  // units' loop.
  void reannounce_nexus(bool inventory_changed) {
    if (!nexus_announced_) return;  // not yet announced, or over
    const scsi::i_t_nexus nexus = this->nexus();
    std::vector<scsi::unit_interface*> now;
    for (const std::uint16_t l : access->luns->luns()) now.push_back(access->luns->find(l));
    for (scsi::unit_interface* gone : announced_) {
      if (std::ranges::find(now, gone) == now.end()) gone->nexus_lost(nexus);
    }
    for (scsi::unit_interface* unit : now) {
      if (std::ranges::find(announced_, unit) == announced_.end()) unit->nexus_created(nexus);
      if (inventory_changed)
        unit->establish_unit_attention(nexus, scsi::asc::reported_luns_data_has_changed);
    }
    announced_ = std::move(now);
  }
  // The session is over: it leaves the server's list, PDUs held for their
  // turn are dropped, and the units hear its I_T nexus is gone (once, on
  // their loop, then units_released).
  void end() {
    if (ended) return;
    ended = true;
    ahead_.clear();
    if (server_alive_.expired()) return;
    {
      std::lock_guard hold(server_.mutex_);
      server_.sessions_.erase(this);
    }
    if (target == nullptr) {
      units_released = true;
      return;
    }
    to_units(
        [self = shared_from_this()] {
          if (self->nexus_announced_) {
            self->nexus_announced_ = false;
            for (scsi::unit_interface* unit : self->announced_) unit->nexus_lost(self->nexus());
            self->announced_.clear();
          }
          self->units_released = true;
        },
        /*at_once=*/true);
  }

  // Runs `work` on the units' loop: at once where that is this session's,
  // else in order after what this session handed over before. Everything
  // this session tells the units goes this way (its commands, its nexus,
  // its resets), so they see it in that order. Commands handed over while
  // the session's loop is busy go in one post, so that a burst costs the
  // units' loop one wake-up, not one each. `at_once`: posted now, with
  // what waits before it, ahead of any response this loop sends after:
  // other sessions must see a login's nexus and a reset's effects once
  // the initiator has heard of them (a command's are the units' own).
  void to_units(std::function<void()> work, bool at_once = false) {
    if (access->luns->executor() == loop) return work();
    outbox_.push_back(std::move(work));
    if (at_once) return flush_to_units();
    if (outbox_posted_) return;
    outbox_posted_ = true;
    asio::post(loop, [self = shared_from_this()] {
      self->outbox_posted_ = false;
      self->flush_to_units();
    });
  }
  void flush_to_units() {
    if (outbox_.empty()) return;
    asio::post(access->luns->executor(), [batch = std::exchange(outbox_, {})] {
      for (const auto& w : batch) w();
    });
  }
  // On the units' loop: `c`'s task is done. Back to this session's loop
  // (at once where that is the units'), in one post with the others done
  // in the same turn of the units' loop.
  void from_units(std::shared_ptr<command> c, void (*finished)(command&)) {
    const asio::any_io_executor& units = access->luns->executor();
    if (units == loop) return finished(*c);
    done_.push_back(std::move(c));
    if (done_posted_) return;
    done_posted_ = true;
    asio::post(units, [self = shared_from_this(), finished] {
      self->done_posted_ = false;
      asio::post(self->loop, [batch = std::exchange(self->done_, {}), finished] {
        for (const auto& each : batch) finished(*each);
      });
    });
  }

 private:
  std::map<std::uint32_t, std::function<void()>> ahead_;  // by CmdSN: arrived before their turn
  // to_units()'s, on this session's loop: handed over, not yet posted.
  std::vector<std::function<void()>> outbox_;
  bool outbox_posted_ = false;
  // from_units()'s, on the units' loop: done, not yet posted back.
  std::vector<std::shared_ptr<command>> done_;
  bool done_posted_ = false;
  // On the units' loop: whether they were told of this session's nexus,
  // and which (those of access->luns when it was announced or last changed).
  bool nexus_announced_ = false;
  std::vector<scsi::unit_interface*> announced_;
};

class connection : public std::enable_shared_from_this<connection> {
 public:
  connection(server& s, tcp::socket socket)
      : server_(s),
        socket_(std::move(socket)),
        server_alive_(s.alive_),
        timing_(s.options()),
        write_wake_(socket_.get_executor()),
        watch_(socket_.get_executor()) {
    write_wake_.expires_at(asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    const auto peer = socket_.remote_endpoint(ec);
    peer_ =
        ec ? "an unknown address" : peer.address().to_string() + ":" + std::to_string(peer.port());
  }

  asio::any_io_executor executor() { return socket_.get_executor(); }
  void start() {
    auto self = shared_from_this();
    asio::co_spawn(
        socket_.get_executor(), [self]() { return self->run(); }, asio::detached);
    asio::co_spawn(
        socket_.get_executor(), [self]() { return self->writer(); }, asio::detached);
    asio::co_spawn(
        socket_.get_executor(), [self]() { return self->watchdog(); }, asio::detached);
  }
  void close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    write_wake_.cancel();
    watch_.cancel();
  }
  // Asks the initiator to log out within `within` (Asynchronous Message,
  // event 1); closes the connection if it is still here after that.
  void request_logout(std::chrono::seconds within);
  bool in_full_feature() const noexcept { return logged_in_ && !closed_; }
  // Whether the reader may go on: not closed, and no read has failed.
  bool readable() const noexcept { return !closed_ && !read_failed_; }
  bool serves(std::string_view target) const noexcept {
    return target_ != nullptr && target_->name == target;
  }
  const session* joined_session() const noexcept { return session_.get(); }
  std::uint16_t cid() const noexcept { return cid_; }
  // Leaves its session, once: the commands with allegiance to this
  // connection are dropped (those the unit runs finish into nothing), and
  // a session left with no connection ends.
  void leave_session();

 private:
  asio::awaitable<void> run();
  // Where server_options::connection_loops has several loops: a connection
  // joining a session (MC/S) must run on the session's loop. Its first
  // PDU, a Login Request naming the session's TSIH, is looked at without
  // being taken (MSG_PEEK); if the session lives on another loop, the
  // socket moves there as a new connection, and this one ends (false).
  asio::awaitable<bool> stay_or_move();
  asio::awaitable<bool> read_header(bhs& h);
  asio::awaitable<bool> read_data(const bhs& h, std::span<std::uint8_t> into);
  asio::awaitable<bool> skip_data(const bhs& h);
  asio::awaitable<bool> login();
  // Checks the first PDU of a login that names a session to join (TSIH
  // nonzero): a login status other than success, with `why`, refuses it.
  std::uint16_t find_session_to_join(std::uint16_t tsih, std::string& why);
  // The login's last step, into the full feature phase: a new session
  // (reinstating an older one of the same initiator port) or a joined one
  // (reinstating an older connection of the same CID). A login status
  // other than success refuses the login.
  asio::awaitable<std::uint16_t> enter_session(bhs& response, std::string& why);
  // The security stage's keys in one login PDU: AuthMethod and the CHAP
  // exchange. Adds the answers; a login status other than success fails
  // the login, with `why`.
  std::uint16_t authenticate(const key_values& keys, key_values& answers, std::string& why);
  asio::awaitable<void> full_feature();
  asio::awaitable<bool> on_scsi_command(const bhs& h);
  // A command whose CmdSN is taken: registered by its tag, then data
  // asked for or the command run.
  void take_command(const bhs& h, const std::shared_ptr<command>& c);
  asio::awaitable<bool> on_data_out(const bhs& h);
  asio::awaitable<bool> on_text(const bhs& h);
  void answer_text(const bhs& h, std::vector<std::uint8_t> data);
  // The next piece of the Text Response in text_rest_.
  void send_text_response(const bhs& h);
  void on_nop_out(const bhs& h, std::vector<std::uint8_t> ping);
  void on_task_management(const bhs& h);
  void manage_tasks(const bhs& h);
  // Aborts `c` for `tmf`: forgets a command still gathering data or
  // waiting for its turn; for one the unit runs, makes `tmf` wait for it.
  void abort(command& c, const std::shared_ptr<pending_tmf>& tmf);
  static void finish_tmf(pending_tmf& tmf);
  // Pings a quiet initiator, and closes a login that takes too long or a
  // connection whose initiator stopped answering.
  asio::awaitable<void> watchdog();
  void log(const std::string& what) const;
  void on_logout(const bhs& h);
  void log_out(const bhs& h);
  void reject(const bhs& h, reject_reason why);
  // Takes `h` in CmdSN order (session::order), running `at_turn` then.
  bool order(const bhs& h, std::function<void()> at_turn, bool even_outside = false) {
    return session_->order(h, timing_.command_window, std::move(at_turn), even_outside);
  }
  // Fails a SCSI command the transport cannot run, with CHECK CONDITION
  // and `why`, or TASK SET FULL without one, taking its CmdSN so that the
  // window moves on.
  void refuse_command(const bhs& h, const std::optional<scsi::sense>& why);
  void send_r2t(command& c);
  // Runs `c` once its turn has come and its data is here.
  void run_when_ready(command& c);
  void execute(command& c);
  // `c` went to its unit: it leaves the session's `entering`, and the
  // commands it held back go.
  void entered(command& c);
  static void on_task_done(scsi::task& t) noexcept;
  // on_task_done's work, back on the session's loop.
  static void task_finished(command& c);
  void respond(command& c);
  void stamp(bhs& h, bool advance_stat_sn);
  void send(outgoing o);
  asio::awaitable<void> writer();

  server& server_;
  tcp::socket socket_;
  target::stream_reader reader_;  // what socket_ received: PDUs are read from it
  bool closed_ = false;
  bool closing_ = false;  // the last PDU is queued: read nothing more
  bool portal_group_sent_ = false;
  bool header_digest_ = false;  // in force (negotiated in params_, on after login)
  bool data_digest_ = false;
  // Login PDUs carry at most 8192 bytes of data (RFC 7143 6.1); then what
  // Strata declared as its MaxRecvDataSegmentLength.
  std::uint32_t max_incoming_segment_bytes_ = 8192;
  std::weak_ptr<void> server_alive_;
  const server_options timing_;  // the server's options, kept: connections may outlive the server
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  bool logged_in_ = false;
  bool read_failed_ = false;  // the socket said end of file or error: read no more
  std::array<std::uint8_t, 6> isid_{};
  std::uint16_t cid_ = 0;
  std::string peer_;  // the initiator's address, for messages
  std::chrono::steady_clock::time_point last_heard_ = started_;  // the last PDU from the initiator
  bool ping_outstanding_ = false;
  std::chrono::steady_clock::time_point ping_sent_;
  std::optional<std::chrono::steady_clock::time_point> logout_deadline_;
  std::size_t executing_ = 0;  // this connection's commands handed to a unit and not yet finished
  // Login and Text key=value text continued over several PDUs (the
  // initiator's C bit): what came so far, and the Text exchange's tag.
  std::vector<std::uint8_t> text_in_;
  std::uint32_t text_in_itt_ = reserved_tag;
  std::uint32_t text_in_ttt_ = reserved_tag;
  // A Text Response longer than one PDU: its bytes, how many went, and the
  // target transfer tag the initiator asks for the rest with.
  std::vector<std::uint8_t> text_rest_;
  std::size_t text_rest_sent_ = 0;
  std::uint32_t text_rest_ttt_ = reserved_tag;
  session_params
      params_;  // the session's, with this connection's own keys (digests, segment lengths)
  std::shared_ptr<const target_node> target_;
  // What the initiator may do, set by the first login PDU: for a normal
  // session, its entry in the target's list; for discovery, the server's.
  const initiator_access* access_ = nullptr;
  // Where authentication stands: AuthMethod to come, CHAP_A, CHAP_N/CHAP_R, done.
  enum class auth_step : std::uint8_t { method, algorithm, response, done };
  auth_step auth_ = auth_step::done;
  std::optional<chap_target> chap_;
  // The session: joined at the end of login (for a connection joining an
  // existing session, found at its first PDU).
  std::shared_ptr<session> session_;
  bool joined_ = false;                 // in session_->connections
  std::uint32_t login_exp_cmd_sn_ = 0;  // a new session's ExpCmdSN while it logs in
  std::uint32_t stat_sn_ = 0;
  std::uint32_t next_ttt_ = 1;
  std::deque<outgoing> queue_;
  // The writer's gather list and each PDU's digests and padding, reused.
  std::vector<asio::const_buffer> write_buffers_;
  std::vector<std::array<std::uint8_t, 8>> write_tails_;
  asio::steady_timer write_wake_;
  asio::steady_timer watch_;
};

}  // namespace strata::iscsi
