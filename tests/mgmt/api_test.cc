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

namespace {

// The status's rich details: the ErrorInfo naming the field.
v1::ErrorInfo info_of(const grpc::Status& s) {
  v1::Status rich;
  v1::ErrorInfo info;
  if (rich.ParseFromString(s.error_details()) && rich.details_size() == 1) (void)rich.details(0).UnpackTo(&info);
  return info;
}

bool refused(const grpc::Status& s, grpc::StatusCode code, const std::string& field) {
  const bool ok = s.error_code() == code && s.error_message().starts_with(field + ":") && info_of(s).field() == field;
  if (!ok) UNSCOPED_INFO("got " << s.error_code() << " \"" << s.error_message() << "\", field \"" << info_of(s).field() << "\"");
  return ok;
}

}  // namespace

TEST_CASE("api: errors carry a strata.v1.Status with an ErrorInfo naming the field", "[mgmt]") {
  api a;
  v1::Disk disk;
  v1::GetRequest get;
  get.set_name("disks/nope");
  const auto s = a.call(&v1::Array::Stub::GetDisk, get, disk);
  CHECK(refused(s, grpc::StatusCode::NOT_FOUND, "name"));
  CHECK(info_of(s).reason() == "disks/nope does not exist");
}

TEST_CASE("api: updates name their fields in a mask, and volumes only grow", "[mgmt]") {
  api a;
  v1::UpdateVolumeRequest in;
  v1::Volume out;
  in.mutable_volume()->set_name("pools/p1/volumes/v1");
  in.mutable_volume()->set_size_bytes(2u << 30);
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT, "update_mask"));
  in.mutable_update_mask()->add_paths("serial");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT, "update_mask"));
  in.mutable_update_mask()->set_paths(0, "size_bytes");
  in.mutable_volume()->set_size_bytes(1u << 20);
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT, "volume.size_bytes"));
  in.mutable_volume()->set_size_bytes((1u << 30) + 1);
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT, "volume.size_bytes"));
  in.mutable_update_mask()->set_paths(0, "affinity");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT, "volume.affinity"));
  in.mutable_volume()->set_name("pools/p1/volumes/v9");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::NOT_FOUND, "volume.name"));
}

