// The array on one controller: the shelf's drives, the RAID groups, the
// pool with its volumes, and the volumes served as iSCSI LUNs, composed
// from what the config store remembers (README.md) or, on an empty state
// directory, built as the embedded default.
//
// Threads: open() and close() drive the loop themselves (start-up and
// shutdown: the loop serves nothing else then); in between the array lives
// on that loop, which the caller runs (device::run_loop).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <deque>
#include <expected>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "controller/config_file.h"
#include "controller/config_store.h"
#include "controller/disk_group.h"
#include "controller/drive_bay.h"
#include "controller/event_log.h"
#include "controller/forwarded_unit.h"
#include "controller/identity.h"
#include "controller/lease.h"
#include "controller/metadata_mirror.h"
#include "controller/operations.h"
#include "controller/partner.h"
#include "controller/shelf.h"
#include "controller/unit_state.h"
#include "controller/write_cache.h"
#include "raid/device/clock.h"
#include "raid/device/emulated_512e.h"
#include "raid/device/io_ring.h"
#include "target/iscsi/server.h"
#include "target/nvme/server.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/lun_map.h"
#include "tiering/metadata_store.h"
#include "tiering/migrator.h"
#include "tiering/pool.h"
#include "tiering/volume.h"

namespace strata::v1 {
class Disk;
class DiskGroup;
class Host;
class Pool;
class VolumeStatistics;
class PoolStatistics;
class ListHeatResponse;
}  // namespace strata::v1

namespace strata::controller {

// A new volume's unit serial number (VPD 80h), unique across arrays:
// "STRATA-", 16 random hex digits, "-", the volume's id.
std::string new_volume_serial(std::string_view volume_id);

// Who may log in as a host, and what it must prove: a Host record's
// terms, as the iSCSI target enforces them.
struct host_access {
  std::vector<std::string> iqns;                       // the initiators' iSCSI names
  std::vector<std::string> nqns;                       // its NVMe host NQNs
  bool any_initiator = false;                          // every initiator not named by another host
  std::optional<iscsi::chap_credentials> chap;         // what the initiator proves
  std::optional<iscsi::chap_credentials> mutual_chap;  // what the array proves to it
};

// A Host record's terms.
host_access host_access_of(const v1::Host& host);

struct array_options {
  std::filesystem::path state_dir = "/var/lib/strata";
  // Where the simulated drives' files are (NAME.img); empty: STATE/shelf.
  // Two controllers of one array are given the same shelf and their own
  // state directories (README.md, "Two controllers").
  std::filesystem::path shelf_dir{};
  // This controller's name: "a" (it builds the array on an empty state
  // directory and owns the pools it builds) or "b".
  std::string controller = "a";
  // The partner link's address (controller b listens there, controller a
  // dials it); none: a controller without a partner. Controller b starting
  // on an empty state directory joins the array on its shelf: it reads the
  // array's identity from the drives, and copies the configuration from
  // controller a over the link.
  std::optional<boost::asio::ip::tcp::endpoint> partner_link;
  // Controller a dials here instead (a relay to partner_link; tests cut
  // the link with it).
  std::optional<boost::asio::ip::tcp::endpoint> partner_dial;
  // Test hooks, off in service (stratad reads STRATA_TEST_HOOKS, a comma
  // list of their names). stamps-after-partner-beats: a takeover writes
  // its epoch only once the partner it checked DOWN beats again (the thaw
  // race made: tests/controller/stratad_partner_test.sh).
  bool test_stamps_after_partner_beats = false;
  boost::asio::ip::tcp::endpoint iscsi{boost::asio::ip::make_address("127.0.0.1"), 3260};
  // The NVMe/TCP port (none: NVMe/TCP is not served). Its subsystem's NQN
  // is the target name's, "iqn." made "nqn.".
  std::optional<boost::asio::ip::tcp::endpoint> nvme;
  // The loops iSCSI and NVMe/TCP connections go to, in turn (the array's
  // own among them, or not); empty: the array's loop. They must run until
  // close() has returned.
  std::vector<boost::asio::any_io_executor> connection_loops;
  // The NVMe/TCP ports the discovery log names (this controller's, as
  // hosts reach it, and others'); empty: this port, at the address each
  // discovery connection came in on.
  std::vector<nvme_portal> nvme_portals;
  std::string target_name = "iqn.2026-11.io.strata:array";
  // What an empty state directory is built as (config_file.h): the
  // embedded default, or a configuration file's build sections. Never read
  // again once the config store holds the array.
  array_plan plan = default_plan();
  // Where `plan` came from, for the log and the event log.
  std::string plan_origin = "the embedded default";
  // The portals SendTargets names ("host:port"); empty: the address each
  // discovery connection came in on.
  std::vector<std::string> iscsi_portals;
  // How often each pool snapshots its hottest extents for the heat map
  // (tiering::heat_history_options::interval).
  device::duration heat_history_interval = std::chrono::minutes(10);
  // Test and torture mode: the shelf's drives keep their unflushed writes
  // in this process's memory (shelf_options::volatile_write_caches).
  bool volatile_drive_caches = false;
  // Words for an administrator: what was built or found, and why not.
  std::function<void(std::string_view)> log;
  // Each event of the event log, as it is recorded.
  std::function<void(severity, std::string_view)> event;
};

class array {
 public:
  // Opens the array in options.state_dir, building the embedded default
  // there if it is empty, and starts serving iSCSI. Fails with what went
  // wrong (a drive that cannot be opened, a group that cannot be
  // assembled, a port in use).
  static std::expected<std::unique_ptr<array>, error> open(boost::asio::io_context& loop,
                                                           const array_options& options);
  // Stops serving, lets commands finish, saves heat and the cache index,
  // flushes, and marks the groups clean. Then the array may be destroyed.
  void close();
  ~array();

