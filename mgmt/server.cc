#include "mgmt/server.h"

#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

namespace strata::mgmt {

namespace {

bool loopback(const std::string& address) {
  return address.starts_with("127.") || address.starts_with("[::1]") || address.starts_with("localhost:");
}

// Shorter is guessable; longer would crowd gRPC's 8 KiB limit on a call's
// metadata.
constexpr std::size_t min_token_chars = 32;
constexpr std::size_t max_token_chars = 1024;
// Certificates and tokens are small: a bigger file is the wrong file.
constexpr std::size_t max_file_bytes = 1 << 20;

// The whole of a small file; `what` names it in errors ("the TLS key").
std::expected<std::string, error> read_small_file(const std::filesystem::path& path, const std::string& what) {
  const std::string where = what + " " + path.string();
  auto failed = [&](int e) { return std::unexpected(make_error(errc_from_errno(e), "cannot read " + where + ": " + std::strerror(e))); };
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
      return std::unexpected(make_error(errc::invalid_argument, where + " is over 1 MiB: not a PEM file or a token"));
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
  if (token.empty()) return std::unexpected(make_error(errc::invalid_argument, "the token file " + where + " is empty" + make_one));
  if (token.find('\n') != std::string::npos) {
    return std::unexpected(make_error(errc::invalid_argument, "the token file " + where + " has more than one line; the token is its only line"));
  }
  // The token travels as an HTTP/2 header value after "Bearer ".
  if (!std::ranges::all_of(token, [](char c) { return c > ' ' && c < 127; })) {
    return std::unexpected(make_error(errc::invalid_argument, "the token in " + where +
                                                                  " has a space, a control character or one outside ASCII, which a call's "
                                                                  "metadata cannot carry" + make_one));
  }
  if (token.size() < min_token_chars) {
    return std::unexpected(make_error(errc::invalid_argument, "the token in " + where + " is " + std::to_string(token.size()) +
                                                                  " characters long; it needs at least " + std::to_string(min_token_chars) +
                                                                  " so that it cannot be guessed" + make_one));
  }
  if (token.size() > max_token_chars) {
    return std::unexpected(make_error(errc::invalid_argument, "the token in " + where + " is " + std::to_string(token.size()) +
                                                                  " characters long; at most " + std::to_string(max_token_chars) +
                                                                  " fit in a call's metadata"));
  }
  return token;
}

using sha256_digest = std::array<unsigned char, 32>;

std::optional<sha256_digest> sha256(std::string_view text) {
  sha256_digest d{};
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), d.data(), &size, EVP_sha256(), nullptr) != 1 || size != d.size()) return std::nullopt;
  return d;
}

// Runs before any handler, for every method (reflection too), so no
// service code has to think about who calls.
class bearer_token_check final : public grpc::AuthMetadataProcessor {
 public:
  explicit bearer_token_check(const sha256_digest& expected) : expected_(expected) {}

  // A hash and a compare: cheap enough for gRPC's own thread, no pool.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata* consumed, OutputMetadata*) override {
    const auto [first, last] = metadata.equal_range("authorization");
    if (first == last) return refuse("no authorization metadata: send \"authorization: Bearer TOKEN\", TOKEN from the server's token file");
    if (std::next(first) != last) return refuse("more than one authorization metadata entry: send one");
    const std::string_view value(first->second.data(), first->second.size());
    // The scheme's case does not matter (RFC 7235, 2.1).
    constexpr std::string_view scheme = "bearer ";
    const bool bearer = value.size() > scheme.size() && std::equal(scheme.begin(), scheme.end(), value.begin(), [](char s, char v) {
                          return s == (v >= 'A' && v <= 'Z' ? v - 'A' + 'a' : v);
                        });
    if (!bearer) return refuse("the authorization metadata is not \"Bearer TOKEN\"");
    // Comparing digests takes the same time whatever was sent, its length
    // included: the timing cannot tell how close a guess came.
    const auto presented = sha256(value.substr(scheme.size()));
    if (!presented || CRYPTO_memcmp(presented->data(), expected_.data(), expected_.size()) != 0) {
      return refuse("the bearer token is not the one in the server's token file");
    }
    // Out of the call's metadata: no handler, log or trace sees the token.
    consumed->emplace(std::string(first->first.data(), first->first.size()), std::string(value));
    return grpc::Status::OK;
  }

 private:
  static grpc::Status refuse(const std::string& why) { return {grpc::StatusCode::UNAUTHENTICATED, why}; }
  const sha256_digest expected_;
};

