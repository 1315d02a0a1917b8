// stratad's configuration file (TOML; the commented example is
// controller/strata.example.toml, the prose README.md): how the daemon
// runs (state directory, portals, the management API), and what array to
// build on an empty state directory.
//
// The build sections ([[drive]], [[group]], [pool], [[volume]], [[host]],
// [[mapping]]) are read once: when the state directory is empty. After
// that the array is what the config store and the RAID superblocks say,
// and a restart re-assembles it from them, never from the file; changes go
// through the management API. Without build sections (or without a file)
// an empty state directory gets the embedded default, default_plan().
//
// Parsing checks everything that can be checked without touching a disk:
// unknown keys (a typo is an error, not a silent default), types, names,
// sizes, references between sections, member counts, LUNs, CHAP secrets.
// Each error names the file, line and column, the item, and the reason:
//   strata.toml:12:9: group g1: drives: RAID-6 needs 4 or more drives, has 3
//
// Threads: plain functions of their arguments; load_config() reads a file
// (blocking: start-up only).
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/disk_group.h"
#include "controller/shelf.h"
#include "raid/device/status.h"
#include "tiering/records.h"

namespace strata::controller {

// Names are short ids, as the management API takes them: [a-z][a-z0-9-]*,
// at most 63 characters ("g1", "hdd-00"); the records add the collection
// ("groups/g1", "disks/hdd-00").

// A RAID group to format: RAID-6 (the capacity tier) of 4 or more drives,
// RAID-1 (the performance tier) of 2 or more, or the read cache, one SSD.
// A Ceph group: an RBD image, and how to reach its cluster (v1::CephImage).
struct ceph_plan {
  std::string monitors;
  std::string user = "admin";
  std::string keyring_path;
  std::string rados_pool;
  std::string image;
  std::uint64_t size_bytes = 0;
  bool create = false;  // make the image (else it must exist, of this size)
  bool operator==(const ceph_plan&) const = default;
};

struct group_plan {
  std::string name;
  group_kind kind = group_kind::raid6;
  std::vector<std::string> drives;  // drive names, in member order
  ceph_plan ceph;                   // kind ceph only (no drives)
  bool operator==(const group_plan&) const = default;
};

// A pool over groups of the plan: its RAID-6 and RAID-1 groups in order
// (extents name their group by its index), its read cache and write log.
struct pool_plan {
  std::string name = "p1";
  std::vector<std::string> groups;
  std::string read_cache_group;  // "": no read cache
  std::string write_log_group;   // "": no write-back cache
  // The controller that serves it when both run ("a" or "b"); controller
  // a builds every pool and hands b its own once b's copy of the pool's
  // metadata is current.
  std::string home = "a";
  // With a Ceph group: how long an extent stays idle before it moves
  // there (v1::Pool.cold_cooling_seconds); none: the default, 31 days.
  std::optional<std::uint64_t> cold_cooling_seconds;
  bool operator==(const pool_plan&) const = default;
};

// A thin volume of a pool.
struct volume_plan {
  std::string name;
  std::uint64_t bytes = 0;  // a positive multiple of 4096
  tiering::affinity placement = tiering::affinity::automatic;
  // The logical block size its LUN presents: 512 (512e: 512-byte blocks
  // over the pool's 4096-byte ones, the default) or 4096 (4Kn).
  std::uint32_t block_size_bytes = 512;
  std::string pool = "p1";  // its pool's name
  bool operator==(const volume_plan&) const = default;
};

// An initiator host (the Host record's terms, v1::Host).
struct host_plan {
  std::string name;
  std::vector<std::string> iqns;
  bool any_initiator = false;  // every initiator no other host names; one host at most
  std::string chap_user, chap_secret, mutual_chap_user, mutual_chap_secret;
  std::vector<std::string> nqns;  // its NVMe host NQNs
  bool operator==(const host_plan&) const = default;
};

// A volume served to a host as a LUN; the records are "mappings/m1",
// "m2", … in this order.
struct mapping_plan {
  std::string volume;  // a volume's name ("v1")
  std::string host;    // a host's name ("all")
  std::uint32_t lun = 0;
  bool operator==(const mapping_plan&) const = default;
};

// What an empty state directory is built as (array::open): the drives
// opened (created sparse, for simulated ones), the groups formatted and
// recorded, then the pool opened on its groups, its volumes created, the
// hosts and mappings recorded. Used once: a restart re-assembles the array
// from the config store and the superblocks.
struct array_plan {
  std::vector<drive_spec> drives;  // slots in this order; drives in no group stay unused
  std::vector<group_plan> groups;
  std::vector<pool_plan> pools;
  std::vector<volume_plan> volumes;  // names unique across the pools
  std::vector<host_plan> hosts;
  std::vector<mapping_plan> mappings;
  bool operator==(const array_plan&) const = default;
};

// The embedded default: 20 nearline HDDs as two RAID-6 groups of 10 (g1,
// g2), ssd-00 and ssd-01 as RAID-1 (g3), ssd-02 the read cache (g4),
// ssd-03 and ssd-04 the mirrored write log (g5); pool p1 on g1 g2 g3 with
// g4 as its read cache and g5 as its write log (write-back); volume v1, 100 GiB, auto
// placement; host "all" (any initiator); v1 mapped to it as LUN 0 (m1).
array_plan default_plan();
// The embedded default's layout over other drives (HDDs in two RAID-6
// halves, the first two SSDs RAID-1, the third the read cache, the fourth
// and fifth the write log), with v1 of `volume_bytes`.
// REQUIRES: 8 or more HDDs, 3 or more SSDs.
array_plan default_plan(std::vector<drive_spec> drives, std::uint64_t volume_bytes);

// The embedded default of two controllers (dual_shelf(): 20 HDDs, 10 SSDs):
// one pool per controller, as the seed array had one RAID-6 group each.
// Pool p1 (home a) on g1 (HDDs 0-9, RAID-6) and g3 (ssd-00, ssd-01,
// RAID-1), read cache g4 (ssd-02), write log g5 (ssd-03, ssd-04); pool p2
// (home b) on g2 (HDDs 10-19) and g6 (ssd-05, ssd-06), read cache g7
// (ssd-07), write log g8 (ssd-08, ssd-09). Volume v1 in p1 and v2 in p2,
// `volume_bytes` each, mapped to host "all" as LUN 0 and LUN 1.
// REQUIRES: 8 or more HDDs, 10 or more SSDs.
array_plan dual_plan(std::vector<drive_spec> drives, std::uint64_t volume_bytes);
array_plan dual_plan();

// How the daemon runs. Command-line flags override each (stratad.cc).
struct daemon_settings {
  std::filesystem::path state_dir = "/var/lib/strata";
  std::string iscsi_listen = "127.0.0.1:3260";  // ADDR:PORT, [V6ADDR]:PORT
  // The portals SendTargets names to initiators ("host:port", a DNS name
  // or an address; IPv6 in brackets). Empty: the address the discovery
  // connection came in on.
  std::vector<std::string> iscsi_portals;
  std::string target_name = "iqn.2026-11.io.strata:array";
  std::string grpc_listen = "127.0.0.1:50051";  // as gRPC takes it
  // All three or none (mgmt/README.md): the API's TLS certificate chain
  // and key (PEM), and its bearer token's file.
  std::filesystem::path grpc_tls_cert, grpc_tls_key, grpc_token_file;
  // The HTTP side (mgmt/http_server.h: the JSON API, /metrics, the
  // console): ADDR:PORT, or "off". Off loopback it takes the three TLS
  // settings above, as the API does. Empty: as NVMe/TCP's default, port
  // 8080 at the iSCSI portal's address when that is the default port 3260
  // (the embedded default, a real deployment); else off, so that daemons
  // on test ports never contend for 8080.
  std::string http_listen;
  // How often each pool snapshots its hottest extents into its heat
  // history (tiering/heat_history.h), for the heat map.
  std::chrono::seconds heat_history_interval{600};
  bool operator==(const daemon_settings&) const = default;
};

struct strata_config {
  daemon_settings daemon;
  std::optional<array_plan> plan;  // none: the file has no build sections
};

// Parses a configuration file's text. `origin` names it in errors
// ("strata.toml"); relative paths in it (state_dir, drive paths, the TLS
// files) are taken relative to `base` (load_config: the file's directory),
// or left as they are if `base` is empty. errc::invalid_argument with the
// first problem found.
std::expected<strata_config, error> parse_config(std::string_view text, std::string_view origin,
                                                 const std::filesystem::path& base = {});
// Reads and parses the file at `path`.
std::expected<strata_config, error> load_config(const std::filesystem::path& path);

// "ADDR:PORT" ("[V6ADDR]:PORT") as an iSCSI listener takes it: a numeric
// address and a port. Else why not.
struct listen_address {
  std::string address;  // without brackets
  std::uint16_t port = 0;
};
std::expected<listen_address, std::string> parse_listen_address(std::string_view text);

// A portal to advertise: "host:port", the host a DNS name, an IPv4
// address or an [IPv6] one. Empty if it is one; else why not.
std::optional<std::string> check_portal(std::string_view portal);

// An NVMe/TCP port for the discovery log (stratad --nvme-portal):
// "host:port" as check_portal takes it (this controller's port, as hosts
// reach it), or "host:port,PORTID" (another's: 1 is controller a's, 2
// b's). Else why not.
struct nvme_portal {
  std::string host;  // without brackets
  std::uint16_t port = 0;
  std::uint16_t port_id = 0;  // 0: this controller's
};
std::expected<nvme_portal, std::string> parse_nvme_portal(std::string_view text);

// A size: a whole number of bytes, or one with a binary suffix K, M, G or
// T (optionally KiB, MiB, GiB, TiB): "512M", "100G", "2T". Else why not.
std::expected<std::uint64_t, std::string> parse_size(std::string_view text);

}  // namespace strata::controller