  // Management changes: called on the loop (mgmt posts them there), and
  // answered there. The caller records the change in the config store.
  //
  // A new thin volume `name` ("pools/p1/volumes/v2"), durable in its
  // pool's metadata before `done`. errc::no_space: over the pool's
  // overcommit.
  void create_volume(const std::string& name, std::uint64_t bytes, tiering::affinity placement,
                     std::function<void(std::expected<void, error>)> done);
  // Deletes volume `name` ("pools/p1/volumes/v2") from the pool: its
  // extents are free once `done` says so. invalid_argument while a host
  // sees it.
  void delete_volume(const std::string& name, std::function<void(std::expected<void, error>)> done);
  // Grows volume `name` to `bytes`; its initiators get CAPACITY DATA HAS
  // CHANGED. invalid_argument for a shrink, no_space past overcommit.
  void resize_volume(const std::string& name, std::uint64_t bytes,
                     std::function<void(std::expected<void, error>)> done);
  void set_placement(const std::string& name, tiering::affinity placement,
                     std::function<void(std::expected<void, error>)> done);
  // Pool `name`'s write cache (its record, which the caller keeps, says
  // the same): write-through destages what is dirty first, with events.
  // not_found: no such pool; not_supported: it has no write log.
  std::expected<void, error> set_write_cache(const std::string& name, raid::cache_mode mode);
  // How long pool `name`'s extents stay idle before they move to its cold
  // tier; zero: never. Its record holds it for the next start.
  std::expected<void, error> set_cold_cooling(const std::string& name,
                                              std::chrono::seconds cooling);
  // Volume `name`'s own write cache mode: write-through sends its writes
  // past its pool's write-back cache from now on (request::write_through);
  // write-back leaves them to the pool's mode. not_found: no such volume;
  // not_supported: write-through asked of a pool with no write log.
  std::expected<void, error> set_volume_write_cache(const std::string& name, raid::cache_mode mode);
  // A simulated drive in a new slot `name` ("hdd-20"): a sparse file in
  // the shelf's directory behind its kind's timing model, blank, unused.
  // Returns its Disk record for the caller to keep. Opening the file is a
  // few blocking system calls on the loop: an administrator's rare command.
  std::expected<v1::Disk, error> add_disk(const std::string& name, drive_kind kind,
                                          std::uint64_t bytes);
  // Formats blank disks `disks` ("disks/hdd-20") into a new group `name`
  // ("groups/g5") of `kind`, and returns its record (with the group id its
  // superblocks carry) for the caller to keep before anything uses it.
  void form_group(const std::string& name, group_kind kind, const std::vector<std::string>& disks,
                  std::function<void(std::expected<v1::DiskGroup, error>)> done);
  // Opens a new pool for `record` ("pools/p2": its groups, in no other
  // pool, and its read cache), whose record the caller has kept, and
  // serves it. Unlike the other changes, called from a thread that may
  // block, not the loop: opening the pool's store is RocksDB's open; the
  // pool is then handed to the loop. An error leaves nothing open.
  std::expected<void, error> add_pool(const v1::Pool& record);
  // Grows pool `pool` by group `name` (RAID-6: capacity tier; RAID-1:
  // performance tier), whose record, and the pool record naming it, the
  // caller has kept: a crash before `done` is finished at the next start.
  void grow_pool(const std::string& pool, const std::string& name,
                 std::function<void(std::expected<void, error>)> done);
  // Takes a Ceph group (ceph_image::connect has checked and opened its
  // image, off the loop) as new group `name` ("groups/c1"), and returns
  // its record for the caller to keep, as form_group does. On the loop.
  void adopt_ceph_group(const std::string& name, std::unique_ptr<ceph_image> image,
                        std::function<void(std::expected<v1::DiskGroup, error>)> done);
  // A Ceph group that a pool has paused (its cluster timed out, is down
  // or full) shows GROUP_UNAVAILABLE, and why in its ceph.status. On the loop.
  void describe_pause(v1::DiskGroup& group) const;
  // The loop the array runs on (a Ceph image's completions come there).
  boost::asio::io_context& loop() const noexcept { return loop_; }
  // Follows volume `name`'s extents as the migrator moves them all to tier
  // `to` (after its placement was set to match): operation `operation`
  // (kind "volume.move") gets the fraction moved each second, and ends
  // SUCCEEDED once none is left on the other tier; FAILED if the volume
  // goes, or (to the performance tier) the tier fills to its reserve.
  void follow_move(const std::string& name, tiering::tier to, const std::string& operation);
  // Stops following `operation`, which ends CANCELLED; false if it had
  // ended already.
  bool stop_following(const std::string& operation);
  // Lets host `name` ("hosts/h1") log in on its terms, or changes them.
  // Sessions of initiators the change shuts out are closed; the others go
  // on (iscsi::server::set_target).
  std::expected<void, error> set_host(const std::string& name, const host_access& access);
  // Shuts host `name` out, closing its sessions. invalid_argument while a
  // LUN is mapped to it.
  std::expected<void, error> remove_host(const std::string& name);
  // Serves volume `volume` ("pools/p1/volumes/v2"), whose unit serial
  // number is `serial` and logical block size `block_size_bytes` (its
  // record's: 512 is presented as 512e over the pool's 4096-byte blocks,
  // through device::emulated_512e; 4096, or 0 in a record older than the
  // field, as it is), to host `host` as `lun`, at once:
  // its live sessions see the new LUN, with REPORTED LUNS DATA HAS CHANGED.
  // One logical unit serves a volume however many hosts see it, so
  // reservations and unit attentions are the volume's.
  std::expected<void, error> map_volume(const std::string& volume, const std::string& serial,
                                        std::uint32_t block_size_bytes, const std::string& host,
                                        std::uint32_t lun);
  // Stops serving `lun` to `host`. `done` once no command of it runs any
  // more (when that was the volume's last mapping, its unit is gone then).
  void unmap_volume(const std::string& host, std::uint32_t lun,
                    std::function<void(std::expected<void, error>)> done);
  // What the array measures, on the loop. Rates are over the last
  // sampling interval (statistics_interval).
  std::expected<void, error> volume_statistics(const std::string& name,
                                               v1::VolumeStatistics& out) const;
  std::expected<void, error> pool_statistics(const std::string& name,
                                             v1::PoolStatistics& out) const;
  // Volume `name`'s extents from `first` (in extent order, or by rank when
  // `hottest_first`), at most `limit`; next_page_token is left to the caller.
  std::expected<void, error> heat(const std::string& name, bool hottest_first, std::uint64_t first,
                                  std::size_t limit, v1::ListHeatResponse& out) const;
  static constexpr std::chrono::seconds statistics_interval{5};
  boost::asio::any_io_executor executor() const { return loop_.get_executor(); }

