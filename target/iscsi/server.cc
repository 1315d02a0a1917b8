#include "target/iscsi/server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <cctype>
#include <cstring>
#include <deque>
#include <map>

#include "target/iscsi/digest.h"
#include "target/iscsi/pdu.h"
#include "target/scsi/lun_map.h"
#include "target/scsi/sense.h"
#include "target/scsi/task.h"

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
scsi::task_attribute task_attribute_of(std::uint8_t flags) noexcept {
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
bool same_name(std::string_view a, std::string_view b) {
  return std::ranges::equal(a, b, [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  });
}

// The LUN a PDU's 8-byte LUN field names. One Strata cannot address (not
// single-level) reaches no unit: the map answers LOGICAL UNIT NOT SUPPORTED.
std::uint64_t lun_of(std::uint64_t lun_field) {
  std::array<std::uint8_t, 8> bytes;
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(lun_field >> (56 - 8 * i));
  return scsi::decode_lun(bytes).value_or(scsi::unaddressable_lun);
}

// A SCSI Response's data segment for CHECK CONDITION: SenseLength, then
// fixed-format sense data (RFC 7143 11.4.7.2).
std::vector<std::uint8_t> sense_segment(const scsi::sense& s) {
  const auto sense = scsi::fixed_sense(s);
  std::vector<std::uint8_t> out(2 + sense.size());
  out[0] = static_cast<std::uint8_t>(sense.size() >> 8);
  out[1] = static_cast<std::uint8_t>(sense.size());
  std::copy(sense.begin(), sense.end(), out.begin() + 2);
  return out;
}

// One PDU on its way out: the header, and a data segment that stays valid
// until it is written (kept alive by `owner`).
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
  std::function<void()> then;  // after the response is queued: a reset's unit attentions, a cold reset's closing
  bool close_after = false;    // a cold reset's: the connection ends once the response is written
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
  device::aligned_buffer out;     // the write data, expected_bytes long
  std::uint32_t received_bytes = 0;
  bool unsolicited_pending = false;  // unsolicited Data-Out still to come
  // Longer than Strata holds for one command: the data is read and
  // dropped, and the unit, given none, fails the command.
  bool discard = false;
  std::uint32_t data_sn = 0;  // the next Data-Out's, within its sequence
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
  std::size_t held_bytes = 0;  // of the session's write-data budget
};

// What RFC 7143 keeps per session, shared by the session's connections
// (several, MC/S): the CmdSN window and the order of delivery, the
// commands by initiator task tag (unique across the session; each answered
// on the connection it came on), the I_T nexus, and the budget of write
// data held. ErrorRecoveryLevel 0: a connection that fails takes its own
// tasks with it, and the session goes on on the others; the initiator
// recovers by reinstating the session or the connection.
class session : public std::enable_shared_from_this<session> {
 public:
  session(server& s, std::weak_ptr<void> server_alive) : server_(s), server_alive_(std::move(server_alive)) {}

  server& server_;
  std::weak_ptr<void> server_alive_;
  std::shared_ptr<const target_node> target;  // null: a discovery session
  const initiator_access* access = nullptr;    // within *target
  session_params params;  // as negotiated on the leading connection
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
  std::size_t executing = 0;  // commands handed to a unit and not yet finished
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

  // Takes a PDU that carries a CmdSN in order (RFC 7143 3.2.2.1): an
  // immediate one, or the one ExpCmdSN names, runs `at_turn` now (and
  // then each PDU held for the CmdSNs after it); one ahead of ExpCmdSN
  // within the window is held until the PDUs before it arrive, on any
  // connection. False (the PDU is ignored) outside the window or for a
  // CmdSN already taken, unless `even_outside`: then `at_turn` runs now.
  bool order(const bhs& h, std::uint32_t window, std::function<void()> at_turn, bool even_outside = false) {
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
    for (auto next = ahead_.find(exp_cmd_sn); next != ahead_.end() && !ended; next = ahead_.find(exp_cmd_sn)) {
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
      if (c.task.attribute == scsi::task_attribute::ordered || older->task.attribute == scsi::task_attribute::ordered)
        return false;
    }
    return true;
  }
  bool waiting_to_enter(const command& c) const {
    const auto it = commands.find(c.itt);
    return it != commands.end() && it->second.get() == &c && c.task.on_complete == nullptr && !c.conn.expired();
  }
  // Gives back the write-data budget a command held.
  void release(command& c) noexcept {
    held_write_bytes -= c.held_bytes;
    c.held_bytes = 0;
  }
  // Targets are compared by name: set_target() may have replaced the node.
  bool is(std::string_view name, const std::array<std::uint8_t, 6>& id, const target_node* t, session_type type) const {
    const bool same_target = target == nullptr ? t == nullptr : t != nullptr && t->name == target->name;
    return same_target && params.type == type && id == isid && same_name(params.initiator_name, name);
  }
  connection* connection_with(std::uint16_t cid) const;
  void announce_nexus() {
    if (target == nullptr) return;
    for (const std::uint16_t l : access->luns->luns()) {
      scsi::unit_interface* unit = access->luns->find(l);
      unit->nexus_created(nexus());
      announced_.push_back(unit);
    }
    nexus_announced_ = true;
  }
  // This session's I_T nexus: its initiator port, the server's target port.
  scsi::i_t_nexus nexus() const { return scsi::i_t_nexus{*initiator_port, server_.options().relative_target_port}; }
  // The units behind access->luns changed (server::luns_changed).
  void reannounce_nexus(bool inventory_changed) {
    if (!nexus_announced_ || ended) return;
    const scsi::i_t_nexus nexus = this->nexus();
    std::vector<scsi::unit_interface*> now;
    for (const std::uint16_t l : access->luns->luns()) now.push_back(access->luns->find(l));
    for (scsi::unit_interface* gone : announced_) {
      if (std::ranges::find(now, gone) == now.end()) gone->nexus_lost(nexus);
    }
    for (scsi::unit_interface* unit : now) {
      if (std::ranges::find(announced_, unit) == announced_.end()) unit->nexus_created(nexus);
      if (inventory_changed) unit->establish_unit_attention(nexus, scsi::asc::reported_luns_data_has_changed);
    }
    announced_ = std::move(now);
  }
  // The session is over: the units hear its I_T nexus is gone (once), it
  // leaves the server's list, and PDUs held for their turn are dropped.
  void end() {
    if (ended) return;
    ended = true;
    ahead_.clear();
    if (server_alive_.expired()) return;
    server_.sessions_.erase(this);
    if (!nexus_announced_) return;
    nexus_announced_ = false;
    for (scsi::unit_interface* unit : announced_) unit->nexus_lost(nexus());
    announced_.clear();
  }

 private:
  std::map<std::uint32_t, std::function<void()>> ahead_;  // by CmdSN: arrived before their turn
  bool nexus_announced_ = false;
  // The units told of this session's nexus: those of access->luns when it
  // was announced or last changed.
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
    peer_ = ec ? "an unknown address" : peer.address().to_string() + ":" + std::to_string(peer.port());
  }

  void start() {
    auto self = shared_from_this();
    asio::co_spawn(socket_.get_executor(), [self]() { return self->run(); }, asio::detached);
    asio::co_spawn(socket_.get_executor(), [self]() { return self->writer(); }, asio::detached);
    asio::co_spawn(socket_.get_executor(), [self]() { return self->watchdog(); }, asio::detached);
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
  bool serves(std::string_view target) const noexcept { return target_ != nullptr && target_->name == target; }
  const session* joined_session() const noexcept { return session_.get(); }
  std::uint16_t cid() const noexcept { return cid_; }
  // Leaves its session, once: the commands with allegiance to this
  // connection are dropped (those the unit runs finish into nothing), and
  // a session left with no connection ends.
  void leave_session();

 private:
  asio::awaitable<void> run();
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
  void respond(command& c);
  void stamp(bhs& h, bool advance_stat_sn);
  void send(outgoing o);
  asio::awaitable<void> writer();

  server& server_;
  tcp::socket socket_;
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
  session_params params_;  // the session's, with this connection's own keys (digests, segment lengths)
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
  bool joined_ = false;  // in session_->connections
  std::uint32_t login_exp_cmd_sn_ = 0;  // a new session's ExpCmdSN while it logs in
  std::uint32_t stat_sn_ = 0;
  std::uint32_t next_ttt_ = 1;
  std::deque<outgoing> queue_;
  asio::steady_timer write_wake_;
  asio::steady_timer watch_;
};

