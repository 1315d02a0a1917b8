// Who may call the management API, for both of its faces: the gRPC server
// (server.h) and the HTTP server (http_server.h). One set of files, read
// and checked in one place, so that the two can never disagree on who
// gets in.
//
// Threads: any. Loaded once, at start; a new certificate or token takes a
// restart.
#pragma once

#include <array>
#include <expected>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "raid/device/status.h"

namespace strata::mgmt {

// All three or none.
struct security_options {
  std::filesystem::path tls_cert,
      tls_key;  // PEM: the server's certificate chain (its own first), and its unencrypted key
  std::filesystem::path
      token_file;  // the bearer token: one line of at least 32 printable characters, no spaces
};

// The bearer token, kept as its SHA-256 digest only.
class bearer_token {
 public:
  // The token file's one line; errors name the file, never the token.
  static std::expected<bearer_token, error> load(const std::filesystem::path& token_file);
  // Compares digests in constant time: the time taken cannot tell how
  // close a guess came, its length included.
  bool matches(std::string_view presented) const noexcept;
  // `value` is "Bearer TOKEN" (the scheme in any case, RFC 7235 2.1) with
  // the token. Else why not, in words for the caller.
  std::optional<std::string> check_authorization(std::string_view value) const;

 private:
  using digest = std::array<unsigned char, 32>;
  explicit bearer_token(const digest& d) : digest_(d) {}
  digest digest_;
};

// TLS and the token, read and checked.
struct loaded_security {
  std::string cert_pem, key_pem;
  bearer_token token;
};

// A numeric loopback address ("127.x.x.x:P", "[::1]:P") or localhost.
bool is_loopback(std::string_view address);

// Reads and checks `options` for a server `what` ("the management API")
// at `address`: none of the three on loopback is nullopt (plaintext, no
// token); all three, read and checked. Refused, naming what to fix: none
// off loopback; only some; a file unreadable, or holding no certificate,
// key or valid token; a key that is not the certificate's.
std::expected<std::optional<loaded_security>, error> load_security(const std::string& what,
                                                                   const std::string& address,
                                                                   const security_options& options);

}  // namespace strata::mgmt
