#include "mgmt/service.h"

#include <string_view>

#include "strata/v1/operations.pb.h"

namespace strata::mgmt {

namespace {

constexpr int default_page_size = 100;
constexpr int max_page_size = 1000;

// A failed call's status: "field: reason" in words, and the same as an
// ErrorInfo in a strata.v1.Status (google.rpc.Status's layout) in the
// details, for programs.
grpc::Status fail(grpc::StatusCode code, const std::string& field, const std::string& why) {
  v1::Status rich;
  rich.set_code(code);
  rich.set_message(field.empty() ? why : field + ": " + why);
  v1::ErrorInfo info;
  info.set_field(field);
  info.set_reason(why);
  rich.add_details()->PackFrom(info);
  return {code, rich.message(), rich.SerializeAsString()};
}

grpc::Status invalid(const std::string& field, const std::string& why) {
  return fail(grpc::StatusCode::INVALID_ARGUMENT, field, why);
}

// What the controller's refusal is as a status.
grpc::Status to_status(const controller::refusal& r) {
  using kind = controller::refusal::kind;
  switch (r.why) {
    case kind::invalid:
      return fail(grpc::StatusCode::INVALID_ARGUMENT, r.field, r.message);
    case kind::not_found:
      return fail(grpc::StatusCode::NOT_FOUND, r.field, r.message);
    case kind::exists:
      return fail(grpc::StatusCode::ALREADY_EXISTS, r.field, r.message);
    case kind::precondition:
      return fail(grpc::StatusCode::FAILED_PRECONDITION, r.field, r.message);
    case kind::no_space:
      return fail(grpc::StatusCode::RESOURCE_EXHAUSTED, r.field, r.message);
    case kind::unavailable:
      return fail(grpc::StatusCode::UNAVAILABLE, r.field, r.message);
    case kind::unimplemented:
      return fail(grpc::StatusCode::UNIMPLEMENTED, r.field, r.message);
    case kind::timed_out:
      return fail(grpc::StatusCode::DEADLINE_EXCEEDED, r.field, r.message);
    case kind::corrupt:
      return fail(grpc::StatusCode::DATA_LOSS, r.field, r.message);
    case kind::internal:
      break;
  }
  return fail(grpc::StatusCode::INTERNAL, r.field, r.message);
}

// A controller call's answer into `out`, or its refusal as a status.
template <class T>
grpc::Status answer(controller::outcome<T>&& got, T* out) {
  if (!got) return to_status(got.error());
  *out = std::move(*got);
  return grpc::Status::OK;
}

grpc::Status answer(const controller::outcome<void>& got) {
  return got ? grpc::Status::OK : to_status(got.error());
}

// A change controller b hands to controller a (controller/remote_management.h):
// a's answer, or its refusal, as if made here.
template <class Request, class Response>
grpc::Status forwarded(controller::management& m, std::string_view method, const Request& in,
                       Response* out) {
  auto got = m.forward(method, in);
  if (!got) return to_status(got.error());
  if (!out->ParseFromString(*got))
    return fail(grpc::StatusCode::INTERNAL, "",
                "the partner's answer to " + std::string(method) + " is corrupt");
  return grpc::Status::OK;
}

std::vector<std::string> fields_of(const google::protobuf::FieldMask& mask) {
  return {mask.paths().begin(), mask.paths().end()};
}

// Whether `rest`, a key past its collection ("hdd-00" of "disks/hdd-00"),
// is a record of the collection itself: not one further down
// ("p1/volumes/v1" under "pools/").
bool direct(std::string_view rest) {
  return rest.find('/') == std::string_view::npos;
}

// Whether `rest`, a key past "pools/", is a volume's: POOL/volumes/NAME.
bool volume_key(std::string_view rest) {
  constexpr std::string_view middle = "/volumes/";
  const auto slash = rest.find('/');
  if (slash == 0 || slash == std::string_view::npos) return false;
  rest.remove_prefix(slash);
  return rest.starts_with(middle) && rest.size() > middle.size() &&
         rest.find('/', middle.size()) == std::string_view::npos;
}

// One page of the records under `collection` ("disks/") that `keep`
// takes (by default those directly under it: not those further down,
// "pools/p1/volumes/…" under "pools/"), in key order, which is their
// names' order. A page token is the last name of the page before, so it
// must be one `keep` takes.
template <class Message, class Response>
grpc::Status list(const controller::config_store& config, const std::string& collection,
                  const v1::ListRequest& in, Response* out, Message* (Response::*add)(),
                  bool (*keep)(std::string_view) = direct) {
  if (in.page_size() < 0 || in.page_size() > max_page_size) {
    return invalid("page_size", std::to_string(in.page_size()) + " is outside 0 to " +
                                    std::to_string(max_page_size));
  }
  if (const std::string_view token = in.page_token();
      !token.empty() &&
      (!token.starts_with(collection) || !keep(token.substr(collection.size())))) {
    return invalid("page_token", "\"" + in.page_token() + "\" is not a token of this list");
  }
  const std::size_t page =
      in.page_size() == 0 ? default_page_size : static_cast<std::size_t>(in.page_size());
  std::vector<std::pair<std::string, std::string>> picked;
  bool more = false;  // a record follows the page: it gets a next_page_token
  std::string after = in.page_token();
  while (!more) {
    const auto records = config.list(collection, after, page + 1);
    for (const auto& [key, bytes] : records) {
      after = key;
      if (!keep(std::string_view(key).substr(collection.size()))) continue;  // nested
      if (picked.size() == page) {
        more = true;
        break;
      }
      picked.emplace_back(key, bytes);
    }
    if (records.size() < page + 1) break;  // the collection ended
  }
  for (const auto& [key, bytes] : picked) {
    if (!(out->*add)()->ParseFromString(bytes))
      return fail(grpc::StatusCode::DATA_LOSS, "", "the record " + key + " is corrupt");
  }
  if (more) out->set_next_page_token(picked.back().first);
  return grpc::Status::OK;
}

template <class Message>
grpc::Status get(const controller::config_store& config, const std::string& collection,
                 const v1::GetRequest& in, Message* out) {
  return answer(controller::get_record<Message>(config, collection, in.name()), out);
}

// What reads return of a host: its secrets are write-only.
void redact(v1::Host& h) {
  h.clear_chap_secret();
  h.clear_mutual_chap_secret();
}

}  // namespace

// ---- changes: the controller's (controller/management.h) ----

grpc::Status array_service::CreateVolume(grpc::ServerContext*, const v1::CreateVolumeRequest* in,
                                         v1::Volume* out) {
  if (manage_.forwards()) return forwarded(manage_, "CreateVolume", *in, out);
  return answer(manage_.create_volume(in->parent(), in->volume_id(), in->volume()), out);
}
grpc::Status array_service::UpdateVolume(grpc::ServerContext*, const v1::UpdateVolumeRequest* in,
                                         v1::Volume* out) {
  if (manage_.forwards()) return forwarded(manage_, "UpdateVolume", *in, out);
  return answer(manage_.update_volume(in->volume(), fields_of(in->update_mask())), out);
}
grpc::Status array_service::MoveVolume(grpc::ServerContext*, const v1::MoveVolumeRequest* in,
                                       v1::Operation* out) {
  if (manage_.forwards()) return forwarded(manage_, "MoveVolume", *in, out);
  return answer(manage_.move_volume(in->name(), in->affinity()), out);
}
grpc::Status array_service::DeleteVolume(grpc::ServerContext*, const v1::DeleteRequest* in,
                                         v1::Operation* out) {
  if (manage_.forwards()) return forwarded(manage_, "DeleteVolume", *in, out);
  return answer(manage_.delete_volume(in->name()), out);
}
grpc::Status array_service::CreatePool(grpc::ServerContext*, const v1::CreatePoolRequest* in,
                                       v1::Pool* out) {
  if (manage_.forwards()) return forwarded(manage_, "CreatePool", *in, out);
  return answer(manage_.create_pool(in->pool_id(), in->pool()), out);
}
grpc::Status array_service::UpdatePool(grpc::ServerContext*, const v1::UpdatePoolRequest* in,
                                       v1::Pool* out) {
  if (manage_.forwards()) return forwarded(manage_, "UpdatePool", *in, out);
  return answer(manage_.update_pool(in->pool(), fields_of(in->update_mask())), out);
}

grpc::Status array_service::MovePool(grpc::ServerContext*, const v1::MovePoolRequest* in,
                                     v1::Operation* out) {
  if (manage_.forwards()) return forwarded(manage_, "MovePool", *in, out);
  return answer(manage_.move_pool(in->name(), in->to()), out);
}

grpc::Status array_service::FailoverController(grpc::ServerContext*, const v1::GetRequest* in,
                                               v1::Operation* out) {
  if (manage_.forwards()) return forwarded(manage_, "FailoverController", *in, out);
  return answer(manage_.failover_controller(in->name()), out);
}

grpc::Status array_service::FailbackController(grpc::ServerContext*, const v1::GetRequest* in,
                                               v1::Operation* out) {
  if (manage_.forwards()) return forwarded(manage_, "FailbackController", *in, out);
  return answer(manage_.failback_controller(in->name()), out);
}
grpc::Status array_service::CreateHost(grpc::ServerContext*, const v1::CreateHostRequest* in,
                                       v1::Host* out) {
  auto status = manage_.forwards() ? forwarded(manage_, "CreateHost", *in, out)
                                   : answer(manage_.create_host(in->host_id(), in->host()), out);
  redact(*out);
  return status;
}
grpc::Status array_service::UpdateHost(grpc::ServerContext*, const v1::UpdateHostRequest* in,
                                       v1::Host* out) {
  auto status = manage_.forwards()
                    ? forwarded(manage_, "UpdateHost", *in, out)
                    : answer(manage_.update_host(in->host(), fields_of(in->update_mask())), out);
  redact(*out);
  return status;
}
grpc::Status array_service::DeleteHost(grpc::ServerContext*, const v1::DeleteRequest* in,
                                       google::protobuf::Empty* out) {
  if (manage_.forwards()) return forwarded(manage_, "DeleteHost", *in, out);
  return answer(manage_.delete_host(in->name()));
}
grpc::Status array_service::CreateMapping(grpc::ServerContext*, const v1::CreateMappingRequest* in,
                                          v1::Mapping* out) {
  if (manage_.forwards()) return forwarded(manage_, "CreateMapping", *in, out);
  return answer(manage_.create_mapping(in->mapping_id(), in->mapping()), out);
}
grpc::Status array_service::DeleteMapping(grpc::ServerContext*, const v1::DeleteRequest* in,
                                          google::protobuf::Empty* out) {
  if (manage_.forwards()) return forwarded(manage_, "DeleteMapping", *in, out);
  return answer(manage_.delete_mapping(in->name()));
}
grpc::Status array_service::CreateDisk(grpc::ServerContext*, const v1::CreateDiskRequest* in,
                                       v1::Disk* out) {
  if (manage_.forwards()) return forwarded(manage_, "CreateDisk", *in, out);
  return answer(manage_.create_disk(in->disk_id(), in->disk()), out);
}
grpc::Status array_service::UpdateDisk(grpc::ServerContext*, const v1::UpdateDiskRequest* in,
                                       v1::Disk* out) {
  if (manage_.forwards()) return forwarded(manage_, "UpdateDisk", *in, out);
  return answer(manage_.update_disk(in->disk(), fields_of(in->update_mask())), out);
}
grpc::Status array_service::FailDisk(grpc::ServerContext*, const v1::GetRequest* in,
                                     v1::Disk* out) {
  if (manage_.forwards()) return forwarded(manage_, "FailDisk", *in, out);
  return answer(manage_.fail_disk(in->name()), out);
}
grpc::Status array_service::ReplaceDisk(grpc::ServerContext*, const v1::ReplaceDiskRequest* in,
                                        v1::Operation* out) {
  if (manage_.forwards()) return forwarded(manage_, "ReplaceDisk", *in, out);
  return answer(manage_.replace_disk(in->name(), in->replacement()), out);
}
grpc::Status array_service::EraseDisk(grpc::ServerContext*, const v1::GetRequest* in,
                                      v1::Disk* out) {
  if (manage_.forwards()) return forwarded(manage_, "EraseDisk", *in, out);
  return answer(manage_.erase_disk(in->name()), out);
}
grpc::Status array_service::CreateDiskGroup(grpc::ServerContext*,
                                            const v1::CreateDiskGroupRequest* in,
                                            v1::DiskGroup* out) {
  if (manage_.forwards()) return forwarded(manage_, "CreateDiskGroup", *in, out);
  return answer(manage_.create_group(in->group_id(), in->group(), in->pool()), out);
}
grpc::Status array_service::ScrubDiskGroup(grpc::ServerContext*, const v1::GetRequest* in,
                                           v1::Operation* out) {
  if (manage_.forwards()) return forwarded(manage_, "ScrubDiskGroup", *in, out);
  return answer(manage_.scrub_group(in->name()), out);
}
grpc::Status array_service::CancelOperation(grpc::ServerContext*, const v1::GetRequest* in,
                                            v1::Operation* out) {
  return answer(manage_.cancel_operation(in->name()), out);
}

// ---- reads: the config store's records, paged here ----

grpc::Status array_service::ListOperations(grpc::ServerContext*, const v1::ListRequest* in,
                                           v1::ListOperationsResponse* out) {
  if (in->page_size() < 0 || in->page_size() > max_page_size) {
    return invalid("page_size", std::to_string(in->page_size()) + " is outside 0 to " +
                                    std::to_string(max_page_size));
  }
  if (!in->page_token().empty() && !in->page_token().starts_with("operations/")) {
    return invalid("page_token", "\"" + in->page_token() + "\" is not a token of this list");
  }
  // Both controllers' (each keeps its own): management merges them.
  *out = manage_.list_operations(*in);
  return grpc::Status::OK;
}

grpc::Status array_service::GetOperation(grpc::ServerContext*, const v1::GetRequest* in,
                                         v1::Operation* out) {
  return answer(manage_.operation(in->name()), out);
}

grpc::Status array_service::GetVolumeStatistics(grpc::ServerContext*, const v1::GetRequest* in,
                                                v1::VolumeStatistics* out) {
  return answer(manage_.volume_statistics(in->name()), out);
}

grpc::Status array_service::GetPoolStatistics(grpc::ServerContext*, const v1::GetRequest* in,
                                              v1::PoolStatistics* out) {
  return answer(manage_.pool_statistics(in->name()), out);
}

grpc::Status array_service::ListHeat(grpc::ServerContext*, const v1::ListHeatRequest* in,
                                     v1::ListHeatResponse* out) {
  if (in->volume().find("/volumes/") == std::string::npos)
    return invalid("volume",
                   "\"" + in->volume() + "\" is not a pools/POOL/volumes/NAME resource name");
  if (in->page_size() < 0 || in->page_size() > max_page_size) {
    return invalid("page_size", std::to_string(in->page_size()) + " is outside 0 to " +
                                    std::to_string(max_page_size));
  }
  std::uint64_t first = 0;
  if (!in->page_token().empty()) {
    const auto start = controller::heat_token_start(in->page_token(), in->hottest_first());
    if (!start)
      return invalid("page_token", "\"" + in->page_token() + "\" is not a token of this list");
    first = *start;
  }
  const std::size_t page =
      in->page_size() == 0 ? default_page_size : static_cast<std::size_t>(in->page_size());
  if (auto status = answer(manage_.heat(in->volume(), in->hottest_first(), first, page), out);
      !status.ok())
    return status;
  if (first + page < out->total_extents())
    out->set_next_page_token(controller::heat_token(in->hottest_first(), first + page));
  return grpc::Status::OK;
}

grpc::Status array_service::ListHeatHistory(grpc::ServerContext*,
                                            const v1::ListHeatHistoryRequest* in,
                                            v1::ListHeatHistoryResponse* out) {
  const auto query = controller::heat_history_query_of(*in);
  if (!query) return invalid(query.error().field, query.error().message);
  return answer(manage_.heat_history(*query), out);
}

grpc::Status array_service::ListEvents(grpc::ServerContext*, const v1::ListRequest* in,
                                       v1::ListEventsResponse* out) {
  if (in->page_size() < 0 || in->page_size() > max_page_size) {
    return invalid("page_size", std::to_string(in->page_size()) + " is outside 0 to " +
                                    std::to_string(max_page_size));
  }
  if (!in->page_token().empty() && !in->page_token().starts_with("events/")) {
    return invalid("page_token", "\"" + in->page_token() + "\" is not a token of this list");
  }
  manage_.drain_events();
  const std::size_t page =
      in->page_size() == 0 ? default_page_size : static_cast<std::size_t>(in->page_size());
  const auto records = config_.list_backward("events/", in->page_token(), page + 1);
  for (std::size_t i = 0; i < records.size() && i < page; ++i) {
    if (!out->add_events()->ParseFromString(records[i].second)) {
      return fail(grpc::StatusCode::DATA_LOSS, "",
                  "the record " + records[i].first + " is corrupt");
    }
  }
  if (records.size() > page) out->set_next_page_token(records[page - 1].first);
  return grpc::Status::OK;
}

grpc::Status array_service::GetVersion(grpc::ServerContext*, const v1::GetVersionRequest*,
                                       v1::GetVersionResponse* out) {
  out->set_version(version);
  out->set_controller(manage_.controller_name() == "b" ? "B" : "A");
  return grpc::Status::OK;
}

grpc::Status array_service::ListControllers(grpc::ServerContext*, const v1::ListRequest* in,
                                            v1::ListControllersResponse* out) {
  if (in->page_size() < 0 || in->page_size() > max_page_size) {
    return invalid("page_size", std::to_string(in->page_size()) + " is outside 0 to " +
                                    std::to_string(max_page_size));
  }
  if (!in->page_token().empty())
    return invalid("page_token", "\"" + in->page_token() + "\" is not a token of this list");
  for (v1::Controller& c : manage_.controllers())
    *out->add_controllers() = std::move(c);  // two at most: one page
  return grpc::Status::OK;
}

grpc::Status array_service::GetController(grpc::ServerContext*, const v1::GetRequest* in,
                                          v1::Controller* out) {
  if (!in->name().starts_with("controllers/"))
    return invalid("name", "\"" + in->name() + "\" is not a controllers/NAME resource name");
  std::string names;
  for (v1::Controller& c : manage_.controllers()) {
    if (c.name() == in->name()) {
      *out = std::move(c);
      return grpc::Status::OK;
    }
    names += (names.empty() ? "" : " and ") + c.name();
  }
  return fail(grpc::StatusCode::NOT_FOUND, "name",
              in->name() + " does not exist (this array has " + names + ")");
}

grpc::Status array_service::ListDisks(grpc::ServerContext*, const v1::ListRequest* in,
                                      v1::ListDisksResponse* out) {
  auto status = list(config_, "disks/", *in, out, &v1::ListDisksResponse::add_disks);
  if (status.ok()) manage_.describe(*out->mutable_disks());
  return status;
}
grpc::Status array_service::GetDisk(grpc::ServerContext*, const v1::GetRequest* in, v1::Disk* out) {
  auto status = get(config_, "disks/", *in, out);
  if (status.ok()) manage_.describe(*out);
  return status;
}
grpc::Status array_service::ListDiskGroups(grpc::ServerContext*, const v1::ListRequest* in,
                                           v1::ListDiskGroupsResponse* out) {
  auto status = list(config_, "groups/", *in, out, &v1::ListDiskGroupsResponse::add_groups);
  if (status.ok()) manage_.describe(*out->mutable_groups());
  return status;
}
grpc::Status array_service::GetDiskGroup(grpc::ServerContext*, const v1::GetRequest* in,
                                         v1::DiskGroup* out) {
  auto status = get(config_, "groups/", *in, out);
  if (status.ok()) manage_.describe(*out);
  return status;
}
grpc::Status array_service::ListPools(grpc::ServerContext*, const v1::ListRequest* in,
                                      v1::ListPoolsResponse* out) {
  return list(config_, "pools/", *in, out, &v1::ListPoolsResponse::add_pools);
}
grpc::Status array_service::GetPool(grpc::ServerContext*, const v1::GetRequest* in, v1::Pool* out) {
  return get(config_, "pools/", *in, out);
}
grpc::Status array_service::ListVolumes(grpc::ServerContext*, const v1::ListRequest* in,
                                        v1::ListVolumesResponse* out) {
  if (in->parent().empty())
    return invalid("parent", "the pool whose volumes to list, e.g. pools/p1 (pools/-: every pool)");
  // Every pool's volumes (AIP-159, "reading across collections"), each
  // named with its own pool, in name order and paged across the pools.
  // This controller's copy of the configuration holds every pool's
  // records, the partner's pools' too (it is replicated: config_sync.h),
  // so the list asks the partner nothing and no pool is ever unreachable:
  // it is whole with the partner down.
  if (in->parent() == "pools/-")
    return list(config_, "pools/", *in, out, &v1::ListVolumesResponse::add_volumes, volume_key);
  if (!controller::is_pool_name(in->parent()) || !config_.get(in->parent())) {
    return fail(grpc::StatusCode::NOT_FOUND, "parent", in->parent() + " is not a pool");
  }
  return list(config_, in->parent() + "/volumes/", *in, out, &v1::ListVolumesResponse::add_volumes);
}
grpc::Status array_service::GetVolume(grpc::ServerContext*, const v1::GetRequest* in,
                                      v1::Volume* out) {
  if (in->name().find("/volumes/") == std::string::npos)
    return invalid("name", "\"" + in->name() + "\" is not a pools/POOL/volumes/NAME resource name");
  return get(config_, "pools/", *in, out);
}
grpc::Status array_service::ListHosts(grpc::ServerContext*, const v1::ListRequest* in,
                                      v1::ListHostsResponse* out) {
  auto status = list(config_, "hosts/", *in, out, &v1::ListHostsResponse::add_hosts);
  for (v1::Host& h : *out->mutable_hosts()) redact(h);
  return status;
}
grpc::Status array_service::GetHost(grpc::ServerContext*, const v1::GetRequest* in, v1::Host* out) {
  auto status = get(config_, "hosts/", *in, out);
  redact(*out);
  return status;
}
grpc::Status array_service::ListMappings(grpc::ServerContext*, const v1::ListRequest* in,
                                         v1::ListMappingsResponse* out) {
  return list(config_, "mappings/", *in, out, &v1::ListMappingsResponse::add_mappings);
}
grpc::Status array_service::GetMapping(grpc::ServerContext*, const v1::GetRequest* in,
                                       v1::Mapping* out) {
  return get(config_, "mappings/", *in, out);
}

}  // namespace strata::mgmt
