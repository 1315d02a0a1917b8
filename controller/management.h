// The array's management operations, whoever asks: the gRPC API
// (mgmt/service.h) today, the partner controller's link next. Each change
// is checked, applied on the array's loop, recorded in the config store,
// and undone where the record fails (check → apply → record → undo), or
// recorded first where the next start must find the record; the order of
// each is said where it is done (management.cc).
//
// Requests and answers are the API's resource records (strata.v1: Volume,
// Host, …), the same messages the config store keeps; a front end
// translates its own requests to these calls and a refusal to its own
// errors. Field names in refusals are the API's ("volume.size_bytes").
//
// Threads: the calls block — on RocksDB, and while the loop answers (no
// time limit: a change may use its caller's request and answer, which
// must outlive it; the loop runs until the front ends have stopped). Call
// them from a front end's own threads, never from the loop. One change at
// a time (a mutex), so that a check and its change see the same state.
//
// `array` may be null (a store with no running array, as the API tests
// use): records can be read and every check answers, and a change that
// passes them is refused as unavailable.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/array.h"
#include "controller/config_store.h"
#include "controller/operations.h"
#include "strata/v1/array.pb.h"

namespace strata::controller {

// Why a request was refused: the kind of reason (a front end maps each to
// its own code: gRPC's INVALID_ARGUMENT, NOT_FOUND, …), the request field
// at fault ("volume.size_bytes"; empty for the request as a whole), and
// the reason in words.
struct refusal {
  enum class kind {
    invalid,        // the request is malformed or asks the impossible
    not_found,      // a resource it names does not exist
    exists,         // the resource it would create does, or what it claims is another's
    precondition,   // the array's state does not allow it (a mapped volume, a group in a pool)
    no_space,       // past the pool's capacity or overcommit
    unavailable,    // no array runs to apply it
    unimplemented,  // not through this front end (a write log made outside the build)
    timed_out,
    corrupt,        // a record that cannot be read
    internal,       // anything else the array or its store reported
  };
  kind why;
  std::string field;
  std::string message;
};

template <class T>
using outcome = std::expected<T, refusal>;

// What an array error means as a refusal about `field`.
refusal refusal_of(const error& e, const std::string& field = {});

// "pools/NAME", not a name under one ("pools/p1/volumes/v1").
bool is_pool_name(std::string_view name);

// The record `name` of `collection` ("disks/"): invalid if `name` is not
// COLLECTION/NAME, not_found if it has no record, corrupt if it does not parse.
template <class Message>
outcome<Message> get_record(const config_store& config, const std::string& collection, const std::string& name) {
  if (!std::string_view(name).starts_with(collection) || name.size() == collection.size()) {
    return std::unexpected(refusal{refusal::kind::invalid, "name", "\"" + name + "\" is not a " + collection + "NAME resource name"});
  }
  const auto bytes = config.get(name);
  if (!bytes) return std::unexpected(refusal{refusal::kind::not_found, "name", name + " does not exist"});
  Message m;
  if (!m.ParseFromString(*bytes)) return std::unexpected(refusal{refusal::kind::corrupt, "", "the record " + name + " is corrupt"});
  return m;
}

class management {
 public:
  management(config_store& config, array* array) : config_(config), array_(array) {}
  management(const management&) = delete;
  management& operator=(const management&) = delete;

  config_store& config() const noexcept { return config_; }

  // Volumes. `fields`: the fields of `want` to change (an update mask).
  outcome<v1::Volume> create_volume(const std::string& pool, const std::string& volume_id, const v1::Volume& want);
  outcome<v1::Volume> update_volume(const v1::Volume& want, const std::vector<std::string>& fields);
  // Onto the SSD tier (PERFORMANCE) or off it (CAPACITY): an operation,
  // whose cancel puts the volume's affinity back.
  outcome<v1::Operation> move_volume(const std::string& name, v1::Affinity to);
  // An operation: the record goes at once, the extents in the background.
  outcome<v1::Operation> delete_volume(const std::string& name);