  boost::asio::ip::tcp::endpoint iscsi_endpoint() const { return server_->local_endpoint(); }
  // Connections open now, on the loop.
  std::size_t iscsi_connections() const noexcept { return server_->connections(); }
  std::size_t nvme_connections() const noexcept { return nvme_ ? nvme_->connections() : 0; }
  // Where NVMe/TCP is served, and its subsystem; none if it is not.
  std::optional<boost::asio::ip::tcp::endpoint> nvme_endpoint() const {
    return nvme_ ? std::optional(nvme_->local_endpoint()) : std::nullopt;
  }
  std::string nvme_subsystem_nqn() const;
  const std::string& target_name() const noexcept { return options_.target_name; }
  const std::filesystem::path& state_dir() const noexcept { return options_.state_dir; }
  // Where the simulated drives are (array_options::shelf_dir, resolved).
  std::filesystem::path shelf_dir() const {
    return options_.shelf_dir.empty() ? options_.state_dir / "shelf" : options_.shelf_dir;
  }
  const std::string& controller_name() const noexcept { return options_.controller; }
  // Whether this controller serves pool `name` now: it owns it, and is
  // neither handing it over nor stepped down from it. On the loop.
  bool serves(const std::string& name) const {
    const served_pool* p = pool_named(name);
    return p != nullptr && !p->lost && !handing_over_.contains(name);
  }
  // The pools this controller stepped down from (the partner took them
  // over while it was frozen) since it started. On the loop.
  std::vector<std::string> stepped_down_from() const {
    std::vector<std::string> out;
    for (const auto& [name, p] : pools_)
      if (p.lost) out.push_back(name);
    return out;
  }
  // The array this controller belongs to (controller/identity.h).
  const array_identity& identity() const noexcept { return identity_; }
  // The partner controller, if one is configured (partner.h).
  const controller::partner* partner() const noexcept { return partner_.get(); }
  // Copies a committed configuration change to the partner; `done` once
  // the partner committed it (at once without a partner). On the loop.
  void replicate(const config_batch& change, std::function<void(std::expected<void, error>)> done);
  // This controller committed configuration `generation`: its drive
  // heartbeat says so from the next beat. On the loop.
  void note_generation(std::uint64_t generation) {
    if (partner_) partner_->note_generation(generation);
  }
  // A request of `type` to the partner (canceled without one, or while
  // the link is down). On the loop.
  void call_partner(std::uint16_t type, link_bytes payload, link_reply done);
  // Who answers the partner's management calls (remote_management.h): run
  // on a thread of the partner's, which may block. Set once, before the
  // partner links (stratad, which makes the management object).
  void answer_partner_calls(std::function<link_bytes(link_bytes, bool delegated)> answer);
  config_store& config() const noexcept { return *config_; }
  controller::event_log& events() const noexcept { return *events_; }
  operation_log& operations() const noexcept { return *operations_; }
  // The disks and groups as an administrator manages them (on the loop).
  drive_bay& drives() const noexcept { return *bay_; }