// gRPC would take a bad certificate or key only to fail to listen, saying
// why in its own log; reading them here first names the file at fault.
std::expected<void, error> check_tls(const security_options& o, const std::string& cert_pem, const std::string& key_pem) {
  // OpenSSL's error queue is per thread and gRPC reads it too: leave it empty.
  struct clear_errors {
    ~clear_errors() { ERR_clear_error(); }
  } clear;
  auto memory = [](const std::string& pem) {
    return std::unique_ptr<BIO, decltype(&BIO_free)>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  };
  const auto cert_bio = memory(cert_pem);
  const std::unique_ptr<X509, decltype(&X509_free)> cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (!cert) {
    return std::unexpected(make_error(errc::invalid_argument, "the TLS certificate " + o.tls_cert.string() +
                                                                  " holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  // Never prompts for a passphrase on the terminal: a daemon has none.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  const auto key_bio = memory(key_pem);
  const std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr),
                                                                &EVP_PKEY_free);
  if (!key) {
    return std::unexpected(make_error(errc::invalid_argument, "the TLS key " + o.tls_key.string() +
                                                                  " holds no PEM private key that can be read without a passphrase"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return std::unexpected(make_error(errc::invalid_argument, "the TLS key " + o.tls_key.string() + " is not the key of the certificate in " +
                                                                  o.tls_cert.string() + " (the first one in the file)"));
  }
  return {};
}

// Plaintext on loopback when no option is given; otherwise TLS and the token
// check, which take all three.
std::expected<std::shared_ptr<grpc::ServerCredentials>, error> credentials_for(const std::string& address, const security_options& o) {
  const bool none = o.tls_cert.empty() && o.tls_key.empty() && o.token_file.empty();
  if (none && loopback(address)) return grpc::InsecureServerCredentials();
  if (none) {
    return std::unexpected(make_error(errc::permission_denied, "the management API at " + address +
                                                                   " is off loopback, so it needs TLS and a bearer token: give a TLS "
                                                                   "certificate, its key and a token file"));
  }
  std::vector<std::string> missing;
  if (o.tls_cert.empty()) missing.push_back("the TLS certificate");
  if (o.tls_key.empty()) missing.push_back("the TLS key");
  if (o.token_file.empty()) missing.push_back("the token file");
  if (!missing.empty()) {
    const std::string list = missing.size() == 1 ? missing[0] : missing[0] + " and " + missing[1];
    return std::unexpected(make_error(errc::invalid_argument, "the management API's TLS certificate, TLS key and token file go together: " +
                                                                  list + (missing.size() == 1 ? " is" : " are") + " missing"));
  }
  const auto cert = read_small_file(o.tls_cert, "the TLS certificate");
  if (!cert) return std::unexpected(cert.error());
  const auto key = read_small_file(o.tls_key, "the TLS key");
  if (!key) return std::unexpected(key.error());
  const auto token = read_token(o.token_file);
  if (!token) return std::unexpected(token.error());
  if (auto checked = check_tls(o, *cert, *key); !checked) return std::unexpected(checked.error());
  const auto expected = sha256(*token);
  if (!expected) return std::unexpected(make_error(errc::io_error, "cannot hash the bearer token: OpenSSL's SHA-256 failed"));

  grpc::SslServerCredentialsOptions tls(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  tls.pem_key_cert_pairs.push_back({*key, *cert});
  auto credentials = grpc::SslServerCredentials(tls);
  credentials->SetAuthMetadataProcessor(std::make_shared<bearer_token_check>(*expected));
  return credentials;
}

}  // namespace

std::expected<std::unique_ptr<management_server>, error> management_server::start(controller::management& manage,
                                                                                  const std::string& address,
                                                                                  const security_options& security) {
  auto credentials = credentials_for(address, security);
  if (!credentials) return std::unexpected(credentials.error());
  // Registers the reflection service with every server built from here on;
  // called explicitly so that the linker keeps it.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<management_server> s(new management_server(manage));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, *credentials, &s->port_);
  builder.RegisterService(&s->service_);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return std::unexpected(make_error(errc::io_error, "the management API cannot listen at " + address +
                                                          ": the port is taken, or the address is not this machine's"));
  }
  return s;
}

void management_server::stop() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

management_server::~management_server() { stop(); }

}  // namespace strata::mgmt
