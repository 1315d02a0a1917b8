#include "mgmt/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

namespace strata::mgmt {

namespace {
bool loopback(const std::string& address) {
  return address.starts_with("127.") || address.starts_with("[::1]") || address.starts_with("localhost:");
}
}  // namespace

std::expected<std::unique_ptr<management_server>, error> management_server::start(controller::config_store& config,
                                                                                  controller::array* array,
                                                                                  const std::string& address) {
  if (!loopback(address)) {
    return std::unexpected(make_error(errc::permission_denied, "the management API at " + address +
                                                                   ": off loopback it needs TLS and a bearer token, which are not built yet"));
  }
  // Registers the reflection service with every server built from here on;
  // called explicitly so that the linker keeps it.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<management_server> s(new management_server(config, array));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &s->port_);
  builder.RegisterService(&s->service_);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) return std::unexpected(make_error(errc::io_error, "the management API cannot listen at " + address));
  return s;
}

void management_server::stop() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

management_server::~management_server() { stop(); }

}  // namespace strata::mgmt
