#include "target/nvme/server.h"

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include "target/close_connections.h"
#include "target/nvme/connection.h"

namespace strata::nvme {

std::span<const namespace_config> subsystem::namespaces_of(
    std::string_view host_nqn) const noexcept {
  if (const auto it = hosts.find(host_nqn); it != hosts.end()) return it->second;
  if (anyone) return *anyone;
  return {};
}

const namespace_config* subsystem::find(std::string_view host_nqn,
                                        std::uint32_t nsid) const noexcept {
  for (const namespace_config& ns : namespaces_of(host_nqn)) {
    if (ns.nsid == nsid) return &ns;
  }
  return nullptr;
}

server::server(boost::asio::any_io_executor loop, std::vector<subsystem> subsystems,
               server_options options)
    : loop_(loop), options_(std::move(options)), acceptor_(loop) {
  for (subsystem& s : subsystems) {
    const std::string nqn = s.nqn;
    subsystems_[nqn] = std::make_shared<const subsystem>(std::move(s));
  }
}

server::~server() {
  stop();
}

void server::log(const std::string& what) const {
  if (!options_.log) return;
  boost::asio::dispatch(loop_, [this, what, alive = std::weak_ptr<void>(alive_)] {
    if (!alive.expired()) options_.log(what);
  });
}

std::expected<void, error> server::listen(const boost::asio::ip::tcp::endpoint& at) {
  boost::system::error_code ec;
  acceptor_.open(at.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(at, ec);
  if (!ec) acceptor_.listen(tcp::socket::max_listen_connections, ec);
  if (ec) {
    return std::unexpected(
        make_error(errc::io_error, "NVMe/TCP cannot listen at " + at.address().to_string() + ":" +
                                       std::to_string(at.port()) + ": " + ec.message()));
  }
  listening_port_ = acceptor_.local_endpoint(ec).port();
  accept();
  return {};
}

boost::asio::ip::tcp::endpoint server::local_endpoint() const {
  boost::system::error_code ec;
  return acceptor_.local_endpoint(ec);
}

void server::accept() {
  // The socket is made on the loop the connection will live on.
  const auto& loops = options_.connection_loops;
  const boost::asio::any_io_executor on =
      loops.empty() ? loop_ : loops[next_loop_++ % loops.size()];
  acceptor_.async_accept(on, [this, alive = std::weak_ptr<void>(alive_)](
                                 const boost::system::error_code& ec, tcp::socket socket) {
    if (alive.expired() || !acceptor_.is_open()) return;
    if (!ec) {
      auto c = std::make_shared<connection>(*this, std::move(socket));
      live_.insert(c);
      boost::asio::post(c->executor(), [c] { c->start(); });
    }
    accept();
  });
}

void server::close_connections(std::function<void()> done) {
  target::close_connections(live_, loop_, std::move(done));
}

void server::stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  for (const auto& c : live_) boost::asio::post(c->executor(), [c] { c->close(); });
}

void server::connection_ended(std::shared_ptr<connection> c) {
  boost::asio::post(loop_, [this, c = std::move(c), alive = std::weak_ptr<void>(alive_)]() mutable {
    if (!alive.expired()) live_.erase(c);
  });
}

std::uint16_t server::add_controller(
    const std::function<std::shared_ptr<controller>(std::uint16_t id)>& make) {
  std::lock_guard hold(mutex_);
  // port_id << 12 | n, n from 1 to FEFh: unique across the two controllers'
  // ports, and never FFFFh (which asks for a dynamic one) or 0.
  for (int tries = 0; tries < 0xfef; ++tries) {
    controller_counter_ = static_cast<std::uint16_t>(controller_counter_ % 0xfef + 1);
    const auto id =
        static_cast<std::uint16_t>((options_.port_id & 0xf) << 12 | controller_counter_);
    if (controllers_.contains(id)) continue;
    controllers_[id] = make(id);
    return id;
  }
  return 0;
}

std::shared_ptr<controller> server::find_controller(std::uint16_t id) const {
  std::lock_guard hold(mutex_);
  const auto it = controllers_.find(id);
  return it == controllers_.end() ? nullptr : it->second.lock();
}

void server::remove_controller(std::uint16_t id) {
  std::lock_guard hold(mutex_);
  controllers_.erase(id);
}

std::shared_ptr<write_budget> server::write_budget_of(const std::string& host_nqn) {
  std::lock_guard hold(mutex_);
  for (auto it = write_budgets_.begin(); it != write_budgets_.end();) {
    it = it->second.expired() ? write_budgets_.erase(it) : std::next(it);
  }
  if (auto there = write_budgets_[host_nqn].lock()) return there;
  auto made = std::make_shared<write_budget>(std::max<std::uint64_t>(
      options_.write_buffer_bytes_per_host, 2 * std::uint64_t{options_.max_transfer_bytes}));
  write_budgets_[host_nqn] = made;
  return made;
}

std::size_t server::controllers_of(std::string_view host_nqn) const {
  std::lock_guard hold(mutex_);
  std::size_t n = 0;
  for (const auto& [id, weak] : controllers_) {
    const auto c = weak.lock();
    if (c != nullptr && !c->ended() && c->host.host_nqn == host_nqn) ++n;
  }
  return n;
}

std::size_t server::controllers() const {
  std::lock_guard hold(mutex_);
  return controllers_.size();
}

std::shared_ptr<const subsystem> server::find_subsystem(std::string_view nqn) const {
  std::lock_guard hold(mutex_);
  const auto it = subsystems_.find(nqn);
  return it == subsystems_.end() ? nullptr : it->second;
}

ana_state server::ana_state_of(std::uint32_t group) const {
  std::lock_guard hold(mutex_);
  const auto it = ana_states_.find(group);
  return it == ana_states_.end() ? ana_state::optimized : it->second;
}

std::uint64_t server::ana_change_count() const {
  std::lock_guard hold(mutex_);
  return ana_change_count_;
}

std::uint64_t server::discovery_generation() const {
  std::lock_guard hold(mutex_);
  return discovery_generation_;
}

health_counters server::health() const noexcept {
  health_counters h;
  h.bytes_read = health_.bytes_read.load(std::memory_order_relaxed);
  h.bytes_written = health_.bytes_written.load(std::memory_order_relaxed);
  h.read_commands = health_.read_commands.load(std::memory_order_relaxed);
  h.write_commands = health_.write_commands.load(std::memory_order_relaxed);
  return h;
}

server::capacity server::known_capacity(const std::string& serial) const {
  std::lock_guard hold(mutex_);
  const auto it = known_capacities_.find(serial);
  return it == known_capacities_.end() ? capacity{} : it->second;
}

void server::remember_capacity(const std::string& serial, capacity c) {
  std::lock_guard hold(mutex_);
  known_capacities_[serial] = c;
}

void server::set_ana_states(std::map<std::uint32_t, ana_state> states) {
  std::vector<std::shared_ptr<controller>> all;
  {
    std::lock_guard hold(mutex_);
    if (states == ana_states_) return;
    ana_states_ = std::move(states);
    ++ana_change_count_;
    for (auto& [id, weak] : controllers_) {
      if (auto c = weak.lock(); c != nullptr && !c->discovery()) all.push_back(std::move(c));
    }
  }
  for (auto& c : all) c->raise(ana_changed());
}

void server::set_subsystem(subsystem s) {
  auto fresh = std::make_shared<const subsystem>(std::move(s));
  std::shared_ptr<const subsystem> before;
  std::vector<std::shared_ptr<controller>> theirs;
  {
    std::lock_guard hold(mutex_);
    if (const auto old = subsystems_.find(fresh->nqn); old != subsystems_.end())
      before = old->second;
    subsystems_[fresh->nqn] = fresh;
    ++discovery_generation_;
    for (auto& [id, weak] : controllers_) {
      auto c = weak.lock();
      if (c != nullptr && !c->discovery() && c->subsystem_nqn() == fresh->nqn)
        theirs.push_back(std::move(c));
    }
  }
  bool groups_moved = false;
  for (auto& c : theirs) {
    const std::string& host = c->host.host_nqn;
    if (!fresh->allows(host)) {
      c->end("its host is no longer allowed in " + fresh->nqn);
      continue;
    }
    // What this host sees that was added, went, or is now reached through
    // another unit or ANA group (a takeover).
    std::vector<std::uint32_t> changed;
    for (const namespace_config& ns : fresh->namespaces_of(host)) {
      const namespace_config* was = before == nullptr ? nullptr : before->find(host, ns.nsid);
      if (was == nullptr || was->unit != ns.unit || was->ana_group != ns.ana_group)
        changed.push_back(ns.nsid);
      if (was != nullptr && was->ana_group != ns.ana_group) groups_moved = true;
    }
    if (before != nullptr) {
      for (const namespace_config& ns : before->namespaces_of(host)) {
        if (fresh->find(host, ns.nsid) == nullptr) changed.push_back(ns.nsid);
      }
    }
    c->subsystem_changed(fresh, changed);
  }
  if (groups_moved) {
    // Namespaces changed ANA group: the ANA log page changed too.
    {
      std::lock_guard hold(mutex_);
      ++ana_change_count_;
    }
    for (auto& c : theirs) c->raise(ana_changed());
  }
}

std::vector<discovery_entry> server::discovery_entries(std::string_view host_nqn,
                                                       const std::string& local_address) const {
  // This port as its referrals name it, or as the host came in.
  std::vector<referral> here;
  for (const referral& r : options_.referrals) {
    if (r.port_id == options_.port_id) here.push_back(r);
  }
  if (here.empty()) here.push_back({local_address, listening_port_, options_.port_id});
  const auto entry = [](bool discovery, const referral& r, const std::string& nqn) {
    return discovery_entry{discovery,
                           r.port_id,
                           nqn,
                           r.address,
                           std::to_string(r.port),
                           r.address.find(':') != std::string::npos};
  };
  std::vector<discovery_entry> out;
  for (const referral& r : here) out.push_back(entry(true, r, std::string(discovery_nqn)));
  std::lock_guard hold(mutex_);
  for (const auto& [nqn, s] : subsystems_) {
    if (!s->allows(host_nqn)) continue;
    for (const referral& r : here) out.push_back(entry(false, r, nqn));
    for (const referral& r : options_.referrals) {
      if (r.port_id != options_.port_id) out.push_back(entry(false, r, nqn));
    }
  }
  return out;
}

}  // namespace strata::nvme