connection* session::connection_with(std::uint16_t cid) const {
  for (connection* c : connections) {
    if (c->cid() == cid) return c;
  }
  return nullptr;
}

void connection::leave_session() {
  if (!joined_) return;
  joined_ = false;
  session& s = *session_;
  std::erase(s.connections, this);
  for (auto it = s.commands.begin(); it != s.commands.end();) {
    command& c = *it->second;
    if (c.conn.lock().get() != this) {
      ++it;
      continue;
    }
    if (c.task.on_complete == nullptr) s.release(c);  // not run: its budget is free now; else when it finishes
    it = s.commands.erase(it);
  }
  if (s.connections.empty()) s.end();
}
asio::awaitable<bool> connection::read_header(bhs& h) {
  auto [ec, n] = co_await asio::async_read(socket_, asio::buffer(h.wire().data(), bhs_bytes), use_tuple);
  if (ec) co_return false;
  last_heard_ = std::chrono::steady_clock::now();  // any PDU shows the initiator alive
  ping_outstanding_ = false;
  std::vector<std::uint8_t> ahs;
  if (h.ahs_bytes() > 0) {
    // Strata uses no AHS (no bidirectional commands, no extended CDBs):
    // read past it; the command that carried it is rejected.
    ahs.resize(h.ahs_bytes());
    auto [ec2, n2] = co_await asio::async_read(socket_, asio::buffer(ahs), use_tuple);
    if (ec2) co_return false;
  }
  if (header_digest_) {
    std::uint8_t d[4];
    auto [ec3, n3] = co_await asio::async_read(socket_, asio::buffer(d), use_tuple);
    if (ec3) co_return false;
    // The digest covers the BHS and the AHS. An error leaves the PDU's
    // length unknown: the connection cannot resynchronise (RFC 7143 7.8),
    // so it ends.
    if (get_digest(d) != crc32c(ahs, crc32c(h.wire()))) co_return false;
  }
  // More than this side declared it accepts: a protocol error, and no
  // allocation driven by a header field.
  if (h.data_segment_bytes() > max_incoming_segment_bytes_) co_return false;
  co_return true;
}

asio::awaitable<bool> connection::read_data(const bhs& h, std::span<std::uint8_t> into) {
  const std::uint32_t n = h.data_segment_bytes();
  std::uint8_t tail[8];
  const std::uint32_t pad = padded(n) - n;
  // An empty data segment has no digest (RFC 7143 11.1).
  const bool digest = data_digest_ && n > 0;
  std::array<asio::mutable_buffer, 2> bufs{asio::buffer(into.data(), n), asio::buffer(tail, pad + (digest ? 4 : 0))};
  auto [ec, got] = co_await asio::async_read(socket_, bufs, use_tuple);
  if (ec) {
    // The initiator went away (or closed its side): nothing more will
    // come. Unlike a digest error, this ends the connection; reading on
    // would wait for good.
    read_failed_ = true;
    co_return false;
  }
  if (digest) {
    std::uint32_t d = crc32c({into.data(), n});
    d = crc32c({tail, pad}, d);
    if (get_digest(tail + pad) != d) {
      reject(h, reject_reason::data_digest_error);
      co_return false;  // the caller drops the PDU; the connection goes on
    }
  }
  co_return true;
}

asio::awaitable<bool> connection::skip_data(const bhs& h) {
  std::vector<std::uint8_t> sink(h.data_segment_bytes());
  co_await read_data(h, sink);  // a digest error is answered there; the PDU is dropped either way
  co_return readable();
}

asio::awaitable<void> connection::run() {
  auto self = shared_from_this();  // the frame must not outlive the connection
  const bool logged_in = co_await login();
  if (logged_in) co_await full_feature();
  // A last PDU (a login failure, a logout response) closes the connection
  // once written; otherwise the initiator went away, or broke the protocol.
  if (!closing_) close();
  // Tasks still running keep their commands alive; they finish into nothing.
  leave_session();
  if (!server_alive_.expired()) server_.live_.erase(shared_from_this());
}

void connection::stamp(bhs& h, bool advance_stat_sn) {
  h.set_u32(field::stat_sn, advance_stat_sn ? stat_sn_++ : stat_sn_);
  const std::uint32_t exp_cmd_sn = session_ ? session_->exp_cmd_sn : login_exp_cmd_sn_;
  h.set_u32(field::exp_cmd_sn, exp_cmd_sn);
  // The window closes (MaxCmdSN = ExpCmdSN - 1) while the session holds
  // its budget of write data: the responses that free it reopen it.
  const bool full = session_ && session_->held_write_bytes >= timing_.max_held_write_bytes;
  h.set_u32(field::max_cmd_sn, exp_cmd_sn + (full ? 0 : timing_.command_window) - 1);
}

void connection::send(outgoing o) {
  if (closed_ || closing_) return;
  closing_ = o.close_after;
  o.header_digest = header_digest_;
  o.data_digest = data_digest_;
  if (!o.own_data.empty()) o.data = o.own_data;
  queue_.push_back(std::move(o));
  write_wake_.cancel_one();
}

asio::awaitable<void> connection::writer() {
  auto self = shared_from_this();
  while (!closed_) {
    if (queue_.empty()) {
      co_await write_wake_.async_wait(use_tuple);
      continue;
    }
    outgoing o = std::move(queue_.front());
    queue_.pop_front();
    o.header.set_data_segment_bytes(static_cast<std::uint32_t>(o.data.size()));
    std::uint8_t header_digest[4];
    std::uint8_t tail[8] = {};
    const auto n = static_cast<std::uint32_t>(o.data.size());
    const std::uint32_t pad = padded(n) - n;
    std::vector<asio::const_buffer> bufs{asio::buffer(o.header.wire().data(), bhs_bytes)};
    if (o.header_digest) {
      put_digest(crc32c(o.header.wire()), header_digest);
      bufs.push_back(asio::buffer(header_digest));
    }
    if (n > 0) {
      bufs.push_back(asio::buffer(o.data.data(), n));
      std::uint32_t tail_bytes = pad;
      if (o.data_digest) {
        std::uint32_t d = crc32c(o.data);
        d = crc32c({tail, pad}, d);
        put_digest(d, tail + pad);
        tail_bytes += 4;
      }
      if (tail_bytes > 0) bufs.push_back(asio::buffer(tail, tail_bytes));
    }
    auto [ec, written] = co_await asio::async_write(socket_, bufs, use_tuple);
    if (ec || o.close_after) {
      close();
      co_return;
    }
  }
}

