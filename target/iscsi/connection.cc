// A connection's PDU reader and writer, and the full feature phase: SCSI
// commands and their data (immediate, unsolicited, R2T), responses and
// Data-In, text, NOP, logout, and the watchdog.
#include "target/iscsi/connection.h"

#include <sys/socket.h>

#include <cerrno>

#include "target/crc32c.h"

namespace strata::iscsi {

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
    if (c.task.on_complete == nullptr)
      s.release(c);  // not run: its budget is free now; else when it finishes
    it = s.commands.erase(it);
  }
  if (s.connections.empty()) s.end();
}
asio::awaitable<bool> connection::read_header(bhs& h) {
  if (!co_await reader_.read(socket_, asio::buffer(h.wire().data(), bhs_bytes))) co_return false;
  last_heard_ = std::chrono::steady_clock::now();  // any PDU shows the initiator alive
  ping_outstanding_ = false;
  std::vector<std::uint8_t> ahs;
  if (h.ahs_bytes() > 0) {
    // Strata uses no AHS (no bidirectional commands, no extended CDBs):
    // read past it; the command that carried it is rejected.
    ahs.resize(h.ahs_bytes());
    if (!co_await reader_.read(socket_, asio::buffer(ahs))) co_return false;
  }
  if (header_digest_) {
    std::array<std::uint8_t, 4> d;
    if (!co_await reader_.read(socket_, asio::buffer(d))) co_return false;
    // The digest covers the BHS and the AHS. An error leaves the PDU's
    // length unknown: the connection cannot resynchronise (RFC 7143 7.8),
    // so it ends.
    if (get_digest(d.data()) != crc32c(ahs, crc32c(h.wire()))) co_return false;
  }
  // More than this side declared it accepts: a protocol error, and no
  // allocation driven by a header field.
  if (h.data_segment_bytes() > max_incoming_segment_bytes_) co_return false;
  co_return true;
}

asio::awaitable<bool> connection::read_data(const bhs& h, std::span<std::uint8_t> into) {
  const std::uint32_t n = h.data_segment_bytes();
  std::array<std::uint8_t, 8> tail;
  const std::uint32_t pad = padded(n) - n;
  // An empty data segment has no digest (RFC 7143 11.1).
  const bool digest = data_digest_ && n > 0;
  if (!co_await reader_.read(socket_, asio::buffer(into.data(), n),
                             asio::buffer(tail.data(), pad + (digest ? 4 : 0)))) {
    // The initiator went away (or closed its side): nothing more will
    // come. Unlike a digest error, this ends the connection; reading on
    // would wait for good.
    read_failed_ = true;
    co_return false;
  }
  if (digest) {
    std::uint32_t d = crc32c({into.data(), n});
    d = crc32c({tail.data(), pad}, d);
    if (get_digest(tail.data() + pad) != d) {
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

asio::awaitable<bool> connection::stay_or_move() {
  if (server_.options().connection_loops.size() < 2) co_return true;
  std::array<std::uint8_t, bhs_bytes> head;
  for (;;) {
    auto [ec] = co_await socket_.async_wait(tcp::socket::wait_read, use_tuple);
    if (ec || closed_) co_return false;  // closed: a login too slow, or the server stopping
    const ssize_t n =
        ::recv(socket_.native_handle(), head.data(), head.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) co_return false;  // the initiator went away
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) co_return false;
    if (n == static_cast<ssize_t>(head.size())) break;
    // Part of a header: the socket stays readable, so wait a little for the rest.
    asio::steady_timer rest(socket_.get_executor(), std::chrono::milliseconds(1));
    co_await rest.async_wait(use_tuple);
    if (closed_) co_return false;
  }
  bhs h;
  std::memcpy(h.wire().data(), head.data(), head.size());
  const std::uint16_t tsih = h.u16(field::tsih);
  if (h.opcode() != opcode::login_request || tsih == 0) co_return true;
  const auto there = server_.session_loop(tsih);
  if (!there || *there == socket_.get_executor())
    co_return true;  // here, or none: the login says so
  boost::system::error_code ec;
  const auto protocol = socket_.local_endpoint(ec).protocol();
  if (ec) co_return false;
  // The session's loop gets the socket, made anew there; the server (on
  // its loop) starts the connection. Closing this one's timers only: the
  // socket is no longer its own.
  auto moved = std::make_shared<tcp::socket>(*there, protocol, socket_.release(ec));
  if (ec) co_return false;
  closed_ = true;
  write_wake_.cancel();
  watch_.cancel();
  asio::dispatch(server_.loop_, [srv = &server_, alive = server_alive_, moved] {
    if (!alive.expired() && srv->acceptor_.is_open()) srv->start_connection(std::move(*moved));
  });
  co_return false;
}

asio::awaitable<void> connection::run() {
  auto self = shared_from_this();  // the frame must not outlive the connection
  if (const bool stays = co_await stay_or_move(); !stays) {
    close();
    if (!server_alive_.expired()) server_.connection_ended(std::move(self));
    co_return;
  }
  const bool logged_in = co_await login();
  if (logged_in) co_await full_feature();
  // A last PDU (a login failure, a logout response) closes the connection
  // once written; otherwise the initiator went away, or broke the protocol.
  if (!closing_) close();
  // Tasks still running keep their commands alive; they finish into nothing.
  leave_session();
  if (!server_alive_.expired()) server_.connection_ended(std::move(self));
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
    // Everything queued goes in one gathered write (up to 64 PDUs): under
    // load, a burst of responses and Data-In shares one system call. The
    // gather list, digests and padding are the connection's, reused.
    std::vector<asio::const_buffer>& bufs = write_buffers_;
    bufs.clear();
    const std::size_t count = std::min<std::size_t>(queue_.size(), 64);
    write_tails_.resize(2 * count);  // per PDU: the header digest, then padding and the data
                                     // digest; before any buffer points in
    bool close_after = false;
    for (std::size_t i = 0; i < count; ++i) {
      outgoing& o = queue_[i];
      std::array<std::uint8_t, 8>& header_digest = write_tails_[2 * i];
      std::array<std::uint8_t, 8>& tail = write_tails_[2 * i + 1];
      const auto n = static_cast<std::uint32_t>(o.data.size());
      o.header.set_data_segment_bytes(n);
      bufs.push_back(asio::buffer(o.header.wire().data(), bhs_bytes));
      if (o.header_digest) {
        put_digest(crc32c(o.header.wire()), header_digest.data());
        bufs.push_back(asio::buffer(header_digest.data(), 4));
      }
      if (n > 0) {
        const std::uint32_t pad = padded(n) - n;
        tail.fill(0);
        bufs.push_back(asio::buffer(o.data.data(), n));
        std::uint32_t tail_bytes = pad;
        if (o.data_digest) {
          std::uint32_t d = crc32c(o.data);
          d = crc32c({tail.data(), pad}, d);
          put_digest(d, tail.data() + pad);
          tail_bytes += 4;
        }
        if (tail_bytes > 0) bufs.push_back(asio::buffer(tail.data(), tail_bytes));
      }
      close_after = close_after || o.close_after;
    }
    auto [ec, written] = co_await asio::async_write(socket_, bufs, use_tuple);
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(count));
    if (ec || close_after) {
      close();
      co_return;
    }
  }
}

