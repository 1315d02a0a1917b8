// A Ceph RBD image as a block device: the Ceph capacity tier's storage
// (docs/ceph-tier.md). Ceph keeps the image's redundancy (its pool's
// replicas or erasure code), so a group over it has no RAID of its own.
//
// I/O goes through librbd's asynchronous C API (rbd_aio_readv, _writev,
// _flush, _discard). librbd completes requests on its own threads; this
// device never blocks the loop for them and never runs a completion there:
// the image is told to notify an eventfd (rbd_set_image_notification), the
// loop waits for that descriptor to become readable (Asio), and then takes
// the finished completions in a batch with rbd_poll_io_events, on the loop's
// thread. So completions arrive on executor()'s thread, as the
// block_device contract requires, with no lock and no per-request post.
//
// Errors: librbd's -errno become strata::errc as for a file (EIO a media
// error, ETIMEDOUT timed_out, ...). An op the cluster does not answer within
// the connection's op_timeout fails with timed_out rather than hanging: a
// Ceph outage makes this device's requests fail, with a clear code, and
// nothing else.
//
// The hot path allocates nothing of its own (fixed slots, as file_device);
// librbd allocates a completion per request, which cannot be avoided.
#pragma once

#include <rados/librados.h>
#include <rbd/librbd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/device/request_queue.h"

namespace strata::device {

// How to reach a cluster.
struct ceph_connection_options {
  // The monitors, as Ceph's mon_host takes them: "127.0.0.1:3300",
  // "[v2:10.0.0.1:3300],[v2:10.0.0.2:3300]", or host names.
  std::string monitors;
  std::string user = "admin";  // the cephx name is client.<user>
  std::string keyring_path;    // a keyring file holding client.<user>'s key
  // Give up on the monitors after this long when connecting (Ceph's own
  // default is 300 s: an unreachable monitor would look like a hang).
  std::chrono::seconds connect_timeout{10};
  // An operation the monitors or OSDs have not answered by then fails with
  // ETIMEDOUT (timed_out) instead of waiting for the cluster to return.
  std::chrono::seconds op_timeout{30};
};

// What the monitors say of the cluster (`ceph health`).
struct ceph_health {
  std::string status;  // HEALTH_OK, HEALTH_WARN or HEALTH_ERR
  struct check {
    std::string code;      // OSD_DOWN, PG_AVAILABILITY, POOL_FULL, ...
    std::string severity;  // HEALTH_WARN or HEALTH_ERR
    std::string message;   // "1 osds down"
  };
  std::vector<check> checks;
  bool has(std::string_view code) const noexcept {
    for (const check& c : checks) {
      if (c.code == code) return true;
    }
    return false;
  }
};

// The cluster's raw capacity (`ceph df`'s totals). RBD images are thin in
// Ceph: what a Ceph group may still write is bounded by this, not by its
// image's size.
struct ceph_usage {
  std::uint64_t size_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t available_bytes = 0;
};

// One connection to a cluster (a librados handle with its threads and
// sockets), shared by every image of that cluster a controller opens.
class ceph_cluster {
 public:
  // Connects. Blocks up to connect_timeout: a set-up call, for a control
  // thread. A clear error naming what is wrong: the keyring file missing or
  // unreadable, no monitor answering, the key refused.
  static std::expected<std::shared_ptr<ceph_cluster>, error> connect(
      const ceph_connection_options& options);
  ~ceph_cluster();
  ceph_cluster(const ceph_cluster&) = delete;
  ceph_cluster& operator=(const ceph_cluster&) = delete;

  rados_t handle() const noexcept { return cluster_; }
  const ceph_connection_options& options() const noexcept { return options_; }
  // The cluster's fsid. Blocks briefly (a monitor round trip at most).
  std::string fsid() const;
  // `ceph health` and the cluster's totals. Each blocks for a monitor round
  // trip (up to op_timeout when the monitors are gone): for a control
  // thread, never the loop.
  std::expected<ceph_health, error> health() const;
  std::expected<ceph_usage, error> usage() const;
  // What RADOS pool `pool` may still take (`ceph df`'s MAX AVAIL: the
  // fullest OSD's free space over the pool's replication), the space other
  // images of a shared cluster leave. Blocks as health() does.
  std::expected<std::uint64_t, error> pool_available_bytes(const std::string& pool) const;