asio::awaitable<bool> connection::login() {
  bool first = true;
  for (;;) {
    bhs h;
    if (const bool ok = co_await read_header(h); !ok) co_return false;
    std::vector<std::uint8_t> data(h.data_segment_bytes());
    if (const bool ok = co_await read_data(h, data); !ok) co_return false;
    bhs r;
    r.set_opcode(opcode::login_response);
    std::memcpy(r.wire().data() + field::isid, h.wire().data() + field::isid, 6);
    r.set_initiator_task_tag(h.initiator_task_tag());
    auto fail = [&](std::uint16_t status, const std::string& why) {
      r.set_byte(field::status_class, static_cast<std::uint8_t>(status >> 8));
      r.set_byte(field::status_detail, static_cast<std::uint8_t>(status));
      stamp(r, true);
      send({r, {}, {}, nullptr, true});
      log("iscsi: login of " + (params_.initiator_name.empty() ? "an initiator" : "initiator " + params_.initiator_name) +
          " from " + peer_ + " refused: " + why);
      return false;
    };
    if (h.opcode() != opcode::login_request) co_return fail(login_status::invalid_during_login, "a PDU other than Login Request during login");
    if (!session_) login_exp_cmd_sn_ = h.u32(field::cmd_sn);
    stat_sn_ = h.u32(field::exp_stat_sn);
    if (h.byte(3) > 0) co_return fail(login_status::unsupported_version, "iSCSI version-min above 0");
    const std::uint16_t tsih = h.u16(field::tsih);
    if (first) {
      std::memcpy(isid_.data(), h.wire().data() + field::isid, isid_.size());
      cid_ = h.u16(field::cid);
    }
    const unsigned csg = login_flags::csg(h.flags());
    const unsigned nsg = login_flags::nsg(h.flags());
    bool transit = (h.flags() & login_flags::transit) != 0;
    if (csg != security_negotiation && csg != operational_negotiation) co_return fail(login_status::initiator_error, "login stage " + std::to_string(csg));
    if (transit && (nsg == 2 || nsg <= csg)) co_return fail(login_status::initiator_error, "a transit to reserved or earlier stage " + std::to_string(nsg));
    // Keys continued in the next PDU (C bit): each such PDU gets an empty
    // response, and the keys are read once they are whole.
    text_in_.insert(text_in_.end(), data.begin(), data.end());
    if (text_in_.size() > max_text_bytes) co_return fail(login_status::initiator_error, "login keys over 64 KiB");
    if ((h.flags() & login_flags::continue_) != 0) {
      if (transit) co_return fail(login_status::initiator_error, "a Login Request with both C and T set");
      r.set_flags(login_flags::make(false, csg, csg));
      stamp(r, true);
      send({r, {}, {}, nullptr, false});
      continue;
    }
    auto keys = parse_text(text_in_);
    text_in_.clear();
    if (!keys) co_return fail(login_status::initiator_error, keys.error());
    for (const auto& [k, v] : *keys) {
      if (k == "SessionType" && v != "Normal" && v != "Discovery") {
        co_return fail(login_status::session_type_not_supported, "SessionType=" + v.substr(0, 64) + " is not supported");
      }
      // A connection joining a session runs with what the session's first
      // connection negotiated (SessionType, declarative, may repeat it).
      if (tsih != 0 && is_leading_only_key(k) && k != "SessionType") {
        co_return fail(login_status::initiator_error, k + " on a connection joining a session; only the session's first connection negotiates it");
      }
    }
    // The names come in the first PDU, in whichever stage it is.
    key_values answers = negotiate(*keys, server_.options().offer, params_);
    if (first) {
      first = false;
      if (params_.initiator_name.empty()) co_return fail(login_status::missing_parameter, "no InitiatorName");
      if (params_.type == session_type::normal) {
        if (params_.target_name.empty()) co_return fail(login_status::missing_parameter, "no TargetName");
        target_ = server_.find_target(params_.target_name);
        if (target_ == nullptr) co_return fail(login_status::not_found, "no target " + params_.target_name);
        access_ = target_->access_for(params_.initiator_name);
        if (access_ == nullptr) co_return fail(login_status::not_authorized, "not allowed to log in to " + target_->name);
      } else {
        access_ = &server_.options().discovery;
      }
      if (tsih != 0) {
        std::string why;
        if (const std::uint16_t status = find_session_to_join(tsih, why); status != login_status::success) co_return fail(status, why);
      }
      auth_ = access_->chap ? auth_step::method : auth_step::done;
    }
    if (csg == security_negotiation) {
      std::string why;
      const std::uint16_t status = authenticate(*keys, answers, why);
      if (status != login_status::success) co_return fail(status, why);
      if (auth_ == auth_step::method && transit) {
        co_return fail(login_status::authentication_failed, "leaving the security stage without AuthMethod; this initiator must use CHAP");
      }
      // The target stays in the security stage until the exchange is done
      // (RFC 7143 6.2: it may refuse the transit).
      if (auth_ != auth_step::done) transit = false;
    } else if (auth_ != auth_step::done) {
      co_return fail(login_status::authentication_failed, "the operational stage before CHAP; this initiator must authenticate");
    }
    if (!portal_group_sent_ && params_.type == session_type::normal) {
      answers.emplace_back("TargetPortalGroupTag", std::to_string(server_.options().relative_target_port));  // in the first response only
      portal_group_sent_ = true;
    }
    const bool entering = transit && nsg == full_feature_phase;
    const bool new_session = !session_;
    if (entering) {
      std::string why;
      const std::uint16_t status = co_await enter_session(r, why);
      if (closed_) co_return false;
      if (status != login_status::success) co_return fail(status, why);
    }
    r.set_flags(login_flags::make(transit, csg, transit ? nsg : csg));
    stamp(r, true);
    send({r, {}, format_text(answers), nullptr, false});
    if (entering) {
      header_digest_ = params_.header_digest;
      data_digest_ = params_.data_digest;
      max_incoming_segment_bytes_ = params_.target_max_recv_data_segment_bytes;
      logged_in_ = true;
      if (new_session) session_->announce_nexus();
      co_return true;
    }
  }
}

std::uint16_t connection::find_session_to_join(std::uint16_t tsih, std::string& why) {
  session* found = nullptr;
  if (!server_alive_.expired()) {
    for (session* s : server_.sessions_) {
      if (s->tsih == tsih && s->is(params_.initiator_name, isid_, target_.get(), params_.type)) found = s;
    }
  }
  if (found == nullptr) {
    why = "TSIH " + std::to_string(tsih) + " names no session of this initiator port";
    return login_status::session_does_not_exist;
  }
  session_ = found->shared_from_this();
  // The session's operational parameters, with this connection's own
  // (digests, data segment lengths) as negotiated so far.
  const session_params own = params_;
  params_ = found->params;
  params_.header_digest = own.header_digest;
  params_.data_digest = own.data_digest;
  params_.initiator_max_recv_data_segment_bytes = own.initiator_max_recv_data_segment_bytes;
  params_.target_max_recv_data_segment_bytes = own.target_max_recv_data_segment_bytes;
  return login_status::success;
}

