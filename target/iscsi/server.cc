#include "target/iscsi/server.h"

#include "target/iscsi/connection.h"

namespace strata::iscsi {

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
