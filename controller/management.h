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
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/array.h"
#include "controller/config_store.h"
#include "controller/heat_history_reader.h"
#include "controller/operations.h"
#include "strata/v1/array.pb.h"
#include "strata/v1/operations.pb.h"

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
    corrupt,   // a record that cannot be read
    internal,  // anything else the array or its store reported
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
outcome<Message> get_record(const config_store& config, const std::string& collection,
                            const std::string& name) {
  if (!std::string_view(name).starts_with(collection) || name.size() == collection.size()) {
    return std::unexpected(
        refusal{refusal::kind::invalid, "name",
                "\"" + name + "\" is not a " + collection + "NAME resource name"});
  }
  const auto bytes = config.get(name);
  if (!bytes)
    return std::unexpected(refusal{refusal::kind::not_found, "name", name + " does not exist"});
  Message m;
  if (!m.ParseFromString(*bytes))
    return std::unexpected(
        refusal{refusal::kind::corrupt, "", "the record " + name + " is corrupt"});
  return m;
}

class management {
 public:
  management(config_store& config, array* array) : config_(config), array_(array) {}
  management(const management&) = delete;
  management& operator=(const management&) = delete;

  config_store& config() const noexcept { return config_; }
  // This controller's firmware version, as controllers() says it (the
  // API's; set once, before the API serves).
  void set_version(std::string version) { version_ = std::move(version); }
  // This controller's name: "a" or "b" ("a" without an array).
  std::string controller_name() const {
    return array_ != nullptr ? array_->controller_name() : "a";
  }

  // Volumes. `fields`: the fields of `want` to change (an update mask).
  outcome<v1::Volume> create_volume(const std::string& pool, const std::string& volume_id,
                                    const v1::Volume& want);
  outcome<v1::Volume> update_volume(const v1::Volume& want, const std::vector<std::string>& fields);
  // Onto the SSD tier (PERFORMANCE) or off it (CAPACITY): an operation,
  // whose cancel puts the volume's affinity back.
  outcome<v1::Operation> move_volume(const std::string& name, v1::Affinity to);
  // An operation: the record goes at once, the extents in the background.
  outcome<v1::Operation> delete_volume(const std::string& name);

  // Pools.
  outcome<v1::Pool> create_pool(const std::string& pool_id, const v1::Pool& want);
  // Fields write_cache, or home alone: a planned move of the pool to that
  // controller (move_pool), answered once it serves the pool.
  outcome<v1::Pool> update_pool(const v1::Pool& want, const std::vector<std::string>& fields);
  // Planned moves between the two controllers, as operations whose
  // progress is the share of the pools moved: pool `name` to controller
  // `to` ("b" or "controllers/b"), its home from now on ("pool.move");
  // every pool controller `name` serves to its partner, where they stay
  // until failback ("controller.failover": the controller's record says
  // failed_over); every pool whose home is controller `name` back to it
  // ("controller.failback"). Refused without an ACTIVE partner.
  outcome<v1::Operation> move_pool(const std::string& name, const std::string& to);
  outcome<v1::Operation> failover_controller(const std::string& name);
  outcome<v1::Operation> failback_controller(const std::string& name);

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
  outcome<v1::DiskGroup> create_group(const std::string& id, const v1::DiskGroup& want,
                                      const std::string& pool);
  outcome<v1::Operation> scrub_group(const std::string& name);

  // Controller b with a partner hands every change to controller a
  // (remote_management.h), unless a is DOWN: then b makes them itself,
  // and a catches up from it by generation when it is back. forwards()
  // says whether a change goes to a, and forward() makes the call there
  // and returns the response message's bytes. Blocking.
  bool forwards() const;
  outcome<std::string> forward(std::string_view method, const google::protobuf::Message& request);

  // A pool's own work -- its volumes' changes, its write cache, its
  // groups' scrubs and members, its statistics, its heat, its operations
  // -- is done by the controller that serves the pool. Controller a,
  // which takes every change, hands one of a pool the partner serves to
  // the partner (link_type::management_delegated) while it holds the
  // change lock, and the partner makes it as its own: checked, applied,
  // committed on both. Reads go straight to the pool's controller. A call
  // the partner handed here runs in a delegated_call scope: made here, or
  // refused, never handed on again.
  class delegated_call {
   public:
    delegated_call();
    ~delegated_call();
    delegated_call(const delegated_call&) = delete;
    delegated_call& operator=(const delegated_call&) = delete;
  };

