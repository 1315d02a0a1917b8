// The management API over a real gRPC server on loopback and a real client:
// resources as the config store holds them, paging, and each error path
// with its status code and the field it names.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include "mgmt/server.h"
#include "strata/v1/array.grpc.pb.h"
#include "tests/raid/device/harness.h"

using namespace strata;
using strata::device::testing::temp_dir;

namespace {

struct api {
  temp_dir dir;
  std::unique_ptr<controller::config_store> config;
  std::unique_ptr<mgmt::management_server> server;
  std::unique_ptr<v1::Array::Stub> stub;

  api() {
    auto c = controller::config_store::open((dir.path() / "config").string());
    REQUIRE(c);
    config = std::move(*c);
    controller::config_batch b;
    for (int i = 0; i < 5; ++i) {
      v1::Disk d;
      d.set_name("disks/hdd-0" + std::to_string(i));
      d.set_kind(v1::HDD);
      b.put(d.name(), d.SerializeAsString());
    }
    v1::Pool p;
    p.set_name("pools/p1");
    p.add_groups("groups/g1");
    b.put(p.name(), p.SerializeAsString());
    for (const char* name : {"pools/p1/volumes/v1", "pools/p1/volumes/v2"}) {
      v1::Volume v;
      v.set_name(name);
      v.set_size_bytes(1u << 30);
      b.put(v.name(), v.SerializeAsString());
    }
    REQUIRE(config->commit(b));
    auto s = mgmt::management_server::start(*config, nullptr, "127.0.0.1:0");
    REQUIRE(s);
    server = std::move(*s);
    stub = v1::Array::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));
  }
  ~api() { server.reset(); }

  template <class Request, class Response, class Call>
  grpc::Status call(Call method, const Request& in, Response& out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ((*stub).*method)(&context, in, &out);
  }
};

v1::ListRequest page(int size, std::string token = {}, std::string parent = {}) {
  v1::ListRequest r;
  r.set_page_size(size);
  r.set_page_token(std::move(token));
  r.set_parent(std::move(parent));
  return r;
}

}  // namespace

TEST_CASE("api: lists page by token until the last page, which has none", "[mgmt]") {
  api a;
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    v1::ListDisksResponse out;
    const auto status = a.call(&v1::Array::Stub::ListDisks, page(2, token), out);
    REQUIRE(status.ok());
    for (const auto& d : out.disks()) seen.push_back(d.name());
    token = out.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  CHECK(pages == 3);
  CHECK(seen == std::vector<std::string>{"disks/hdd-00", "disks/hdd-01", "disks/hdd-02", "disks/hdd-03", "disks/hdd-04"});

  v1::ListPoolsResponse pools;
  REQUIRE(a.call(&v1::Array::Stub::ListPools, page(0), pools).ok());
  REQUIRE(pools.pools_size() == 1);  // its volumes are not pools
  CHECK(pools.pools(0).groups(0) == "groups/g1");
  v1::ListVolumesResponse volumes;
  REQUIRE(a.call(&v1::Array::Stub::ListVolumes, page(0, {}, "pools/p1"), volumes).ok());
  CHECK(volumes.volumes_size() == 2);
  CHECK(volumes.next_page_token().empty());
}

