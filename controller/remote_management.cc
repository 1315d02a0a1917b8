#include "controller/remote_management.h"

#include <google/protobuf/empty.pb.h>

#include <optional>

#include "controller/wire.h"
#include "strata/v1/array.pb.h"
#include "strata/v1/operations.pb.h"

namespace strata::controller {

namespace {

using wire::put_text;

link_bytes refusal_bytes(const refusal& r) {
  link_bytes out{0, static_cast<std::uint8_t>(r.why)};
  put_text(out, r.field);
  put_text(out, r.message);
  return out;
}

template <class T>
link_bytes respond(const outcome<T>& got) {
  if (!got) return refusal_bytes(got.error());
  link_bytes out{1};
  if constexpr (std::is_void_v<T>) {
    put_text(out, google::protobuf::Empty().SerializeAsString());
  } else {
    put_text(out, got->SerializeAsString());
  }
  return out;
}

std::vector<std::string> fields_of(const google::protobuf::FieldMask& mask) {
  return {mask.paths().begin(), mask.paths().end()};
}

refusal bad_call(const std::string& why) {
  return {refusal::kind::invalid, "", "a management call from the partner: " + why};
}

}  // namespace

link_bytes encode_call(std::string_view method, const google::protobuf::Message& request) {
  link_bytes out;
  put_text(out, method);
  put_text(out, request.SerializeAsString());
  return out;
}

outcome<std::string> decode_answer(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < 2) return std::unexpected(bad_call("an empty answer"));
  wire::reader r(bytes.subspan(bytes[0] == 1 ? 1 : 2));
  if (bytes[0] == 1) {
    auto body = r.text();
    if (!body || !r.done()) return std::unexpected(bad_call("a malformed answer"));
    return *body;
  }
  const auto why = static_cast<refusal::kind>(bytes[1]);
  auto field = r.text();
  auto message = r.text();
  if (!field || !message || !r.done() || why > refusal::kind::internal)
    return std::unexpected(bad_call("a malformed refusal"));
  return std::unexpected(refusal{why, *field, *message});
}

