// A connection's PDU reader and writer, and a command's data: the ICReq,
// capsules and their in-capsule data, R2T and H2CData, C2HData and the
// response capsule.
#include "target/nvme/connection.h"

#include <algorithm>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>

#include "target/crc32c.h"

namespace strata::nvme {

connection::connection(server& s, tcp::socket socket)
    : server_(s),
      socket_(std::move(socket)),
      executor_(socket_.get_executor()),
      server_alive_(s.alive_),
      write_wake_(socket_.get_executor()),
      connect_timer_(socket_.get_executor()),
      data_timer_(socket_.get_executor()) {
  write_wake_.expires_at(asio::steady_timer::time_point::max());
  boost::system::error_code ec;
  const auto peer = socket_.remote_endpoint(ec);
  peer_ =
      ec ? "an unknown address" : peer.address().to_string() + ":" + std::to_string(peer.port());
  const auto local = socket_.local_endpoint(ec);
  local_address_ = ec ? "127.0.0.1" : local.address().to_string();
  socket_.set_option(tcp::no_delay(true), ec);  // a response waits for nothing
  terms_.max_in_capsule_data_bytes = s.options().in_capsule_data_bytes;
  terms_.max_h2c_data_bytes = s.options().max_h2c_data_bytes;
}

void connection::start() {
  auto self = shared_from_this();
  asio::co_spawn(
      socket_.get_executor(), [self] { return self->run(); }, asio::detached);
  asio::co_spawn(
      socket_.get_executor(), [self] { return self->writer(); }, asio::detached);
  asio::co_spawn(
      socket_.get_executor(), [self] { return self->connect_watchdog(); }, asio::detached);
  asio::co_spawn(
      socket_.get_executor(), [self] { return self->data_watch(); }, asio::detached);
}

void connection::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  write_wake_.cancel();
  connect_timer_.cancel();
  data_timer_.cancel();
}

void connection::log(const std::string& what) const {
  if (server_alive_.expired()) return;
  server_.log("NVMe/TCP " + peer_ + ": " + what);
}

asio::awaitable<void> connection::connect_watchdog() {
  auto self = shared_from_this();
  connect_timer_.expires_after(server_.options().connect_timeout);
  auto [ec] = co_await connect_timer_.async_wait(use_tuple);
  if (ec || closed_ || ctrl_ != nullptr) co_return;
  log("closed: no Connect within " + std::to_string(server_.options().connect_timeout.count()) +
      " s");
  close();
}

asio::awaitable<bool> connection::read(std::span<std::uint8_t> into) {
  co_return co_await reader_.read(socket_, asio::buffer(into.data(), into.size()));
}

asio::awaitable<bool> connection::read_data(const pdu_layout& l, std::span<std::uint8_t> into,
                                            bool& digest_failed) {
  std::array<std::uint8_t, 256> pad{};
  const std::uint32_t pad_bytes = l.pad_bytes();  // PDO is at most 255
  std::array<std::uint8_t, digest_bytes> digest{};
  if (!co_await reader_.read(socket_, asio::buffer(pad.data(), pad_bytes),
                             asio::buffer(into.data(), into.size()),
                             asio::buffer(digest.data(), l.data_digest ? digest_bytes : 0)))
    co_return false;
  if (l.data_digest && get_digest(digest.data()) != crc32c(into)) digest_failed = true;
  co_return true;
}

void connection::terminate(const fatal& why, std::span<const std::uint8_t> offending) {
  log("terminated: fatal error " + std::to_string(static_cast<int>(why.status)) + " at " +
      std::to_string(why.information));
  outgoing o;
  o.header = c2h_term_req(why, offending);
  o.close_after = true;
  send(std::move(o));
  closing_ = true;
}

