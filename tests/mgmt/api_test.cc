// The management API over a real gRPC server on loopback and a real client:
// resources as the config store holds them, paging, and each error path
// with its status code and the field it names; TLS and the bearer token
// (with a certificate the openssl command makes for each test).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iterator>

#include "mgmt/server.h"
#include "strata/v1/array.grpc.pb.h"
#include "tests/raid/device/harness.h"

using namespace strata;
using strata::device::testing::temp_dir;

namespace {

const std::string good_token = "test-token-0123456789abcdef0123456789abcdef";

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A self-signed certificate for 127.0.0.1 and localhost, its key, and a
// token file holding good_token: what an admin gives stratad.
struct tls_files {
  temp_dir dir;
  std::filesystem::path cert = dir.path() / "cert.pem";
  std::filesystem::path key = dir.path() / "key.pem";
  std::filesystem::path token = dir.path() / "token";

  tls_files() {
    // An EC key: quicker to make than RSA, and gRPC takes either.
    const std::string command =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "
        "/CN=localhost"
        " -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout '" +
        key.string() + "' -out '" + cert.string() + "' > '" +
        (dir.path() / "openssl.log").string() + "' 2>&1";
    const int status = std::system(command.c_str());
    INFO("the openssl command makes the test certificate: "
         << command << "\n"
         << read_file(dir.path() / "openssl.log"));
    REQUIRE(status == 0);
    write_file(token, good_token + "\n");
  }
  mgmt::security_options options() const { return {cert, key, token}; }
};

struct api {
  temp_dir dir;
  std::unique_ptr<controller::config_store> config;
  std::unique_ptr<controller::management>
      manage;  // over no array: every check answers, changes are UNAVAILABLE
  std::unique_ptr<mgmt::management_server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Array::Stub> stub;
  std::string authorization;  // sent with each call when not empty

  // With `tls`, the server takes its certificate, key and token, and the
  // client trusts that certificate and sends the token.
  explicit api(const tls_files* tls = nullptr) {
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
    manage = std::make_unique<controller::management>(*config, nullptr);
    auto s = mgmt::management_server::start(*manage, "127.0.0.1:0",
                                            tls ? tls->options() : mgmt::security_options{});
    if (!s) FAIL(s.error().message);
    server = std::move(*s);
    auto credentials = grpc::InsecureChannelCredentials();
    if (tls) {
      grpc::SslCredentialsOptions trust;
      trust.pem_root_certs = read_file(tls->cert);
      credentials = grpc::SslCredentials(trust);
      authorization = "Bearer " + good_token;
    }
    channel = grpc::CreateChannel(target(), credentials);
    stub = v1::Array::NewStub(channel);
  }
  ~api() { server.reset(); }

  std::string target() const { return "127.0.0.1:" + std::to_string(server->port()); }

  template <class Request, class Response, class Call>
  grpc::Status call(Call method, const Request& in, Response& out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    return ((*stub).*method)(&context, in, &out);
  }

