#include "controller/partner_link.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <deque>
#include <optional>

#include "target/crc32c.h"

namespace strata::controller {

namespace asio = boost::asio;
using asio::ip::tcp;
using clock = std::chrono::steady_clock;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// docs/partner-link.md.
constexpr std::uint32_t magic = 0x4c505453;  // "STPL" in little-endian byte order
constexpr std::size_t header_bytes = 32;
constexpr std::uint16_t version = 1;
constexpr std::size_t nonce_bytes = 32;
constexpr std::size_t mac_bytes = 32;
constexpr std::uint16_t flag_response = 1;

namespace type {
constexpr std::uint16_t hello = 1;      // dialer: version, name, nonce
constexpr std::uint16_t challenge = 2;  // listener: name, nonce, its proof
constexpr std::uint16_t proof = 3;      // dialer: its proof
constexpr std::uint16_t welcome = 4;    // listener: the link is up
constexpr std::uint16_t refuse = 5;     // either: why, then it closes
constexpr std::uint16_t heartbeat = 6;  // either, every heartbeat_interval once up
}  // namespace type

struct header {
  std::uint16_t type = 0;
  std::uint16_t flags = 0;
  std::uint64_t id = 0;
  std::uint32_t length = 0;
  std::uint32_t status = 0;  // a response's: 0, or the errc it failed with
};

void put16(std::uint8_t* p, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint64_t get(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::array<std::uint8_t, header_bytes> encode(const header& h) {
  std::array<std::uint8_t, header_bytes> b{};
  put32(b.data(), magic);
  put16(b.data() + 4, h.type);
  put16(b.data() + 6, h.flags);
  put64(b.data() + 8, h.id);
  put32(b.data() + 16, h.length);
  put32(b.data() + 20, h.status);
  put32(b.data() + 24, crc32c({b.data(), 24}));
  return b;
}

// The header in `b`, or why it is not one of ours.
std::expected<header, std::string> decode(const std::array<std::uint8_t, header_bytes>& b) {
  if (get(b.data(), 4) != magic) return std::unexpected("not a partner link frame (bad magic)");
  if (get(b.data() + 24, 4) != crc32c({b.data(), 24}))
    return std::unexpected("a frame header failed its CRC");
  header h;
  h.type = static_cast<std::uint16_t>(get(b.data() + 4, 2));
  h.flags = static_cast<std::uint16_t>(get(b.data() + 6, 2));
  h.id = get(b.data() + 8, 8);
  h.length = static_cast<std::uint32_t>(get(b.data() + 16, 4));
  h.status = static_cast<std::uint32_t>(get(b.data() + 20, 4));
  if (h.length > partner_link::max_payload_bytes)
    return std::unexpected("a frame of " + std::to_string(h.length) + " bytes, above the limit");
  return h;
}

using nonce = std::array<std::uint8_t, nonce_bytes>;
using mac = std::array<std::uint8_t, mac_bytes>;

// Never a predictable challenge: better no link than a replayable one.
std::optional<nonce> fresh_nonce() {
  nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) return std::nullopt;
  return n;
}

// What proves the key: HMAC-SHA256 over the role, both nonces (the
// prover's peer's first) and the prover's name. The role keeps one side's
// proof from being replayed as the other's.
mac proof_of(const link_key& key, std::string_view role, const nonce& theirs, const nonce& ours,
             const std::string& name) {
  std::vector<std::uint8_t> text;
  const std::string label = "strata-link/1 " + std::string(role);
  text.insert(text.end(), label.begin(), label.end());
  text.insert(text.end(), theirs.begin(), theirs.end());
  text.insert(text.end(), ours.begin(), ours.end());
  text.insert(text.end(), name.begin(), name.end());
  mac m{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), text.data(), text.size(), m.data(),
       &length);
  return m;
}

bool same(const mac& a, std::span<const std::uint8_t> b) {
  return b.size() == a.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// A name on the wire: one length byte, then the bytes.
void put_name(link_bytes& out, const std::string& name) {
  out.push_back(static_cast<std::uint8_t>(name.size()));
  out.insert(out.end(), name.begin(), name.end());
}
std::optional<std::string> take_name(std::span<const std::uint8_t>& in) {
  if (in.empty() || in.size() < 1u + in[0]) return std::nullopt;
  std::string name(reinterpret_cast<const char*>(in.data() + 1), in[0]);
  in = in.subspan(1u + in[0]);
  return name;
}

std::string endpoint_text(const tcp::endpoint& e) {
  return e.address().to_string() + ":" + std::to_string(e.port());
}

}  // namespace

class partner_link::connection : public std::enable_shared_from_this<connection> {
 public:
  connection(partner_link& link, tcp::socket socket, bool dialer)
      : link_(&link),
        alive_(link.alive_),
        options_(link.options_),
        socket_(std::move(socket)),
        dialer_(dialer),
        write_wake_(socket_.get_executor()),
        watch_(socket_.get_executor()) {
    write_wake_.expires_at(asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    const auto peer = socket_.remote_endpoint(ec);
    peer_ = ec ? "an unknown address"
               : peer.address().to_string();  // not the port: a caller's changes with each try
  }

  void start() {
    auto self = shared_from_this();
    asio::co_spawn(
        socket_.get_executor(), [self] { return self->run(); }, asio::detached);
    asio::co_spawn(
        socket_.get_executor(), [self] { return self->writer(); }, asio::detached);
    asio::co_spawn(
        socket_.get_executor(), [self] { return self->watchdog(); }, asio::detached);
  }

  // Closes once; the link hears why if this was its connection.
  void close(const std::string& why) {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    write_wake_.cancel();
    watch_.cancel();
    auto waiting = std::move(waiting_);
    for (auto& [id, done] : waiting)
      done(std::unexpected(
          make_error(errc::canceled, "the partner link went down before the answer: " + why)));
    if (!alive_.expired()) link_->lost(this, why);
  }

  void call(std::uint16_t t, link_bytes payload, link_reply done) {
    const std::uint64_t id = next_id_++;
    waiting_.emplace(id, std::move(done));
    send({t, 0, id, 0, 0}, std::move(payload));
  }

 private:
  struct outgoing {
    header h;
    link_bytes payload;
  };

  void send(header h, link_bytes payload) {
    if (closed_) return;
    h.length = static_cast<std::uint32_t>(payload.size());
    queue_.push_back({h, std::move(payload)});
    write_wake_.cancel();
  }

  void send_text(std::uint16_t t, const std::string& text) {
    send({t, 0, 0, 0, 0}, link_bytes(text.begin(), text.end()));
  }

  // Tells the peer why, and closes (after the refusal is written).
  void refuse(const std::string& why, const std::string& event) {
    if (!alive_.expired()) link_->refused(event);
    send_text(type::refuse, why);
    closing_after_write_ = why;
    write_wake_.cancel();
  }

  asio::awaitable<bool> read_frame(header& h, link_bytes& payload) {
    std::array<std::uint8_t, header_bytes> raw{};
    auto [ec, n] = co_await asio::async_read(socket_, asio::buffer(raw), use_tuple);
    if (ec) {
      close(ec == asio::error::eof ? "the partner closed the connection"
                                   : "reading: " + ec.message());
      co_return false;
    }
    auto decoded = decode(raw);
    if (!decoded) {
      if (!alive_.expired())
        link_->refused("partner link: " + peer_ + " sent " + decoded.error() + "; closed");
      close(decoded.error());
      co_return false;
    }
    h = *decoded;
    payload.resize(h.length);
    if (h.length > 0) {
      auto [ec2, n2] = co_await asio::async_read(socket_, asio::buffer(payload), use_tuple);
      if (ec2) {
        close("reading: " + ec2.message());
        co_return false;
      }
    }
    heard_ = clock::now();
    co_return true;
  }

  // The peer's `refuse` frame in the handshake: reported, and closed.
  bool refused_by_peer(const header& h, const link_bytes& p) {
    if (h.type != type::refuse) return false;
    const std::string why(p.begin(), p.end());
    if (!alive_.expired()) link_->refused("partner link: " + peer_ + " refused us: " + why);
    close("refused: " + why);
    return true;
  }

  asio::awaitable<bool> handshake();
  asio::awaitable<void> run();
  asio::awaitable<void> writer();
  asio::awaitable<void> watchdog();
  void on_frame(const header& h, link_bytes payload);

  partner_link* link_;
  std::weak_ptr<int> alive_;
  const partner_link_options options_;
  tcp::socket socket_;
  const bool dialer_;
  std::string peer_;
  asio::steady_timer write_wake_;
  asio::steady_timer watch_;
  std::deque<outgoing> queue_;
  std::map<std::uint64_t, link_reply> waiting_;
  std::uint64_t next_id_ = 1;
  std::uint64_t heartbeats_sent_ = 0;
  bool closed_ = false;
  bool authenticated_ = false;
  std::optional<std::string> closing_after_write_;
  clock::time_point heard_ = clock::now();
  const clock::time_point born_ = clock::now();
};

asio::awaitable<bool> partner_link::connection::handshake() {
  header h;
  link_bytes p;
  const auto made = fresh_nonce();
  if (!made) {
    close("OpenSSL's RAND_bytes failed: no nonce for the handshake");
    co_return false;
  }
  const nonce ours = *made;
  if (dialer_) {
    link_bytes hello;
    hello.push_back(static_cast<std::uint8_t>(version));
    hello.push_back(static_cast<std::uint8_t>(version >> 8));
    put_name(hello, options_.self);
    hello.insert(hello.end(), ours.begin(), ours.end());
    send({type::hello, 0, 0, 0, 0}, std::move(hello));
    if (!co_await read_frame(h, p)) co_return false;
    if (refused_by_peer(h, p)) co_return false;
    std::span<const std::uint8_t> in(p);
    const auto name = h.type == type::challenge ? take_name(in) : std::nullopt;
    if (!name || in.size() != nonce_bytes + mac_bytes) {
      refuse("expected a challenge",
             "partner link: " + peer_ +
                 " answered our hello with something else than a challenge; closed");
      co_return false;
    }
    if (*name != options_.partner) {
      refuse("this is controller " + options_.self + "; it links only with controller " +
                 options_.partner,
             "partner link: " + peer_ + " is controller " + *name + ", not " + options_.partner +
                 "; closed");
      co_return false;
    }
    nonce theirs{};
    std::memcpy(theirs.data(), in.data(), nonce_bytes);
    if (!same(proof_of(options_.key, "listener", ours, theirs, *name), in.subspan(nonce_bytes))) {
      refuse(
          "wrong link key",
          "partner link: " + peer_ +
              " does not hold this array's link key (another array, or not a controller); closed");
      co_return false;
    }
    const mac mine = proof_of(options_.key, "dialer", theirs, ours, options_.self);
    send({type::proof, 0, 0, 0, 0}, link_bytes(mine.begin(), mine.end()));
    if (!co_await read_frame(h, p)) co_return false;
    if (refused_by_peer(h, p)) co_return false;
    if (h.type != type::welcome) {
      refuse("expected a welcome",
             "partner link: " + peer_ + " sent an unexpected frame in the handshake; closed");
      co_return false;
    }
    co_return true;
  }
  // The listener: hello, then the challenge with our proof, then theirs.
  if (!co_await read_frame(h, p)) co_return false;
  std::span<const std::uint8_t> in(p);
  if (h.type != type::hello || in.size() < 2) {
    refuse("a partner link starts with a hello",
           "partner link: " + peer_ +
               " is not a Strata controller (its first frame was no hello); closed");
    co_return false;
  }
  if (const auto v = static_cast<std::uint16_t>(get(in.data(), 2)); v != version) {
    refuse("link version " + std::to_string(v) + " is not " + std::to_string(version),
           "partner link: " + peer_ + " speaks link version " + std::to_string(v) + "; closed");
    co_return false;
  }
  in = in.subspan(2);
  const auto name = take_name(in);
  if (!name || in.size() != nonce_bytes) {
    refuse("a malformed hello", "partner link: " + peer_ + " sent a malformed hello; closed");
    co_return false;
  }
  if (*name != options_.partner) {
    refuse("this is controller " + options_.self + "; it links only with controller " +
               options_.partner,
           "partner link: " + peer_ + " says it is controller " + *name + ", not " +
               options_.partner + "; closed");
    co_return false;
  }
  nonce theirs{};
  std::memcpy(theirs.data(), in.data(), nonce_bytes);
  const mac mine = proof_of(options_.key, "listener", theirs, ours, options_.self);
  link_bytes challenge;
  put_name(challenge, options_.self);
  challenge.insert(challenge.end(), ours.begin(), ours.end());
  challenge.insert(challenge.end(), mine.begin(), mine.end());
  send({type::challenge, 0, 0, 0, 0}, std::move(challenge));
  if (!co_await read_frame(h, p)) co_return false;
  if (refused_by_peer(h, p)) co_return false;
  if (h.type != type::proof || !same(proof_of(options_.key, "dialer", ours, theirs, *name), p)) {
    refuse(
        "wrong link key",
        "partner link: " + peer_ + " (calling itself controller " + *name +
            ") does not hold this array's link key (another array, or not a controller); closed");
    co_return false;
  }
  send({type::welcome, 0, 0, 0, 0}, {});
  co_return true;
}

asio::awaitable<void> partner_link::connection::run() {
  auto self = shared_from_this();
  if (!co_await handshake()) co_return;
  if (closed_ || alive_.expired()) co_return;
  authenticated_ = true;
  watch_.cancel();  // the watchdog moves from the handshake limit to heartbeats
  link_->authenticated(self);
  header h;
  link_bytes p;
  while (!closed_ && co_await read_frame(h, p)) on_frame(h, std::move(p));
}

void partner_link::connection::on_frame(const header& h, link_bytes payload) {
  if (h.type == type::heartbeat) return;  // heard_ is all it is for
  if (h.type == type::refuse) {
    close("the partner refused: " + std::string(payload.begin(), payload.end()));
    return;
  }
  if (h.flags & flag_response) {
    auto it = waiting_.find(h.id);
    if (it == waiting_.end()) return;  // an answer nobody waits for any more
    link_reply done = std::move(it->second);
    waiting_.erase(it);
    if (h.status == 0) {
      done(std::move(payload));
    } else {
      done(std::unexpected(error{make_error_code(static_cast<errc>(h.status)),
                                 std::string(payload.begin(), payload.end())}));
    }
    return;
  }
  if (alive_.expired()) return;
  auto handler = link_->handlers_.find(h.type);
  if (handler == link_->handlers_.end()) {
    const std::string why = "no handler for frame type " + std::to_string(h.type);
    send({h.type, flag_response, h.id, 0, static_cast<std::uint32_t>(errc::not_supported)},
         link_bytes(why.begin(), why.end()));
    return;
  }
  std::weak_ptr<connection> weak = weak_from_this();
  handler->second(
      std::move(payload), [weak, t = h.type, id = h.id](std::expected<link_bytes, error> r) {
        auto c = weak.lock();
        if (!c) return;  // the connection that asked has gone: so has the asker
        if (r) {
          c->send({t, flag_response, id, 0, 0}, std::move(*r));
        } else {
          const std::string& why = r.error().message;
          c->send({t, flag_response, id, 0, static_cast<std::uint32_t>(r.error().code.value())},
                  link_bytes(why.begin(), why.end()));
        }
      });
}

asio::awaitable<void> partner_link::connection::writer() {
  auto self = shared_from_this();
  while (!closed_) {
    if (queue_.empty()) {
      if (closing_after_write_) {
        close(*closing_after_write_);
        co_return;
      }
      co_await write_wake_.async_wait(use_tuple);
      continue;
    }
    outgoing o = std::move(queue_.front());
    queue_.pop_front();
    const auto raw = encode(o.h);
    const std::array<asio::const_buffer, 2> bufs{asio::buffer(raw), asio::buffer(o.payload)};
    auto [ec, written] = co_await asio::async_write(socket_, bufs, use_tuple);
    if (ec) {
      close("writing: " + ec.message());
      co_return;
    }
  }
}

// Before the handshake ends: its time limit. After: a heartbeat every
// interval, and the link closed once nothing was heard for silence_limit.
asio::awaitable<void> partner_link::connection::watchdog() {
  auto self = shared_from_this();
  while (!closed_) {
    if (!authenticated_) {
      watch_.expires_at(born_ + options_.handshake_limit);
      co_await watch_.async_wait(use_tuple);
      if (!closed_ && !authenticated_ && clock::now() >= born_ + options_.handshake_limit) {
        if (!alive_.expired())
          link_->refused("partner link: " + peer_ +
                         " did not finish the handshake in time; closed");
        close("the handshake took too long");
      }
      continue;
    }
    const auto silent = clock::now() - heard_;
    if (silent >= options_.silence_limit) {
      close("nothing heard from the partner for " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(silent).count()) +
            " ms");
      co_return;
    }
    link_bytes beat(8);
    put64(beat.data(), ++heartbeats_sent_);
    send({type::heartbeat, 0, 0, 0, 0}, std::move(beat));
    watch_.expires_after(options_.heartbeat_interval);
    co_await watch_.async_wait(use_tuple);
  }
}

partner_link::partner_link(asio::any_io_executor loop, partner_link_options options)
    : loop_(std::move(loop)), options_(std::move(options)) {}

partner_link::~partner_link() {
  stop();
  alive_.reset();
}

std::expected<void, error> partner_link::start() {
  stopped_ = false;
  if (dials()) {
    redial_ = std::make_unique<asio::steady_timer>(loop_);
    dial();
    return {};
  }
  acceptor_ = std::make_unique<tcp::acceptor>(loop_);
  boost::system::error_code ec;
  acceptor_->open(options_.listen_at.protocol(), ec);
  if (!ec) acceptor_->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_->bind(options_.listen_at, ec);
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return std::unexpected(make_error(errc::io_error, "partner link: cannot listen on " +
                                                          endpoint_text(options_.listen_at) + ": " +
                                                          ec.message()));
  accept();
  return {};
}

tcp::endpoint partner_link::listen_endpoint() const {
  if (!acceptor_) return options_.listen_at;
  boost::system::error_code ec;
  const auto at = acceptor_->local_endpoint(ec);
  return ec ? options_.listen_at : at;
}

void partner_link::accept() {
  acceptor_->async_accept(
      [this, alive = std::weak_ptr<int>(alive_)](boost::system::error_code ec, tcp::socket socket) {
        if (ec || alive.expired() || stopped_) return;
        socket.set_option(tcp::no_delay(true), ec);
        // Each caller proves itself in its handshake; until then it is nobody.
        auto c = std::make_shared<connection>(*this, std::move(socket), false);
        track(c);
        c->start();
        accept();
      });
}

void partner_link::dial() {
  if (stopped_ || current_ || dialing_) return;
  auto socket = std::make_shared<tcp::socket>(loop_);
  socket->async_connect(
      options_.dial_at.value_or(options_.listen_at),
      [this, socket, alive = std::weak_ptr<int>(alive_)](boost::system::error_code ec) {
        if (alive.expired() || stopped_) return;
        if (ec) return redial_later();
        socket->set_option(tcp::no_delay(true), ec);
        dialing_ = std::make_shared<connection>(*this, std::move(*socket), true);
        track(dialing_);
        dialing_->start();
      });
}

void partner_link::authenticated(std::shared_ptr<connection> c) {
  if (dialing_ == c) dialing_.reset();
  if (current_ && current_ != c) {
    // The partner came back (restarted) while its old connection had not
    // yet timed out: the new one replaces it.
    auto old = std::move(current_);
    old->close("replaced by a new link from controller " + options_.partner);
  }
  current_ = std::move(c);
  refusals_in_a_row_ = 0;
  last_refusal_.clear();
  if (on_state) on_state(true, "");
}

void partner_link::refused(const std::string& what) {
  ++refusals_in_a_row_;
  if (what == last_refusal_) return;
  last_refusal_ = what;
  if (on_refused) on_refused(what);
}

std::chrono::milliseconds partner_link::redial_delay() const {
  const auto backed_off = options_.redial_interval * (1 << std::min(refusals_in_a_row_, 5));
  return std::min<std::chrono::milliseconds>(backed_off, std::chrono::seconds(5));
}

void partner_link::redial_later() {
  redial_->expires_after(refusals_in_a_row_ == 0 ? options_.redial_interval : redial_delay());
  redial_->async_wait([this, alive = std::weak_ptr<int>(alive_)](boost::system::error_code e) {
    if (!e && !alive.expired()) dial();
  });
}

void partner_link::track(const std::shared_ptr<connection>& c) {
  std::erase_if(unproven_, [](const std::weak_ptr<connection>& w) { return w.expired(); });
  unproven_.push_back(c);
}

void partner_link::lost(connection* c, const std::string& why) {
  if (dialing_.get() == c) dialing_.reset();
  const bool was_current = current_.get() == c;
  if (was_current) current_.reset();
  if (was_current && on_state) on_state(false, why);
  if (dials() && !stopped_ && !current_ && !dialing_ && redial_) redial_later();
}

void partner_link::stop() {
  stopped_ = true;
  boost::system::error_code ignored;
  if (acceptor_) acceptor_->close(ignored);
  if (redial_) redial_->cancel();
  for (const auto& w : std::exchange(unproven_, {})) {
    if (auto c = w.lock()) c->close("the link was stopped");
  }
  if (dialing_) dialing_->close("the link was stopped");
  if (current_) current_->close("the link was stopped");
}

void partner_link::handle(std::uint16_t t, std::function<void(link_bytes, link_reply)> handler) {
  handlers_[t] = std::move(handler);
}

void partner_link::call(std::uint16_t t, link_bytes payload, link_reply done) {
  if (!current_) {
    done(std::unexpected(make_error(errc::canceled, "the partner link is down")));
    return;
  }
  if (payload.size() > max_payload_bytes) {
    // The partner would take it for garbage and drop the link: refused here.
    done(std::unexpected(make_error(errc::invalid_argument,
                                    "a partner link request of " + std::to_string(payload.size()) +
                                        " bytes, above the limit of " +
                                        std::to_string(max_payload_bytes))));
    return;
  }
  current_->call(t, std::move(payload), std::move(done));
}

}  // namespace strata::controller