asio::awaitable<void> connection::run() {
  auto self = shared_from_this();
  std::array<std::uint8_t, 256> header{};
  while (!closed_ && !closing_) {
    if (!co_await read(std::span(header).first(common_header_bytes))) break;
    const auto layout = check_common_header(
        std::span<const std::uint8_t, common_header_bytes>(header.data(), common_header_bytes),
        terms_);
    if (!layout) {
      terminate(layout.error(), std::span(header).first(common_header_bytes));
      break;
    }
    const std::uint32_t header_end =
        layout->header_bytes + (layout->header_digest ? digest_bytes : 0);
    if (!co_await read(
            std::span(header).subspan(common_header_bytes, header_end - common_header_bytes)))
      break;
    const auto whole = std::span<const std::uint8_t>(header).first(header_end);
    if (auto ok = check_header_digest(whole, *layout); !ok) {
      terminate(ok.error(), whole.first(layout->header_bytes));
      break;
    }
    bool going = false;
    switch (layout->type) {
      case pdu_type::ic_req:
        going = co_await on_ic_req(whole);
        break;
      case pdu_type::capsule_cmd:
        going = co_await on_capsule(*layout, whole);
        break;
      case pdu_type::h2c_data:
        going = co_await on_h2c_data(*layout, whole);
        break;
      case pdu_type::h2c_term_req:
      default:
        log("the host ended the connection (H2CTermReq, status " + std::to_string(get16(whole, 8)) +
            ")");
        going = false;
        break;
    }
    if (!going) break;
  }
  if (!closing_) {
    close();
  } else if (!closed_) {
    // A last PDU (a C2HTermReq, a Disconnect's response) is queued: the
    // writer closes once it is sent, and a host that stops reading gets 2 s.
    connect_timer_.expires_after(std::chrono::seconds(2));
    connect_timer_.async_wait([self](const boost::system::error_code& ec) {
      if (!ec) self->close();
    });
  }
  // Commands no unit runs are dropped now: an outstanding Asynchronous
  // Event Request, a fused Compare waiting for its Write, a write waiting
  // for its data. (Each holds this connection: kept, they would keep it
  // for ever.) Those a unit runs finish into nothing, and free themselves.
  fused_compare_ = nullptr;
  waiting_for_buffer_.clear();
  for (auto& s : slots_) s->waiting_for_buffer = false;
  for (auto& s : slots_) {
    if (s->busy && !s->on_unit && !s->responding) release(*s);
  }
  // The controller hears of its queue's end; a controller's admin queue
  // ending ends the controller.
  if (ctrl_ != nullptr) {
    if (qid_ == 0) {
      ctrl_->end("its admin queue closed");
    } else {
      std::lock_guard hold(ctrl_->mutex);
      const auto it = ctrl_->io_queues.find(qid_);
      if (it != ctrl_->io_queues.end() && it->second.lock().get() == this)
        ctrl_->io_queues.erase(it);
    }
  }
  if (!server_alive_.expired()) server_.connection_ended(shared_from_this());
}

asio::awaitable<bool> connection::on_ic_req(std::span<const std::uint8_t> header) {
  const auto req = parse_ic_req(header);
  if (!req) {
    terminate(req.error(), header);
    co_return false;
  }
  // Digests as the host asks for them; data at any offset (CPDA 0); C2HData
  // aligned as the host asks (HPDA).
  terms_.header_digest = req->header_digest;
  terms_.data_digest = req->data_digest;
  terms_.cpda = 0;
  host_pdu_data_alignment_ = req->host_pdu_data_alignment;
  outgoing o;
  o.header = ic_resp(terms_);
  send(std::move(o));
  terms_.initialized = true;
  co_return true;
}

slot* connection::free_slot() {
  for (auto& s : slots_) {
    if (!s->busy) return s.get();
  }
  if (slots_.size() >= std::max<std::uint32_t>(queue_entries_, 1)) return nullptr;
  slots_.push_back(std::make_unique<slot>());
  slots_.back()->index = static_cast<std::uint16_t>(slots_.size() - 1);
  slots_.back()->task.context = slots_.back().get();
  return slots_.back().get();
}