  // Server reflection's list of services (what grpcurl asks first), as one
  // call with raw bytes: the reflection protos are not ours to compile. On
  // success `services` holds the response, in which the names appear.
  grpc::Status list_services(std::string& services) {
    grpc::GenericStub generic(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    const char list_services_request[] = {0x3a,
                                          0x00};  // ServerReflectionRequest{list_services: ""}
    grpc::Slice slice(list_services_request, sizeof list_services_request);
    grpc::ByteBuffer in(&slice, 1), out;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                      grpc::StubOptions(), &in, &out,
                      [&](grpc::Status s) { done.set_value(std::move(s)); });
    const grpc::Status status = done.get_future().get();
    services.clear();
    std::vector<grpc::Slice> slices;
    if (status.ok() && out.Dump(&slices).ok()) {
      for (const auto& s : slices)
        services.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    return status;
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
  CHECK(seen == std::vector<std::string>{"disks/hdd-00", "disks/hdd-01", "disks/hdd-02",
                                         "disks/hdd-03", "disks/hdd-04"});

  v1::ListPoolsResponse pools;
  REQUIRE(a.call(&v1::Array::Stub::ListPools, page(0), pools).ok());
  REQUIRE(pools.pools_size() == 1);  // its volumes are not pools
  CHECK(pools.pools(0).groups(0) == "groups/g1");
  v1::ListVolumesResponse volumes;
  REQUIRE(a.call(&v1::Array::Stub::ListVolumes, page(0, {}, "pools/p1"), volumes).ok());
  CHECK(volumes.volumes_size() == 2);
  CHECK(volumes.next_page_token().empty());
}

TEST_CASE("api: ListVolumes of pools/- lists every pool's volumes, paged across the pools",
          "[mgmt]") {
  api a;
  // Two pools more, one before p1 and one after (on two controllers, the
  // partner's pools are in this copy of the configuration too).
  controller::config_batch b;
  for (const char* name : {"pools/p0", "pools/p2"}) {
    v1::Pool p;
    p.set_name(name);
    b.put(p.name(), p.SerializeAsString());
  }
  for (const char* name : {"pools/p0/volumes/a", "pools/p2/volumes/v2", "pools/p2/volumes/v3"}) {
    v1::Volume v;
    v.set_name(name);
    v.set_size_bytes(1u << 30);
    b.put(v.name(), v.SerializeAsString());
  }
  REQUIRE(a.config->commit(b));
  const std::vector<std::string> every{"pools/p0/volumes/a", "pools/p1/volumes/v1",
                                       "pools/p1/volumes/v2", "pools/p2/volumes/v2",
                                       "pools/p2/volumes/v3"};

  v1::ListVolumesResponse all;
  REQUIRE(a.call(&v1::Array::Stub::ListVolumes, page(0, {}, "pools/-"), all).ok());
  std::vector<std::string> names;
  for (const auto& v : all.volumes()) names.push_back(v.name());
  CHECK(names == every);  // each with its own pool, in name order; no pool among them
  CHECK(all.next_page_token().empty());

  // Pages of two: the pages run on from one pool into the next.
  names.clear();
  std::vector<std::string> tokens;
  std::string token;
  do {
    v1::ListVolumesResponse out;
    const auto s = a.call(&v1::Array::Stub::ListVolumes, page(2, token, "pools/-"), out);
    INFO(s.error_message());
    REQUIRE(s.ok());
    for (const auto& v : out.volumes()) names.push_back(v.name());
    token = out.next_page_token();
    if (!token.empty()) tokens.push_back(token);
  } while (!token.empty() && tokens.size() < 10);
  CHECK(names == every);
  CHECK(tokens == std::vector<std::string>{"pools/p1/volumes/v1", "pools/p2/volumes/v2"});

  // One pool's list is still that pool's.
  v1::ListVolumesResponse p2;
  REQUIRE(a.call(&v1::Array::Stub::ListVolumes, page(0, {}, "pools/p2"), p2).ok());
  REQUIRE(p2.volumes_size() == 2);
  CHECK(p2.volumes(0).name() == "pools/p2/volumes/v2");
  v1::ListPoolsResponse pools;
  REQUIRE(a.call(&v1::Array::Stub::ListPools, page(0), pools).ok());
  CHECK(pools.pools_size() == 3);

  // A token must be a volume's name.
  v1::ListVolumesResponse bad;
  auto s = a.call(&v1::Array::Stub::ListVolumes, page(2, "pools/p1", "pools/-"), bad);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().starts_with("page_token:"));
  s = a.call(&v1::Array::Stub::ListVolumes, page(2, "disks/hdd-00", "pools/-"), bad);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  s = a.call(&v1::Array::Stub::ListVolumes, page(2, "pools/p2/volumes/v2", "pools/p1"), bad);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);  // another pool's: not this list's
  s = a.call(&v1::Array::Stub::ListVolumes, page(0, {}, "pools/-/volumes"), bad);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
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
  s = a.call(&v1::Array::Stub::ListVolumes, page(0, {}, "pools/p1/volumes/v1"),
             volumes);  // a volume, not a pool
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "parent: pools/p1/volumes/v1 is not a pool");
  v1::CreateVolumeRequest nested;
  nested.set_parent("pools/p1/volumes/v1");
  nested.set_volume_id("x");
  nested.mutable_volume()->set_size_bytes(1 << 20);
  v1::Volume made;
  s = a.call(&v1::Array::Stub::CreateVolume, nested, made);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "parent: pools/p1/volumes/v1 is not a pool");
  v1::Volume volume;
  get.set_name("pools/p1");
  s = a.call(&v1::Array::Stub::GetVolume, get, volume);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("api: off loopback the server refuses to start, saying why", "[mgmt]") {
  temp_dir dir;
  auto c = controller::config_store::open((dir.path() / "config").string());
  REQUIRE(c);
  controller::management manage(**c, nullptr);
  auto s = mgmt::management_server::start(manage, "0.0.0.0:0");
  REQUIRE_FALSE(s);
  CHECK(s.error().code == errc::permission_denied);
  CHECK(s.error().message.find("TLS") != std::string::npos);
  CHECK(s.error().message.find("bearer token") != std::string::npos);
}