 private:
  ceph_cluster(rados_t cluster, ceph_connection_options options)
      : cluster_(cluster), options_(std::move(options)) {}
  rados_t cluster_;
  ceph_connection_options options_;
};

// Creates IMAGE in POOL, `size_bytes` large (thin: Ceph allocates as it
// is written), with rbd's default features. Blocks (a set-up call). Clear
// errors for a pool that does not exist, an image that does, a size of 0.
std::expected<void, error> create_rbd_image(const ceph_cluster& cluster, const std::string& pool,
                                            const std::string& image, std::uint64_t size_bytes);

// The image's exclusive lock (an rbd default feature) at open.
enum class rbd_lock {
  none,          // librbd takes it at the first write, waiting out a dead owner's
  take_if_free,  // take it now; an image another client holds is refused (busy)
  take_over,     // take it now, breaking any owner's (the OSDs blocklist that
                 // client: it can never write to the image again)
};

struct rbd_options {
  std::uint32_t logical_block_size_bytes = 4096;  // 512 or 4096
  // 0: the image's whole size (a multiple of the block size). Otherwise the
  // image must be exactly this many blocks: a group made over an image of
  // one size must not come back over another.
  std::uint64_t block_count = 0;
  std::uint32_t queue_depth = 128;  // requests at librbd at once; more wait in a FIFO
  rbd_lock lock = rbd_lock::none;
};

class rbd_device final : public block_device {
 public:
  // Opens IMAGE in POOL on `context`'s loop. Blocks (a set-up call). A clear
  // error, naming it, for a pool or image that does not exist, an image of
  // the wrong size, or options that make no sense.
  static std::expected<std::unique_ptr<rbd_device>, error> open(
      boost::asio::io_context& context, std::shared_ptr<ceph_cluster> cluster,
      const std::string& pool, const std::string& image, const rbd_options& options);
  // REQUIRES: no request in flight (the block_device contract). Closes the
  // image (blocks until librbd has let go of it).
  ~rbd_device() override;
  // REQUIRES: no request in flight; on the loop. Lets go of the loop's part
  // now (the completion eventfd's wait) and returns the rest of the close
  // for a thread that may block: rbd_close, which releases the image's
  // exclusive lock in a round trip to the OSDs (a partitioned cluster holds
  // it up to op_timeout), then the eventfd librbd wrote to until then.
  static std::function<void()> release(std::unique_ptr<rbd_device> device);

  const block_geometry& geometry() const noexcept override { return geometry_; }
  boost::asio::any_io_executor executor() const noexcept override {
    return context_.get_executor();
  }
  void submit(request& req) noexcept override;

  const std::string& pool() const noexcept { return pool_; }
  const std::string& image() const noexcept { return image_; }
  // Requests at librbd now (those waiting for a slot are behind them).
  std::uint64_t in_flight() const noexcept { return slots_.size() - free_slots_.size(); }

 private:
  struct slot {
    request* req = nullptr;
    rbd_completion_t completion = nullptr;
  };

  rbd_device(boost::asio::io_context& context, std::shared_ptr<ceph_cluster> cluster,
             rados_ioctx_t ioctx, rbd_image_t image, int event_fd, std::string pool,
             std::string image_name, const block_geometry& geometry, std::uint32_t queue_depth);
  void start(slot& s, request& req) noexcept;
  void finish(slot& s, std::error_code result) noexcept;
  void wait_for_events() noexcept;
  void on_events() noexcept;

  boost::asio::io_context& context_;
  std::shared_ptr<ceph_cluster> cluster_;
  rados_ioctx_t ioctx_;
  rbd_image_t image_handle_;
  std::string pool_;
  std::string image_;
  block_geometry geometry_;
  boost::asio::posix::stream_descriptor events_;
  std::uint64_t event_count_ = 0;
  std::vector<slot> slots_;
  std::vector<slot*> free_slots_;
  std::vector<rbd_completion_t> polled_;  // rbd_poll_io_events' batch, sized once
  request_list waiting_;
  completion_queue
      completed_later_;  // refusals and flushes: completed from the loop, never in submit
  // The eventfd wait's handler holds a weak reference: one that runs after
  // the device is gone does nothing.
  std::shared_ptr<rbd_device*> self_;
};

}  // namespace strata::device