void connection::release(slot& s) {
  s.busy = false;
  s.responding = false;
  // Nothing of a fused pair outlives its slot.
  if (s.fused_with != nullptr && s.fused_with->fused_with == &s) s.fused_with->fused_with = nullptr;
  s.fused_with = nullptr;
  s.fused_failed = false;
  if (fused_compare_ == &s) fused_compare_ = nullptr;
  if (s.waiting_for_buffer) {
    std::erase(waiting_for_buffer_, &s);
    s.waiting_for_buffer = false;
  }
  // Its write buffer's memory goes (a slot keeps no more than in-capsule
  // data needs), and its reservation back to the queue and the host.
  if (s.data.size() > terms_.max_in_capsule_data_bytes) s.data = device::aligned_buffer();
  if (s.reserved_bytes > 0) {
    reserved_bytes_ -= s.reserved_bytes;
    if (s.reserved_from_host && ctrl_ != nullptr && ctrl_->budget != nullptr)
      ctrl_->budget->give_back(s.reserved_bytes);
    s.reserved_bytes = 0;
    s.reserved_from_host = false;
    grant_buffers_soon();
  }
  s.ns = nullptr;
  s.subsys.reset();
  s.to_host.clear();
  s.digest_failed = false;
  s.data_ready = false;
  s.received_bytes = 0;
  s.data_bytes = 0;
  s.result = success;
  s.result_dword = 0;
  s.hold.reset();  // last: it may hold this connection's last reference
}

asio::awaitable<bool> connection::on_capsule(const pdu_layout& l,
                                             std::span<const std::uint8_t> header) {
  slot* s = free_slot();
  std::array<std::uint8_t, sqe_bytes> sqe{};
  std::memcpy(sqe.data(), header.data() + common_header_bytes, sqe_bytes);
  const command_view c(std::span<const std::uint8_t, sqe_bytes>(sqe.data(), sqe_bytes));
  if (ctrl_ != nullptr) ctrl_->heard();
  if (sq_flow_control_ && ctrl_ != nullptr)
    sq_head_ = static_cast<std::uint16_t>((sq_head_ + 1) % queue_entries_);
  if (s == nullptr) {
    // More commands than the queue holds: the host broke its own flow
    // control. Nothing is kept for it; its data, if any, is read and dropped.
    std::vector<std::uint8_t> sink(l.data_bytes);
    bool ignored = false;
    if (l.data_bytes > 0 && !co_await read_data(l, sink, ignored)) co_return false;
    log("a command past the queue's " + std::to_string(queue_entries_) + " entries");
    terminate({fatal_error::pdu_sequence_error, 0}, header.first(l.header_bytes));
    co_return false;
  }
  s->busy = true;
  s->sqe = sqe;
  s->cid = c.command_id();
  s->sq_head = sq_flow_control_ ? sq_head_ : 0xffff;
  s->hold = shared_from_this();
  // A fused Compare's Write must come next (NVMe Base 2.0, 3.4.2): anything
  // else leaves the Compare without its half.
  const bool second_of_pair = c.fuse() == 2 && fused_compare_ != nullptr;
  if (fused_compare_ != nullptr && !second_of_pair)
    fail_fused(*fused_compare_, generic(code::aborted_missing_fused));
  const bool after_failed_first = std::exchange(failed_fused_first_, false);
  // A command refused before it holds a buffer: its data, if any, is read
  // and dropped. A refused fused half fails its pair.
  const auto refuse = [&](status why) -> asio::awaitable<bool> {
    if (second_of_pair) fail_fused(*fused_compare_, generic(code::aborted_failed_fused));
    if (c.fuse() == 1) failed_fused_first_ = true;
    std::vector<std::uint8_t> sink(l.data_bytes);
    bool ignored = false;
    if (l.data_bytes > 0 && !co_await read_data(l, sink, ignored)) co_return false;
    finish(*s, why);
    co_return true;
  };
  const auto needed = data_needed(c);
  if (!needed) co_return co_await refuse(needed.error());
  // The capsule carries the command's data exactly when its SGL says so,
  // and all of it: a capsule that disagrees is refused (its data read and
  // dropped, so that the stream stays in step), and no buffer is made
  // from the SGL's length that the PDU does not carry.
  const bool sgl_in_capsule =
      c.sgl_type() == sgl::data_block && c.sgl_subtype() == sgl::subtype_offset;
  if (l.data_bytes != (sgl_in_capsule ? *needed : 0))
    co_return co_await refuse(generic(code::data_sgl_length_invalid));
  s->data_bytes = *needed;
  const bool in_capsule = l.data_bytes > 0;
  if (in_capsule || s->data_bytes == 0) {
    // In-capsule data (at most IOCCSZ) goes into the slot's own buffer,
    // kept from command to command; write data on an R2T waits below for
    // a reservation before its buffer is made.
    bool no_memory = false;
    try {
      if (s->data.size() < s->data_bytes) s->data = device::aligned_buffer(s->data_bytes);
    } catch (const std::bad_alloc&) {
      no_memory = true;
    }
    if (no_memory) co_return co_await refuse(generic(code::command_interrupted, false));
  }
  if (c.fuse() == 1) {
    fused_compare_ = s;
  } else if (c.fuse() == 2) {
    if (second_of_pair) {
      fused_compare_->fused_with = s;
      s->fused_with = fused_compare_;
      fused_compare_ = nullptr;
      // A Compare whose data comes by R2T waited for this capsule; a Write
      // by R2T too is reserved with it below.
      if (s->fused_with->waiting_for_buffer && in_capsule) grant_buffers();
    } else {
      // No Compare before it, or one refused at once.
      s->fused_failed = true;
      s->result =
          generic(after_failed_first ? code::aborted_failed_fused : code::aborted_missing_fused);
    }
  }
  if (in_capsule) {
    // In-capsule data: all of the command's.
    auto into = std::span(reinterpret_cast<std::uint8_t*>(s->data.data()), s->data_bytes);
    if (!co_await read_data(l, into, s->digest_failed)) co_return false;
    s->received_bytes = s->data_bytes;
    data_arrived(*s);
  } else if (s->data_bytes > 0) {
    // One R2T for the whole (the host cuts it into H2CData of MAXH2CDATA),
    // once the queue's and the host's budgets hold its buffer.
    s->waiting_for_buffer = true;
    waiting_for_buffer_.push_back(s);
    grant_buffers();
  } else {
    data_arrived(*s);
  }
  co_return true;
}