TEST_CASE("api: with TLS and the right bearer token, calls are served, reflection's too",
          "[mgmt]") {
  tls_files tls;
  api a(&tls);
  v1::ListDisksResponse disks;
  const auto s = a.call(&v1::Array::Stub::ListDisks, page(0), disks);
  INFO(s.error_message());
  REQUIRE(s.ok());
  CHECK(disks.disks_size() == 5);
  std::string services;
  REQUIRE(a.list_services(services).ok());
  CHECK(services.find("strata.v1.Array") != std::string::npos);
  // The scheme's case does not matter (RFC 7235).
  a.authorization = "bearer " + good_token;
  CHECK(a.call(&v1::Array::Stub::ListDisks, page(0), disks).ok());
}

TEST_CASE(
    "api: with TLS on, a call without the token or with a wrong one is UNAUTHENTICATED, "
    "reflection's too",
    "[mgmt]") {
  tls_files tls;
  api a(&tls);
  v1::ListDisksResponse disks;
  std::string services;
  auto unauthenticated = [&](const std::string& says) {
    const auto s = a.call(&v1::Array::Stub::ListDisks, page(0), disks);
    const auto r = a.list_services(services);
    INFO("with \"" << a.authorization << "\": " << s.error_code() << " " << s.error_message()
                   << "; reflection " << r.error_code() << " " << r.error_message());
    return s.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
           s.error_message().find(says) != std::string::npos &&
           r.error_code() == grpc::StatusCode::UNAUTHENTICATED;
  };
  a.authorization.clear();
  CHECK(unauthenticated("no authorization"));
  a.authorization = "Bearer " + good_token.substr(0, good_token.size() - 1) + "X";
  CHECK(unauthenticated("not the one in the server's token file"));
  a.authorization = "Bearer " + good_token + "X";
  CHECK(unauthenticated("not the one in the server's token file"));
  a.authorization = good_token;
  CHECK(unauthenticated("not \"Bearer TOKEN\""));
  a.authorization = "Basic " + good_token;
  CHECK(unauthenticated("not \"Bearer TOKEN\""));
}

TEST_CASE("api: with TLS on, a plaintext client cannot connect", "[mgmt]") {
  tls_files tls;
  api a(&tls);
  a.stub = v1::Array::NewStub(grpc::CreateChannel(a.target(), grpc::InsecureChannelCredentials()));
  v1::ListDisksResponse disks;
  const auto s = a.call(&v1::Array::Stub::ListDisks, page(0),
                        disks);  // with the token: it is TLS that is missing
  INFO(s.error_message());
  CHECK(s.error_code() == grpc::StatusCode::UNAVAILABLE);
}

namespace {

using started = std::expected<std::unique_ptr<mgmt::management_server>, error>;

// An empty config store to start servers on, for the refusals. Declared
// before the servers it starts, so that it outlives them.
struct empty_store {
  temp_dir dir;
  std::unique_ptr<controller::config_store> config;
  std::unique_ptr<controller::management> manage;

  empty_store() {
    auto c = controller::config_store::open((dir.path() / "config").string());
    REQUIRE(c);
    config = std::move(*c);
    manage = std::make_unique<controller::management>(*config, nullptr);
  }
  started start(const mgmt::security_options& security,
                const std::string& address = "127.0.0.1:0") {
    return mgmt::management_server::start(*manage, address, security);
  }
};

bool refused_saying(const started& s, const std::string& says) {
  if (s) {
    UNSCOPED_INFO("it started");
    return false;
  }
  UNSCOPED_INFO("refused: " << s.error().message);
  return s.error().message.find(says) != std::string::npos;
}

}  // namespace

