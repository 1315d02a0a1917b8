// A Ceph group as the controller holds it: one RBD image in a Ceph
// cluster, the cold tier of a pool (docs/ceph-tier.md). Ceph keeps the
// image's redundancy, so the group has no members, no RAID, no rebuild
// and no scrub; what the controller adds is the connection's life.
//
//   - Made through the API (connect()): every input is checked before
//     anything is recorded -- the keyring file, the monitors, the key, the
//     RADOS pool, the image and its size -- with an error naming what is
//     wrong; the cluster's fsid is recorded with the group.
//   - At start-up (open_later()): Ceph being down must not keep the
//     array from starting, so the image is opened on the group's own
//     thread, now and every retry interval until it opens. Meanwhile its
//     requests fail with busy (the host retries), and the array pauses the group
//     (tiering::pool::pause_group): only the extents in Ceph are out of
//     reach, with a clear status.
//   - Once open, librados rides out an outage by itself; an I/O the
//     cluster does not answer within op_timeout fails with timed_out.
//   - Every status_interval the thread asks the monitors for the
//     cluster's health and totals (status(), for the API; blocking calls,
//     never on the loop).
//   - Letting go (release(), the destructor) never waits on the loop
//     either: the thread may be inside a query for up to op_timeout, and
//     the image's close is a round trip to the OSDs.
//
// Threads: the block_device side on the loop; status() from any thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "raid/device/rbd_device.h"
#include "raid/member_health.h"
#include "raid/member_replacement.h"
#include "raid/progress.h"

namespace strata::controller {

struct ceph_group_spec {
  device::ceph_connection_options connection;
  std::string rados_pool;
  std::string image;
  std::uint64_t size_bytes = 0;  // a multiple of 4096
  // The cluster's fsid, recorded when the group was made: an image of
  // another cluster with the same names is refused. Empty: not known yet.
  std::string fsid;
  std::string name() const { return rados_pool + "/" + image; }
};

// What the controller last saw of the image and its cluster.
struct ceph_status {
  bool connected = false;
  std::string
      status;  // why not connected, or the last health query's failure; empty when all is well
  std::string health;               // HEALTH_OK, HEALTH_WARN, HEALTH_ERR, or "" (not asked yet)
  std::vector<std::string> checks;  // "OSD_DOWN: 1 osds down"
  device::ceph_usage usage;
  // What its RADOS pool may still take (ceph df's MAX AVAIL), if known: on
  // a cluster shared with other images, less than the image's free space.
  std::optional<std::uint64_t> pool_available_bytes;
  // The cluster says it is (nearly) full: no more extents go there.
  bool full = false;
};

class ceph_image final : public device::block_device, public raid::member_replacement {
 public:
  struct options {
    std::chrono::seconds retry_interval{10};   // between tries to open, while it cannot
    std::chrono::seconds status_interval{10};  // between health queries, once open
  };
  // Connects, checks and opens now: blocks for the monitors and OSDs (up to
  // connection.connect_timeout and a few round trips), so call it on a
  // control thread, never the loop. With `create`, makes the image first.
  // The spec returned by spec() then holds the cluster's fsid.
  static std::expected<std::unique_ptr<ceph_image>, error> connect(boost::asio::io_context& loop,
                                                                   ceph_group_spec spec,
                                                                   bool create, const options& o);
  // For start-up: opens on the group's thread, retrying until it can; never
  // fails here. Requests fail with busy until the image is open.
  static std::unique_ptr<ceph_image> open_later(boost::asio::io_context& loop, ceph_group_spec spec,
                                                const options& o);
  // REQUIRES: idle(). Never blocks: the status thread stops at its own
  // pace (a monitor query in flight takes up to op_timeout), and the image
  // closes on a thread of its own (wait_for_threads, at the process's end).
  ~ceph_image() override;
  ceph_image(const ceph_image&) = delete;
  ceph_image& operator=(const ceph_image&) = delete;

  const device::block_geometry& geometry() const noexcept override { return geometry_; }
  boost::asio::any_io_executor executor() const noexcept override { return loop_.get_executor(); }
  void submit(device::request& req) noexcept override;

  const ceph_group_spec& spec() const noexcept { return spec_; }
  ceph_status status() const;
  bool idle() const noexcept;
  // A clean stop: the image's writes are on the OSDs once it completes.
  void mark_clean(std::function<void(std::error_code)> done);
  // REQUIRES: idle(), after mark_clean. Its pool went to the partner: the
  // thread stops and the image closes, so that its exclusive lock is
  // released (the partner takes it without blocklisting this client).
  // `closed` runs on the loop once it is. Neither blocks the loop: a
  // cluster whose monitors are partitioned holds a status query up to
  // op_timeout, and the close a round trip to the OSDs, while the loop
  // must go on beating (a loop held that long is a frozen controller,
  // whose partner takes every pool over). It takes no more I/O; a
  // takeover back opens the group anew.
  void release(std::function<void()> closed);
  // At the process's end, off the loop: waits up to `limit` for the status
  // and closing threads of the images gone (true: none is left).
  static bool wait_for_threads(std::chrono::milliseconds limit);

  // The group-wide calls a RAID group answers, answered for a group
  // without members.
  unsigned member_count() const noexcept override { return 0; }
  bool member_failed(unsigned) const noexcept override { return false; }
  std::optional<error> replace_member(unsigned, device::block_device*,
                                      std::function<void(std::error_code)>) override;
  const device::block_device* member_device(unsigned) const noexcept { return nullptr; }
  const raid::member_health& health(unsigned) const noexcept;
  void fail_member(unsigned) noexcept {}
  raid::rebuild_progress rebuild_status() const { return {}; }
  void cancel_rebuild() noexcept {}
  std::uint64_t repaired_blocks() const noexcept { return 0; }

 private:
  // What the status thread shares with the image: it outlives the image
  // when a query holds the thread past the image's end.
  struct watch_state;

  ceph_image(boost::asio::io_context& loop, ceph_group_spec spec, const options& o);
  // The group's thread: opens while closed, then asks for the status.
  static void watch(std::shared_ptr<watch_state> state, ceph_image* image,
                    std::shared_ptr<bool> alive);
  // Blocking: connect, check the fsid, open (or create and open). Sets
  // spec.fsid and the state's cluster.
  static std::expected<std::unique_ptr<device::rbd_device>, error> open_now(watch_state& state,
                                                                            bool create);
  // Starts `work` on a thread that wait_for_threads counts.
  static void spawn(std::function<void()> work);
  void start_watching();
  // Tells the thread to stop, and lets it go.
  void stop_watching();
  // A request while the image is not open: fails, from the loop.
  void refuse(device::request& req) noexcept;

  boost::asio::io_context& loop_;
  ceph_group_spec spec_;  // the loop's: its fsid once the image opened
  device::block_geometry geometry_;
  std::unique_ptr<device::rbd_device> device_;  // loop thread; null until open
  unsigned refusing_ = 0;                       // refused requests not yet completed
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for what the thread posts
  std::shared_ptr<watch_state> state_;
  bool watching_ = false;  // the thread runs, and has not been told to stop
};

}  // namespace strata::controller