 private:
  array(boost::asio::io_context& loop, const array_options& options)
      : loop_(loop), options_(options) {}
  std::expected<void, error> build_default();
  std::expected<void, error> assemble();
  std::expected<void, error> open_pool(const std::string& pool_record);
  // Assembles group record `key` from its superblocks on the shelf's drives
  // (driving the loop), and adds it to groups_.
  std::expected<void, error> assemble_named(const std::string& key, const std::string& bytes);
  // A CEPH group record's group, opening its image in the background
  // (array_ceph.cc).
  std::unique_ptr<disk_group> open_ceph_group(const std::string& key, const v1::DiskGroup& record);
  // A Ceph group of the plan: connected, checked and opened now (on a
  // thread of its own while the loop goes on), its record filled in.
  std::expected<std::unique_ptr<disk_group>, error> connect_planned_ceph(const group_plan& planned,
                                                                         v1::DiskGroup& record);
  // Each sample: pools stop placing extents in a Ceph group whose cluster
  // is out of reach or (nearly) full (tiering::pool::pause_group).
  void watch_cold_groups();
  std::set<std::pair<std::string, std::uint16_t>> cold_paused_;  // (pool, group index) paused by it
  // Makes the pool's volumes what the config records say: a volume the
  // pool has and the config does not is the rest of a delete (or of a
  // create that crashed before its record): it is deleted.
  std::expected<void, error> reconcile_volumes(const std::string& pool_name);
  // The shelf's controller areas (identity.h), read at start-up.
  std::vector<drive_area> read_shelf_areas();
  // Refuses a shelf that holds another array (or, building, any array),
  // with an event; nothing is written to it.
  std::expected<void, error> check_shelf(const std::vector<drive_area>& areas, bool building);
  // Writes the identity to every group member's area, and each pool's
  // ownership to its groups' members, where an area lacks them (all of
  // them at the build; at each start, what a crash or a failed write left
  // out). An ownership record is never overwritten here.
  std::expected<void, error> stamp_shelf();
  // Controller b on an empty state directory: the identity from the
  // drives, the configuration from controller a (waiting for it to link).
  std::expected<void, error> join();
  // Starts the partner link (options_.partner_link), with the array's key.
  std::expected<void, error> start_partner();
  // The drive heartbeat (with a partner): on up to three drives with a
  // controller area, SSDs first, in slot order, which both controllers
  // choose alike from the shelf they share.
  void start_drive_heartbeats();
  // The partner's configuration changes, committed here: what this
  // controller serves follows them (hosts today).
  void partner_changed(const config_change& change);
  // A disk record the partner changed: a disk it added (hot plug) is
  // opened here too, from the shared shelf, and a spare it set or took
  // back is one here too (the spares are global: drive_bay answer_claim).
  void partner_disk_changed(const std::string& name, const v1::Disk& disk);
  // Whether this controller serves pool record `pool`: the owner its
  // drives name, read at start-up; else its record's (a record older than
  // owners: controller a).
  bool owns(const v1::Pool& pool) const;
  std::map<std::string, pool_ownership>
      drive_owners_;  // start-up only: by pool name, the newest record found
  // The same for one group made or taken into a pool while the array
  // runs, on the loop: its members' areas get the identity and
  // `ownership`. A failure is an event (the group stands; the next start
  // stamps what is missing), and `done` follows either way.
  void stamp_group(const disk_group& g, std::optional<pool_ownership> ownership,
                   std::function<void()> done);
  std::expected<void, error> serve();
  // The target node the hosts make: each named IQN its host's access,
  // every other initiator the any_initiator host's (if there is one).
  iscsi::target_node target_node() const;
  // Destroys retiring_ units whose commands have all ended; `done` when
  // none is left.
  void retire_units(std::function<void()> done);
  // Runs the loop until `ready` holds.
  void wait(const std::function<bool()>& ready);
  void log(const std::string& what) const {
    if (options_.log) options_.log(what);
  }