  // Pools.
  outcome<v1::Pool> create_pool(const std::string& pool_id, const v1::Pool& want);
  // Fields write_cache, or home alone: a planned move of the pool to that
  // controller (failover, or failback), answered once it serves the pool.
  outcome<v1::Pool> update_pool(const v1::Pool& want, const std::vector<std::string>& fields);

  // Hosts (answered with their secrets: a front end that shows hosts
  // hides them) and mappings.
  outcome<v1::Host> create_host(const std::string& host_id, const v1::Host& want);
  outcome<v1::Host> update_host(const v1::Host& want, const std::vector<std::string>& fields);
  outcome<void> delete_host(const std::string& name);
  outcome<v1::Mapping> create_mapping(const std::string& mapping_id, const v1::Mapping& want);
  outcome<void> delete_mapping(const std::string& name);

  // Disks and groups, answered with what the array sees of them now.
  outcome<v1::Disk> create_disk(const std::string& disk_id, const v1::Disk& want);
  outcome<v1::Disk> update_disk(const v1::Disk& want, const std::vector<std::string>& fields);
  outcome<v1::Disk> fail_disk(const std::string& name);
  outcome<v1::Disk> erase_disk(const std::string& name);
  outcome<v1::Operation> replace_disk(const std::string& name, const std::string& replacement);
  // `pool`: empty, or the pool the new group grows.
  outcome<v1::DiskGroup> create_group(const std::string& id, const v1::DiskGroup& want, const std::string& pool);
  outcome<v1::Operation> scrub_group(const std::string& name);

  // Controller b with a partner hands every change to controller a
  // (remote_management.h): forwards() says so, and forward() makes the
  // call there and returns the response message's bytes. Blocking.
  bool forwards() const noexcept;
  outcome<std::string> forward(std::string_view method, const google::protobuf::Message& request);

  // Operations. Without an array, read from their records.
  outcome<v1::Operation> operation(const std::string& name) const;
  outcome<v1::Operation> cancel_operation(const std::string& name);

  // What only the running array knows, asked on its loop. describe():
  // the output-only fields of disk and group records (state, membership,
  // health, rebuild progress); nothing without an array.
  void describe(v1::Disk& disk) const;
  void describe(v1::DiskGroup& group) const;
  void describe(google::protobuf::RepeatedPtrField<v1::Disk>& disks) const;
  void describe(google::protobuf::RepeatedPtrField<v1::DiskGroup>& groups) const;
  outcome<v1::VolumeStatistics> volume_statistics(const std::string& name) const;
  outcome<v1::PoolStatistics> pool_statistics(const std::string& name) const;
  // Volume `volume`'s extents from `first`, at most `limit` (array::heat).
  outcome<v1::ListHeatResponse> heat(const std::string& volume, bool hottest_first, std::uint64_t first, std::size_t limit) const;
  // Let the event or the operation log write what it holds, so that a
  // list made next includes it.
  void drain_events() const;
  void drain_operations() const;
  // The array's controllers, as this one sees them: itself first, then
  // its partner (if it has one).
  std::vector<v1::Controller> controllers(const std::string& version) const;

 private:
  config_store& config_;
  array* const array_;
  std::mutex changes_;
  const std::int64_t started_ms_ = unix_ms_now();  // the daemon's start, near enough

  // A volume's affinity set, on the array and in its record (changes_ held).
  outcome<void> set_affinity(v1::Volume& volume, v1::Affinity affinity);
  // Whether a volume of pool `pool_name` may have write cache `mode`:
  // WRITE_BACK or WRITE_THROUGH, the latter only where the pool has a log.
  outcome<void> check_volume_write_cache(const std::string& pool_name, v1::WriteCache mode) const;
  // A host's own fields, and that no other host claims what it does.
  outcome<void> check_host(const v1::Host& h) const;
  // Records a change: with the configuration generation bumped when it
  // touches array-wide records, and copied to the partner before it is
  // acknowledged (config_sync.h).
  outcome<void> commit(config_batch b);
  // Whether this controller may make a change now: an array runs, and it
  // is the one that takes changes.
  outcome<v1::Pool> move_pool(const std::string& name, const std::string& to);
  outcome<void> may_change(const std::string& to) const;
};

}  // namespace strata::controller
