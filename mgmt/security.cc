#include "mgmt/security.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace strata::mgmt {

namespace {

// Shorter is guessable; longer would crowd gRPC's 8 KiB limit on a call's
// metadata.
constexpr std::size_t min_token_chars = 32;
constexpr std::size_t max_token_chars = 1024;
// Certificates and tokens are small: a bigger file is the wrong file.
constexpr std::size_t max_file_bytes = 1 << 20;

// The whole of a small file; `what` names it in errors ("the TLS key").
std::expected<std::string, error> read_small_file(const std::filesystem::path& path,
                                                  const std::string& what) {
  const std::string where = what + " " + path.string();
  auto failed = [&](int e) {
    return std::unexpected(
        make_error(errc_from_errno(e), "cannot read " + where + ": " + std::strerror(e)));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return failed(errno);
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {  // a directory: EISDIR
      const int e = errno;
      ::close(fd);
      return failed(e);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > max_file_bytes) {
      ::close(fd);
      return std::unexpected(
          make_error(errc::invalid_argument, where + " is over 1 MiB: not a PEM file or a token"));
    }
  }
  ::close(fd);
  return text;
}

// The token file's one line. Errors name the file, never the token.
std::expected<std::string, error> read_token(const std::filesystem::path& path) {
  auto text = read_small_file(path, "the token file");
  if (!text) return std::unexpected(text.error());
  std::string token = std::move(*text);
  // A final newline (echo, an editor) is not part of the token.
  if (token.ends_with('\n')) token.pop_back();
  if (token.ends_with('\r')) token.pop_back();
  const std::string where = path.string();
  const std::string make_one = "; make one with: openssl rand -hex 32 > " + where;
  if (token.empty())
    return std::unexpected(
        make_error(errc::invalid_argument, "the token file " + where + " is empty" + make_one));
  if (token.find('\n') != std::string::npos) {
    return std::unexpected(make_error(
        errc::invalid_argument,
        "the token file " + where + " has more than one line; the token is its only line"));
  }
  // The token travels as an HTTP/2 header value after "Bearer ".
  if (!std::ranges::all_of(token, [](char c) { return c > ' ' && c < 127; })) {
    return std::unexpected(
        make_error(errc::invalid_argument,
                   "the token in " + where +
                       " has a space, a control character or one outside ASCII, which a call's "
                       "metadata cannot carry" +
                       make_one));
  }
  if (token.size() < min_token_chars) {
    return std::unexpected(make_error(
        errc::invalid_argument, "the token in " + where + " is " + std::to_string(token.size()) +
                                    " characters long; it needs at least " +
                                    std::to_string(min_token_chars) +
                                    " so that it cannot be guessed" + make_one));
  }
  if (token.size() > max_token_chars) {
    return std::unexpected(make_error(
        errc::invalid_argument, "the token in " + where + " is " + std::to_string(token.size()) +
                                    " characters long; at most " + std::to_string(max_token_chars) +
                                    " fit in a call's metadata"));
  }
  return token;
}

using sha256_digest = std::array<unsigned char, 32>;

std::optional<sha256_digest> sha256(std::string_view text) {
  sha256_digest d{};
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), d.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != d.size())
    return std::nullopt;
  return d;
}

// gRPC would take a bad certificate or key only to fail to listen, saying
// why in its own log; reading them here first names the file at fault.
std::expected<void, error> check_tls(const security_options& o, const std::string& cert_pem,
                                     const std::string& key_pem) {
  // OpenSSL's error queue is per thread and gRPC reads it too: leave it empty.
  struct clear_errors {
    ~clear_errors() { ERR_clear_error(); }
  } clear;
  auto memory = [](const std::string& pem) {
    return std::unique_ptr<BIO, decltype(&BIO_free)>(
        BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  };
  const auto cert_bio = memory(cert_pem);
  const std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (!cert) {
    return std::unexpected(make_error(
        errc::invalid_argument, "the TLS certificate " + o.tls_cert.string() +
                                    " holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  // Never prompts for a passphrase on the terminal: a daemon has none.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  const auto key_bio = memory(key_pem);
  const std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr), &EVP_PKEY_free);
  if (!key) {
    return std::unexpected(
        make_error(errc::invalid_argument,
                   "the TLS key " + o.tls_key.string() +
                       " holds no PEM private key that can be read without a passphrase"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return std::unexpected(make_error(
        errc::invalid_argument, "the TLS key " + o.tls_key.string() +
                                    " is not the key of the certificate in " + o.tls_cert.string() +
                                    " (the first one in the file)"));
  }
  return {};
}

}  // namespace

bool is_loopback(std::string_view address) {
  return address.starts_with("127.") || address.starts_with("[::1]") ||
         address.starts_with("localhost:");
}

std::expected<bearer_token, error> bearer_token::load(const std::filesystem::path& token_file) {
  const auto token = read_token(token_file);
  if (!token) return std::unexpected(token.error());
  const auto d = sha256(*token);
  if (!d)
    return std::unexpected(
        make_error(errc::io_error, "cannot hash the bearer token: OpenSSL's SHA-256 failed"));
  return bearer_token(*d);
}

bool bearer_token::matches(std::string_view presented) const noexcept {
  const auto d = sha256(presented);
  return d && CRYPTO_memcmp(d->data(), digest_.data(), digest_.size()) == 0;
}

std::optional<std::string> bearer_token::check_authorization(std::string_view value) const {
  // The scheme's case does not matter (RFC 7235, 2.1).
  constexpr std::string_view scheme = "bearer ";
  const bool bearer = value.size() > scheme.size() &&
                      std::equal(scheme.begin(), scheme.end(), value.begin(), [](char s, char v) {
                        return s == (v >= 'A' && v <= 'Z' ? v - 'A' + 'a' : v);
                      });
  if (!bearer) return "the authorization is not \"Bearer TOKEN\"";
  if (!matches(value.substr(scheme.size())))
    return "the bearer token is not the one in the server's token file";
  return std::nullopt;
}

std::expected<std::optional<loaded_security>, error> load_security(const std::string& what,
                                                                   const std::string& address,
                                                                   const security_options& o) {
  const bool none = o.tls_cert.empty() && o.tls_key.empty() && o.token_file.empty();
  if (none && is_loopback(address)) return std::nullopt;
  if (none) {
    return std::unexpected(
        make_error(errc::permission_denied,
                   what + " at " + address +
                       " is off loopback, so it needs TLS and a bearer token: give a TLS "
                       "certificate, its key and a token file"));
  }
  std::vector<std::string> missing;
  if (o.tls_cert.empty()) missing.push_back("the TLS certificate");
  if (o.tls_key.empty()) missing.push_back("the TLS key");
  if (o.token_file.empty()) missing.push_back("the token file");
  if (!missing.empty()) {
    const std::string list = missing.size() == 1 ? missing[0] : missing[0] + " and " + missing[1];
    return std::unexpected(make_error(
        errc::invalid_argument, what + "'s TLS certificate, TLS key and token file go together: " +
                                    list + (missing.size() == 1 ? " is" : " are") + " missing"));
  }
  auto cert = read_small_file(o.tls_cert, "the TLS certificate");
  if (!cert) return std::unexpected(cert.error());
  auto key = read_small_file(o.tls_key, "the TLS key");
  if (!key) return std::unexpected(key.error());
  auto token = bearer_token::load(o.token_file);
  if (!token) return std::unexpected(token.error());
  if (auto checked = check_tls(o, *cert, *key); !checked) return std::unexpected(checked.error());
  return loaded_security{std::move(*cert), std::move(*key), *token};
}

}  // namespace strata::mgmt