  boost::asio::io_context& loop_;
  array_options options_;
  device::real_clock clock_;
  std::unique_ptr<device::io_ring> ring_;
  std::unique_ptr<config_store> config_;
  std::unique_ptr<controller::event_log> events_;
  std::unique_ptr<operation_log> operations_;
  std::unique_ptr<shelf> shelf_;
  array_identity identity_{};
  std::unique_ptr<controller::partner> partner_;
  // This controller's lease on its pools, renewed by its drive heartbeat
  // (lease.h; with a partner only), which the gates in front of the
  // shelf's drives ask at every request (shelf::fence).
  std::unique_ptr<controller::lease> lease_;
  std::vector<std::unique_ptr<disk_group>> groups_;
  std::vector<std::string> group_names_;  // groups_'s resource names ("groups/g1")
  std::unique_ptr<drive_bay> bay_;        // over shelf_ and groups_
  // How group `index` of groups_ runs: its member failures go to bay_.
  group_options group_options_for(std::size_t index);
  // A pool this controller owns: its metadata store (STATE/pools/NAME),
  // the pool, its migrator, and its groups' names by the pool's own index
  // (extent_location::group).
  struct served_pool {
    // The partner's copy of the metadata (with a partner): before the
    // store, which feeds it until it is gone.
    std::unique_ptr<pool_mirror> mirror;
    std::unique_ptr<tiering::metadata_store> metadata;
    std::unique_ptr<controller::write_cache>
        write_cache;  // before the pool, which uses its devices
    std::unique_ptr<tiering::pool> pool;
    std::unique_ptr<tiering::migrator> migrator;
    std::vector<std::string> groups;
    tiering::migrator_options migration;  // the record's cold cooling
    pool_ownership ownership;             // its owner and epoch, as on its groups' controller areas
    bool lost = false;  // the partner took it over while this controller was frozen: stepped down
  };
  std::map<std::string, served_pool> pools_;  // by name: "pools/p1"
  // Pool `name` ("pools/p1"), or null.
  served_pool* pool_named(std::string_view name);
  const served_pool* pool_named(std::string_view name) const;
  // Group `name` ("groups/g1"), or null.
  disk_group* group_named(const std::string& name) const;
  // Volume `name` ("pools/p1/volumes/v1") and its pool, or nulls.
  std::pair<served_pool*, tiering::volume*> volume_named(std::string_view name) const;
  // Opens pool `record`'s store and pool over its groups, blocking.
  // `on_loop`: called where it may drive the loop (start-up), which
  // opening a write log (its replay) needs.
  std::expected<served_pool, error> load_pool(const v1::Pool& record, bool on_loop);
  // Serves a loaded pool: its migrator runs. On the loop.
  void adopt_pool(const std::string& name, served_pool p);
  // Lets a pool's I/O end, then saves its heat and cache index, flushes
  // its volumes and stops its write cache (what is dirty stays in the log,
  // for whoever opens the pool next). Drives the loop; its migrator is
  // stopped already.
  void quiesce_pool(served_pool& served);
  // The pool's metadata mirrored to the partner (metadata_mirror.h), from
  // now on; on the loop, with a partner.
  void attach_mirror(const std::string& name, served_pool& p);
  // Rewrites pool `name`'s ownership records saying whether the partner's
  // copy of its metadata is current; refused without a valid lease.
  void record_copy(const std::string& name, bool current,
                   std::function<void(std::error_code)> done);
  // Asks the partner whether hot spare `disk` may take a failed member's
  // place here (drive_bay::set_spare_claims): granted outright while it is
  // DOWN (at its start it finds the spare holding this controller's
  // superblock, and leaves it), later while it is unreachable but alive.
  void claim_spare(const std::string& disk, std::function<void(raid::spare_claim)> answer);
  // The partner is DOWN: each pool it owned is taken over, from this
  // controller's copy of its metadata, if the records on its drives say
  // that copy is current (takeover.cc).
  void take_over_pools();
  void take_over(const v1::Pool& record);
  // Its groups assembled, its pool opened from the copy (the write log
  // replayed), its LUNs presented, its record updated. Drives the loop.
  std::expected<void, error> take_over_now(const v1::Pool& record, const pool_ownership& o);
  // Pool `pool`'s ownership, as the newest record on its drives says, and
  // where each of its members' areas is.
  struct ownership_found {
    std::optional<pool_ownership> newest;
    std::vector<area_stamp> members;  // drive and area, nothing to write yet
    std::vector<std::size_t> drives;  // the members' shelf indexes
  };
  void read_ownership(const std::string& pool, std::function<void(ownership_found)> done);
  // read_areas and write_stamps, counted: close() waits for the drives to
  // answer them, since a drive closed under a request never completes it
  // (and what waits on it is never freed).
  void read_drive_areas(const std::vector<device::block_device*>& drives,
                        std::function<void(std::vector<drive_area>)> done);
  void write_drive_stamps(std::vector<area_stamp> stamps,
                          std::function<void(std::error_code)> done);
  // A takeover's epoch, written right after its last "partner DOWN"
  // check, under `claim` (partner::claim) until it is on the drives.
  // A takeover's last steps, once the partner's key is off the pool's
  // drives: its epoch written (within the claim), the pool opened.
  void take_over_stamped(const v1::Pool& record, std::vector<area_stamp> stamps,
                         std::shared_ptr<void> claim, std::function<void(const std::string&)> fail,
                         device::time_point started, const pool_ownership& o);
  void stamp_after_check(std::vector<area_stamp> stamps, std::shared_ptr<void> claim,
                         std::function<void(std::error_code)> done);
  std::size_t area_io_in_flight_ = 0;
  // Failback: pool `name`, served here away from its home controller (the
  // partner), goes back once the partner is ACTIVE and holds a current
  // copy of its metadata: its LUNs are withdrawn, the pool closed (its
  // last metadata mirrored), the partner's ownership written on its
  // drives with a new epoch, and the partner told to serve it; should the
  // partner fail to, this controller takes it back. Drives the loop.
  void hand_over(const std::string& name);
  void hand_over_now(const std::string& name);
  // Runs `work` on the loop, after whatever of its kind runs or waits
  // already: a takeover, a pool taken back or handed in, a hand-over.
  // Each drives the loop while it opens or closes a pool; nested in one
  // another's waits, one would see groups_ change under it (a group it
  // assembles replaced, or destroyed with its I/O in flight). Posted: a
  // drive's completion must return before the ring delivers the next.
  void one_at_a_time(std::function<void()> work);
  bool moving_pool_ = false;
  std::deque<std::function<void()>> pool_work_;
  // Start-up with a partner whose drive heartbeat beats: it may be taking
  // this controller's pools over (it found it silent). Those the drives
  // name this controller the owner of wait (reclaim_) until the partner
  // has heard it, then are opened if the drives still name it.
  bool partner_beating(const std::vector<drive_area>& areas);
  void reclaim_pools();
  std::set<std::string> reclaim_;
  std::unique_ptr<boost::asio::steady_timer> reclaim_timer_;

