// The management API's service (proto/strata/v1/array.proto): the array's
// resources as the controller keeps them in its config store.
//
// Threads: gRPC's. The handlers read the config store, which is safe from
// any thread (controller/config_store.h). A change to the array runs on the
// array's loop (posted there); the handler waits for it, on its gRPC
// thread, never on the loop. Changes are serialised by one mutex: each
// checks, applies and records as one step.
#pragma once

#include <mutex>

#include "controller/array.h"
#include "controller/config_store.h"
#include "strata/v1/array.grpc.pb.h"

namespace strata::mgmt {

class array_service final : public v1::Array::Service {
 public:
  // `array`: the running array that changes are applied to; null: the
  // resources can be read, and changes are refused (UNAVAILABLE).
  array_service(controller::config_store& config, controller::array* array) : config_(config), array_(array) {}

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
  grpc::Status ListEvents(grpc::ServerContext*, const v1::ListRequest* in, v1::ListEventsResponse* out) override;

 private:
  controller::config_store& config_;
  controller::array* array_;
  std::mutex changes_;
  const std::int64_t started_ms_ = controller::unix_ms_now();  // the daemon's start, near enough
  // This controller, as it stands.
  v1::Controller self() const;
  // A volume's affinity set, on the array and in its record (changes_ held).
  grpc::Status set_affinity(v1::Volume& volume, v1::Affinity affinity);
  // Whether a volume of pool `pool_name` may have write cache `mode`:
  // WRITE_BACK or WRITE_THROUGH, the latter only where the pool has a log.
  grpc::Status check_volume_write_cache(const std::string& pool_name, v1::WriteCache mode);
};

}  // namespace strata::mgmt