TEST_CASE("api: a missing, unreadable or wrong TLS file refuses the start, naming the file",
          "[mgmt]") {
  tls_files tls;
  empty_store store;
  auto o = tls.options();
  o.tls_key = tls.dir.path() / "no-such-key.pem";
  auto s = store.start(o);
  CHECK(refused_saying(s, "cannot read the TLS key " + o.tls_key.string()));
  CHECK(refused_saying(s, "No such file"));

  o = tls.options();
  o.tls_cert = tls.dir.path();
  CHECK(refused_saying(store.start(o), "cannot read the TLS certificate " + o.tls_cert.string()));
  o = tls.options();
  o.token_file = tls.dir.path() / "no-such-token";
  CHECK(refused_saying(store.start(o), "cannot read the token file " + o.token_file.string()));

  o = tls.options();
  o.tls_cert = tls.key;  // a key where the certificate should be
  CHECK(refused_saying(store.start(o),
                       "the TLS certificate " + tls.key.string() + " holds no PEM certificate"));
  o = tls.options();
  o.tls_key = tls.cert;
  CHECK(refused_saying(store.start(o),
                       "the TLS key " + tls.cert.string() + " holds no PEM private key"));

  // Another pair's key: gRPC would only fail to handshake later.
  tls_files other;
  o = tls.options();
  o.tls_key = other.key;
  CHECK(refused_saying(store.start(o), "the TLS key " + other.key.string() +
                                           " is not the key of the certificate in " +
                                           tls.cert.string()));
}

TEST_CASE("api: a bearer token shorter than 32 characters refuses the start", "[mgmt]") {
  tls_files tls;
  empty_store store;
  write_file(tls.token, good_token.substr(0, 31) + "\n");
  auto s = store.start(tls.options());
  CHECK(refused_saying(
      s, "the token in " + tls.token.string() + " is 31 characters long; it needs at least 32"));
  CHECK_FALSE(refused_saying(s, good_token.substr(0, 31)));  // never the token itself

  write_file(tls.token, "");
  CHECK(refused_saying(store.start(tls.options()), "is empty"));
  write_file(tls.token, good_token + "\n" + good_token + "\n");
  CHECK(refused_saying(store.start(tls.options()), "more than one line"));
  write_file(tls.token, "test token with spaces 0123456789abcdef\n");
  CHECK(refused_saying(store.start(tls.options()), "has a space"));
  write_file(tls.token, good_token.substr(0, 32));  // exactly 32, no newline
  CHECK(store.start(tls.options()));
}

TEST_CASE("api: the TLS certificate, key and token file go together", "[mgmt]") {
  tls_files tls;
  empty_store store;
  CHECK(refused_saying(store.start({tls.cert, {}, {}}),
                       "the TLS key and the token file are missing"));
  CHECK(refused_saying(store.start({{}, tls.key, tls.token}), "the TLS certificate is missing"));
  CHECK(refused_saying(store.start({tls.cert, tls.key, {}}, "0.0.0.0:0"),
                       "the token file is missing"));
}

TEST_CASE("api: off loopback the server starts once it has TLS and a token", "[mgmt]") {
  tls_files tls;
  empty_store store;
  auto s = store.start(tls.options(), "0.0.0.0:0");
  if (!s) {
    // A sandbox may forbid binding the wildcard address: that is not the
    // policy refusing (permission_denied, "off loopback").
    CHECK(s.error().code == errc::io_error);
    CHECK(s.error().message.find("cannot listen") != std::string::npos);
    WARN("0.0.0.0 cannot be bound here: " << s.error().message);
    return;
  }
  CHECK((*s)->port() > 0);
  grpc::SslCredentialsOptions trust;
  trust.pem_root_certs = read_file(tls.cert);
  auto stub = v1::Array::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string((*s)->port()),
                                                     grpc::SslCredentials(trust)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  context.AddMetadata("authorization", "Bearer " + good_token);
  v1::ListDisksResponse disks;
  const auto status = stub->ListDisks(&context, page(0), &disks);
  INFO(status.error_message());
  CHECK(status.ok());
  (*s)->stop();
}

