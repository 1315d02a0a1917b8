#include "mgmt/http_server.h"

#include <grpcpp/client_context.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <openssl/rand.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "controller/config_file.h"
#include "mgmt/console_files.h"
#include "mgmt/json_api.h"
#include "mgmt/metrics.h"
#include "strata/v1/array.grpc.pb.h"

namespace strata::mgmt {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

using request = http::request<http::string_body>;
using response = http::response<http::string_body>;

constexpr std::string_view session_cookie = "strata_session";
constexpr std::chrono::hours session_lifetime{12};
constexpr std::size_t max_sessions = 1024;
constexpr std::size_t header_limit_bytes = 16 * 1024;
constexpr std::chrono::seconds write_timeout{30};

const char* content_type_of(const std::filesystem::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js" || ext == ".mjs") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".ico") return "image/x-icon";
  if (ext == ".json") return "application/json";
  return "application/octet-stream";
}

// A gRPC callback-API call awaited in a coroutine: gRPC completes it on its
// own thread; the coroutine resumes on its executor.
template <class Token>
auto async_unary(grpc::GenericStub& stub, grpc::ClientContext& context, const std::string& method,
                 const grpc::ByteBuffer& in, grpc::ByteBuffer& out, Token&& token) {
  return asio::async_initiate<Token, void(grpc::Status)>(
      [&](auto handler) {
        using handler_type = decltype(handler);
        auto held = std::make_shared<handler_type>(std::move(handler));
        stub.UnaryCall(
            &context, method, grpc::StubOptions(), &in, &out, [held](grpc::Status status) {
              auto executor = asio::get_associated_executor(*held);
              asio::post(executor, [held, status]() mutable { std::move (*held)(status); });
            });
      },
      token);
}

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  if (RAND_bytes(raw.data(), static_cast<int>(raw.size())) != 1) return {};
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (const unsigned char b : raw) {
    out.push_back(hex[b >> 4]);
    out.push_back(hex[b & 15]);
  }
  return out;
}

// The value of cookie `name` in a Cookie header, if there.
std::string_view cookie_value(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const std::size_t end = header.find(';');
    std::string_view pair = header.substr(0, end);
    header = end == std::string_view::npos ? std::string_view{} : header.substr(end + 1);
    while (pair.starts_with(' ')) pair.remove_prefix(1);
    if (pair.starts_with(name) && pair.size() > name.size() && pair[name.size()] == '=')
      return pair.substr(name.size() + 1);
  }
  return {};
}

}  // namespace

class http_server::impl {
 public:
  impl(std::shared_ptr<grpc::Channel> api, const http_options& options,
       std::optional<loaded_security> security)
      : options_(options),
        security_(std::move(security)),
        channel_(std::move(api)),
        stub_(channel_),
        acceptor_(io_) {}

