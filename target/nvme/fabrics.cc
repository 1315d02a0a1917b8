// The Fabrics commands (NVMe over Fabrics 1.1, section 3): Connect, which
// makes a controller (admin queue) or joins one (I/O queue), Property Get
// and Set, Disconnect; and the controller's life: its keep alive, its
// events, its end.
#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>

#include "target/nvme/connection.h"

namespace strata::nvme {

namespace {

// Connect's "invalid parameters" for a field of the command itself
// (IATTR 0) at byte `at` of the SQE.
status invalid_connect_parameter() noexcept {
  return {status_type::command_specific, code::connect_invalid_parameters, true};
}
std::uint64_t command_field(std::uint16_t at) noexcept {
  return connect_invalid_command_field_result(at);
}

std::string hex(std::span<const std::uint8_t> bytes) {
  std::string out;
  char two[3];
  for (const std::uint8_t b : bytes) {
    std::snprintf(two, sizeof two, "%02x", b);
    out += two;
  }
  return out;
}

}  // namespace

void connection::on_fabrics(slot& s) {
  const command_view c = s.command();
  if (c.fabrics_type() == fctype::connect) return on_connect(s);
  if (ctrl_ == nullptr) return finish(s, generic(code::command_sequence_error));
  switch (c.fabrics_type()) {
    case fctype::property_get:
    case fctype::property_set:
      // Properties are the controller's, reached through its admin queue.
      if (qid_ != 0) return finish(s, generic(code::invalid_field));
      return on_property(s, c.fabrics_type() == fctype::property_set);
    case fctype::disconnect:
      // An I/O queue's end; the admin queue ends with its connection.
      if (qid_ == 0) return finish(s, generic(code::invalid_field));
      finish(s, success);
      closing_ = true;
      {
        outgoing last;  // closes the connection once the response is written
        last.close_after = true;
        send(std::move(last));
      }
      return;
    default:
      return finish(s, generic(code::invalid_field));
  }
}

void connection::on_connect(slot& s) {
  const command_view c = s.command();
  if (ctrl_ != nullptr)
    return finish(s, generic(code::command_sequence_error));  // one Connect per queue
  const connect_command cmd = parse_connect(c);
  if (cmd.record_format != 0) {
    return finish(s, {status_type::command_specific, code::connect_incompatible_format, true});
  }
  auto data = parse_connect_data(
      std::span(reinterpret_cast<const std::uint8_t*>(s.data.data()), s.data_bytes));
  if (!data) {
    log("Connect refused: malformed NQN at byte " + std::to_string(data.error().data_offset) +
        " of its data");
    return finish(s, data.error().why, connect_invalid_parameter_result(data.error().data_offset));
  }
  constexpr std::uint16_t subsystem_nqn_at = 256, controller_id_at = 16, queue_id_at = 42,
                          queue_size_at = 44;
  const bool discovery = data->subsystem_nqn == discovery_nqn;
  std::shared_ptr<const subsystem> subsys;
  if (!discovery) {
    subsys = server_.find_subsystem(data->subsystem_nqn);
    if (subsys == nullptr) {
      log("Connect refused: no subsystem " + data->subsystem_nqn + " (host " + data->host_nqn +
          ")");
      return finish(s, invalid_connect_parameter(),
                    connect_invalid_parameter_result(subsystem_nqn_at));
    }
    if (!subsys->allows(data->host_nqn)) {
      log("Connect refused: host " + data->host_nqn + " is not allowed in " + data->subsystem_nqn);
      return finish(s, {status_type::command_specific, code::connect_invalid_host, true});
    }
  }
  if (cmd.queue_entries < 2 || cmd.queue_entries > server_.options().max_queue_entries) {
    return finish(s, invalid_connect_parameter(), command_field(queue_size_at));
  }
  if (cmd.queue_id == 0) {
    // The admin queue: a new controller (the dynamic model: the host asks
    // for FFFFh, or names none it may have).
    // It lives on this connection's loop.
    if (server_.controllers_of(data->host_nqn) >= server_.options().max_controllers_per_host) {
      log("Connect refused: host " + data->host_nqn + " has " +
          std::to_string(server_.options().max_controllers_per_host) +
          " controllers at this port already");
      return finish(s, {status_type::command_specific, code::connect_controller_busy, false});
    }
    std::shared_ptr<controller> made;
    const std::uint16_t id = server_.add_controller([&](std::uint16_t fresh) {
      made =
          std::make_shared<controller>(server_, executor_, subsys, fresh, *data, cmd.keep_alive_ms);
      return made;
    });
    if (id == 0)
      return finish(s, {status_type::command_specific, code::connect_controller_busy, false});
    made->budget = server_.write_budget_of(data->host_nqn);
    ctrl_ = made;
    subsys_ = subsys;
    {
      std::lock_guard hold(ctrl_->mutex);
      ctrl_->admin = weak_from_this();
    }
    ctrl_->start();
    qid_ = 0;
  } else {
    // An I/O queue joins its host's controller.
    std::shared_ptr<controller> joined = server_.find_controller(data->controller_id);
    if (joined == nullptr || joined->ended() || joined->discovery() || discovery ||
        joined->host.host_nqn != data->host_nqn || joined->host.host_id != data->host_id ||
        joined->subsystem_nqn() != data->subsystem_nqn) {
      log("Connect refused: host " + data->host_nqn + " named controller " +
          std::to_string(data->controller_id) + ", which is not its");
      return finish(s, invalid_connect_parameter(),
                    connect_invalid_parameter_result(controller_id_at));
    }
    std::unique_lock hold(joined->mutex);
    if (!joined->registers.ready()) return finish(s, generic(code::command_sequence_error));
    const auto taken = joined->io_queues.find(cmd.queue_id);
    if (cmd.queue_id > joined->features.io_queues() ||
        (taken != joined->io_queues.end() && !taken->second.expired())) {
      return finish(s, invalid_connect_parameter(), command_field(queue_id_at));
    }
    joined->io_queues[cmd.queue_id] = weak_from_this();
    subsys_ = joined->subsys;
    hold.unlock();
    ctrl_ = joined;
    qid_ = cmd.queue_id;
  }
  queue_entries_ = cmd.queue_entries;
  // CATTR bit 2: the host disables SQ flow control, and reads no SQHD.
  sq_flow_control_ = (c.u16(46) & 0x4) == 0;
  sq_head_ = static_cast<std::uint16_t>(1 % queue_entries_);  // the Connect itself took an entry
  s.sq_head = sq_flow_control_ ? sq_head_ : 0xffff;
  connect_timer_.cancel();
  finish(s, success, qid_ == 0 ? ctrl_->id : 0);
}

void connection::on_property(slot& s, bool set) {
  const property_access p = parse_property(s.command());
  std::unique_lock hold(ctrl_->mutex);
  if (!set) {
    const auto value = ctrl_->registers.get(p.offset, p.size_bytes);
    if (!value) return finish(s, value.error());
    return finish(s, success, *value);
  }
  const auto changed = ctrl_->registers.set(p.offset, p.size_bytes, p.value);
  if (!changed) return finish(s, changed.error());
  hold.unlock();
  if (*changed == controller_registers::change::reset ||
      *changed == controller_registers::change::shut_down) {
    // A reset or shutdown ends the I/O queues (NVMe Base 2.0, 3.7.2).
    ctrl_->drop_io_queues();
  }
  finish(s, success);
}

// ---------------------------------------------------------------------------
// The controller

controller::controller(server& s, asio::any_io_executor loop,
                       std::shared_ptr<const subsystem> subsystem_now, std::uint16_t controller_id,
                       connect_data connecting, std::uint32_t keep_alive_ms)
    : server_(s),
      server_alive_(s.alive_),
      id(controller_id),
      host(std::move(connecting)),
      initiator_port(host.host_nqn + ",hostid,0x" + hex(host.host_id)),
      subsys(std::move(subsystem_now)),
      registers(s.options().max_queue_entries, 2000),
      features(s.options().max_io_queues, keep_alive_ms, true),
      events(4),
      discovery_(subsys == nullptr),
      subsystem_nqn_(subsys == nullptr ? std::string(discovery_nqn) : subsys->nqn),
      loop_(std::move(loop)),
      keep_alive_(loop_) {}

void controller::start() {
  auto self = shared_from_this();
  asio::co_spawn(
      loop_, [self] { return self->keep_alive_watch(); }, asio::detached);
}

asio::awaitable<void> controller::keep_alive_watch() {
  auto self = shared_from_this();
  while (!ended()) {
    std::uint32_t kato_ms = 0;
    {
      std::lock_guard hold(mutex);
      kato_ms = features.keep_alive_ms();
    }
    // KATO 0: no keep alive; look again in a while, in case the host sets one.
    keep_alive_.expires_after(std::chrono::milliseconds(kato_ms == 0 ? 1000 : kato_ms));
    auto [ec] = co_await keep_alive_.async_wait(use_tuple);
    if (ec || ended()) co_return;
    {
      std::lock_guard hold(mutex);
      kato_ms = features.keep_alive_ms();
    }
    if (kato_ms == 0) continue;
    // Any command on any of its queues counts (traffic-based keep alive,
    // as Linux's nvmet counts it); silence for a whole KATO ends it.
    if (now_ns() - last_heard_ns_.load(std::memory_order_relaxed) >=
        std::int64_t{kato_ms} * 1000000) {
      end_here("its host " + host.host_nqn + " sent nothing for " + std::to_string(kato_ms) +
               " ms (keep alive)");
    }
  }
}

void controller::end(const std::string& why) {
  asio::dispatch(loop_, [self = shared_from_this(), why] { self->end_here(why); });
}

void controller::end_here(const std::string& why) {
  if (ended_.exchange(true)) return;
  keep_alive_.cancel();
  if (!server_alive_.expired()) {
    server_.log("NVMe controller " + std::to_string(id) + " of " + host.host_nqn +
                " ended: " + why);
    server_.remove_controller(id);
  }
  // Each queue closes on its own loop; its reader then leaves this controller.
  std::vector<std::shared_ptr<connection>> queues;
  {
    std::lock_guard hold(mutex);
    for (auto& [qid, q] : io_queues) {
      if (auto c = q.lock()) queues.push_back(std::move(c));
    }
    if (auto a = admin.lock()) queues.push_back(std::move(a));
  }
  for (auto& q : queues) asio::post(q->executor(), [q] { q->close(); });
}

void controller::drop_io_queues() {
  std::vector<std::shared_ptr<connection>> queues;
  {
    std::lock_guard hold(mutex);
    for (auto& [qid, q] : io_queues) {
      if (auto c = q.lock()) queues.push_back(std::move(c));
    }
  }
  for (auto& q : queues) asio::post(q->executor(), [q] { q->close(); });
}

void controller::raise(const async_event& e) {
  if (ended()) return;
  std::shared_ptr<connection> to;
  std::optional<async_completion> done;
  {
    std::lock_guard hold(mutex);
    done = events.raise(e, features.async_events_enabled());
    if (done) to = admin.lock();
  }
  if (done && to != nullptr)
    asio::post(to->executor(), [to, d = *done] { to->complete_async_event(d); });
}

void controller::subsystem_changed(std::shared_ptr<const subsystem> fresh,
                                   const std::vector<std::uint32_t>& changed) {
  std::vector<std::shared_ptr<connection>> queues;
  {
    std::lock_guard hold(mutex);
    subsys = fresh;
    for (const std::uint32_t nsid : changed) {
      if (std::ranges::find(changed_namespaces, nsid) == changed_namespaces.end())
        changed_namespaces.push_back(nsid);
    }
    for (auto& [qid, q] : io_queues) {
      if (auto c = q.lock()) queues.push_back(std::move(c));
    }
    if (auto a = admin.lock()) queues.push_back(std::move(a));
  }
  for (auto& q : queues) asio::dispatch(q->executor(), [q, fresh] { q->update_subsystem(fresh); });
  if (!changed.empty()) raise(namespace_attribute_changed());
}

}  // namespace strata::nvme
