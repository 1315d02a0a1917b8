#include "target/iscsi/server.h"

#include "target/close_connections.h"
#include "target/iscsi/connection.h"

namespace strata::iscsi {

server::server(asio::any_io_executor loop, std::vector<target_node> targets,
               const server_options& options)
    : loop_(std::move(loop)), options_(options), acceptor_(loop_) {
  for (target_node& t : targets)
    targets_.push_back(std::make_shared<const target_node>(std::move(t)));
}

server::~server() {
  // Connections on other loops are gone (REQUIRES), and their loops may be
  // too: only those on this one are closed, as stop() would.
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  for (const auto& c : live_) {
    if (c->executor() == loop_) c->close();
  }
}

std::expected<void, error> server::listen(const tcp::endpoint& at) {
  boost::system::error_code ec;
  acceptor_.open(at.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(at, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return std::unexpected(
        make_error(errc::io_error, "iscsi: cannot listen on " + at.address().to_string() + ":" +
                                       std::to_string(at.port()) + ": " + ec.message()));
  }
  accept();
  return {};
}

tcp::endpoint server::local_endpoint() const {
  return acceptor_.local_endpoint();
}

void server::accept() {
  // The socket is made on the loop the connection will live on.
  const auto& loops = options_.connection_loops;
  const asio::any_io_executor on = loops.empty() ? loop_ : loops[next_loop_++ % loops.size()];
  acceptor_.async_accept(on, [this, alive = std::weak_ptr<void>(alive_)](
                                 boost::system::error_code ec, tcp::socket socket) {
    if (ec || alive.expired() || !acceptor_.is_open()) return;  // stopped
    socket.set_option(tcp::no_delay(true), ec);
    start_connection(std::move(socket));
    accept();
  });
}

void server::start_connection(tcp::socket socket) {
  auto c = std::make_shared<connection>(*this, std::move(socket));
  live_.insert(c);
  asio::dispatch(c->executor(), [c] { c->start(); });
}

void server::connection_ended(std::shared_ptr<connection> c) {
  asio::dispatch(loop_, [this, c = std::move(c), alive = std::weak_ptr<void>(alive_)]() mutable {
    if (!alive.expired()) live_.erase(c);
  });
}

void server::request_logout(std::chrono::seconds within) {
  for (const auto& c : live_)
    asio::dispatch(c->executor(), [c, within] { c->request_logout(within); });
}

void server::close_sessions_of(std::string_view target, const connection* except) {
  for (const auto& c : live_) {
    if (c.get() == except) continue;
    asio::dispatch(c->executor(), [c, target = std::string(target)] {
      if (c->serves(target)) c->close();
    });
  }
}

void server::close_connections(std::function<void()> done) {
  target::close_connections(live_, loop_, std::move(done));
}

void server::stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  for (const auto& c : live_) asio::dispatch(c->executor(), [c] { c->close(); });
}

const initiator_access* target_node::access_for(std::string_view initiator) const {
  for (const auto& [listed, access] : initiators) {
    if (same_name(listed, initiator)) return &access;
  }
  return anyone ? &*anyone : nullptr;
}

std::optional<std::string> check_target(const target_node& target) {
  auto check = [&](const std::string& who,
                   const initiator_access& a) -> std::optional<std::string> {
    if (a.luns == nullptr) return "target " + target.name + ": " + who + " has no LUN map";
    if (a.mutual_chap && !a.chap)
      return "target " + target.name + ": " + who + " has mutual CHAP without CHAP";
    if (a.chap) {
      if (auto bad = check_chap_secrets(*a.chap, a.mutual_chap))
        return "target " + target.name + ": " + who + ": " + *bad;
    }
    return std::nullopt;
  };
  for (const auto& [name, access] : target.initiators) {
    if (auto bad = check("initiator " + name, access)) return bad;
  }
  if (target.anyone) return check("the default initiator entry", *target.anyone);
  return std::nullopt;
}

std::vector<std::shared_ptr<const target_node>> server::targets() const {
  std::lock_guard hold(mutex_);
  return targets_;
}

std::shared_ptr<const target_node> server::find_target(std::string_view name) const {
  std::lock_guard hold(mutex_);
  for (const auto& t : targets_) {
    if (t->name == name) return t;
  }
  return nullptr;
}

void server::set_target(target_node target) {
  auto node = std::make_shared<const target_node>(std::move(target));
  {
    std::lock_guard hold(mutex_);
    auto same =
        std::ranges::find_if(targets_, [&](const auto& t) { return t->name == node->name; });
    if (same == targets_.end()) {
      targets_.push_back(node);
      return;
    }
    *same = node;
  }
  // Each connection checks its own session, on its loop.
  for (const auto& c : live_) {
    asio::dispatch(c->executor(), [c, node] {
      const session* s = c->joined_session();
      if (s == nullptr || !c->serves(node->name)) return;
      const initiator_access* now = node->access_for(s->params.initiator_name);
      if (now == nullptr || now->luns != s->access->luns) c->close();
    });
  }
}

void server::luns_changed(const scsi::lun_map& luns, bool inventory_changed) {
  std::vector<std::shared_ptr<session>> affected;
  {
    std::lock_guard hold(mutex_);
    for (const auto& [raw, weak] : sessions_) {
      // A session's access is set before it is listed, and never changes.
      if (auto s = weak.lock(); s && s->access != nullptr && s->access->luns == &luns)
        affected.push_back(std::move(s));
    }
  }
  // What the units were told is kept on their loop, this one.
  for (const auto& s : affected) s->reannounce_nexus(inventory_changed);
}

std::optional<asio::any_io_executor> server::session_loop(std::uint16_t tsih) const {
  std::lock_guard hold(mutex_);
  for (const auto& [raw, weak] : sessions_) {
    if (auto s = weak.lock(); s && s->tsih == tsih) return s->loop;
  }
  return std::nullopt;
}

std::uint16_t server::next_tsih_locked() noexcept {
  // Unique among live sessions: a connection joining one finds its loop by it.
  for (;;) {
    if (++tsih_ == 0) ++tsih_;
    const bool taken = std::ranges::any_of(sessions_, [&](const auto& entry) {
      const auto s = entry.second.lock();
      return s && s->tsih == tsih_;
    });
    if (!taken) return tsih_;
  }
}

}  // namespace strata::iscsi