void connection::grant_buffers() {
  grant_posted_ = false;
  if (closed_ || closing_ || server_alive_.expired()) return;
  const std::uint64_t queue_capacity =
      std::max<std::uint64_t>(server_.options().write_buffer_bytes_per_queue,
                              2 * std::uint64_t{server_.options().max_transfer_bytes});
  write_budget* budget = ctrl_ == nullptr ? nullptr : ctrl_->budget.get();  // none before Connect
  while (!waiting_for_buffer_.empty()) {
    slot& s = *waiting_for_buffer_.front();
    // A fused Compare's buffer waits for its Write's capsule, and the pair's
    // buffers are then reserved together: a Compare holding its buffer
    // while its Write waits for one behind it could wait for ever.
    if (&s == fused_compare_) return;
    slot* write =
        s.command().fuse() == 1 && s.fused_with != nullptr && s.fused_with->waiting_for_buffer
            ? s.fused_with
            : nullptr;
    const std::uint64_t bytes = s.data_bytes + (write != nullptr ? write->data_bytes : 0);
    if (reserved_bytes_ + bytes > queue_capacity) return;  // a release here grants again
    if (budget != nullptr) {
      std::function<void()> wake;  // one per queue at a time
      if (!host_wake_kept_) {
        wake = [weak = weak_from_this()] {
          if (auto self = weak.lock()) {
            asio::post(self->executor_, [self] {
              self->host_wake_kept_ = false;
              self->grant_buffers();
            });
          }
        };
      }
      if (!budget->take(bytes, std::move(wake))) {
        host_wake_kept_ = true;
        return;  // the host's other queues hold it: woken when they give some back
      }
    }
    bool no_memory = false;
    for (slot* each : {&s, write}) {
      if (each == nullptr) continue;
      std::erase(waiting_for_buffer_, each);
      each->waiting_for_buffer = false;
      each->reserved_bytes = each->data_bytes;
      each->reserved_from_host = budget != nullptr;
      reserved_bytes_ += each->data_bytes;
      try {
        if (each->data.size() < each->data_bytes)
          each->data = device::aligned_buffer(each->data_bytes);
      } catch (const std::bad_alloc&) {
        no_memory = true;
      }
    }
    if (no_memory) {
      // No data will come: answered now (the host retries), the pair
      // together; the reservations go with the slots.
      if (write != nullptr) {
        s.fused_with = write->fused_with = nullptr;
        finish(*write, generic(code::aborted_failed_fused));
      }
      finish(s, generic(code::command_interrupted, false));
      continue;
    }
    for (slot* each : {&s, write}) {
      if (each == nullptr) continue;
      each->data_moved_at = std::chrono::steady_clock::now();
      outgoing o;
      o.header = r2t(each->cid, each->index, 0, each->data_bytes, terms_.header_digest);
      send(std::move(o));
    }
  }
}

