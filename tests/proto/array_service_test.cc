// The protobuf + gRPC path works end to end: generated messages serialize,
// and a real server on loopback answers a real client.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include "strata/v1/array.grpc.pb.h"

namespace {

class array_service final : public strata::v1::Array::Service {
  grpc::Status GetVersion(grpc::ServerContext*, const strata::v1::GetVersionRequest*,
                          strata::v1::GetVersionResponse* response) override {
    response->set_version("0.1.0");
    response->set_controller("A");
    return grpc::Status::OK;
  }
};

}  // namespace

TEST_CASE("proto: messages round-trip through the wire format", "[proto]") {
  strata::v1::GetVersionResponse out;
  out.set_version("1.2.3");
  out.set_controller("B");
  strata::v1::GetVersionResponse in;
  REQUIRE(in.ParseFromString(out.SerializeAsString()));
  CHECK(in.version() == "1.2.3");
  CHECK(in.controller() == "B");
}

TEST_CASE("proto: a gRPC server on loopback answers GetVersion", "[proto]") {
  array_service service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server);
  REQUIRE(port > 0);

  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto stub = strata::v1::Array::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  strata::v1::GetVersionResponse response;
  const grpc::Status status = stub->GetVersion(&context, {}, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  CHECK(response.version() == "0.1.0");
  CHECK(response.controller() == "A");
  server->Shutdown();
}