link_bytes answer_call(management& m, std::span<const std::uint8_t> call, bool delegated) {
  std::optional<management::delegated_call> scope;
  if (delegated) scope.emplace();
  wire::reader r(call);
  auto method = r.text();
  auto body = r.text();
  if (!method || !body || !r.done()) return refusal_bytes(bad_call("a malformed call"));
  // Parses the request as `Request` and makes the call.
  auto with = [&]<class Request>(auto make) -> link_bytes {
    Request request;
    if (!request.ParseFromString(*body))
      return refusal_bytes(bad_call("a malformed " + *method + " request"));
    return make(request);
  };
  using namespace v1;
  const std::string& name = *method;
  if (name == "CreateVolume")
    return with.operator()<CreateVolumeRequest>(
        [&](auto& q) { return respond(m.create_volume(q.parent(), q.volume_id(), q.volume())); });
  if (name == "UpdateVolume")
    return with.operator()<UpdateVolumeRequest>(
        [&](auto& q) { return respond(m.update_volume(q.volume(), fields_of(q.update_mask()))); });
  if (name == "MoveVolume")
    return with.operator()<MoveVolumeRequest>(
        [&](auto& q) { return respond(m.move_volume(q.name(), q.affinity())); });
  if (name == "DeleteVolume")
    return with.operator()<DeleteRequest>(
        [&](auto& q) { return respond(m.delete_volume(q.name())); });
  if (name == "CreatePool")
    return with.operator()<CreatePoolRequest>(
        [&](auto& q) { return respond(m.create_pool(q.pool_id(), q.pool())); });
  if (name == "UpdatePool")
    return with.operator()<UpdatePoolRequest>(
        [&](auto& q) { return respond(m.update_pool(q.pool(), fields_of(q.update_mask()))); });
  if (name == "CreateHost")
    return with.operator()<CreateHostRequest>(
        [&](auto& q) { return respond(m.create_host(q.host_id(), q.host())); });
  if (name == "UpdateHost")
    return with.operator()<UpdateHostRequest>(
        [&](auto& q) { return respond(m.update_host(q.host(), fields_of(q.update_mask()))); });
  if (name == "DeleteHost")
    return with.operator()<DeleteRequest>(
        [&](auto& q) { return respond(m.delete_host(q.name())); });
  if (name == "CreateMapping")
    return with.operator()<CreateMappingRequest>(
        [&](auto& q) { return respond(m.create_mapping(q.mapping_id(), q.mapping())); });
  if (name == "DeleteMapping")
    return with.operator()<DeleteRequest>(
        [&](auto& q) { return respond(m.delete_mapping(q.name())); });
  // Operations a change started on a (b asks after them).
  if (name == "GetOperation")
    return with.operator()<GetRequest>([&](auto& q) { return respond(m.operation(q.name())); });
  if (name == "CancelOperation")
    return with.operator()<GetRequest>(
        [&](auto& q) { return respond(m.cancel_operation(q.name())); });
  // The disks and groups are controller a's today (it owns the groups).
  if (name == "CreateDisk")
    return with.operator()<CreateDiskRequest>(
        [&](auto& q) { return respond(m.create_disk(q.disk_id(), q.disk())); });
  if (name == "UpdateDisk")
    return with.operator()<UpdateDiskRequest>(
        [&](auto& q) { return respond(m.update_disk(q.disk(), fields_of(q.update_mask()))); });
  if (name == "FailDisk")
    return with.operator()<GetRequest>([&](auto& q) { return respond(m.fail_disk(q.name())); });
  if (name == "ReplaceDisk")
    return with.operator()<ReplaceDiskRequest>(
        [&](auto& q) { return respond(m.replace_disk(q.name(), q.replacement())); });
  if (name == "EraseDisk")
    return with.operator()<GetRequest>([&](auto& q) { return respond(m.erase_disk(q.name())); });
  if (name == "CreateDiskGroup")
    return with.operator()<CreateDiskGroupRequest>(
        [&](auto& q) { return respond(m.create_group(q.group_id(), q.group(), q.pool())); });
  if (name == "ScrubDiskGroup")
    return with.operator()<GetRequest>([&](auto& q) { return respond(m.scrub_group(q.name())); });
  // Reads about a pool this controller serves (delegated).
  if (name == "GetDisk") {
    return with.operator()<GetRequest>([&](auto& q) {
      auto disk = get_record<Disk>(m.config(), "disks/", q.name());
      if (disk) m.describe(*disk);
      return respond(disk);
    });
  }
  if (name == "GetDiskGroup") {
    return with.operator()<GetRequest>([&](auto& q) {
      auto group = get_record<DiskGroup>(m.config(), "groups/", q.name());
      if (group) m.describe(*group);
      return respond(group);
    });
  }
  if (name == "GetVolumeStatistics")
    return with.operator()<GetRequest>(
        [&](auto& q) { return respond(m.volume_statistics(q.name())); });
  if (name == "GetPoolStatistics")
    return with.operator()<GetRequest>(
        [&](auto& q) { return respond(m.pool_statistics(q.name())); });
  if (name == "ListHeat") {
    return with.operator()<ListHeatRequest>([&](auto& q) {
      const auto first = heat_token_start(q.page_token(), q.hottest_first());
      if (!first || q.page_size() <= 0)
        return refusal_bytes(bad_call("a malformed ListHeat request"));
      return respond(
          m.heat(q.volume(), q.hottest_first(), *first, static_cast<std::size_t>(q.page_size())));
    });
  }
  if (name == "ListHeatHistory") {
    return with.operator()<ListHeatHistoryRequest>([&](auto& q) {
      const auto query = heat_history_query_of(q);
      if (!query) return refusal_bytes(bad_call("a malformed ListHeatHistory request"));
      return respond(m.heat_history(*query));
    });
  }
  if (name == "GetController") {
    return with.operator()<GetRequest>(
        [&](auto&) { return respond(outcome<Controller>(m.controllers().front())); });
  }
  // Planned moves (controller a makes them).
  if (name == "MovePool")
    return with.operator()<MovePoolRequest>(
        [&](auto& q) { return respond(m.move_pool(q.name(), q.to())); });
  if (name == "FailoverController")
    return with.operator()<GetRequest>(
        [&](auto& q) { return respond(m.failover_controller(q.name())); });
  if (name == "FailbackController")
    return with.operator()<GetRequest>(
        [&](auto& q) { return respond(m.failback_controller(q.name())); });
  if (name == "ListOperations")
    return with.operator()<ListRequest>(
        [&](auto& q) { return respond(outcome<ListOperationsResponse>(m.list_operations(q))); });
  return refusal_bytes(
      {refusal::kind::unimplemented, "",
       name + " is not made through the partner controller yet: make it through controller a"});
}

}  // namespace strata::controller
