#include "mgmt/service.h"

#include <boost/asio/post.hpp>
#include <future>
#include <string_view>

#include "tiering/records.h"

namespace strata::mgmt {

namespace {

constexpr int default_page_size = 100;
constexpr int max_page_size = 1000;

grpc::Status invalid(const std::string& field, const std::string& why) {
  return {grpc::StatusCode::INVALID_ARGUMENT, field + ": " + why};
}

// One page of the records directly under `collection` ("disks/"): not
// those further down ("pools/p1/volumes/…" under "pools/").
template <class Message, class Response>
grpc::Status list(const controller::config_store& config, const std::string& collection, const v1::ListRequest& in,
                  Response* out, Message* (Response::*add)()) {
  if (in.page_size() < 0 || in.page_size() > max_page_size) {
    return invalid("page_size", std::to_string(in.page_size()) + " is outside 0 to " + std::to_string(max_page_size));
  }
  if (!in.page_token().empty() && !std::string_view(in.page_token()).starts_with(collection)) {
    return invalid("page_token", "\"" + in.page_token() + "\" is not a token of this list");
  }
  const std::size_t page = in.page_size() == 0 ? default_page_size : static_cast<std::size_t>(in.page_size());
  std::vector<std::pair<std::string, std::string>> picked;
  bool more = false;  // a record follows the page: it gets a next_page_token
  std::string after = in.page_token();
  while (!more) {
    const auto records = config.list(collection, after, page + 1);
    for (const auto& [key, bytes] : records) {
      after = key;
      if (std::string_view(key).substr(collection.size()).find('/') != std::string_view::npos) continue;  // nested
      if (picked.size() == page) {
        more = true;
        break;
      }
      picked.emplace_back(key, bytes);
    }
    if (records.size() < page + 1) break;  // the collection ended
  }
  for (const auto& [key, bytes] : picked) {
    if (!(out->*add)()->ParseFromString(bytes)) return {grpc::StatusCode::DATA_LOSS, "the record " + key + " is corrupt"};
  }
  if (more) out->set_next_page_token(picked.back().first);
  return grpc::Status::OK;
}

template <class Message>
grpc::Status get(const controller::config_store& config, const std::string& collection, const v1::GetRequest& in,
                 Message* out) {
  if (!std::string_view(in.name()).starts_with(collection) || in.name().size() == collection.size()) {
    return invalid("name", "\"" + in.name() + "\" is not a " + collection + "NAME resource name");
  }
  const auto bytes = config.get(in.name());
  if (!bytes) return {grpc::StatusCode::NOT_FOUND, "name: " + in.name() + " does not exist"};
  if (!out->ParseFromString(*bytes)) return {grpc::StatusCode::DATA_LOSS, "the record " + in.name() + " is corrupt"};
  return grpc::Status::OK;
}

// A short name the API accepts for a new resource: [a-z][a-z0-9-]*, at most 63.
bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 63 || id[0] < 'a' || id[0] > 'z') return false;
  return std::ranges::all_of(id, [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

grpc::Status status_of(const error& e) {
  switch (static_cast<errc>(e.code.value())) {
    case errc::no_space:
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, e.message};
    case errc::invalid_argument:
      return {grpc::StatusCode::INVALID_ARGUMENT, e.message};
    case errc::not_found:
      return {grpc::StatusCode::NOT_FOUND, e.message};
    default:
      return {grpc::StatusCode::INTERNAL, e.message};
  }
}

// Runs `change` on the array's loop and waits for what it reports, at most
// 30 s (the loop may be shutting down).
std::expected<void, error> on_loop(controller::array& array,
                                   std::function<void(std::function<void(std::expected<void, error>)>)> change) {
  auto result = std::make_shared<std::promise<std::expected<void, error>>>();
  auto outcome = result->get_future();
  boost::asio::post(array.executor(), [result, change = std::move(change)] {
    change([result](std::expected<void, error> r) { result->set_value(std::move(r)); });
  });
  if (outcome.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    return std::unexpected(make_error(errc::timed_out, "the array did not answer within 30 s"));
  }
  return outcome.get();
}

}  // namespace

grpc::Status array_service::CreateVolume(grpc::ServerContext*, const v1::CreateVolumeRequest* in, v1::Volume* out) {
  if (in->parent().empty()) return invalid("parent", "the pool to create the volume in, e.g. pools/p1");
  if (!valid_id(in->volume_id())) return invalid("volume_id", "\"" + in->volume_id() + "\" is not [a-z][a-z0-9-]*, at most 63");
  const std::uint64_t bytes = in->volume().size_bytes();
  if (bytes == 0 || bytes % 4096 != 0) return invalid("volume.size_bytes", std::to_string(bytes) + " is not a positive multiple of 4096");
  if (in->volume().block_size_bytes() != 0 && in->volume().block_size_bytes() != 4096) {
    return invalid("volume.block_size_bytes", "the pool's drives have 4096-byte blocks: 4096 (or 0)");
  }
  std::lock_guard hold(changes_);
  if (!config_.get(in->parent()) || !in->parent().starts_with("pools/")) {
    return {grpc::StatusCode::NOT_FOUND, "parent: " + in->parent() + " does not exist"};
  }
  const std::string name = in->parent() + "/volumes/" + in->volume_id();
  if (config_.get(name)) return {grpc::StatusCode::ALREADY_EXISTS, "volume_id: " + name + " exists"};
  if (array_ == nullptr) return {grpc::StatusCode::UNAVAILABLE, "no array to create the volume in"};
  const v1::Affinity affinity = in->volume().affinity() == v1::AFFINITY_UNSPECIFIED ? v1::AUTO : in->volume().affinity();
  const tiering::affinity placement = affinity == v1::PERFORMANCE ? tiering::affinity::performance
                                      : affinity == v1::CAPACITY  ? tiering::affinity::archive
                                                                  : tiering::affinity::automatic;
  auto created = on_loop(*array_, [this, id = in->volume_id(), bytes, placement](auto done) {
    array_->create_volume(id, bytes, placement, std::move(done));
  });
  if (!created) return status_of(created.error());
  out->set_name(name);
  out->set_size_bytes(bytes);
  out->set_block_size_bytes(4096);
  out->set_affinity(affinity);
  out->set_serial(controller::new_volume_serial(in->volume_id()));
  controller::config_batch b;
  b.put(name, out->SerializeAsString());
  if (auto done = config_.commit(b); !done) return status_of(done.error());
  return grpc::Status::OK;
}

grpc::Status array_service::CreateMapping(grpc::ServerContext*, const v1::CreateMappingRequest* in, v1::Mapping* out) {
  if (!valid_id(in->mapping_id())) return invalid("mapping_id", "\"" + in->mapping_id() + "\" is not [a-z][a-z0-9-]*, at most 63");
  const v1::Mapping& m = in->mapping();
  if (m.lun() >= 16384) return invalid("mapping.lun", std::to_string(m.lun()) + " is not below 16384");
  std::lock_guard hold(changes_);
  const std::string name = "mappings/" + in->mapping_id();
  if (config_.get(name)) return {grpc::StatusCode::ALREADY_EXISTS, "mapping_id: " + name + " exists"};
  const auto volume_bytes = m.volume().find("/volumes/") == std::string::npos ? std::nullopt : config_.get(m.volume());
  v1::Volume volume;
  if (!volume_bytes || !volume.ParseFromString(*volume_bytes)) {
    return {grpc::StatusCode::NOT_FOUND, "mapping.volume: " + m.volume() + " does not exist"};
  }
  const auto host_bytes = config_.get(m.host());
  v1::Host host;
  if (!m.host().starts_with("hosts/") || !host_bytes || !host.ParseFromString(*host_bytes)) {
    return {grpc::StatusCode::NOT_FOUND, "mapping.host: " + m.host() + " does not exist"};
  }
  if (!host.any_initiator()) {
    return {grpc::StatusCode::FAILED_PRECONDITION, "mapping.host: only a host of every initiator can be served today"};
  }
  for (const auto& [key, bytes] : config_.list("mappings/")) {
    v1::Mapping other;
    if (!other.ParseFromString(bytes)) continue;
    if (other.host() == m.host() && other.lun() == m.lun()) {
      return {grpc::StatusCode::ALREADY_EXISTS, "mapping.lun: LUN " + std::to_string(m.lun()) + " of " + m.host() + " is " + key};
    }
    if (other.volume() == m.volume()) {
      return {grpc::StatusCode::FAILED_PRECONDITION, "mapping.volume: " + m.volume() + " is already served (" + key + ")"};
    }
  }
  if (array_ == nullptr) return {grpc::StatusCode::UNAVAILABLE, "no array to serve the volume"};
  *out = m;
  out->set_name(name);
  controller::config_batch b;
  b.put(name, out->SerializeAsString());
  if (auto done = config_.commit(b); !done) return status_of(done.error());
  // The record is read here, on the gRPC thread: the loop gets what it needs.
  auto mapped = on_loop(*array_, [this, name = volume.name(), serial = volume.serial(), lun = m.lun()](auto done) {
    done(array_->map_volume(name, serial, lun));
  });
  if (!mapped) {
    controller::config_batch undo;  // a failed request changes nothing
    undo.erase(name);
    (void)config_.commit(undo);
    return status_of(mapped.error());
  }
  return grpc::Status::OK;
}

grpc::Status array_service::GetVersion(grpc::ServerContext*, const v1::GetVersionRequest*, v1::GetVersionResponse* out) {
  out->set_version("0.1.0");
  out->set_controller("A");
  return grpc::Status::OK;
}

grpc::Status array_service::ListDisks(grpc::ServerContext*, const v1::ListRequest* in, v1::ListDisksResponse* out) {
  return list(config_, "disks/", *in, out, &v1::ListDisksResponse::add_disks);
}
grpc::Status array_service::GetDisk(grpc::ServerContext*, const v1::GetRequest* in, v1::Disk* out) {
  return get(config_, "disks/", *in, out);
}
grpc::Status array_service::ListDiskGroups(grpc::ServerContext*, const v1::ListRequest* in, v1::ListDiskGroupsResponse* out) {
  return list(config_, "groups/", *in, out, &v1::ListDiskGroupsResponse::add_groups);
}
grpc::Status array_service::GetDiskGroup(grpc::ServerContext*, const v1::GetRequest* in, v1::DiskGroup* out) {
  return get(config_, "groups/", *in, out);
}
grpc::Status array_service::ListPools(grpc::ServerContext*, const v1::ListRequest* in, v1::ListPoolsResponse* out) {
  return list(config_, "pools/", *in, out, &v1::ListPoolsResponse::add_pools);
}
grpc::Status array_service::GetPool(grpc::ServerContext*, const v1::GetRequest* in, v1::Pool* out) {
  return get(config_, "pools/", *in, out);
}
grpc::Status array_service::ListVolumes(grpc::ServerContext*, const v1::ListRequest* in, v1::ListVolumesResponse* out) {
  if (in->parent().empty() || !config_.get(in->parent()) || !in->parent().starts_with("pools/")) {
    return in->parent().empty() ? invalid("parent", "the pool whose volumes to list, e.g. pools/p1")
                                : grpc::Status(grpc::StatusCode::NOT_FOUND, "parent: " + in->parent() + " does not exist");
  }
  return list(config_, in->parent() + "/volumes/", *in, out, &v1::ListVolumesResponse::add_volumes);
}
grpc::Status array_service::GetVolume(grpc::ServerContext*, const v1::GetRequest* in, v1::Volume* out) {
  if (in->name().find("/volumes/") == std::string::npos) return invalid("name", "\"" + in->name() + "\" is not a pools/POOL/volumes/NAME resource name");
  return get(config_, "pools/", *in, out);
}
grpc::Status array_service::ListHosts(grpc::ServerContext*, const v1::ListRequest* in, v1::ListHostsResponse* out) {
  return list(config_, "hosts/", *in, out, &v1::ListHostsResponse::add_hosts);
}
grpc::Status array_service::GetHost(grpc::ServerContext*, const v1::GetRequest* in, v1::Host* out) {
  return get(config_, "hosts/", *in, out);
}
grpc::Status array_service::ListMappings(grpc::ServerContext*, const v1::ListRequest* in, v1::ListMappingsResponse* out) {
  return list(config_, "mappings/", *in, out, &v1::ListMappingsResponse::add_mappings);
}
grpc::Status array_service::GetMapping(grpc::ServerContext*, const v1::GetRequest* in, v1::Mapping* out) {
  return get(config_, "mappings/", *in, out);
}

}  // namespace strata::mgmt