TEST_CASE(
    "api: creating a volume or a mapping checks every field first, and a failed request changes "
    "nothing",
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
  CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
         s.error_message().starts_with("parent:")));
  s = create("pools/p1", "V3!", 1u << 30);
  CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
         s.error_message().starts_with("volume_id:")));
  s = create("pools/p1", "v3", 1000);
  CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
         s.error_message().starts_with("volume.size_bytes:")));
  // The block size: 512 (512e, the default when 0) or 4096 (4Kn), nothing else.
  for (const std::uint32_t bad : {1u, 1024u, 2048u, 8192u}) {
    cv.mutable_volume()->set_block_size_bytes(bad);
    s = create("pools/p1", "v3", 1u << 30);
    CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
           s.error_message().starts_with("volume.block_size_bytes:")));
  }
  for (const std::uint32_t good : {0u, 512u, 4096u}) {
    cv.mutable_volume()->set_block_size_bytes(good);
    s = create("pools/p1", "v3", 1u << 30);  // valid, but no array behind this server
    CHECK(s.error_code() == grpc::StatusCode::UNAVAILABLE);
  }
  cv.mutable_volume()->set_block_size_bytes(0);
  s = create("pools/p9", "v3", 1u << 30);
  CHECK(
      (s.error_code() == grpc::StatusCode::NOT_FOUND && s.error_message().starts_with("parent:")));
  s = create("pools/p1", "v1", 1u << 30);
  CHECK((s.error_code() == grpc::StatusCode::ALREADY_EXISTS &&
         s.error_message().starts_with("volume_id:")));
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
  CHECK((s.error_code() == grpc::StatusCode::NOT_FOUND &&
         s.error_message().starts_with("mapping.volume:")));
  s = map("m2", "pools/p1/volumes/v1", "hosts/nobody", 1);
  CHECK((s.error_code() == grpc::StatusCode::NOT_FOUND &&
         s.error_message().starts_with("mapping.host:")));
  s = map("m2", "pools/p1/volumes/v1", "hosts/all", 20000);
  CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
         s.error_message().starts_with("mapping.lun:")));
  s = map("", "pools/p1/volumes/v1", "hosts/all", 1);
  CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
         s.error_message().starts_with("mapping_id:")));
  CHECK(a.config->list("mappings/").empty());
}

namespace {

// The status's rich details: the ErrorInfo naming the field.
v1::ErrorInfo info_of(const grpc::Status& s) {
  v1::Status rich;
  v1::ErrorInfo info;
  if (rich.ParseFromString(s.error_details()) && rich.details_size() == 1)
    (void)rich.details(0).UnpackTo(&info);
  return info;
}

bool refused(const grpc::Status& s, grpc::StatusCode code, const std::string& field) {
  const bool ok = s.error_code() == code && s.error_message().starts_with(field + ":") &&
                  info_of(s).field() == field;
  if (!ok)
    UNSCOPED_INFO("got " << s.error_code() << " \"" << s.error_message() << "\", field \""
                         << info_of(s).field() << "\"");
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
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT,
                "update_mask"));
  in.mutable_update_mask()->add_paths("serial");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT,
                "update_mask"));
  in.mutable_update_mask()->set_paths(0, "size_bytes");
  in.mutable_volume()->set_size_bytes(1u << 20);
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT,
                "volume.size_bytes"));
  in.mutable_volume()->set_size_bytes((1u << 30) + 1);
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT,
                "volume.size_bytes"));
  in.mutable_update_mask()->set_paths(0, "affinity");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT,
                "volume.affinity"));
  in.mutable_update_mask()->set_paths(0, "write_cache");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::INVALID_ARGUMENT,
                "volume.write_cache"));
  in.mutable_volume()->set_write_cache(
      v1::WRITE_THROUGH);  // p1 has no write log: it writes through already
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out),
                grpc::StatusCode::FAILED_PRECONDITION, "volume.write_cache"));
  v1::CreateVolumeRequest create;
  create.set_parent("pools/p1");
  create.set_volume_id("v3");
  create.mutable_volume()->set_size_bytes(1u << 30);
  create.mutable_volume()->set_write_cache(v1::WRITE_THROUGH);
  CHECK(refused(a.call(&v1::Array::Stub::CreateVolume, create, out),
                grpc::StatusCode::FAILED_PRECONDITION, "volume.write_cache"));
  in.mutable_volume()->set_name("pools/p1/volumes/v9");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateVolume, in, out), grpc::StatusCode::NOT_FOUND,
                "volume.name"));
}