void connection::grant_buffers_soon() {
  if (grant_posted_ || waiting_for_buffer_.empty()) return;
  grant_posted_ = true;
  asio::post(executor_, [self = shared_from_this()] { self->grant_buffers(); });
}

asio::awaitable<void> connection::data_watch() {
  auto self = shared_from_this();
  const auto timeout = server_.options().h2c_data_timeout;
  if (timeout.count() <= 0) co_return;  // never
  const auto period =
      std::max<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(10));
  while (!closed_ && !closing_) {
    data_timer_.expires_after(period);
    auto [ec] = co_await data_timer_.async_wait(use_tuple);
    if (ec || closed_ || closing_) co_return;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& s : slots_) {
      if (!s->busy || s->reserved_bytes == 0 || s->data_ready || now - s->data_moved_at < timeout)
        continue;
      log("terminated: command " + std::to_string(s->cid) + " had " +
          std::to_string(s->received_bytes) + " of the " + std::to_string(s->data_bytes) +
          " bytes its R2T asked for, and no more came for " + std::to_string(timeout.count()) +
          " ms");
      terminate({fatal_error::pdu_sequence_error, 0}, {});
      // A host that reads nothing more gets 2 s for the C2HTermReq.
      data_timer_.expires_after(std::chrono::seconds(2));
      auto [late] = co_await data_timer_.async_wait(use_tuple);
      if (!late) close();
      co_return;
    }
  }
}

std::expected<std::uint32_t, status> connection::data_needed(const command_view& c) {
  // What the command moves, by its kind.
  std::uint32_t to_controller = 0;
  std::optional<std::uint32_t> to_host;  // none: what the SGL says (admin data)
  // FUSE 11b is reserved, and only NVM commands fuse (NVMe Base 2.0, 3.4.2).
  if (c.fuse() == 3 || (c.fuse() != 0 && (qid_ == 0 || c.opcode() == opcode::fabrics)))
    return std::unexpected(generic(code::invalid_field));
  if (c.opcode() == opcode::fabrics) {
    if (c.fabrics_type() == fctype::connect) to_controller = connect_data_bytes;
  } else if (ctrl_ == nullptr) {
    return std::unexpected(
        generic(code::command_sequence_error));  // nothing but Connect before Connect
  } else if (qid_ != 0) {
    const namespace_config* ns =
        subsys_ == nullptr ? nullptr : subsys_->find(ctrl_->host.host_nqn, c.nsid());
    if (ns == nullptr) {
      if (c.opcode() == opcode::flush && c.nsid() == 0xffffffff) return 0u;  // every namespace
      return std::unexpected(generic(code::invalid_namespace));
    }
    const auto t = nvm_transfer_of(c, ns->block_bytes, server_.options().max_transfer_bytes);
    if (!t) return std::unexpected(t.error());
    to_controller = t->to_controller_bytes;
    to_host = t->to_host_bytes;
    if (c.sgl_length() > to_controller && c.sgl_length() <= t->to_controller_most_bytes)
      to_controller = c.sgl_length();
  }
  // The data pointer: a Data Block in the capsule, or the Transport SGL
  // Data Block (R2T for what the host sends, C2HData for what it gets).
  const bool in_capsule = c.sgl_type() == sgl::data_block && c.sgl_subtype() == sgl::subtype_offset;
  const bool transport =
      c.sgl_type() == sgl::transport_data_block && c.sgl_subtype() == sgl::subtype_transport;
  if (!in_capsule && !transport) return std::unexpected(generic(code::sgl_descriptor_type_invalid));
  if (to_controller > 0) {
    if (c.sgl_length() != to_controller || (in_capsule && c.sgl_address() != 0))
      return std::unexpected(generic(code::data_sgl_length_invalid));
    if (in_capsule && to_controller > terms_.max_in_capsule_data_bytes)
      return std::unexpected(generic(code::data_sgl_length_invalid));
  } else if (to_host && *to_host > 0 && (!transport || c.sgl_length() != *to_host)) {
    return std::unexpected(generic(code::data_sgl_length_invalid));
  }
  return to_controller;
}