  std::expected<void, error> listen(const tcp::endpoint& at) {
    boost::system::error_code ec;
    acceptor_.open(at.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(at, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return std::unexpected(
          make_error(errc::io_error,
                     "the HTTP server cannot listen at " + options_.address + ": " + ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    if (security_) {
      tls_.emplace(asio::ssl::context::tls_server);
      tls_->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                        asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                        asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
      tls_->use_certificate_chain(asio::buffer(security_->cert_pem), ec);
      if (!ec) tls_->use_private_key(asio::buffer(security_->key_pem), asio::ssl::context::pem, ec);
      if (ec)
        return std::unexpected(make_error(errc::invalid_argument,
                                          "the HTTP server's TLS set-up failed: " + ec.message()));
    }
    asio::co_spawn(io_, accept(), asio::detached);
    for (unsigned i = 0; i < std::max(1u, options_.threads); ++i)
      threads_.emplace_back([this] { io_.run(); });
    return {};
  }

  void stop() {
    if (stopped_.exchange(true)) return;
    asio::post(io_, [this] {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
    });
    // gRPC writes each call's answer into a coroutine's frame: the frames
    // must outlive the calls.
    for (int i = 0; i < 500 && calls_in_flight_.load() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    io_.stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    workers_.join();
  }

  int port() const noexcept { return port_; }
  bool tls() const noexcept { return security_.has_value(); }

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      if (ec) {
        // A connection reset while queued, or out of descriptors: go on
        // with the next, after a pause so that a lasting error cannot spin.
        asio::steady_timer pause(acceptor_.get_executor(), std::chrono::milliseconds(50));
        co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
        continue;
      }
      asio::co_spawn(socket.get_executor(), connection(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> connection(tcp::socket socket) {
    ++connections_;
    struct counted {
      std::atomic<std::size_t>& n;
      ~counted() { --n; }
    } count{connections_};
    beast::tcp_stream stream(std::move(socket));
    if (connections_.load() > options_.max_connections) {
      response busy =
          plain(http::status::service_unavailable,
                "too many connections: at most " + std::to_string(options_.max_connections));
      busy.keep_alive(false);
      stream.expires_after(write_timeout);
      co_await http::async_write(stream, busy, asio::as_tuple(asio::use_awaitable));
      co_return;
    }
    if (!tls_) {
      co_await serve(stream);
      co_return;
    }
    beast::ssl_stream<beast::tcp_stream> secure(std::move(stream), *tls_);
    beast::get_lowest_layer(secure).expires_after(options_.read_timeout);
    auto [ec] = co_await secure.async_handshake(asio::ssl::stream_base::server,
                                                asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;  // a plaintext client, a wrong protocol: nothing to answer it in
    co_await serve(secure);
    beast::get_lowest_layer(secure).expires_after(std::chrono::seconds(5));
    co_await secure.async_shutdown(asio::as_tuple(asio::use_awaitable));
  }

  template <class Stream>
  asio::awaitable<void> serve(Stream& stream) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(header_limit_bytes);
      parser.body_limit(options_.max_body_bytes);
      beast::get_lowest_layer(stream).expires_after(options_.read_timeout);
      auto [ec, n] =
          co_await http::async_read(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
      if (ec == http::error::body_limit || ec == http::error::header_limit) {
        // Answered, then closed: the rest of what it sends is not read.
        const bool body = ec == http::error::body_limit;
        response refused = error_answer(
            body
                ? json_api_error(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 "the request's body is over " +
                                     std::to_string(options_.max_body_bytes) + " bytes")
                : json_answer{431,
                              R"({"code":"resource_exhausted","message":"the request's headers are over 16 KiB"})"},
            body ? http::status::payload_too_large : http::status::request_header_fields_too_large);
        refused.keep_alive(false);
        beast::get_lowest_layer(stream).expires_after(write_timeout);
        co_await http::async_write(stream, refused, asio::as_tuple(asio::use_awaitable));
        co_await linger(beast::get_lowest_layer(stream));
        co_return;
      }
      if (ec) co_return;  // closed, timed out, or not HTTP
      request req = parser.release();
      response answer = co_await handle(req);
      answer.version(req.version());
      answer.keep_alive(req.keep_alive() && !stopped_);
      answer.prepare_payload();
      if (req.method() == http::verb::head) {
        // The headers GET would send, its Content-Length included, and no body.
        const std::size_t length = answer.body().size();
        answer.body().clear();
        answer.content_length(length);
      }
      beast::get_lowest_layer(stream).expires_after(write_timeout);
      auto [wec, written] =
          co_await http::async_write(stream, answer, asio::as_tuple(asio::use_awaitable));
      if (wec || !answer.keep_alive()) co_return;
    }
  }

  // A close while the client still sends makes the kernel reset the
  // connection, and the client may lose the answer before it reads it:
  // end our side, then read and drop what it still sends (a few seconds,
  // a few MiB at most), as web servers' "lingering close" does.
  static asio::awaitable<void> linger(beast::tcp_stream& stream) {
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream.expires_after(std::chrono::seconds(2));
    std::vector<char> scratch(64 * 1024);
    for (std::size_t dropped = 0; dropped < (16u << 20);) {
      auto [ec, n] = co_await stream.async_read_some(asio::buffer(scratch),
                                                     asio::as_tuple(asio::use_awaitable));
      if (ec) break;
      dropped += n;
    }
  }

  static json_answer json_api_error(grpc::StatusCode code, const std::string& message) {
    return error_json(code, message);
  }
  // The answer with another HTTP status than its code's (a route's 404, a
  // verb's 405, a media type's 415).
  static json_answer with_status(int http_status, json_answer a) {
    a.http_status = http_status;
    return a;
  }

  static response error_answer(const json_answer& a, http::status status) {
    response r{status, 11};
    r.set(http::field::content_type, "application/json");
    r.body() = a.body;
    return r;
  }

  static response json(const json_answer& a) {
    response r{static_cast<http::status>(a.http_status), 11};
    r.set(http::field::content_type, "application/json");
    r.set(http::field::cache_control, "no-store");
    r.body() = a.body;
    return r;
  }

  static response plain(http::status status, const std::string& text) {
    response r{status, 11};
    r.set(http::field::content_type, "text/plain; charset=utf-8");
    r.body() = text + "\n";
    return r;
  }

  asio::awaitable<response> handle(const request& req) {
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (path.starts_with("/strata.v1.Array/") || path.starts_with("/strata."))
      co_return co_await call(req, path);
    if (path == "/metrics") co_return co_await metrics(req);
    if (path == "/login") co_return login(req);
    if (path == "/logout") co_return logout(req);
    co_return console(req, path);
  }

  // Who calls: nothing to check without security; else the bearer token
  // or a live session cookie. Empty: let in; else why not.
  std::optional<std::string> refused(const request& req) {
    if (!security_) return std::nullopt;
    if (const auto auth = req.find(http::field::authorization); auth != req.end()) {
      return security_->token.check_authorization(
          std::string_view(auth->value().data(), auth->value().size()));
    }
    if (const auto cookie = req.find(http::field::cookie); cookie != req.end()) {
      const std::string_view id = cookie_value(
          std::string_view(cookie->value().data(), cookie->value().size()), session_cookie);
      std::lock_guard lock(sessions_mutex_);
      if (const auto s = sessions_.find(std::string(id)); !id.empty() && s != sessions_.end()) {
        if (s->second > std::chrono::steady_clock::now()) return std::nullopt;
        sessions_.erase(s);
        return "the session has expired: log in again";
      }
      if (!id.empty())
        return "the session is not known (the array restarted, or it was logged out): log in again";
    }
    return "no credentials: send \"Authorization: Bearer TOKEN\", TOKEN from the server's token "
           "file, or log in (POST /login)";
  }

  asio::awaitable<response> call(const request& req, std::string_view path) {
    const google::protobuf::MethodDescriptor* method = find_method(path);
    if (method == nullptr) {
      co_return json(with_status(
          404,
          error_json(grpc::StatusCode::UNIMPLEMENTED,
                     "no method " + std::string(path.substr(1)) +
                         ": the methods are strata.v1.Array's (proto/strata/v1/array.proto)")));
    }
    if (req.method() != http::verb::post) {
      response r = json(
          with_status(405, error_json(grpc::StatusCode::UNIMPLEMENTED, "call the API with POST")));
      r.set(http::field::allow, "POST");
      co_return r;
    }
    if (const auto why = refused(req))
      co_return json(error_json(grpc::StatusCode::UNAUTHENTICATED, *why));
    const auto type = req.find(http::field::content_type);
    const std::string_view content_type =
        type == req.end() ? "" : std::string_view(type->value().data(), type->value().size());
    if (!content_type.starts_with("application/json")) {
      co_return json(with_status(
          415, error_json(grpc::StatusCode::INVALID_ARGUMENT,
                          "the body must be JSON (Content-Type: application/json), not \"" +
                              std::string(content_type) + "\"")));
    }
    auto bytes = request_from_json(*method, req.body());
    if (!bytes) co_return json(bytes.error());
    grpc::Slice slice(*bytes);
    grpc::ByteBuffer in(&slice, 1);
    grpc::ByteBuffer out;
    grpc::ClientContext context;
    const std::string full_path =
        "/" + std::string(method->service()->full_name()) + "/" + method->name();
    ++calls_in_flight_;
    const grpc::Status status =
        co_await async_unary(stub_, context, full_path, in, out, asio::use_awaitable);
    --calls_in_flight_;
    if (!status.ok()) co_return json(error_json(status));
    std::vector<grpc::Slice> slices;
    std::string answer;
    if (out.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices)
        answer.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    co_return json(response_to_json(*method, answer));
  }

  asio::awaitable<response> metrics(const request& req) {
    if (req.method() != http::verb::get && req.method() != http::verb::head)
      co_return plain(http::status::method_not_allowed, "GET /metrics");
    if (const auto why = refused(req)) co_return plain(http::status::unauthorized, *why);
    // The scrape's calls block: on the worker thread, a coroutine of its
    // own, awaited here. The job is a named local, not a temporary of the
    // co_await expression: g++ 12 destroys such temporaries twice (it
    // freed the channel's shared_ptr under us).
    auto scrape_job = [channel =
                           channel_]() -> asio::awaitable<std::expected<std::string, std::string>> {
      auto stub = v1::Array::NewStub(channel);
      auto scrape = collect(*stub);
      if (!scrape) co_return std::unexpected(scrape.error().error_message());
      co_return render(*scrape);
    };
    auto text = co_await asio::co_spawn(workers_, std::move(scrape_job), asio::use_awaitable);
    if (!text)
      co_return plain(http::status::service_unavailable,
                      "the API did not answer the scrape: " + text.error());
    response r{http::status::ok, 11};
    r.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    r.body() = std::move(*text);
    co_return r;
  }

  response login(const request& req) {
    if (req.method() != http::verb::post)
      return json(
          with_status(405, error_json(grpc::StatusCode::UNIMPLEMENTED, "log in with POST")));
    if (!security_) return json(json_answer{200, R"({"required":false})"});
    const nlohmann::json body = nlohmann::json::parse(req.body(), nullptr, false);
    if (!body.is_object() || !body.contains("token") || !body["token"].is_string()) {
      return json(error_json(grpc::StatusCode::INVALID_ARGUMENT,
                             "token: send {\"token\": TOKEN}, TOKEN from the server's token file"));
    }
    if (!security_->token.matches(body["token"].get<std::string>())) {
      return json(error_json(grpc::StatusCode::UNAUTHENTICATED,
                             "token: not the one in the server's token file"));
    }
    const std::string id = random_hex(32);
    if (id.empty())
      return json(error_json(grpc::StatusCode::INTERNAL, "cannot make a session: no randomness"));
    {
      std::lock_guard lock(sessions_mutex_);
      const auto now = std::chrono::steady_clock::now();
      std::erase_if(sessions_, [now](const auto& s) { return s.second <= now; });
      if (sessions_.size() >= max_sessions) {
        return json(error_json(grpc::StatusCode::RESOURCE_EXHAUSTED,
                               "too many sessions: at most " + std::to_string(max_sessions)));
      }
      sessions_[id] = now + session_lifetime;
    }
    response r = json(json_answer{200, R"({"required":true})"});
    r.set(http::field::set_cookie,
          std::string(session_cookie) + "=" + id +
              "; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=" +
              std::to_string(std::chrono::seconds(session_lifetime).count()));
    return r;
  }

  response logout(const request& req) {
    if (req.method() != http::verb::post)
      return json(
          with_status(405, error_json(grpc::StatusCode::UNIMPLEMENTED, "log out with POST")));
    if (const auto cookie = req.find(http::field::cookie); cookie != req.end()) {
      const std::string_view id = cookie_value(
          std::string_view(cookie->value().data(), cookie->value().size()), session_cookie);
      std::lock_guard lock(sessions_mutex_);
      sessions_.erase(std::string(id));
    }
    response r = json(json_answer{200, "{}"});
    r.set(http::field::set_cookie,
          std::string(session_cookie) + "=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0");
    return r;
  }

  response console(const request& req, std::string_view path) {
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      response r = plain(http::status::method_not_allowed, "the console's files are read with GET");
      r.set(http::field::allow, "GET, HEAD");
      return r;
    }
    std::string relative(path == "/" ? "/index.html" : path);
    relative.erase(0, 1);
    std::optional<std::string> bytes;
    if (relative.find("..") == std::string::npos && relative.find('\0') == std::string::npos) {
      if (options_.console_dir.empty()) {
        for (const console_file& f : console_files()) {
          if (f.path == relative) bytes.emplace(f.bytes);
        }
      } else if (std::ifstream in(options_.console_dir / relative, std::ios::binary);
                 in && !std::filesystem::is_directory(options_.console_dir / relative)) {
        std::ostringstream all;
        all << in.rdbuf();
        bytes = all.str();
      }
    }
    if (!bytes) return plain(http::status::not_found, "no such page: " + std::string(path));
    response r{http::status::ok, 11};
    r.set(http::field::content_type, content_type_of(relative));
    // The console runs only its own code, and is shown in no other site's frame.
    r.set("Content-Security-Policy",
          "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
          "frame-ancestors 'none'");
    r.set("X-Content-Type-Options", "nosniff");
    r.set(http::field::cache_control, "no-cache");
    r.body() = std::move(*bytes);
    return r;
  }

  const http_options options_;
  const std::optional<loaded_security> security_;
  std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub stub_;
  std::optional<asio::ssl::context>
      tls_;  // before io_: the connections' streams, destroyed with io_, use it
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::thread_pool workers_{1};
  std::vector<std::thread> threads_;
  std::atomic<std::size_t> connections_{0};
  std::atomic<std::size_t> calls_in_flight_{0};
  std::atomic<bool> stopped_{false};
  int port_ = 0;
  std::mutex sessions_mutex_;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> sessions_;  // id -> expiry
};

std::expected<std::unique_ptr<http_server>, error> http_server::start(
    std::shared_ptr<grpc::Channel> api, const http_options& options) {
  const auto at = controller::parse_listen_address(options.address);
  if (!at)
    return std::unexpected(
        make_error(errc::invalid_argument,
                   "the HTTP server's address " + options.address + ": " + at.error()));
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(at->address, ec);
  if (ec)
    return std::unexpected(
        make_error(errc::invalid_argument,
                   "the HTTP server's address " + options.address + " is not numeric"));
  auto security = load_security("the HTTP server", options.address, options.security);
  if (!security) return std::unexpected(security.error());
  auto i = std::make_unique<impl>(std::move(api), options, std::move(*security));
  if (auto listening = i->listen(tcp::endpoint(address, at->port)); !listening)
    return std::unexpected(listening.error());
  return std::unique_ptr<http_server>(new http_server(std::move(i)));
}

http_server::http_server(std::unique_ptr<impl> i) : impl_(std::move(i)) {}
http_server::~http_server() {
  stop();
}
int http_server::port() const noexcept {
  return impl_->port();
}
bool http_server::tls() const noexcept {
  return impl_->tls();
}
void http_server::stop() {
  impl_->stop();
}

}  // namespace strata::mgmt
