// The management plane's gRPC server: the Array service (service.h) and
// server reflection, so that grpcurl can list and call every method.
//
// Threads: gRPC's own (its completion queues and handler threads), never a
// data-path loop. Listens on loopback only until TLS and bearer tokens
// arrive: anything else is refused.
#pragma once

#include <grpcpp/server.h>

#include <expected>
#include <memory>
#include <string>

#include "controller/config_store.h"
#include "mgmt/service.h"
#include "raid/device/status.h"

namespace strata::mgmt {

class management_server {
 public:
  // Serves at `address` ("127.0.0.1:50051"; port 0: any free one).
  // `array` may be null (service.h).
  static std::expected<std::unique_ptr<management_server>, error> start(controller::config_store& config,
                                                                        controller::array* array,
                                                                        const std::string& address);
  ~management_server();
  int port() const noexcept { return port_; }
  // Ends every call and stops; waits for handlers running.
  void stop();

 private:
  management_server(controller::config_store& config, controller::array* array) : service_(config, array) {}
  array_service service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace strata::mgmt