asio::awaitable<bool> connection::on_h2c_data(const pdu_layout& l,
                                              std::span<const std::uint8_t> header) {
  const auto d = parse_h2c_data(header, l, terms_);
  if (!d) {
    terminate(d.error(), header.first(l.header_bytes));
    co_return false;
  }
  // The R2T's tag is the slot's index; it must be waiting for this data,
  // from where the last H2CData ended.
  slot* s = d->transfer_tag < slots_.size() ? slots_[d->transfer_tag].get() : nullptr;
  if (s == nullptr || !s->busy || s->cid != d->command_id || s->data_ready || s->data_bytes == 0 ||
      s->reserved_bytes == 0) {
    terminate({fatal_error::invalid_header_field, 10}, header.first(l.header_bytes));
    co_return false;
  }
  if (d->data_offset != s->received_bytes || d->data_bytes > s->data_bytes - s->received_bytes) {
    terminate({fatal_error::data_out_of_range, 0}, header.first(l.header_bytes));
    co_return false;
  }
  auto into =
      std::span(reinterpret_cast<std::uint8_t*>(s->data.data()) + d->data_offset, d->data_bytes);
  if (!co_await read_data(l, into, s->digest_failed)) co_return false;
  s->received_bytes += d->data_bytes;
  s->data_moved_at = std::chrono::steady_clock::now();
  if (s->received_bytes == s->data_bytes) {
    data_arrived(*s);
  } else if (d->last) {
    // LAST_PDU before all the R2T asked for.
    terminate({fatal_error::data_out_of_range, 0}, header.first(l.header_bytes));
    co_return false;
  }
  co_return true;
}

void connection::data_arrived(slot& s) {
  s.data_ready = true;
  // A data digest error is not fatal: the host sends the command again
  // (NVMe/TCP 1.0, 3.6.2.7). Of a fused pair, it fails both halves.
  const status transient = generic(code::transient_transport_error, false);
  const std::uint8_t fuse = s.command().fuse();
  if (fuse == 0) return s.digest_failed ? finish(s, transient) : execute(s);
  if (s.fused_failed) return finish(s, s.digest_failed ? transient : s.result);
  if (s.fused_with == nullptr) return;  // a Compare waiting for its Write's capsule
  slot& compare = fuse == 1 ? s : *s.fused_with;
  slot& write = *compare.fused_with;
  if (!compare.data_ready || !write.data_ready) return;  // the other half's data is to come
  if (compare.digest_failed || write.digest_failed) {
    compare.fused_with = write.fused_with = nullptr;
    const status failed_fused = generic(code::aborted_failed_fused);
    finish(compare, compare.digest_failed ? transient : failed_fused);
    finish(write, write.digest_failed ? transient : failed_fused);
    return;
  }
  execute_fused(compare);
}

void connection::fail_fused(slot& half, status why) {
  if (fused_compare_ == &half) fused_compare_ = nullptr;
  if (half.command().fuse() == 0) return;
  // A half answered once its data is in, or at once if its R2T has not
  // gone out (no data will come for it then).
  const auto answer_when_due = [this](slot& h, status st) {
    if (h.waiting_for_buffer) {
      std::erase(waiting_for_buffer_, &h);
      h.waiting_for_buffer = false;
      h.data_ready = true;
      grant_buffers_soon();  // those behind it
    }
    if (h.data_ready)
      finish(h, h.digest_failed ? generic(code::transient_transport_error, false) : st);
  };
  if (slot* other = std::exchange(half.fused_with, nullptr); other != nullptr) {
    // Its other half fails with it (a pair is answered together).
    other->fused_with = nullptr;
    other->fused_failed = true;
    other->result = generic(code::aborted_failed_fused);
    answer_when_due(*other, other->result);
  }
  half.fused_failed = true;
  half.result = why;
  answer_when_due(half, why);
}