asio::awaitable<void> connection::full_feature() {
  auto self = shared_from_this();
  while (!closed_ && !closing_) {
    bhs h;
    if (const bool ok = co_await read_header(h); !ok) co_return;
    if (h.ahs_bytes() > 0 && h.opcode() == opcode::scsi_command) {
      // Extended CDBs and bidirectional commands: not in Strata's command set.
      if (const bool ok = co_await skip_data(h); !ok) co_return;
      refuse_command(h, scsi::make_sense(scsi::sense_key::illegal_request,
                                         scsi::asc::invalid_command_operation_code));
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
    order(h, [self, h] {
      self->reject(h, reject_reason::protocol_error);
    });  // taken, or the window would stick on it
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
  if ((c->writes && (immediate > c->expected_bytes || immediate > first_burst ||
                     (immediate > 0 && !params_.immediate_data))) ||
      (!c->writes && immediate > 0)) {
    // Data the command may not carry: the command fails, its CmdSN taken.
    if (const bool ok = co_await skip_data(h); !ok) co_return false;
    refuse_command(h, scsi::make_sense(scsi::sense_key::illegal_request,
                                       scsi::asc::invalid_field_in_command_iu));
    co_return true;
  }
  session& s = *session_;
  if (c->writes) {
    c->discard = c->expected_bytes > max_command_bytes;
    if (!c->discard && s.held_write_bytes > 0 &&
        s.held_write_bytes + c->expected_bytes > timing_.max_held_write_bytes) {
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
      const bool ok =
          c->discard
              ? co_await skip_data(h)
              : co_await read_data(h, {reinterpret_cast<std::uint8_t*>(c->out.data()), immediate});
      if (!ok) {
        s.release(*c);
        co_return readable();
      }
    }
    c->received_bytes = immediate;
    c->unsolicited_pending =
        !h.final() && !params_.initial_r2t && immediate < std::min(first_burst, c->expected_bytes);
  }
  const std::uint32_t sn = h.u32(field::cmd_sn);
  if (auto it = std::ranges::find(s.cancelled_cmd_sns, sn);
      it != s.cancelled_cmd_sns.end() && !h.immediate()) {
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
  if (auto at = std::ranges::find_if(s.entering, [&](const auto& e) { return e.get() == &c; });
      at != s.entering.end())
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
    r.set_byte(3, static_cast<std::uint8_t>(why ? scsi::status::check_condition
                                                : scsi::status::task_set_full));
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
  if (it == session_->commands.end() || !it->second->writes ||
      it->second->task.on_complete != nullptr || it->second->conn.lock().get() != this) {
    if (const bool ok = co_await skip_data(h); !ok) co_return false;
    reject(h, reject_reason::invalid_pdu_field);
    co_return true;
  }
  command& c = *it->second;
  // In order (DataPDUInOrder=Yes), within the command's buffer, and within
  // what was solicited.
  const std::uint32_t ttt = h.u32(field::target_transfer_tag);
  const bool solicited = ttt != reserved_tag;
  const std::uint32_t limit =
      solicited ? c.r2t_end : std::min(params_.first_burst_bytes, c.expected_bytes);
  if (offset != c.received_bytes || n > limit - std::min(limit, offset) ||
      (solicited && ttt != c.ttt) || (!solicited && !c.unsolicited_pending)) {
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
                            : co_await read_data(
                                  h, {reinterpret_cast<std::uint8_t*>(c.out.data()) + offset, n});
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
  // To the units' loop, in order with what this session told them before
  // (its nexus first): session::to_units.
  scsi::lun_map* luns = access_->luns;
  session_->to_units([luns, &t = c.task] { luns->execute(t); });
  entered(c);
}

void connection::on_task_done(scsi::task& t) noexcept {
  // On the units' loop: back to the session's, where its counts, its
  // connections and its socket are.
  command& c = *static_cast<command*>(t.context);
  session& s = *c.sess;
  s.from_units(std::move(c.self), &connection::task_finished);
}

void connection::task_finished(command& c) {
  auto keep = c.shared_from_this();
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
      send({d,
            {reinterpret_cast<const std::uint8_t*>(t.data_in.data()) + offset, n},
            {},
            owner,
            false});
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
  const std::uint32_t produced = c.writes ? t.data_out_described_bytes.value_or(c.received_bytes)
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
  const bool continued =
      ttt != reserved_tag && ttt == text_in_ttt_ && h.initiator_task_tag() == text_in_itt_;
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
      addresses.push_back((here.address().is_v6() ? "[" + here.address().to_string() + "]"
                                                  : here.address().to_string()) +
                          ":" + std::to_string(here.port()) + tag);
    }
    for (const auto& t : server_.targets()) {
      if (v != "All" && v != t->name &&
          !(v.empty() && target_ != nullptr && t->name == target_->name))
        continue;
      if (t->access_for(params_.initiator_name) == nullptr)
        continue;  // masked: it does not exist for this initiator
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

asio::awaitable<void> connection::watchdog() {
  auto self = shared_from_this();
  using std::chrono::steady_clock;
  // A second's resolution is enough for timeouts of seconds, and costs a
  // timer wake-up per connection per second.
  constexpr auto tick = std::chrono::seconds(1);
  while (!closed_) {
    watch_.expires_after(timing_.ping_interval.count() > 0
                             ? std::min<steady_clock::duration>(tick, timing_.ping_interval)
                             : tick);
    co_await watch_.async_wait(use_tuple);
    if (closed_) co_return;
    const auto now = steady_clock::now();
    if (!logged_in_) {
      if (now - started_ >= timing_.login_timeout) {
        log("iscsi: a login from " + peer_ + " did not finish within " +
            std::to_string(timing_.login_timeout.count()) + " s; connection closed");
        close();
      }
      continue;
    }
    if (logout_deadline_ && now >= *logout_deadline_) {
      log("iscsi: initiator " + params_.initiator_name +
          " did not log out when asked; connection closed");
      close();
    } else if (ping_outstanding_ && now - ping_sent_ >= timing_.ping_timeout) {
      log("iscsi: initiator " + params_.initiator_name + " at " + peer_ +
          " did not answer a NOP-In within " + std::to_string(timing_.ping_timeout.count()) +
          " s; presumed dead, connection closed");
      close();
    } else if (!ping_outstanding_ && timing_.ping_interval.count() > 0 &&
               now - last_heard_ >= timing_.ping_interval) {
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
  a.set_u16(field::async_parameter3,
            static_cast<std::uint16_t>(std::min<std::int64_t>(within.count(), 3600)));
  stamp(a, true);
  send({a, {}, {}, nullptr, false});
  logout_deadline_ = std::chrono::steady_clock::now() + within;
}

void connection::log(const std::string& what) const {
  if (timing_.log) timing_.log(what);
}

void connection::on_logout(const bhs& h) {
  order(
      h, [self = shared_from_this(), h] { self->log_out(h); }, true);
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

}  // namespace strata::iscsi
