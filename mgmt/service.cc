#include "mgmt/service.h"

#include <string_view>

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

}  // namespace

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