void connection::execute(slot& s) {
  const command_view c = s.command();
  if (c.opcode() == opcode::fabrics) return on_fabrics(s);
  if (qid_ == 0) return on_admin(s);
  execute_io(s);
}

void connection::finish(slot& s, status st, std::uint64_t result) {
  s.result = st;
  s.result_dword = result;
  respond(s);
}

void connection::respond(slot& s) {
  if (closed_ || closing_) return release(s);
  s.responding = true;  // its data (to_host, the task's data_in) is the writer's until written
  const bool with_data = s.result.ok() && !s.to_host.empty() && s.command().sgl_length() > 0;
  const bool read_data = s.result.ok() && s.ns != nullptr && s.nvm.to_host_bytes() > 0;
  if (with_data || read_data) {
    outgoing data;
    // An admin command's data, no more than the host's buffer holds.
    data.data = with_data ? std::span<const std::uint8_t>(s.to_host).first(
                                std::min<std::size_t>(s.to_host.size(), s.command().sgl_length()))
                          : s.nvm.to_host(s.task);
    // The response capsule follows (its SQHD is the host's flow control),
    // so C2HData's SUCCESS flag is used only without it.
    const bool success_flag = !sq_flow_control_;
    data.header =
        c2h_data(s.cid, 0, static_cast<std::uint32_t>(data.data.size()), true, success_flag,
                 terms_.header_digest, terms_.data_digest, host_pdu_data_alignment_);
    data.data_digest = terms_.data_digest;
    if (success_flag) {
      data.release = &s;
      send(std::move(data));
      return;
    }
    send(std::move(data));
  }
  const auto cqe = completion(s.cid, s.result, s.sq_head, qid_, s.result_dword);
  outgoing o;
  o.header = capsule_resp(cqe, terms_.header_digest);
  o.release = &s;
  send(std::move(o));
}

void connection::complete_async_event(const async_completion& done) {
  for (auto& s : slots_) {
    if (s->busy && s->cid == done.command_id &&
        s->command().opcode() == opcode::async_event_request) {
      return finish(*s, success, done.result);
    }
  }
}

void connection::send(outgoing o) {
  if (closed_) {
    if (o.release != nullptr) release(*o.release);
    return;
  }
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
    // Everything queued goes in one gathered write: a response and the
    // next command's data share a system call under load.
    // The gather list and digests are the connection's, reused: a steady
    // load allocates nothing here.
    std::vector<asio::const_buffer>& bufs = write_buffers_;
    std::vector<std::array<std::uint8_t, digest_bytes>>& digests = write_digests_;
    bufs.clear();
    const std::size_t n = std::min<std::size_t>(queue_.size(), 64);
    digests.resize(n);  // before any buffer points into it
    bool close_after = false;
    for (std::size_t i = 0; i < n; ++i) {
      outgoing& o = queue_[i];
      bufs.push_back(asio::buffer(o.header.wire().data(), o.header.size));
      if (!o.data.empty()) {
        bufs.push_back(asio::buffer(o.data.data(), o.data.size()));
        if (o.data_digest) {
          put_digest(crc32c(o.data), digests[i].data());
          bufs.push_back(asio::buffer(digests[i]));
        }
      }
      close_after = close_after || o.close_after;
    }
    auto [ec, written] = co_await asio::async_write(socket_, bufs, use_tuple);
    for (std::size_t i = 0; i < n; ++i) {
      if (queue_.front().release != nullptr) release(*queue_.front().release);
      queue_.pop_front();
    }
    if (ec || close_after) {
      close();
      break;
    }
  }
  // Closed: what was queued is not sent, and its slots are free.
  while (!queue_.empty()) {
    if (queue_.front().release != nullptr) release(*queue_.front().release);
    queue_.pop_front();
  }
}

}  // namespace strata::nvme
