// The management plane's HTTP side (Boost.Beast), beside the gRPC server:
//
//   POST /strata.v1.Array/<Method>   the API as JSON (json_api.h), each call
//                                    made through the gRPC server's
//                                    in-process channel: the same service,
//                                    the same checks, the same errors
//   GET  /metrics                    Prometheus metrics (metrics.h)
//   POST /login, POST /logout        the browser's session (below)
//   GET  /...                        the web console (mgmt/console/), built
//                                    into stratad, or from console_dir
//
// Who may call: the API's rule (security.h). On loopback with no security
// options, anyone on this machine, in plaintext. With them, HTTPS only,
// and the API and /metrics need `Authorization: Bearer TOKEN` or the
// session cookie that `POST /login {"token": TOKEN}` sets (HttpOnly,
// Secure, SameSite=Strict; 12 hours). The console's own files need
// neither: they hold no data. API calls must be `Content-Type:
// application/json`, which no cross-site form can send without the
// browser asking first: with SameSite, that keeps other sites from
// calling the API with an admin's cookie.
//
// Bad input: a body over max_body_bytes (413), headers over 16 KiB (431),
// a client slower than read_timeout to send its request (the connection
// closes), more than max_connections at once (503, then closed). Each
// connection is a coroutine on the server's own threads: one client's
// slowness never holds up another's.
//
// Threads: its own (`threads`), never a data-path loop; /metrics's
// blocking API calls run on a worker thread beside them.
#pragma once

#include <grpcpp/channel.h>

#include <chrono>
#include <cstddef>
#include <expected>
#include <filesystem>
#include <memory>
#include <string>

#include "mgmt/security.h"
#include "raid/device/status.h"

namespace strata::mgmt {

struct http_options {
  std::string address = "127.0.0.1:8080";  // ADDR:PORT; port 0: any free one
  security_options security;               // the API's (security.h): TLS and the bearer token
  std::filesystem::path console_dir;  // empty: the console built into stratad; else its files, read
                                      // at each request (development)
  std::size_t max_body_bytes = 1 << 20;
  std::chrono::seconds read_timeout{30};  // for a request's headers and body to arrive
  std::size_t max_connections = 256;
  unsigned threads = 2;
};

class http_server {
 public:
  // Serves `api` (the gRPC server's in-process channel) at options.address.
  // Refused, with a message naming what to fix: an address that is not
  // ADDR:PORT, or that cannot be listened on; security as the API's.
  static std::expected<std::unique_ptr<http_server>, error> start(
      std::shared_ptr<grpc::Channel> api, const http_options& options);
  ~http_server();
  int port() const noexcept;
  bool tls() const noexcept;
  // Stops accepting, waits (up to 5 s) for the API calls in flight, and
  // ends every connection.
  void stop();

  class impl;

 private:
  explicit http_server(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

}  // namespace strata::mgmt
