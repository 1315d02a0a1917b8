#include "mgmt/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <iterator>
#include <string_view>

namespace strata::mgmt {

namespace {

// Runs before any handler, for every method (reflection too), so no
// service code has to think about who calls.
class bearer_token_check final : public grpc::AuthMetadataProcessor {
 public:
  explicit bearer_token_check(const bearer_token& token) : token_(token) {}
  // A hash and a compare: cheap enough for gRPC's own thread, no pool.
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata* consumed,
                       OutputMetadata*) override {
    const auto [first, last] = metadata.equal_range("authorization");
    if (first == last)
      return refuse(
          "no authorization metadata: send \"authorization: Bearer TOKEN\", TOKEN from the "
          "server's token file");
    if (std::next(first) != last)
      return refuse("more than one authorization metadata entry: send one");
    const std::string_view value(first->second.data(), first->second.size());
    if (const auto wrong = token_.check_authorization(value)) return refuse(*wrong);
    // Out of the call's metadata: no handler, log or trace sees the token.
    consumed->emplace(std::string(first->first.data(), first->first.size()), std::string(value));
    return grpc::Status::OK;
  }

 private:
  static grpc::Status refuse(const std::string& why) {
    return {grpc::StatusCode::UNAUTHENTICATED, why};
  }
  const bearer_token token_;
};

// Plaintext on loopback when no option is given; otherwise TLS and the token
// check, which take all three (security.h).
std::expected<std::shared_ptr<grpc::ServerCredentials>, error> credentials_for(
    const std::string& address, const security_options& o) {
  auto loaded = load_security("the management API", address, o);
  if (!loaded) return std::unexpected(loaded.error());
  if (!*loaded) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions tls(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  tls.pem_key_cert_pairs.push_back({(*loaded)->key_pem, (*loaded)->cert_pem});
  auto credentials = grpc::SslServerCredentials(tls);
  credentials->SetAuthMetadataProcessor(std::make_shared<bearer_token_check>((*loaded)->token));
  return credentials;
}

}  // namespace

std::expected<std::unique_ptr<management_server>, error> management_server::start(
    controller::management& manage, const std::string& address, const security_options& security) {
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
    return std::unexpected(make_error(
        errc::io_error, "the management API cannot listen at " + address +
                            ": the port is taken, or the address is not this machine's"));
  }
  return s;
}

void management_server::stop() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

management_server::~management_server() {
  stop();
}

}  // namespace strata::mgmt