TEST_CASE("api: hosts are checked field by field, and one host's IQN or any_initiator is not another's", "[mgmt]") {
  api a;
  controller::config_batch b;
  v1::Host all;
  all.set_name("hosts/all");
  all.set_any_initiator(true);
  v1::Host db;
  db.set_name("hosts/db");
  db.add_iqns("iqn.2026-11.test:db");
  v1::Mapping m;
  m.set_name("mappings/m1");
  m.set_volume("pools/p1/volumes/v1");
  m.set_host("hosts/db");
  b.put(all.name(), all.SerializeAsString());
  b.put(db.name(), db.SerializeAsString());
  b.put(m.name(), m.SerializeAsString());
  REQUIRE(a.config->commit(b));

  v1::Host out;
  v1::CreateHostRequest in;
  auto create = [&](std::string id, std::function<void(v1::Host&)> fill) {
    in.set_host_id(std::move(id));
    in.clear_host();
    fill(*in.mutable_host());
    return a.call(&v1::Array::Stub::CreateHost, in, out);
  };
  CHECK(refused(create("H!", [](v1::Host& h) { h.add_iqns("iqn.2026-11.test:x"); }), grpc::StatusCode::INVALID_ARGUMENT, "host_id"));
  CHECK(refused(create("db", [](v1::Host& h) { h.add_iqns("iqn.2026-11.test:x"); }), grpc::StatusCode::ALREADY_EXISTS, "host_id"));
  CHECK(refused(create("x", [](v1::Host&) {}), grpc::StatusCode::INVALID_ARGUMENT, "host.iqns"));
  CHECK(refused(create("x", [](v1::Host& h) { h.add_iqns("db-server"); }), grpc::StatusCode::INVALID_ARGUMENT, "host.iqns"));
  CHECK(refused(create("x", [](v1::Host& h) { h.add_iqns("iqn.2026-11.test:x"), h.add_iqns("IQN.2026-11.test:X"); }),
                grpc::StatusCode::INVALID_ARGUMENT, "host.iqns"));
  CHECK(refused(create("x", [](v1::Host& h) { h.add_iqns("IQN.2026-11.TEST:DB"); }), grpc::StatusCode::ALREADY_EXISTS, "host.iqns"));
  CHECK(refused(create("x", [](v1::Host& h) { h.set_any_initiator(true); }), grpc::StatusCode::ALREADY_EXISTS, "host.any_initiator"));
  auto with_chap = [](std::string secret, std::string mutual_user, std::string mutual_secret) {
    return [=](v1::Host& h) {
      h.add_iqns("iqn.2026-11.test:x");
      h.set_chap_user("u");
      h.set_chap_secret(secret);
      h.set_mutual_chap_user(mutual_user);
      h.set_mutual_chap_secret(mutual_secret);
    };
  };
  CHECK(refused(create("x", with_chap("", "", "")), grpc::StatusCode::INVALID_ARGUMENT, "host.chap_secret"));
  CHECK(refused(create("x", with_chap("short", "", "")), grpc::StatusCode::INVALID_ARGUMENT, "host.chap_secret"));
  CHECK(refused(create("x", with_chap("long-enough-secret", "t", "")), grpc::StatusCode::INVALID_ARGUMENT, "host.mutual_chap_secret"));
  CHECK(refused(create("x", with_chap("long-enough-secret", "t", "long-enough-secret")), grpc::StatusCode::INVALID_ARGUMENT,
                "host.mutual_chap_secret"));
  CHECK(create("x", with_chap("long-enough-secret", "t", "another-long-secret")).error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_FALSE(a.config->get("hosts/x"));

  v1::UpdateHostRequest update;
  update.mutable_host()->set_name("hosts/nobody");
  update.mutable_update_mask()->add_paths("iqns");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateHost, update, out), grpc::StatusCode::NOT_FOUND, "host.name"));
  update.mutable_host()->set_name("hosts/db");
  update.mutable_update_mask()->set_paths(0, "name");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateHost, update, out), grpc::StatusCode::INVALID_ARGUMENT, "update_mask"));
  update.mutable_update_mask()->set_paths(0, "any_initiator");
  update.mutable_host()->set_any_initiator(true);
  CHECK(refused(a.call(&v1::Array::Stub::UpdateHost, update, out), grpc::StatusCode::ALREADY_EXISTS, "host.any_initiator"));

  google::protobuf::Empty none;
  v1::DeleteRequest del;
  del.set_name("hosts/db");
  CHECK(refused(a.call(&v1::Array::Stub::DeleteHost, del, none), grpc::StatusCode::FAILED_PRECONDITION, "name"));
  del.set_name("hosts/nobody");
  CHECK(refused(a.call(&v1::Array::Stub::DeleteHost, del, none), grpc::StatusCode::NOT_FOUND, "name"));
  del.set_name("mappings/m9");
  CHECK(refused(a.call(&v1::Array::Stub::DeleteMapping, del, none), grpc::StatusCode::NOT_FOUND, "name"));

  v1::Operation op;
  del.set_name("pools/p1/volumes/v1");
  CHECK(refused(a.call(&v1::Array::Stub::DeleteVolume, del, op), grpc::StatusCode::FAILED_PRECONDITION, "name"));
  del.set_name("pools/p1/volumes/v9");
  CHECK(refused(a.call(&v1::Array::Stub::DeleteVolume, del, op), grpc::StatusCode::NOT_FOUND, "name"));
  CHECK(a.config->get("pools/p1/volumes/v1"));

  v1::ListHostsResponse hosts;
  REQUIRE(a.call(&v1::Array::Stub::ListHosts, page(0), hosts).ok());
  CHECK(hosts.hosts_size() == 2);
}

TEST_CASE("api: the event log lists newest first, paged", "[mgmt]") {
  api a;
  controller::config_batch b;
  for (int i = 1; i <= 5; ++i) {
    v1::Event e;
    e.set_name("events/0000000000000000000" + std::to_string(i));
    e.set_message("event " + std::to_string(i));
    b.put(e.name(), e.SerializeAsString());
  }
  REQUIRE(a.config->commit(b));
  v1::ListEventsResponse out;
  REQUIRE(a.call(&v1::Array::Stub::ListEvents, page(2), out).ok());
  REQUIRE(out.events_size() == 2);
  CHECK(out.events(0).message() == "event 5");
  CHECK(out.events(1).message() == "event 4");
  std::vector<std::string> rest;
  while (!out.next_page_token().empty()) {
    const std::string token = out.next_page_token();
    out.Clear();
    REQUIRE(a.call(&v1::Array::Stub::ListEvents, page(2, token), out).ok());
    for (const auto& e : out.events()) rest.push_back(e.message());
  }
  CHECK(rest == std::vector<std::string>{"event 3", "event 2", "event 1"});
  CHECK(refused(a.call(&v1::Array::Stub::ListEvents, page(2, "hosts/x"), out), grpc::StatusCode::INVALID_ARGUMENT, "page_token"));
}
