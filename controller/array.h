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
#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "controller/config_store.h"
#include "controller/disk_group.h"
#include "controller/shelf.h"
#include "controller/unit_state.h"
#include "raid/device/clock.h"
#include "raid/device/io_ring.h"
#include "target/iscsi/server.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/lun_map.h"
#include "tiering/metadata_store.h"
#include "tiering/migrator.h"
#include "tiering/pool.h"

namespace strata::controller {

// A new volume's unit serial number (VPD 80h), unique across arrays:
// "STRATA-", 16 random hex digits, "-", the volume's id.
std::string new_volume_serial(std::string_view volume_id);

struct array_options {
  std::filesystem::path state_dir = "/var/lib/strata";
  boost::asio::ip::tcp::endpoint iscsi{boost::asio::ip::make_address("127.0.0.1"), 3260};
  std::string target_name = "iqn.2026-11.io.strata:array";
  // The embedded default, used only on an empty state directory.
  std::vector<drive_spec> shelf = default_shelf();
  std::uint64_t default_volume_bytes = 100ull << 30;
  // Words for an administrator: what was built or found, and why not.
  std::function<void(std::string_view)> log;
};

class array {
 public:
  // Opens the array in options.state_dir, building the embedded default
  // there if it is empty, and starts serving iSCSI. Fails with what went
  // wrong (a drive that cannot be opened, a group that cannot be
  // assembled, a port in use).
  static std::expected<std::unique_ptr<array>, error> open(boost::asio::io_context& loop, const array_options& options);
  // Stops serving, lets commands finish, saves heat and the cache index,
  // flushes, and marks the groups clean. Then the array may be destroyed.
  void close();
  ~array();

  // Management changes: called on the loop (mgmt posts them there), and
  // answered there. The caller records the change in the config store.
  //
  // A new thin volume `name` ("v2") in the pool, durable in the pool's
  // metadata before `done`. errc::no_space: over the pool's overcommit.
  void create_volume(const std::string& name, std::uint64_t bytes, tiering::affinity placement,
                     std::function<void(std::expected<void, error>)> done);
  // Serves volume `name` ("pools/p1/volumes/v2"), whose unit serial number
  // is `serial` (its record's), as `lun` to every initiator, at once.
  std::expected<void, error> map_volume(const std::string& name, const std::string& serial, std::uint32_t lun);
  boost::asio::any_io_executor executor() const { return loop_.get_executor(); }

  boost::asio::ip::tcp::endpoint iscsi_endpoint() const { return server_->local_endpoint(); }
  const std::string& target_name() const noexcept { return options_.target_name; }
  config_store& config() const noexcept { return *config_; }

 private:
  array(boost::asio::io_context& loop, const array_options& options) : loop_(loop), options_(options) {}
  std::expected<void, error> build_default();
  std::expected<void, error> assemble();
  std::expected<void, error> open_pool(const std::string& pool_record);
  std::expected<void, error> serve();
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
  std::unique_ptr<shelf> shelf_;
  std::vector<std::unique_ptr<disk_group>> groups_;
  std::vector<std::string> group_names_;  // groups_'s resource names ("groups/g1")
  std::unique_ptr<tiering::metadata_store> metadata_;
  std::unique_ptr<tiering::pool> pool_;
  std::unique_ptr<tiering::migrator> migrator_;
  boost::asio::thread_pool state_writer_{1};  // the reservation state's synced writes
  std::vector<std::unique_ptr<config_unit_state_store>> unit_states_;
  std::vector<std::unique_ptr<scsi::logical_unit>> units_;
  std::unique_ptr<scsi::lun_map> luns_;
  std::unique_ptr<iscsi::server> server_;
  bool closed_ = false;
};

}  // namespace strata::controller
