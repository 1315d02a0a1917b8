// The management plane's gRPC server: the Array service (service.h) and
// server reflection, so that grpcurl can list and call every method.
//
// Threads: gRPC's own (its completion queues and handler threads), never a
// data-path loop.
//
// Who may call: on a loopback address with no security options, anyone on
// this machine, in plaintext (as a local admin socket). With security
// options, every call is over TLS and must carry `authorization: Bearer
// TOKEN`, reflection included; a call without it, or with another token, is
// UNAUTHENTICATED. Off loopback the options are required: the server refuses
// to start without them rather than expose the array in the clear.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/server.h>
#include <grpcpp/support/channel_arguments.h>

#include <expected>
#include <filesystem>
#include <memory>
#include <string>

#include "controller/management.h"
#include "mgmt/security.h"
#include "mgmt/service.h"
#include "raid/device/status.h"

namespace strata::mgmt {

class management_server {
 public:
  // Serves at `address` ("127.0.0.1:50051"; port 0: any free one).
  // `manage`'s array may be null (service.h). Refused, with a message naming what
  // to fix: an address off loopback without `security`; only some of
  // `security`; a file that cannot be read or holds no certificate, key or
  // valid token; a key that is not the certificate's.
  static std::expected<std::unique_ptr<management_server>, error> start(
      controller::management& manage, const std::string& address,
      const security_options& security = {});
  ~management_server();
  int port() const noexcept { return port_; }
  // A channel to the server within this process (no socket, no TLS): the
  // HTTP server's calls take it, after checking the caller itself.
  std::shared_ptr<grpc::Channel> in_process_channel() {
    return server_->InProcessChannel(grpc::ChannelArguments());
  }
  // Ends every call and stops; waits for handlers running.
  void stop();

 private:
  explicit management_server(controller::management& manage) : service_(manage) {}
  array_service service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace strata::mgmt