asio::awaitable<std::uint16_t> connection::enter_session(bhs& response, std::string& why) {
  if (server_alive_.expired()) {
    close();
    co_return login_status::success;  // the caller sees closed_
  }
  asio::steady_timer wait(socket_.get_executor());
  if (session_) {
    // Joining a session (MC/S). A connection with the same CID is an older
    // one of this initiator's (connection reinstatement, RFC 7143 6.3.4):
    // it ends, its tasks with it, and this one starts once those the
    // units run have finished, so that none of its writes lands after
    // this connection's.
    session& s = *session_;
    if (s.ended) {
      why = "the session ended while this connection logged in";
      co_return login_status::session_does_not_exist;
    }
    connection* older = s.connection_with(cid_);
    if (older == nullptr && s.connections.size() >= s.params.max_connections) {
      why = "the session has its " + std::to_string(s.params.max_connections) + " connection(s) (MaxConnections)";
      co_return login_status::too_many_connections;
    }
    s.connections.push_back(this);  // first: the session lives on while the older connection leaves
    joined_ = true;
    if (older != nullptr) {
      log("iscsi: initiator " + params_.initiator_name + " logged in connection " + std::to_string(cid_) + " again from " + peer_ +
          "; the older connection ends");
      auto keep = older->shared_from_this();
      older->close();
      older->leave_session();
      while (keep->executing_ > 0 && !closed_) {
        wait.expires_after(std::chrono::milliseconds(1));
        co_await wait.async_wait(use_tuple);
      }
    }
    response.set_u16(field::tsih, s.tsih);
    co_return login_status::success;
  }
  // A new session. Session reinstatement (RFC 7143 6.3.5): an older
  // session of the same initiator port ends, and the new one starts only
  // once the older one's tasks have finished, so that none of its writes
  // can land after the new session's.
  std::vector<std::shared_ptr<session>> older;
  for (session* s : server_.sessions_) {
    if (s->is(params_.initiator_name, isid_, target_.get(), params_.type)) older.push_back(s->shared_from_this());
  }
  for (const auto& s : older) {
    log("iscsi: initiator " + params_.initiator_name + " logged in again from " + peer_ + "; its older session ends");
    for (connection* c : std::vector<connection*>(s->connections)) c->close();
    s->end();  // now, before the new session announces the same nexus
  }
  for (const auto& s : older) {
    while (s->executing > 0 && !closed_) {
      wait.expires_after(std::chrono::milliseconds(1));
      co_await wait.async_wait(use_tuple);
    }
  }
  if (closed_ || server_alive_.expired()) {
    close();
    co_return login_status::success;
  }
  auto s = std::make_shared<session>(server_, server_alive_);
  s->target = target_;
  s->access = access_;
  s->params = params_;
  s->isid = isid_;
  s->tsih = server_.next_tsih();
  s->initiator_port = std::make_shared<const std::string>(params_.initiator_name + ",i,0x" + encode_hex(isid_).substr(2));
  s->exp_cmd_sn = login_exp_cmd_sn_;
  s->connections.push_back(this);
  server_.sessions_.insert(s.get());
  session_ = std::move(s);
  joined_ = true;
  response.set_u16(field::tsih, session_->tsih);
  co_return login_status::success;
}