  // Operations. Without an array, read from their records.
  outcome<v1::Operation> operation(const std::string& name) const;
  outcome<v1::Operation> cancel_operation(const std::string& name);
  // A page of both controllers' operations (each keeps its own records;
  // the partner's while it is ACTIVE), in name order: at most
  // `page_size` after `page_token`, the request's fields already checked.
  v1::ListOperationsResponse list_operations(const v1::ListRequest& request) const;

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
  outcome<v1::ListHeatResponse> heat(const std::string& volume, bool hottest_first,
                                     std::uint64_t first, std::size_t limit) const;
  // A pool's or a volume's heat history (heat_history_reader.h), read
  // from the pool's metadata directory on the calling thread, or asked of
  // the partner where it serves the pool. `query.pool` and `query.volume`
  // are checked here.
  outcome<v1::ListHeatHistoryResponse> heat_history(const heat_history_query& query) const;
  // Let the event or the operation log write what it holds, so that a
  // list made next includes it.
  void drain_events() const;
  void drain_operations() const;
  // The array's controllers: itself first, then its partner (if it has
  // one), as the partner describes itself while it is ACTIVE, else as
  // this controller sees it (DOWN, UNREACHABLE).
  std::vector<v1::Controller> controllers() const;

 private:
  config_store& config_;
  array* const array_;
  std::mutex changes_;
  const std::int64_t started_ms_ = unix_ms_now();  // the daemon's start, near enough
  std::string version_;

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
  // Whether this controller may make a change now: an array runs, it is
  // the one that takes changes (a, or b with a DOWN), and the partner is
  // not alive beyond a cut link (UNREACHABLE: refused on both sides, so
  // that the configurations never diverge).
  outcome<void> may_change(const std::string& to) const;
  // Whether pools may move now (two controllers, the partner ACTIVE); a
  // refusal names `field`.
  outcome<void> may_move(const std::string& field) const;
  // Operation `kind_name` about `resource`, which follows `pools` (pool
  // name → the controller it goes to) to their controllers
  // (array::follow_pools), once the array has been told to move them.
  outcome<v1::Operation> follow(const std::string& kind_name, const std::string& resource,
                                std::map<std::string, std::string> pools);
  // Pool `pool`'s work (delegated_call): nullopt when it is done here (or
  // when `pool` is no pool: the checks here say so); else the partner's
  // answer to `method` -- its response message's bytes -- or why neither
  // controller can do it now.
  std::optional<outcome<std::string>> elsewhere(const std::string& pool, std::string_view method,
                                                const google::protobuf::Message& request) const;
  // The pool whose group `group` is, or whose group has disk `disk`
  // as a member ("pools/p1"); empty: none.
  std::string pool_of_group(const std::string& group) const;
  std::string pool_of_disk(const std::string& disk) const;
  // A call of link type `type` to the partner, waited for: its answer or
  // refusal. Without the link: unavailable, saying `link_down` (or that
  // the link is down).
  outcome<std::string> call_partner(std::uint16_t type, std::string_view method,
                                    const google::protobuf::Message& request,
                                    const std::string& link_down = {}) const;
  // The partner's answer to an operation call (`name` is one of its
  // operations): nullopt when `name` is this controller's.
  std::optional<outcome<v1::Operation>> partner_operation(const std::string& name,
                                                          std::string_view method) const;
};

// ListHeat's page token: where a page starts, as an extent index
// ("extent:N"), or by rank when hottest first ("rank:N"), so that a token
// of one order is not taken by the other. nullopt: not a token of that order.
std::string heat_token(bool hottest_first, std::uint64_t first);
std::optional<std::uint64_t> heat_token_start(const std::string& token, bool hottest_first);

// The response message `bytes` hold, or the refusal.
template <class Response>
outcome<Response> parsed(outcome<std::string> bytes) {
  if (!bytes) return std::unexpected(bytes.error());
  Response r;
  if (!r.ParseFromString(*bytes))
    return std::unexpected(refusal{refusal::kind::internal, "", "the partner's answer is corrupt"});
  return r;
}

}  // namespace strata::controller