TEST_CASE(
    "api: hosts are checked field by field, and one host's IQN or any_initiator is not another's",
    "[mgmt]") {
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
  CHECK(refused(create("H!", [](v1::Host& h) { h.add_iqns("iqn.2026-11.test:x"); }),
                grpc::StatusCode::INVALID_ARGUMENT, "host_id"));
  CHECK(refused(create("db", [](v1::Host& h) { h.add_iqns("iqn.2026-11.test:x"); }),
                grpc::StatusCode::ALREADY_EXISTS, "host_id"));
  CHECK(refused(create("x", [](v1::Host&) {}), grpc::StatusCode::INVALID_ARGUMENT, "host.iqns"));
  CHECK(refused(create("x", [](v1::Host& h) { h.add_iqns("db-server"); }),
                grpc::StatusCode::INVALID_ARGUMENT, "host.iqns"));
  CHECK(refused(create("x",
                       [](v1::Host& h) {
                         h.add_iqns("iqn.2026-11.test:x"), h.add_iqns("IQN.2026-11.test:X");
                       }),
                grpc::StatusCode::INVALID_ARGUMENT, "host.iqns"));
  CHECK(refused(create("x", [](v1::Host& h) { h.add_iqns("IQN.2026-11.TEST:DB"); }),
                grpc::StatusCode::ALREADY_EXISTS, "host.iqns"));
  CHECK(refused(create("x", [](v1::Host& h) { h.set_any_initiator(true); }),
                grpc::StatusCode::ALREADY_EXISTS, "host.any_initiator"));
  auto with_chap = [](std::string secret, std::string mutual_user, std::string mutual_secret) {
    return [=](v1::Host& h) {
      h.add_iqns("iqn.2026-11.test:x");
      h.set_chap_user("u");
      h.set_chap_secret(secret);
      h.set_mutual_chap_user(mutual_user);
      h.set_mutual_chap_secret(mutual_secret);
    };
  };
  CHECK(refused(create("x", with_chap("", "", "")), grpc::StatusCode::INVALID_ARGUMENT,
                "host.chap_secret"));
  CHECK(refused(create("x", with_chap("short", "", "")), grpc::StatusCode::INVALID_ARGUMENT,
                "host.chap_secret"));
  CHECK(refused(create("x", with_chap("long-enough-secret", "t", "")),
                grpc::StatusCode::INVALID_ARGUMENT, "host.mutual_chap_secret"));
  CHECK(refused(create("x", with_chap("long-enough-secret", "t", "long-enough-secret")),
                grpc::StatusCode::INVALID_ARGUMENT, "host.mutual_chap_secret"));
  CHECK(create("x", with_chap("long-enough-secret", "t", "another-long-secret")).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  CHECK_FALSE(a.config->get("hosts/x"));

  v1::UpdateHostRequest update;
  update.mutable_host()->set_name("hosts/nobody");
  update.mutable_update_mask()->add_paths("iqns");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateHost, update, out), grpc::StatusCode::NOT_FOUND,
                "host.name"));
  update.mutable_host()->set_name("hosts/db");
  update.mutable_update_mask()->set_paths(0, "name");
  CHECK(refused(a.call(&v1::Array::Stub::UpdateHost, update, out),
                grpc::StatusCode::INVALID_ARGUMENT, "update_mask"));
  update.mutable_update_mask()->set_paths(0, "any_initiator");
  update.mutable_host()->set_any_initiator(true);
  CHECK(refused(a.call(&v1::Array::Stub::UpdateHost, update, out), grpc::StatusCode::ALREADY_EXISTS,
                "host.any_initiator"));

  google::protobuf::Empty none;
  v1::DeleteRequest del;
  del.set_name("hosts/db");
  CHECK(refused(a.call(&v1::Array::Stub::DeleteHost, del, none),
                grpc::StatusCode::FAILED_PRECONDITION, "name"));
  del.set_name("hosts/nobody");
  CHECK(refused(a.call(&v1::Array::Stub::DeleteHost, del, none), grpc::StatusCode::NOT_FOUND,
                "name"));
  del.set_name("mappings/m9");
  CHECK(refused(a.call(&v1::Array::Stub::DeleteMapping, del, none), grpc::StatusCode::NOT_FOUND,
                "name"));

  v1::Operation op;
  del.set_name("pools/p1/volumes/v1");
  CHECK(refused(a.call(&v1::Array::Stub::DeleteVolume, del, op),
                grpc::StatusCode::FAILED_PRECONDITION, "name"));
  del.set_name("pools/p1/volumes/v9");
  CHECK(refused(a.call(&v1::Array::Stub::DeleteVolume, del, op), grpc::StatusCode::NOT_FOUND,
                "name"));
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
  CHECK(refused(a.call(&v1::Array::Stub::ListEvents, page(2, "hosts/x"), out),
                grpc::StatusCode::INVALID_ARGUMENT, "page_token"));
}