std::uint16_t connection::authenticate(const key_values& keys, key_values& answers, std::string& why) {
  auto find = [&](std::string_view name) -> const std::string* {
    for (const auto& [k, v] : keys) {
      if (k == name) return &v;
    }
    return nullptr;
  };
  if (const std::string* methods = find("AuthMethod")) {
    if (auth_ != auth_step::method && auth_ != auth_step::done) {
      why = "AuthMethod offered again in the middle of CHAP";
      return login_status::initiator_error;
    }
    bool none = false;
    bool chap = false;
    for (std::string_view rest = *methods;;) {
      const auto comma = rest.find(',');
      none = none || rest.substr(0, comma) == "None";
      chap = chap || rest.substr(0, comma) == "CHAP";
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (access_->chap) {
      if (!chap) {
        why = "this initiator must use CHAP; it offers AuthMethod=" + methods->substr(0, 64);
        return login_status::authentication_failed;
      }
      answers.emplace_back("AuthMethod", "CHAP");
      auth_ = auth_step::algorithm;
      chap_.emplace(*access_->chap, access_->mutual_chap);
    } else {
      if (!none) {
        why = "AuthMethod=" + methods->substr(0, 64) + " offered, and no CHAP secret is configured for this initiator";
        return login_status::authentication_failed;
      }
      answers.emplace_back("AuthMethod", "None");
    }
  }
  const bool algorithm = find("CHAP_A") != nullptr;
  const bool response = find("CHAP_N") != nullptr || find("CHAP_R") != nullptr;
  if (algorithm || response) {
    const auth_step expected = algorithm ? auth_step::algorithm : auth_step::response;
    if (auth_ != expected || (algorithm && response)) {
      why = "CHAP keys out of order";
      return login_status::initiator_error;
    }
    auto step = algorithm ? chap_->challenge(keys) : chap_->verify(keys);
    if (!step) {
      why = step.error().reason;
      return step.error().initiator_error ? login_status::initiator_error : login_status::authentication_failed;
    }
    answers.insert(answers.end(), step->begin(), step->end());
    auth_ = algorithm ? auth_step::response : auth_step::done;
  }
  return login_status::success;
}

asio::awaitable<void> connection::full_feature() {
  auto self = shared_from_this();
  while (!closed_ && !closing_) {
    bhs h;
    if (const bool ok = co_await read_header(h); !ok) co_return;
    if (h.ahs_bytes() > 0 && h.opcode() == opcode::scsi_command) {
      // Extended CDBs and bidirectional commands: not in Strata's command set.
      if (const bool ok = co_await skip_data(h); !ok) co_return;
      refuse_command(h, scsi::make_sense(scsi::sense_key::illegal_request, scsi::asc::invalid_command_operation_code));
      continue;
    }
    bool ok = true;
    switch (h.opcode()) {
      case opcode::scsi_command:
        ok = co_await on_scsi_command(h);
        break;
      case opcode::data_out:
        ok = co_await on_data_out(h);
        break;
      case opcode::nop_out: {
        std::vector<std::uint8_t> ping(h.data_segment_bytes());
        if (const bool got = co_await read_data(h, ping); !got) co_return;
        on_nop_out(h, std::move(ping));
        break;
      }
      case opcode::text_request:
        ok = co_await on_text(h);
        break;
      case opcode::task_management_request:
        ok = co_await skip_data(h);
        on_task_management(h);
        break;
      case opcode::logout_request:
        ok = co_await skip_data(h);
        on_logout(h);
        break;
      default:
        ok = co_await skip_data(h);
        reject(h, reject_reason::command_not_supported);
        break;
    }
    if (!ok) co_return;
  }
}

void connection::reject(const bhs& h, reject_reason why) {
  bhs r;
  r.set_opcode(opcode::reject);
  r.set_final(true);
  r.set_byte(2, static_cast<std::uint8_t>(why));
  r.set_initiator_task_tag(reserved_tag);
  stamp(r, true);
  outgoing o{r, {}, {}, nullptr, false};
  o.own_data.assign(h.wire().begin(), h.wire().end());  // the rejected header
  send(std::move(o));
}

asio::awaitable<bool> connection::on_scsi_command(const bhs& h) {
  auto self = shared_from_this();
  if (target_ == nullptr) {  // a discovery session has no LUNs
    if (const bool ok = co_await skip_data(h); !ok) co_return false;
    order(h, [self, h] { self->reject(h, reject_reason::protocol_error); });  // taken, or the window would stick on it
    co_return true;
  }
  auto c = std::make_shared<command>();
  c->conn = weak_from_this();
  c->itt = h.initiator_task_tag();
  c->lun_field = h.lun_field();
  c->reads = (h.flags() & command_flags::read) != 0;
  c->writes = (h.flags() & command_flags::write) != 0;
  c->expected_bytes = h.u32(field::expected_transfer_length);
  std::memcpy(c->task.cdb.data(), h.wire().data() + field::cdb, 16);
  c->task.attribute = task_attribute_of(h.flags());
  const std::uint32_t immediate = h.data_segment_bytes();
  const std::uint32_t first_burst = params_.first_burst_bytes;
  if ((c->writes && (immediate > c->expected_bytes || immediate > first_burst || (immediate > 0 && !params_.immediate_data))) ||
      (!c->writes && immediate > 0)) {
    // Data the command may not carry: the command fails, its CmdSN taken.
    if (const bool ok = co_await skip_data(h); !ok) co_return false;
    refuse_command(h, scsi::make_sense(scsi::sense_key::illegal_request, scsi::asc::invalid_field_in_command_iu));
    co_return true;
  }
  session& s = *session_;
  if (c->writes) {
    c->discard = c->expected_bytes > max_command_bytes;
    if (!c->discard && s.held_write_bytes > 0 && s.held_write_bytes + c->expected_bytes > timing_.max_held_write_bytes) {
      // An initiator that ignored the closed window: TASK SET FULL, which
      // it retries, rather than memory that other sessions need.
      if (const bool ok = co_await skip_data(h); !ok) co_return false;
      refuse_command(h, std::nullopt);
      co_return true;
    }
    c->out = device::aligned_buffer(c->discard ? 0 : c->expected_bytes);
    c->held_bytes = c->out.size();
    s.held_write_bytes += c->held_bytes;
    if (immediate > 0) {
      const bool ok = c->discard ? co_await skip_data(h)
                                 : co_await read_data(h, {reinterpret_cast<std::uint8_t*>(c->out.data()), immediate});
      if (!ok) {
        s.release(*c);
        co_return readable();
      }
    }
    c->received_bytes = immediate;
    c->unsolicited_pending = !h.final() && !params_.initial_r2t && immediate < std::min(first_burst, c->expected_bytes);
  }
  const std::uint32_t sn = h.u32(field::cmd_sn);
  if (auto it = std::ranges::find(s.cancelled_cmd_sns, sn); it != s.cancelled_cmd_sns.end() && !h.immediate()) {
    s.cancelled_cmd_sns.erase(it);  // aborted before it came: taken, never run
    order(h, [] {});
    s.release(*c);
    co_return true;
  }
  // The command is taken at once, so that its Data-Out find it, but runs
  // only in its turn.
  const bool taken = order(h, [c] {
    c->in_turn = true;
    if (auto conn = c->conn.lock(); conn && !conn->closed_) {
      conn->session_->entering.push_back(c);
      conn->run_when_ready(*c);
    }
  });
  if (!taken) {
    s.release(*c);
    co_return true;
  }
  take_command(h, c);
  co_return true;
}

void connection::take_command(const bhs& h, const std::shared_ptr<command>& c) {
  session& s = *session_;
  if (s.commands.contains(c->itt)) {
    s.release(*c);
    reject(h, reject_reason::task_in_progress);
    return;
  }
  s.commands[c->itt] = c;
  if (c->writes && c->received_bytes < c->expected_bytes) {
    if (!c->unsolicited_pending) send_r2t(*c);
    return;
  }
  c->ready = true;
  run_when_ready(*c);
}

void connection::run_when_ready(command& c) {
  if (!c.in_turn || !c.ready || c.task.on_complete != nullptr) return;
  // Aborted, or its connection gone, while it waited: not ours to run.
  auto it = session_->commands.find(c.itt);
  if (it == session_->commands.end() || it->second.get() != &c) return;
  if (!session_->may_enter(c)) return;  // an older or ORDERED command goes first
  execute(c);
}

void connection::entered(command& c) {
  session& s = *session_;
  const bool was_ordered = c.task.attribute == scsi::task_attribute::ordered;
  if (auto at = std::ranges::find_if(s.entering, [&](const auto& e) { return e.get() == &c; }); at != s.entering.end())
    s.entering.erase(at);
  while (!s.entering.empty() && !s.waiting_to_enter(*s.entering.front())) s.entering.pop_front();
  // Commands held back by this one, or by an ORDERED one, may go now.
  const bool ordered_waiting = std::ranges::any_of(
      s.entering, [](const auto& e) { return e->task.attribute == scsi::task_attribute::ordered; });
  if (s.admitting || s.entering.empty() || !(was_ordered || ordered_waiting)) return;
  s.admitting = true;
  const std::vector<std::shared_ptr<command>> waiting(s.entering.begin(), s.entering.end());
  for (const auto& w : waiting) {
    if (!w->in_turn || !w->ready) continue;
    if (auto conn = w->conn.lock(); conn && !conn->closed_) conn->run_when_ready(*w);
  }
  s.admitting = false;
}

void connection::refuse_command(const bhs& h, const std::optional<scsi::sense>& why) {
  order(h, [self = shared_from_this(), h, why] {
    bhs r;
    r.set_opcode(opcode::scsi_response);
    r.set_final(true);
    r.set_byte(3, static_cast<std::uint8_t>(why ? scsi::status::check_condition : scsi::status::task_set_full));
    r.set_initiator_task_tag(h.initiator_task_tag());
    self->stamp(r, true);
    self->send({r, {}, why ? sense_segment(*why) : std::vector<std::uint8_t>{}, nullptr, false});
  });
}

void connection::send_r2t(command& c) {
  const std::uint32_t want = std::min(c.expected_bytes - c.received_bytes, params_.max_burst_bytes);
  c.ttt = next_ttt_++;
  if (next_ttt_ == reserved_tag) next_ttt_ = 1;
  c.r2t_end = c.received_bytes + want;
  bhs r;
  r.set_opcode(opcode::r2t);
  r.set_final(true);
  r.set_lun_field(c.lun_field);
  r.set_initiator_task_tag(c.itt);
  r.set_u32(field::target_transfer_tag, c.ttt);
  stamp(r, false);
  r.set_u32(field::data_sn, c.r2t_sn++);
  r.set_u32(field::buffer_offset, c.received_bytes);
  r.set_u32(field::desired_transfer_length, want);
  send({r, {}, {}, nullptr, false});
}

asio::awaitable<bool> connection::on_data_out(const bhs& h) {
  auto it = session_->commands.find(h.initiator_task_tag());
  const std::uint32_t offset = h.u32(field::buffer_offset);
  const std::uint32_t n = h.data_segment_bytes();
  // Data-Out go on the command's own connection (allegiance).
  if (it == session_->commands.end() || !it->second->writes || it->second->task.on_complete != nullptr ||
      it->second->conn.lock().get() != this) {
    if (const bool ok = co_await skip_data(h); !ok) co_return false;
    reject(h, reject_reason::invalid_pdu_field);
    co_return true;
  }
  command& c = *it->second;
  // In order (DataPDUInOrder=Yes), within the command's buffer, and within
  // what was solicited.
  const std::uint32_t ttt = h.u32(field::target_transfer_tag);
  const bool solicited = ttt != reserved_tag;
  const std::uint32_t limit = solicited ? c.r2t_end : std::min(params_.first_burst_bytes, c.expected_bytes);
  if (offset != c.received_bytes || n > limit - std::min(limit, offset) || (solicited && ttt != c.ttt) ||
      (!solicited && !c.unsolicited_pending)) {
    if (const bool ok = co_await skip_data(h); !ok) co_return false;
    reject(h, reject_reason::protocol_error);
    co_return true;
  }
  // DataSN counts from 0 in each sequence (an R2T's burst, or the
  // unsolicited data). At ErrorRecoveryLevel 0 a gap is not recoverable:
  // the connection ends, and the command with it (RFC 7143 7.1.2).
  if (h.u32(field::data_sn) != c.data_sn++) co_return false;
  auto keep = it->second;
  const bool ok = c.discard ? co_await skip_data(h)
                            : co_await read_data(h, {reinterpret_cast<std::uint8_t*>(c.out.data()) + offset, n});
  if (!ok) co_return readable();
  c.received_bytes += n;
  if (!h.final()) co_return true;
  // The final PDU of a solicited burst before the burst's end: the data
  // the R2T asked for will never come. A protocol error; at ERL 0 the
  // connection ends, rather than the command waiting for good.
  if (solicited && c.received_bytes != c.r2t_end) co_return false;
  if (!solicited) c.unsolicited_pending = false;
  c.data_sn = 0;  // the next sequence starts again
  if (c.received_bytes == c.expected_bytes) {
    c.ready = true;
    run_when_ready(c);
  } else if (!solicited || c.received_bytes == c.r2t_end) {
    send_r2t(c);
  }
  co_return true;
}

void connection::execute(command& c) {
  c.task.lun = lun_of(c.lun_field);
  c.task.expected_transfer_bytes = c.expected_bytes;
  if (c.writes && !c.discard) c.task.data_out = c.out.bytes().first(c.received_bytes);
  c.port = session_->initiator_port;  // the task may outlive the session
  c.task.nexus.initiator_port = *c.port;
  c.task.nexus.relative_target_port = server_.options().relative_target_port;
  c.task.context = &c;
  c.task.on_complete = &connection::on_task_done;
  c.self = c.shared_from_this();
  c.sess = session_;
  ++session_->executing;
  ++executing_;
  access_->luns->execute(c.task);
  entered(c);
}

void connection::on_task_done(scsi::task& t) noexcept {
  command& c = *static_cast<command*>(t.context);
  auto keep = std::move(c.self);
  auto sess = std::move(c.sess);
  // Counted even after closing: a reinstated session or connection waits for it.
  --sess->executing;
  sess->release(c);  // first: the response's MaxCmdSN may reopen the window
  auto conn = c.conn.lock();
  if (conn) --conn->executing_;
  if (c.aborted_by) {
    auto tmf = std::move(c.aborted_by);
    if (--tmf->tasks == 0) finish_tmf(*tmf);
    return;
  }
  if (conn && !conn->closed_) conn->respond(c);
}

void connection::respond(command& c) {
  // Aborted: its tag may be reused by a new command, which is not ours to answer.
  auto it = session_->commands.find(c.itt);
  if (it == session_->commands.end() || it->second.get() != &c) return;
  std::shared_ptr<command> owner = std::move(it->second);
  session_->commands.erase(it);
  const scsi::task& t = c.task;
  const std::uint32_t edtl = c.expected_bytes;
  if (c.reads && t.result == scsi::status::good && std::min(t.data_in_bytes, edtl) > 0) {
    // Data-In PDUs of at most the initiator's MaxRecvDataSegmentLength, the
    // status in the last (phase collapse, RFC 7143 11.7.4).
    const std::uint32_t to_send = std::min(t.data_in_bytes, edtl);
    const std::uint32_t chunk = params_.initiator_max_recv_data_segment_bytes;
    const std::uint32_t burst = params_.max_burst_bytes;
    std::uint32_t data_sn = 0;
    std::uint32_t offset = 0;
    do {
      // A Data-In sequence is at most MaxBurstLength (RFC 7143 13.13): the
      // F bit ends each one, and the S bit only the last.
      const std::uint32_t burst_left = burst - offset % burst;
      const std::uint32_t n = std::min({chunk, to_send - offset, burst_left});
      const bool last = offset + n == to_send;
      bhs d;
      d.set_opcode(opcode::data_in);
      std::uint8_t flags = last ? (data_in_flags::final | data_in_flags::status)
                                : (n == burst_left ? data_in_flags::final : std::uint8_t{0});
      if (last && t.data_in_bytes < edtl) {
        flags |= data_in_flags::residual_underflow;
        d.set_u32(field::residual_count, edtl - t.data_in_bytes);
      } else if (last && t.data_in_bytes > edtl) {
        flags |= data_in_flags::residual_overflow;
        d.set_u32(field::residual_count, t.data_in_bytes - edtl);
      }
      d.set_flags(flags);
      d.set_byte(3, static_cast<std::uint8_t>(t.result));
      d.set_lun_field(c.lun_field);
      d.set_initiator_task_tag(c.itt);
      d.set_u32(field::target_transfer_tag, reserved_tag);
      stamp(d, last);
      if (!last) d.set_u32(field::stat_sn, 0);  // StatSN only with status
      d.set_u32(field::data_sn, data_sn++);
      d.set_u32(field::buffer_offset, offset);
      send({d, {reinterpret_cast<const std::uint8_t*>(t.data_in.data()) + offset, n}, {}, owner, false});
      offset += n;
    } while (offset < to_send);
    return;
  }
  bhs r;
  r.set_opcode(opcode::scsi_response);
  std::uint8_t flags = 0x80;
  // What the command would have sent against what the initiator expected.
  // A failed read sends no data: all of it is residual, so that the
  // initiator counts none of it as read.
  const std::uint32_t produced =
      c.writes ? t.data_out_described_bytes.value_or(c.received_bytes)
               : (t.result == scsi::status::good ? t.data_in_bytes : 0);
  if (produced > edtl) {
    flags |= data_in_flags::residual_overflow;
    r.set_u32(field::residual_count, produced - edtl);
  } else if (produced < edtl) {
    flags |= data_in_flags::residual_underflow;
    r.set_u32(field::residual_count, edtl - produced);
  }
  r.set_flags(flags);
  r.set_byte(2, 0);  // command completed at target
  r.set_byte(3, static_cast<std::uint8_t>(t.result));
  r.set_initiator_task_tag(c.itt);
  stamp(r, true);
  outgoing o{r, {}, {}, nullptr, false};
  if (t.result == scsi::status::check_condition) o.own_data = sense_segment(t.sense_data);
  send(std::move(o));
}

void connection::on_nop_out(const bhs& h, std::vector<std::uint8_t> ping) {
  // A NOP-Out answering a ping of ours has no task tag and wants no answer.
  order(h, [self = shared_from_this(), h, ping = std::move(ping)] {
    if (h.initiator_task_tag() == reserved_tag) return;
    bhs r;
    r.set_opcode(opcode::nop_in);
    r.set_final(true);
    r.set_lun_field(h.lun_field());
    r.set_initiator_task_tag(h.initiator_task_tag());
    r.set_u32(field::target_transfer_tag, reserved_tag);
    self->stamp(r, true);
    self->send({r, {}, ping, nullptr, false});
  });
}

asio::awaitable<bool> connection::on_text(const bhs& h) {
  std::vector<std::uint8_t> data(h.data_segment_bytes());
  if (const bool ok = co_await read_data(h, data); !ok) co_return readable();
  order(h, [self = shared_from_this(), h, data = std::move(data)] { self->answer_text(h, data); });
  co_return true;
}

void connection::answer_text(const bhs& h, std::vector<std::uint8_t> data) {
  const std::uint32_t ttt = h.u32(field::target_transfer_tag);
  if (ttt != reserved_tag && ttt == text_rest_ttt_ && data.empty()) {
    // The initiator asks for the rest of a response (RFC 7143 11.11.4).
    send_text_response(h);
    return;
  }
  const bool continued = ttt != reserved_tag && ttt == text_in_ttt_ && h.initiator_task_tag() == text_in_itt_;
  if (ttt != reserved_tag && !continued) {
    reject(h, reject_reason::protocol_error);
    return;
  }
  if (!continued) text_in_.clear();  // a new exchange: one left unfinished is dropped
  text_in_ttt_ = reserved_tag;
  text_in_.insert(text_in_.end(), data.begin(), data.end());
  if (text_in_.size() > max_text_bytes) {
    text_in_.clear();
    reject(h, reject_reason::protocol_error);
    return;
  }
  if ((h.flags() & 0x40) != 0) {
    // The initiator's keys go on in its next Text Request (C bit): an
    // empty response, with a tag for it to continue with.
    text_in_itt_ = h.initiator_task_tag();
    text_in_ttt_ = next_ttt_++;
    if (next_ttt_ == reserved_tag) next_ttt_ = 1;
    bhs r;
    r.set_opcode(opcode::text_response);
    r.set_initiator_task_tag(text_in_itt_);
    r.set_u32(field::target_transfer_tag, text_in_ttt_);
    stamp(r, true);
    send({r, {}, {}, nullptr, false});
    return;
  }
  const auto keys = parse_text(text_in_);
  text_in_.clear();
  if (!keys) {
    reject(h, reject_reason::protocol_error);
    return;
  }
  key_values answers;
  for (const auto& [k, v] : *keys) {
    if (k != "SendTargets") {
      answers.emplace_back(k, "NotUnderstood");
      continue;
    }
    std::vector<std::string> addresses;  // "host:port,TAG"
    const std::string tag = "," + std::to_string(server_.options().relative_target_port);
    for (const std::string& portal : server_.options().portals) {
      addresses.push_back(portal.find(',') == std::string::npos ? portal + tag : portal);
    }
    if (addresses.empty()) {
      boost::system::error_code ec;
      const auto here = socket_.local_endpoint(ec);
      if (ec) break;
      addresses.push_back((here.address().is_v6() ? "[" + here.address().to_string() + "]" : here.address().to_string()) + ":" +
                          std::to_string(here.port()) + tag);
    }
    for (const auto& t : server_.targets()) {
      if (v != "All" && v != t->name && !(v.empty() && target_ != nullptr && t->name == target_->name)) continue;
      if (t->access_for(params_.initiator_name) == nullptr) continue;  // masked: it does not exist for this initiator
      answers.emplace_back("TargetName", t->name);
      for (const std::string& address : addresses) answers.emplace_back("TargetAddress", address);
    }
  }
  text_rest_ = format_text(answers);
  text_rest_sent_ = 0;
  send_text_response(h);
}

void connection::send_text_response(const bhs& h) {
  // At most what the initiator accepts per PDU; the rest waits for it to
  // ask (C bit, and a target transfer tag to ask with).
  const std::size_t left = text_rest_.size() - text_rest_sent_;
  const std::size_t n = std::min<std::size_t>(left, params_.initiator_max_recv_data_segment_bytes);
  const bool last = n == left;
  bhs r;
  r.set_opcode(opcode::text_response);
  r.set_flags(last ? 0x80 : 0x40);  // F when complete, else C
  r.set_initiator_task_tag(h.initiator_task_tag());
  if (last) {
    r.set_u32(field::target_transfer_tag, reserved_tag);
    text_rest_ttt_ = reserved_tag;
  } else {
    text_rest_ttt_ = next_ttt_++;
    if (next_ttt_ == reserved_tag) next_ttt_ = 1;
    r.set_u32(field::target_transfer_tag, text_rest_ttt_);
  }
  stamp(r, true);
  outgoing o{r, {}, {}, nullptr, false};
  o.own_data.assign(text_rest_.begin() + static_cast<std::ptrdiff_t>(text_rest_sent_),
                    text_rest_.begin() + static_cast<std::ptrdiff_t>(text_rest_sent_ + n));
  text_rest_sent_ += n;
  send(std::move(o));
  if (last) text_rest_.clear();
}

void connection::on_task_management(const bhs& h) {
  auto self = shared_from_this();
  if (target_ == nullptr) {  // a discovery session has no tasks and no LUNs
    order(h, [self, h] { self->reject(h, reject_reason::protocol_error); }, true);
    return;
  }
  order(h, [self, h] { self->manage_tasks(h); }, true);
}

void connection::manage_tasks(const bhs& h) {
  session& s = *session_;
  auto tmf = std::make_shared<pending_tmf>();
  tmf->conn = weak_from_this();
  bhs& r = tmf->response;
  r.set_opcode(opcode::task_management_response);
  r.set_final(true);
  r.set_initiator_task_tag(h.initiator_task_tag());
  auto respond_now = [&](std::uint8_t response) {
    r.set_byte(2, response);
    finish_tmf(*tmf);
  };
  const std::uint8_t function = h.flags() & 0x7f;
  const std::uint64_t lun_field = h.lun_field();
  scsi::unit_interface* unit = access_->luns->find(lun_of(lun_field));
  // Every command of this session (on any of its connections) that `pred`
  // picks is aborted; the response goes when the last of those the unit
  // runs has finished.
  auto abort_all = [&](auto pred) {
    std::vector<std::shared_ptr<command>> doomed;
    for (const auto& [tag, c] : s.commands) {
      if (pred(*c)) doomed.push_back(c);
    }
    for (const auto& c : doomed) abort(*c, tmf);
  };
  switch (function) {
    case tmf::abort_task: {
      auto it = s.commands.find(h.u32(field::referenced_task_tag));
      if (it != s.commands.end()) {
        abort(*it->second, tmf);
        break;
      }
      // Not here: if its CmdSN is yet to come (RefCmdSN in the window,
      // before this request), it is taken as received and never run.
      const std::uint32_t ref = h.u32(field::ref_cmd_sn);
      const std::uint32_t max = s.exp_cmd_sn + timing_.command_window - 1;
      if (!sn_less(ref, s.exp_cmd_sn) && sn_less_equal(ref, max) && sn_less(ref, h.u32(field::cmd_sn))) {
        if (s.cancelled_cmd_sns.size() < timing_.command_window) s.cancelled_cmd_sns.push_back(ref);
        return respond_now(tmf::function_complete);
      }
      return respond_now(tmf::task_does_not_exist);
    }
    case tmf::abort_task_set:
    case tmf::clear_task_set:
      // One task set per I_T nexus here: the unit keeps no task sets of its
      // own, so both end this session's tasks for the LUN.
      if (unit == nullptr) return respond_now(tmf::lun_does_not_exist);
      abort_all([&](const command& c) { return c.lun_field == lun_field; });
      break;
    case tmf::clear_aca:
      // Strata never establishes an ACA condition (NACA is not supported):
      // there is nothing to clear.
      if (unit == nullptr) return respond_now(tmf::lun_does_not_exist);
      break;
    case tmf::logical_unit_reset:
      if (unit == nullptr) return respond_now(tmf::lun_does_not_exist);
      abort_all([&](const command& c) { return c.lun_field == lun_field; });
      // The unit is looked up again when the reset runs: the one there now
      // (a takeover may have swapped it, and retired the old one).
      tmf->then = [luns = access_->luns, lun = lun_of(lun_field), port = s.initiator_port, at = server_.options().relative_target_port]() {
        if (scsi::unit_interface* now = luns->find(lun)) now->reset(scsi::i_t_nexus{*port, at});
      };
      break;
    case tmf::target_warm_reset:
    case tmf::target_cold_reset: {
      if (function == tmf::target_cold_reset && !timing_.allow_target_cold_reset) return respond_now(tmf::authorization_failed);
      abort_all([](const command&) { return true; });
      // A cold reset ends every session of the target (RFC 7143 11.5.1),
      // this connection once its response is written. The units are looked
      // up when the reset runs (a takeover may have swapped some).
      tmf->close_after = function == tmf::target_cold_reset;
      tmf->then = [luns = access_->luns, port = s.initiator_port, at = server_.options().relative_target_port, cold = tmf->close_after,
                   srv = &server_, alive = server_alive_, target = target_->name, except = weak_from_this()]() {
        for (const std::uint16_t l : luns->luns()) luns->find(l)->reset(scsi::i_t_nexus{*port, at});
        if (cold && !alive.expired()) srv->close_sessions_of(target, except.lock().get());
      };
      break;
    }
    case tmf::task_reassign:
      return respond_now(tmf::reassign_not_supported);  // ErrorRecoveryLevel 0
    default:
      return respond_now(tmf::function_not_supported);
  }
  r.set_byte(2, tmf::function_complete);
  if (tmf->tasks == 0) finish_tmf(*tmf);
}

void connection::abort(command& c, const std::shared_ptr<pending_tmf>& tmf) {
  session& s = *session_;
  auto keep = s.commands.at(c.itt);
  s.commands.erase(c.itt);
  if (c.task.on_complete == nullptr) {  // gathering its data or waiting for its turn: nothing runs
    s.release(c);
    return;
  }
  c.aborted_by = tmf;
  ++tmf->tasks;
}

void connection::finish_tmf(pending_tmf& tmf) {
  if (auto conn = tmf.conn.lock(); conn && !conn->closed_) {
    conn->stamp(tmf.response, true);
    conn->send({tmf.response, {}, {}, nullptr, tmf.close_after});
  }
  if (tmf.then) tmf.then();
}

asio::awaitable<void> connection::watchdog() {
  auto self = shared_from_this();
  using std::chrono::steady_clock;
  // A second's resolution is enough for timeouts of seconds, and costs a
  // timer wake-up per connection per second.
  constexpr auto tick = std::chrono::seconds(1);
  while (!closed_) {
    watch_.expires_after(timing_.ping_interval.count() > 0 ? std::min<steady_clock::duration>(tick, timing_.ping_interval) : tick);
    co_await watch_.async_wait(use_tuple);
    if (closed_) co_return;
    const auto now = steady_clock::now();
    if (!logged_in_) {
      if (now - started_ >= timing_.login_timeout) {
        log("iscsi: a login from " + peer_ + " did not finish within " + std::to_string(timing_.login_timeout.count()) + " s; connection closed");
        close();
      }
      continue;
    }
    if (logout_deadline_ && now >= *logout_deadline_) {
      log("iscsi: initiator " + params_.initiator_name + " did not log out when asked; connection closed");
      close();
    } else if (ping_outstanding_ && now - ping_sent_ >= timing_.ping_timeout) {
      log("iscsi: initiator " + params_.initiator_name + " at " + peer_ + " did not answer a NOP-In within " +
          std::to_string(timing_.ping_timeout.count()) + " s; presumed dead, connection closed");
      close();
    } else if (!ping_outstanding_ && timing_.ping_interval.count() > 0 && now - last_heard_ >= timing_.ping_interval) {
      // A NOP-In that asks for an answer (RFC 7143 11.19): a target
      // transfer tag, no initiator task tag; StatSN not advanced.
      bhs p;
      p.set_opcode(opcode::nop_in);
      p.set_final(true);
      p.set_initiator_task_tag(reserved_tag);
      p.set_u32(field::target_transfer_tag, next_ttt_++);
      if (next_ttt_ == reserved_tag) next_ttt_ = 1;
      stamp(p, false);
      send({p, {}, {}, nullptr, false});
      ping_outstanding_ = true;
      ping_sent_ = now;
    }
  }
}

void connection::request_logout(std::chrono::seconds within) {
  if (!in_full_feature() || closing_) return;
  bhs a;
  a.set_opcode(opcode::async_message);
  a.set_final(true);
  a.set_initiator_task_tag(reserved_tag);
  a.set_byte(field::async_event, async_event::logout_requested);
  a.set_u16(field::async_parameter3, static_cast<std::uint16_t>(std::min<std::int64_t>(within.count(), 3600)));
  stamp(a, true);
  send({a, {}, {}, nullptr, false});
  logout_deadline_ = std::chrono::steady_clock::now() + within;
}

void connection::log(const std::string& what) const {
  if (timing_.log) timing_.log(what);
}

void connection::on_logout(const bhs& h) {
  order(h, [self = shared_from_this(), h] { self->log_out(h); }, true);
}

void connection::log_out(const bhs& h) {
  std::uint8_t response = logout::closed;
  bool close_this = false;
  switch (h.flags() & 0x7f) {
    case logout::close_session:
      // Every connection of the session ends, and their tasks with them.
      close_this = true;
      for (connection* c : std::vector<connection*>(session_->connections)) {
        if (c != this) c->close();
      }
      break;
    case logout::close_connection: {
      // This connection, or another of the session (one that is stuck,
      // logged out from here).
      const std::uint16_t cid = h.u16(field::cid);
      if (cid == cid_) {
        close_this = true;
      } else if (connection* other = session_->connection_with(cid)) {
        other->close();
      } else {
        response = logout::cid_not_found;
      }
      break;
    }
    case logout::remove_for_recovery:
      response = logout::recovery_not_supported;  // ErrorRecoveryLevel 0
      break;
    default:
      reject(h, reject_reason::protocol_error);
      return;
  }
  bhs r;
  r.set_opcode(opcode::logout_response);
  r.set_final(true);
  r.set_byte(2, response);
  r.set_initiator_task_tag(h.initiator_task_tag());
  stamp(r, true);
  send({r, {}, {}, nullptr, close_this});
}

server::server(asio::any_io_executor loop, std::vector<target_node> targets, const server_options& options)
    : loop_(std::move(loop)), options_(options), acceptor_(loop_) {
  for (target_node& t : targets) targets_.push_back(std::make_shared<const target_node>(std::move(t)));
}

server::~server() { stop(); }

std::expected<void, error> server::listen(const tcp::endpoint& at) {
  boost::system::error_code ec;
  acceptor_.open(at.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(at, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return std::unexpected(make_error(errc::io_error, "iscsi: cannot listen on " + at.address().to_string() + ":" +
                                                          std::to_string(at.port()) + ": " + ec.message()));
  }
  accept();
  return {};
}

tcp::endpoint server::local_endpoint() const { return acceptor_.local_endpoint(); }

void server::accept() {
  acceptor_.async_accept([this, alive = std::weak_ptr<void>(alive_)](boost::system::error_code ec, tcp::socket socket) {
    if (ec || alive.expired() || !acceptor_.is_open()) return;  // stopped
    socket.set_option(tcp::no_delay(true), ec);
    auto c = std::make_shared<connection>(*this, std::move(socket));
    live_.insert(c);
    c->start();
    accept();
  });
}

void server::request_logout(std::chrono::seconds within) {
  for (const auto& c : live_) c->request_logout(within);
}

void server::close_sessions_of(std::string_view target, const connection* except) {
  for (const auto& c : live_) {
    if (c.get() != except && c->serves(target)) c->close();
  }
}

void server::stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  for (const auto& c : live_) c->close();
}

const initiator_access* target_node::access_for(std::string_view initiator) const {
  for (const auto& [listed, access] : initiators) {
    if (same_name(listed, initiator)) return &access;
  }
  return anyone ? &*anyone : nullptr;
}

std::optional<std::string> check_target(const target_node& target) {
  auto check = [&](const std::string& who, const initiator_access& a) -> std::optional<std::string> {
    if (a.luns == nullptr) return "target " + target.name + ": " + who + " has no LUN map";
    if (a.mutual_chap && !a.chap) return "target " + target.name + ": " + who + " has mutual CHAP without CHAP";
    if (a.chap) {
      if (auto bad = check_chap_secrets(*a.chap, a.mutual_chap)) return "target " + target.name + ": " + who + ": " + *bad;
    }
    return std::nullopt;
  };
  for (const auto& [name, access] : target.initiators) {
    if (auto bad = check("initiator " + name, access)) return bad;
  }
  if (target.anyone) return check("the default initiator entry", *target.anyone);
  return std::nullopt;
}

std::shared_ptr<const target_node> server::find_target(std::string_view name) const noexcept {
  for (const auto& t : targets_) {
    if (t->name == name) return t;
  }
  return nullptr;
}

void server::set_target(target_node target) {
  auto node = std::make_shared<const target_node>(std::move(target));
  auto same = std::ranges::find_if(targets_, [&](const auto& t) { return t->name == node->name; });
  if (same == targets_.end()) {
    targets_.push_back(node);
    return;
  }
  *same = node;
  for (const auto& c : live_) {
    const session* s = c->joined_session();
    if (s == nullptr || !c->serves(node->name)) continue;
    const initiator_access* now = node->access_for(s->params.initiator_name);
    if (now == nullptr || now->luns != s->access->luns) c->close();
  }
}

void server::luns_changed(const scsi::lun_map& luns, bool inventory_changed) {
  for (session* s : std::vector<session*>(sessions_.begin(), sessions_.end())) {
    if (s->access != nullptr && s->access->luns == &luns) s->reannounce_nexus(inventory_changed);
  }
}

std::uint16_t server::next_tsih() noexcept {
  if (++tsih_ == 0) ++tsih_;
  return tsih_;
}

}  // namespace strata::iscsi
