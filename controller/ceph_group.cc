#include "controller/ceph_group.h"

#include <boost/asio/post.hpp>

namespace strata::controller {

namespace {

constexpr std::uint32_t block_bytes = 4096;  // the pool's groups' block size

// The health checks that mean no more data should go to the cluster.
bool full_check(const std::string& code) {
  return code == "OSD_FULL" || code == "OSD_NEARFULL" || code == "POOL_FULL" ||
         code == "POOL_NEARFULL" || code == "OSD_BACKFILLFULL" || code == "POOL_BACKFILLFULL";
}

}  // namespace

ceph_image::ceph_image(boost::asio::io_context& loop, ceph_group_spec spec, const options& o)
    : loop_(loop), spec_(std::move(spec)), options_(o) {
  geometry_.logical_block_size_bytes = block_bytes;
  geometry_.block_count = spec_.size_bytes / block_bytes;
  geometry_.buffer_alignment_bytes = 0;
  geometry_.max_segments = 1024;  // rbd_aio_readv/writev take iovecs
  status_.status = "not connected yet";
}

std::expected<std::unique_ptr<ceph_image>, error> ceph_image::connect(boost::asio::io_context& loop,
                                                                      ceph_group_spec spec,
                                                                      bool create,
                                                                      const options& o) {
  if (spec.size_bytes == 0 || spec.size_bytes % block_bytes != 0) {
    return std::unexpected(
        make_error(errc::invalid_argument, "the image size " + std::to_string(spec.size_bytes) +
                                               " is not a positive multiple of 4096 bytes"));
  }
  std::unique_ptr<ceph_image> g(new ceph_image(loop, std::move(spec), o));
  auto opened = g->open_now(create);
  if (!opened) return std::unexpected(opened.error());
  g->device_ = std::move(*opened);
  g->set_status([](ceph_status& s) {
    s.connected = true;
    s.status.clear();
  });
  g->thread_ = std::thread([raw = g.get()] { raw->watch(); });
  return g;
}

std::unique_ptr<ceph_image> ceph_image::open_later(boost::asio::io_context& loop,
                                                   ceph_group_spec spec, const options& o) {
  std::unique_ptr<ceph_image> g(new ceph_image(loop, std::move(spec), o));
  g->thread_ = std::thread([raw = g.get()] { raw->watch(); });
  return g;
}

ceph_image::~ceph_image() {
  release();
}

void ceph_image::release() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  *alive_ = false;
  if (!device_) return;
  device_.reset();
  set_status([](ceph_status& s) {
    s.connected = false;
    s.status = "closed here: its pool is served by the partner";
  });
}

std::expected<std::unique_ptr<device::rbd_device>, error> ceph_image::open_now(bool create) {
  auto cluster = device::ceph_cluster::connect(spec_.connection);
  if (!cluster) return std::unexpected(cluster.error());
  const std::string fsid = (*cluster)->fsid();
  if (!spec_.fsid.empty() && fsid != spec_.fsid) {
    return std::unexpected(make_error(
        errc::invalid_argument, "the cluster at " + spec_.connection.monitors + " is " + fsid +
                                    ", not " + spec_.fsid + " where the group's image was made"));
  }
  if (create) {
    if (auto made =
            device::create_rbd_image(**cluster, spec_.rados_pool, spec_.image, spec_.size_bytes);
        !made) {
      return std::unexpected(made.error());
    }
  }
  device::rbd_options o;
  o.logical_block_size_bytes = block_bytes;
  o.block_count = spec_.size_bytes / block_bytes;
  // A new group's image must be no one's; an existing group's is this
  // controller's now (its pool's owner), whoever held it before.
  o.lock =
      create || spec_.fsid.empty() ? device::rbd_lock::take_if_free : device::rbd_lock::take_over;
  auto opened = device::rbd_device::open(loop_, *cluster, spec_.rados_pool, spec_.image, o);
  if (!opened) return std::unexpected(opened.error());
  spec_.fsid = fsid;
  cluster_ = std::move(*cluster);
  return opened;
}

void ceph_image::set_status(const std::function<void(ceph_status&)>& change) {
  std::lock_guard lock(mutex_);
  change(status_);
}

ceph_status ceph_image::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}

void ceph_image::watch() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const bool open = cluster_ != nullptr;
    lock.unlock();
    if (!open) {
      auto opened = open_now(false);
      if (opened) {
        // Handed to the loop, which serves with it from its next turn.
        auto opened_device =
            std::make_shared<std::unique_ptr<device::rbd_device>>(std::move(*opened));
        boost::asio::post(loop_, [this, alive = alive_, opened_device] {
          if (*alive) device_ = std::move(*opened_device);
        });
        set_status([](ceph_status& s) {
          s.connected = true;
          s.status.clear();
        });
        lock.lock();
        continue;  // its health and room at once, not a status interval later
      } else {
        set_status([&](ceph_status& s) {
          s.connected = false;
          s.status = opened.error().message;
        });
      }
    } else {
      auto health = cluster_->health();
      auto usage = cluster_->usage();
      auto pool_available = cluster_->pool_available_bytes(spec_.rados_pool);
      set_status([&](ceph_status& s) {
        s.pool_available_bytes = pool_available ? std::optional(*pool_available) : std::nullopt;
        s.status.clear();
        if (health) {
          s.health = health->status;
          s.checks.clear();
          s.full = false;
          for (const auto& c : health->checks) {
            s.checks.push_back(c.code + ": " + c.message);
            s.full = s.full || full_check(c.code);
          }
        } else {
          s.status = "the monitors did not answer: " + health.error().message;
        }
        if (usage) s.usage = *usage;
      });
    }
    lock.lock();
    wake_.wait_for(lock, open ? options_.status_interval : options_.retry_interval,
                   [this] { return stopping_; });
  }
}

void ceph_image::refuse(device::request& req) noexcept {
  ++refusing_;
  boost::asio::post(loop_, [this, alive = alive_, &req] {
    if (!*alive) return;
    --refusing_;
    // busy: the initiator retries (SCSI BUSY, NVMe command interrupted),
    // and the pool does not take it for an outage of the cluster.
    device::complete(req, make_error_code(errc::busy));
  });
}

void ceph_image::submit(device::request& req) noexcept {
  if (!device_) return refuse(req);
  device_->submit(req);
}

bool ceph_image::idle() const noexcept {
  return refusing_ == 0 && (!device_ || device_->in_flight() == 0);
}

void ceph_image::mark_clean(std::function<void(std::error_code)> done) {
  if (!device_) {
    boost::asio::post(loop_, [done = std::move(done)] { done({}); });
    return;
  }
  struct flush_box {
    device::request req;
    std::function<void(std::error_code)> done;
  };
  auto box = new flush_box{};
  box->done = std::move(done);
  box->req.operation = device::op::flush;
  box->req.context = box;
  box->req.on_complete = [](device::request& r) noexcept {
    auto* b = static_cast<flush_box*>(r.context);
    auto then = std::move(b->done);
    const std::error_code ec = r.result;
    delete b;
    then(ec);
  };
  device_->submit(box->req);
}

std::optional<error> ceph_image::replace_member(unsigned, device::block_device*,
                                                std::function<void(std::error_code)>) {
  return make_error(errc::not_supported, "a Ceph group has no members: Ceph keeps its redundancy");
}

const raid::member_health& ceph_image::health(unsigned) const noexcept {
  static const raid::member_health none{};
  return none;
}

}  // namespace strata::controller