TEST_CASE("api: each bad request gets its status code and names the field", "[mgmt]") {
  api a;
  v1::ListDisksResponse disks;
  auto s = a.call(&v1::Array::Stub::ListDisks, page(-1), disks);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().starts_with("page_size:"));
  s = a.call(&v1::Array::Stub::ListDisks, page(5000), disks);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  s = a.call(&v1::Array::Stub::ListDisks, page(2, "pools/p1"), disks);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().starts_with("page_token:"));

  v1::GetRequest get;
  v1::Disk disk;
  get.set_name("disks/hdd-09");
  s = a.call(&v1::Array::Stub::GetDisk, get, disk);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "name: disks/hdd-09 does not exist");
  get.set_name("pools/p1");
  s = a.call(&v1::Array::Stub::GetDisk, get, disk);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().starts_with("name:"));
  get.set_name("disks/hdd-03");
  REQUIRE(a.call(&v1::Array::Stub::GetDisk, get, disk).ok());
  CHECK(disk.kind() == v1::HDD);

  v1::ListVolumesResponse volumes;
  s = a.call(&v1::Array::Stub::ListVolumes, page(0), volumes);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().starts_with("parent:"));
  s = a.call(&v1::Array::Stub::ListVolumes, page(0, {}, "pools/p9"), volumes);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  v1::Volume volume;
  get.set_name("pools/p1");
  s = a.call(&v1::Array::Stub::GetVolume, get, volume);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("api: off loopback the server refuses to start, saying why", "[mgmt]") {
  temp_dir dir;
  auto c = controller::config_store::open((dir.path() / "config").string());
  REQUIRE(c);
  auto s = mgmt::management_server::start(**c, nullptr, "0.0.0.0:0");
  REQUIRE_FALSE(s);
  CHECK(s.error().message.find("TLS") != std::string::npos);
}

TEST_CASE("api: creating a volume or a mapping checks every field first, and a failed request changes nothing",
          "[mgmt]") {
  api a;
  v1::Volume volume;
  v1::CreateVolumeRequest cv;
  cv.mutable_volume()->set_size_bytes(1u << 30);
  auto create = [&](std::string parent, std::string id, std::uint64_t bytes) {
    cv.set_parent(std::move(parent));
    cv.set_volume_id(std::move(id));
    cv.mutable_volume()->set_size_bytes(bytes);
    return a.call(&v1::Array::Stub::CreateVolume, cv, volume);
  };
  auto s = create("", "v3", 1u << 30);
  CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT && s.error_message().starts_with("parent:")));
  s = create("pools/p1", "V3!", 1u << 30);
  CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT && s.error_message().starts_with("volume_id:")));
  s = create("pools/p1", "v3", 1000);
  CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT && s.error_message().starts_with("volume.size_bytes:")));
  s = create("pools/p9", "v3", 1u << 30);
  CHECK((s.error_code() == grpc::StatusCode::NOT_FOUND && s.error_message().starts_with("parent:")));
  s = create("pools/p1", "v1", 1u << 30);
  CHECK((s.error_code() == grpc::StatusCode::ALREADY_EXISTS && s.error_message().starts_with("volume_id:")));
  s = create("pools/p1", "v3", 1u << 30);  // valid, but no array behind this server
  CHECK(s.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_FALSE(a.config->get("pools/p1/volumes/v3"));

  v1::Mapping mapping;
  v1::CreateMappingRequest cm;
  auto map = [&](std::string id, std::string vol, std::string host, std::uint32_t lun) {
    cm.set_mapping_id(std::move(id));
    cm.mutable_mapping()->set_volume(std::move(vol));
    cm.mutable_mapping()->set_host(std::move(host));
    cm.mutable_mapping()->set_lun(lun);
    return a.call(&v1::Array::Stub::CreateMapping, cm, mapping);
  };
  s = map("m2", "pools/p1/volumes/v9", "hosts/all", 1);
  CHECK((s.error_code() == grpc::StatusCode::NOT_FOUND && s.error_message().starts_with("mapping.volume:")));
  s = map("m2", "pools/p1/volumes/v1", "hosts/nobody", 1);
  CHECK((s.error_code() == grpc::StatusCode::NOT_FOUND && s.error_message().starts_with("mapping.host:")));
  s = map("m2", "pools/p1/volumes/v1", "hosts/all", 20000);
  CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT && s.error_message().starts_with("mapping.lun:")));
  s = map("", "pools/p1/volumes/v1", "hosts/all", 1);
  CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT && s.error_message().starts_with("mapping_id:")));
  CHECK(a.config->list("mappings/").empty());
}
