// The management API's service (proto/strata/v1/array.proto): the array's
// resources as the controller keeps them in its config store.
//
// It translates: a request to a call of controller::management (which
// checks, applies, records and undoes every change) and its answer or
// refusal back to a response or a status; lists are paged here.
//
// Threads: gRPC's. The handlers read the config store, which is safe from
// any thread (controller/config_store.h), and wait for the management
// calls on their gRPC thread, never on the array's loop.
#pragma once

#include "controller/management.h"
#include "strata/v1/array.grpc.pb.h"

namespace strata::mgmt {

class array_service final : public v1::Array::Service {
 public:
  // `manage`'s array may be null: the resources can be read, and changes
  // that pass their checks are refused (UNAVAILABLE).
  explicit array_service(controller::management& manage) : manage_(manage), config_(manage.config()) {}

  static constexpr const char* version = "0.1.0";

  grpc::Status GetVersion(grpc::ServerContext*, const v1::GetVersionRequest*, v1::GetVersionResponse* out) override;
  grpc::Status ListControllers(grpc::ServerContext*, const v1::ListRequest* in, v1::ListControllersResponse* out) override;
  grpc::Status GetController(grpc::ServerContext*, const v1::GetRequest* in, v1::Controller* out) override;
  grpc::Status ListDisks(grpc::ServerContext*, const v1::ListRequest* in, v1::ListDisksResponse* out) override;
  grpc::Status GetDisk(grpc::ServerContext*, const v1::GetRequest* in, v1::Disk* out) override;
  grpc::Status CreateDisk(grpc::ServerContext*, const v1::CreateDiskRequest* in, v1::Disk* out) override;
  grpc::Status UpdateDisk(grpc::ServerContext*, const v1::UpdateDiskRequest* in, v1::Disk* out) override;
  grpc::Status FailDisk(grpc::ServerContext*, const v1::GetRequest* in, v1::Disk* out) override;
  grpc::Status ReplaceDisk(grpc::ServerContext*, const v1::ReplaceDiskRequest* in, v1::Operation* out) override;
  grpc::Status EraseDisk(grpc::ServerContext*, const v1::GetRequest* in, v1::Disk* out) override;
  grpc::Status ScrubDiskGroup(grpc::ServerContext*, const v1::GetRequest* in, v1::Operation* out) override;
  grpc::Status CreateDiskGroup(grpc::ServerContext*, const v1::CreateDiskGroupRequest* in, v1::DiskGroup* out) override;
  grpc::Status ListDiskGroups(grpc::ServerContext*, const v1::ListRequest* in, v1::ListDiskGroupsResponse* out) override;
  grpc::Status GetDiskGroup(grpc::ServerContext*, const v1::GetRequest* in, v1::DiskGroup* out) override;
  grpc::Status CreatePool(grpc::ServerContext*, const v1::CreatePoolRequest* in, v1::Pool* out) override;
  grpc::Status ListPools(grpc::ServerContext*, const v1::ListRequest* in, v1::ListPoolsResponse* out) override;
  grpc::Status GetPool(grpc::ServerContext*, const v1::GetRequest* in, v1::Pool* out) override;
  grpc::Status UpdatePool(grpc::ServerContext*, const v1::UpdatePoolRequest* in, v1::Pool* out) override;
  grpc::Status MovePool(grpc::ServerContext*, const v1::MovePoolRequest* in, v1::Operation* out) override;
  grpc::Status FailoverController(grpc::ServerContext*, const v1::GetRequest* in, v1::Operation* out) override;
  grpc::Status FailbackController(grpc::ServerContext*, const v1::GetRequest* in, v1::Operation* out) override;
  grpc::Status ListVolumes(grpc::ServerContext*, const v1::ListRequest* in, v1::ListVolumesResponse* out) override;
  grpc::Status GetVolume(grpc::ServerContext*, const v1::GetRequest* in, v1::Volume* out) override;
  grpc::Status ListHosts(grpc::ServerContext*, const v1::ListRequest* in, v1::ListHostsResponse* out) override;
  grpc::Status GetHost(grpc::ServerContext*, const v1::GetRequest* in, v1::Host* out) override;
  grpc::Status ListMappings(grpc::ServerContext*, const v1::ListRequest* in, v1::ListMappingsResponse* out) override;
  grpc::Status GetMapping(grpc::ServerContext*, const v1::GetRequest* in, v1::Mapping* out) override;
  grpc::Status CreateVolume(grpc::ServerContext*, const v1::CreateVolumeRequest* in, v1::Volume* out) override;
  grpc::Status UpdateVolume(grpc::ServerContext*, const v1::UpdateVolumeRequest* in, v1::Volume* out) override;
  grpc::Status DeleteVolume(grpc::ServerContext*, const v1::DeleteRequest* in, v1::Operation* out) override;
  grpc::Status MoveVolume(grpc::ServerContext*, const v1::MoveVolumeRequest* in, v1::Operation* out) override;
  grpc::Status CreateHost(grpc::ServerContext*, const v1::CreateHostRequest* in, v1::Host* out) override;
  grpc::Status UpdateHost(grpc::ServerContext*, const v1::UpdateHostRequest* in, v1::Host* out) override;
  grpc::Status DeleteHost(grpc::ServerContext*, const v1::DeleteRequest* in, google::protobuf::Empty* out) override;
  grpc::Status CreateMapping(grpc::ServerContext*, const v1::CreateMappingRequest* in, v1::Mapping* out) override;
  grpc::Status DeleteMapping(grpc::ServerContext*, const v1::DeleteRequest* in, google::protobuf::Empty* out) override;
  grpc::Status ListOperations(grpc::ServerContext*, const v1::ListRequest* in, v1::ListOperationsResponse* out) override;
  grpc::Status GetOperation(grpc::ServerContext*, const v1::GetRequest* in, v1::Operation* out) override;
  grpc::Status CancelOperation(grpc::ServerContext*, const v1::GetRequest* in, v1::Operation* out) override;
  grpc::Status GetVolumeStatistics(grpc::ServerContext*, const v1::GetRequest* in, v1::VolumeStatistics* out) override;
  grpc::Status GetPoolStatistics(grpc::ServerContext*, const v1::GetRequest* in, v1::PoolStatistics* out) override;
  grpc::Status ListHeat(grpc::ServerContext*, const v1::ListHeatRequest* in, v1::ListHeatResponse* out) override;
  grpc::Status ListHeatHistory(grpc::ServerContext*, const v1::ListHeatHistoryRequest* in, v1::ListHeatHistoryResponse* out) override;
  grpc::Status ListEvents(grpc::ServerContext*, const v1::ListRequest* in, v1::ListEventsResponse* out) override;

 private:
  controller::management& manage_;
  const controller::config_store& config_;
};

}  // namespace strata::mgmt