TEST_CASE("api: disk and group commands check the names and the mask before the array", "[mgmt]") {
  api a;
  v1::UpdateDiskRequest update;
  update.mutable_disk()->set_name("disks/hdd-03");
  update.mutable_disk()->set_spare(true);
  v1::Disk disk;
  auto s = a.call(&v1::Array::Stub::UpdateDisk, update, disk);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "update_mask: empty; name the fields to change (spare)");
  update.mutable_update_mask()->add_paths("size_bytes");
  s = a.call(&v1::Array::Stub::UpdateDisk, update, disk);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "update_mask: \"size_bytes\" cannot be changed; these can: spare");
  update.mutable_update_mask()->set_paths(0, "spare");
  update.mutable_disk()->set_name("disks/hdd-77");
  s = a.call(&v1::Array::Stub::UpdateDisk, update, disk);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "disk.name: disks/hdd-77 does not exist");
  update.mutable_disk()->set_name("disks/hdd-03");
  s = a.call(&v1::Array::Stub::UpdateDisk, update, disk);
  CHECK(s.error_code() == grpc::StatusCode::UNAVAILABLE);  // no array behind this server

  v1::GetRequest get;
  get.set_name("disks/hdd-77");
  s = a.call(&v1::Array::Stub::FailDisk, get, disk);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "name: disks/hdd-77 does not exist");
  s = a.call(&v1::Array::Stub::EraseDisk, get, disk);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "name: disks/hdd-77 does not exist");

  v1::ReplaceDiskRequest replace;
  v1::Operation op;
  replace.set_name("disks/hdd-03");
  replace.set_replacement("disks/ssd-09");
  s = a.call(&v1::Array::Stub::ReplaceDisk, replace, op);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "replacement: disks/ssd-09 does not exist");
  replace.set_name("hdd-03");  // not a resource name
  s = a.call(&v1::Array::Stub::ReplaceDisk, replace, op);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "name: hdd-03 does not exist");

  get.set_name("groups/g9");
  s = a.call(&v1::Array::Stub::ScrubDiskGroup, get, op);
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(s.error_message() == "name: groups/g9 does not exist");

  v1::CreateDiskRequest create;
  create.set_disk_id("HDD 1");
  s = a.call(&v1::Array::Stub::CreateDisk, create, disk);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().starts_with("disk_id:"));
  create.set_disk_id("hdd-03");
  create.mutable_disk()->set_kind(v1::HDD);
  create.mutable_disk()->set_size_bytes(1ull << 30);
  s = a.call(&v1::Array::Stub::CreateDisk, create, disk);
  CHECK(s.error_code() == grpc::StatusCode::ALREADY_EXISTS);
  create.set_disk_id("hdd-10");
  create.mutable_disk()->set_size_bytes((1ull << 30) + 1);
  s = a.call(&v1::Array::Stub::CreateDisk, create, disk);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().starts_with("disk.size_bytes:"));
  create.mutable_disk()->set_size_bytes(1ull << 30);
  create.mutable_disk()->set_kind(v1::DISK_KIND_UNSPECIFIED);
  s = a.call(&v1::Array::Stub::CreateDisk, create, disk);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message().starts_with("disk.kind:"));
}