 public:
  // Where pools belong changed (a pool's home, a controller failed over
  // or back: management.h, here or through the partner): each pool served
  // here that belongs with the partner now is handed over. On the loop.
  void placement_changed();
  // Follows pools moving between the controllers for operation
  // `operation` (a planned move, failover or failback): `pools` maps each
  // to the controller it goes to ("controllers/b"); its progress is the
  // share whose owner this controller's record names so, SUCCEEDED when
  // all do, FAILED after `limit` (the events say why) or at a stop.
  void follow_pools(const std::string& operation, std::map<std::string, std::string> pools,
                    std::chrono::seconds limit);
  // What this controller is doing with pools now: taking some over (a
  // takeover, or pools handed to it), handing some over, or neither.
  enum class moving { none, taking_over, handing_over };
  moving pools_moving() const noexcept {
    return !taking_over_.empty()    ? moving::taking_over
           : !handing_over_.empty() ? moving::handing_over
                                    : moving::none;
  }

 private:
  void take_back(const v1::Pool& record, const std::string& why);
  // The partner handed pool `name` over (link_type::pool_handover).
  void receive_pool(const std::string& name, link_reply reply);
  // Pool `pool`'s record in this controller's config store says `owner`
  // and `epoch`, as its drives do. Who owns a pool is what its drives say;
  // each controller keeps its own record of it, changed when it learns
  // of a takeover or a hand-over, and not an array-wide change (no
  // generation: the two controllers' records would otherwise diverge when
  // one takes a pool over while the other is away). Blocking: rare.
  void note_owner(const std::string& pool, const std::string& owner, std::uint64_t epoch);
  // Whether pool record `record`'s home is the partner.
  bool home_is_partner(const v1::Pool& record) const;
  // Whether pool record `record` belongs with the partner now: its home
  // is the partner and the partner is not failed over, or this controller
  // is (the controllers' records, management.h). Reads the config store.
  bool belongs_with_partner(const v1::Pool& record) const;
  // Pools moving for operations (follow_pools), checked every 100 ms.
  struct followed_pools {
    std::string operation;
    std::map<std::string, std::string> pools;  // name → the controller it goes to
    device::time_point until{};
  };
  std::vector<followed_pools> pool_moves_;
  std::unique_ptr<boost::asio::steady_timer> pool_move_timer_;
  void check_pool_moves();
  std::set<std::string> handing_over_;
  // A gate held a drive request because the lease had lapsed: once the
  // lease is renewed, the ownership records say whether this controller
  // still owns each pool it serves; the gates open for those it does, and
  // shut for good on the drives of those it lost (it steps down).
  void confirm_ownership();
  void step_down(const std::string& pool, const pool_ownership& newer,
                 const std::vector<std::size_t>& drives);
  bool confirming_ = false;
  // Persistent reservations (raid/device/reservations.h): this
  // controller's key and its partner's, derived from the array's id; the
  // drives of a pool (every member of its groups by the configuration,
  // and those holding its ownership record), whose partner's key a
  // takeover removes before it writes its epoch; and this controller's
  // key registered again (after a confirm, or a heartbeat a drive refused
  // while the lease was fenced, when nothing but the controller's own
  // records reaches a drive).
  std::uint64_t reservation_key_of(const std::string& controller) const;
  std::set<std::size_t> drives_of_pool(const std::string& pool,
                                       const std::vector<std::size_t>& recorded) const;
  void register_again(const std::string& why, std::function<void()> then = {});
  bool registering_ = false;
  // The fence on the medium from the start: this controller's key on every
  // drive as soon as the array's id is known, before its first write (the
  // partner's takeover removes it from a pool's drives before it writes
  // its epoch, and they refuse what this controller still had queued).
  void register_reservations();
  bool reservations_registered_ = false;
  std::set<std::size_t> lost_groups_;  // indexes into groups_ of the pools stepped down from: their
                                       // member events are ignored
  std::unique_ptr<boost::asio::steady_timer> confirm_timer_;
  // The partner's copies of its pools' metadata (with a partner).
  std::unique_ptr<metadata_replicas> replicas_;
  std::set<std::string> taking_over_;         // pools whose takeover runs
  boost::asio::thread_pool state_writer_{1};  // the write cache's synced config writes
  // A volume presented to hosts: its logical unit here, over its
  // reservation state, when this controller serves its pool; else a
  // forwarded unit, which sends its commands to the partner's
  // (forwarded_unit.h). Hosts see one LUN either way.
  struct served_volume {
    std::string serial;
    std::uint32_t block_size_bytes = 0;
    std::unique_ptr<pool_unit_state_store> state;
    // 512-byte blocks over the volume's 4096-byte ones, for a 512e volume;
    // declared before the unit, which uses it and goes first.
    std::unique_ptr<device::emulated_512e> emulation;
    std::unique_ptr<scsi::logical_unit> unit;
    std::unique_ptr<forwarded_unit> forwarded;
    std::size_t mappings = 0;  // hosts that see it
    scsi::unit_interface& presented() const {
      return unit ? static_cast<scsi::unit_interface&>(*unit) : *forwarded;
    }
  };
  // The unit for `volume` as things stand: a logical unit when its pool
  // is served here, else (with a partner) a forwarded unit; why not.
  std::expected<served_volume, error> make_unit(const std::string& volume,
                                                const std::string& serial,
                                                std::uint32_t block_size_bytes,
                                                scsi::state_origin origin);
  // The forwarded unit for `volume`, whose pool the partner serves: this
  // controller's ports send its commands to the partner's unit.
  served_volume forwarded_volume(const std::string& volume, const std::string& serial,
                                 std::uint32_t block_size_bytes);
  // Every volume of pool `pool` presented to hosts is now reached through
  // a logical unit here (`here`, after a takeover or a hand-over to this
  // controller), or through a forwarded unit (after this controller
  // handed the pool over). The hosts' LUNs stay; the sessions announce
  // their nexuses to the new units; the old ones retire once idle.
  // `stranded`: the old units wait for good (a pool stepped down from:
  // their commands are held at the lost drives' gates until close()).
  void present_pool(const std::string& pool, bool here, bool stranded = false);
  // Presents every mapping of the configuration and withdraws LUNs no
  // mapping names: after the partner changed the mappings.
  void present_mappings();
  // The target port groups, from this controller's view: its own ports
  // active/optimized (it serves the units it runs), the partner's
  // active/non-optimized (they forward to it).
  std::vector<scsi::target_port_group> port_groups() const;
  // Where forwarding stands (forwarded_unit.h): forwarding while the link
  // is up; unavailable when the partner has been alive without a link for
  // longer than it takes to notice a dead one; transitioning otherwise.
  forwarding_state forwarding_now() const;
  forwarding_path forwarding_;
  // Runs the partner's forwarded commands on the units here (with a
  // partner); not while close() drains them (`receiving_` false).
  std::unique_ptr<forward_receiver> receiver_;
  bool receiving_ = true;
  device::time_point liveness_since_{};         // when the partner's liveness last changed
  std::map<std::string, served_volume> units_;  // by volume name
  // A host: its terms and its view of the units (LUN masking).
  struct served_host {
    host_access access;
    std::unique_ptr<scsi::lun_map> luns;
  };
  std::map<std::string, served_host> hosts_;  // by host name
  // Maps of removed hosts: a session being closed may still hold one, so
  // they stay (empty, small) until close().
  std::vector<std::unique_ptr<scsi::lun_map>> retired_maps_;
  // Units no host sees any more, destroyed once their last command ends.
  std::vector<served_volume> retiring_;
  // Units of pools stepped down from, whose commands wait at the lost
  // drives' gates: destroyed at close(), once shut_lost() failed them.
  std::vector<served_volume> stranded_;
  std::unique_ptr<iscsi::server> server_;
  // NVMe/TCP: one subsystem, each host's namespaces its LUNs (NSID = LUN
  // + 1), rebuilt by present_nvme() whenever the hosts or their LUN maps
  // change. ANA group 1 is controller a's pools, 2 b's.
  std::unique_ptr<nvme::server> nvme_;
  void present_nvme();
  // The ANA groups' states on this port: this controller's optimized; the
  // partner's non-optimized while the link to it is up (its namespaces
  // are forwarded), change (transitioning) while it is unreachable or
  // being taken over, so that hosts wait (ANATT) rather than fail.
  void present_nvme_ana();
  // The volumes' counters at the last two samples, for rates.
  struct sample {
    device::time_point at{};
    tiering::volume_counters counters;
  };
  std::map<std::string, std::pair<sample, sample>> samples_;  // by volume name: (before, last)
  std::unique_ptr<boost::asio::steady_timer> sampler_;
  // Volumes whose extents the migrator moves to one tier, by command.
  struct followed_move {
    std::string volume;  // its name: "pools/p1/volumes/v1"
    tiering::tier to = tiering::tier::capacity;
    std::uint64_t to_move = 0;  // extents on the other tier when it began
    std::string operation;
  };
  std::vector<followed_move> moves_;
  std::unique_ptr<boost::asio::steady_timer> move_timer_;
  void check_moves();
  void take_samples();
  bool closed_ = false;
  bool started_ = false;  // open() finished: close() then records a clean stop
  // Expired once the array is gone: for callbacks the servers post to the
  // loop after it may have been destroyed (step_down's connection reset).
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace strata::controller
