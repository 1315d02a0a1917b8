#include "controller/ceph_group.h"

#include <boost/asio/post.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace strata::controller {

namespace {

constexpr std::uint32_t block_bytes = 4096;  // the pool's groups' block size

// The health checks that mean no more data should go to the cluster.
bool full_check(const std::string& code) {
  return code == "OSD_FULL" || code == "OSD_NEARFULL" || code == "POOL_FULL" ||
         code == "POOL_NEARFULL" || code == "OSD_BACKFILLFULL" || code == "POOL_BACKFILLFULL";
}

// The threads that outlive their image: status threads inside a query,
// and closes. wait_for_threads counts them.
struct thread_count {
  std::mutex mutex;
  std::condition_variable changed;
  unsigned running = 0;
};
thread_count& threads() {
  // Never destroyed: a thread left at the stop may end after exit's
  // destructors.
  static thread_count* t = new thread_count;
  return *t;
}

}  // namespace

struct ceph_image::watch_state {
  watch_state(boost::asio::io_context& l, ceph_group_spec s, const options& o)
      : loop(l), spec(std::move(s)), options(o) {}
  boost::asio::io_context& loop;
  ceph_group_spec spec;  // the thread's (open_now sets its fsid)
  const ceph_image::options options;
  std::shared_ptr<device::ceph_cluster> cluster;  // the thread's, once connected
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;  // under mutex
  ceph_status status;     // under mutex
  void set_status(const std::function<void(ceph_status&)>& change) {
    std::lock_guard lock(mutex);
    change(status);
  }
};

ceph_image::ceph_image(boost::asio::io_context& loop, ceph_group_spec spec, const options& o)
    : loop_(loop), spec_(spec), state_(std::make_shared<watch_state>(loop, std::move(spec), o)) {
  geometry_.logical_block_size_bytes = block_bytes;
  geometry_.block_count = spec_.size_bytes / block_bytes;
  geometry_.buffer_alignment_bytes = 0;
  geometry_.max_segments = 1024;  // rbd_aio_readv/writev take iovecs
  state_->status.status = "not connected yet";
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
  auto opened = open_now(*g->state_, create);  // no thread yet: the state is this one's
  if (!opened) return std::unexpected(opened.error());
  g->device_ = std::move(*opened);
  g->spec_ = g->state_->spec;
  g->state_->set_status([](ceph_status& s) {
    s.connected = true;
    s.status.clear();
  });
  g->start_watching();
  return g;
}

std::unique_ptr<ceph_image> ceph_image::open_later(boost::asio::io_context& loop,
                                                   ceph_group_spec spec, const options& o) {
  std::unique_ptr<ceph_image> g(new ceph_image(loop, std::move(spec), o));
  g->start_watching();
  return g;
}

ceph_image::~ceph_image() {
  if (!*alive_) return;  // released
  stop_watching();
  *alive_ = false;
  if (device_) spawn(device::rbd_device::release(std::move(device_)));
}

void ceph_image::spawn(std::function<void()> work) {
  thread_count& t = threads();
  {
    std::lock_guard lock(t.mutex);
    ++t.running;
  }
  std::thread([work = std::move(work), &t]() mutable {
    work();
    // What it holds goes too (a cluster's handle shuts down) before it
    // counts as done.
    work = nullptr;
    std::lock_guard lock(t.mutex);
    --t.running;
    t.changed.notify_all();
  }).detach();
}

bool ceph_image::wait_for_threads(std::chrono::milliseconds limit) {
  thread_count& t = threads();
  std::unique_lock lock(t.mutex);
  return t.changed.wait_for(lock, limit, [&] { return t.running == 0; });
}

void ceph_image::start_watching() {
  watching_ = true;
  spawn([state = state_, image = this, alive = alive_] { watch(state, image, alive); });
}

void ceph_image::stop_watching() {
  if (!watching_) return;
  watching_ = false;
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_all();
}

void ceph_image::release(std::function<void()> closed) {
  stop_watching();
  *alive_ = false;
  state_->set_status([](ceph_status& s) {
    s.connected = false;
    s.status = "closed here: its pool is served by the partner";
  });
  if (!device_) return boost::asio::post(loop_, std::move(closed));
  spawn([close = device::rbd_device::release(std::move(device_)), closed = std::move(closed),
         &loop = loop_] {
    close();
    boost::asio::post(loop, closed);
  });
}

std::expected<std::unique_ptr<device::rbd_device>, error> ceph_image::open_now(watch_state& state,
                                                                               bool create) {
  ceph_group_spec& spec = state.spec;
  auto cluster = device::ceph_cluster::connect(spec.connection);
  if (!cluster) return std::unexpected(cluster.error());
  const std::string fsid = (*cluster)->fsid();
  if (!spec.fsid.empty() && fsid != spec.fsid) {
    return std::unexpected(make_error(
        errc::invalid_argument, "the cluster at " + spec.connection.monitors + " is " + fsid +
                                    ", not " + spec.fsid + " where the group's image was made"));
  }
  if (create) {
    if (auto made =
            device::create_rbd_image(**cluster, spec.rados_pool, spec.image, spec.size_bytes);
        !made) {
      return std::unexpected(made.error());
    }
  }
  device::rbd_options o;
  o.logical_block_size_bytes = block_bytes;
  o.block_count = spec.size_bytes / block_bytes;
  // A new group's image must be no one's; an existing group's is this
  // controller's now (its pool's owner), whoever held it before.
  o.lock =
      create || spec.fsid.empty() ? device::rbd_lock::take_if_free : device::rbd_lock::take_over;
  auto opened = device::rbd_device::open(state.loop, *cluster, spec.rados_pool, spec.image, o);
  if (!opened) return std::unexpected(opened.error());
  spec.fsid = fsid;
  state.cluster = std::move(*cluster);
  return opened;
}

ceph_status ceph_image::status() const {
  std::lock_guard lock(state_->mutex);
  return state_->status;
}

void ceph_image::watch(std::shared_ptr<watch_state> state, ceph_image* image,
                       std::shared_ptr<bool> alive) {
  watch_state& w = *state;
  std::unique_lock lock(w.mutex);
  while (!w.stopping) {
    const bool open = w.cluster != nullptr;
    lock.unlock();
    if (!open) {
      auto opened = open_now(w, false);
      if (opened) {
        // Handed to the loop, which serves with it from its next turn; an
        // image gone meanwhile has it closed off the loop.
        auto opened_device =
            std::make_shared<std::unique_ptr<device::rbd_device>>(std::move(*opened));
        boost::asio::post(w.loop, [image, alive, opened_device, fsid = w.spec.fsid] {
          if (!*alive) return spawn(device::rbd_device::release(std::move(*opened_device)));
          image->device_ = std::move(*opened_device);
          image->spec_.fsid = fsid;
        });
        w.set_status([](ceph_status& s) {
          s.connected = true;
          s.status.clear();
        });
        lock.lock();
        continue;  // its health and room at once, not a status interval later
      } else {
        w.set_status([&](ceph_status& s) {
          s.connected = false;
          s.status = opened.error().message;
        });
      }
    } else {
      // Each a monitor round trip (up to op_timeout when they are gone):
      // a stop asked meanwhile is heard between them.
      auto stopping = [&] {
        std::lock_guard stop(w.mutex);
        return w.stopping;
      };
      auto health = w.cluster->health();
      if (stopping()) break;
      auto usage = w.cluster->usage();
      if (stopping()) break;
      auto pool_available = w.cluster->pool_available_bytes(w.spec.rados_pool);
      if (stopping()) break;  // released meanwhile: its status says so, and stays
      w.set_status([&](ceph_status& s) {
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
    w.wake.wait_for(lock, open ? w.options.status_interval : w.options.retry_interval,
                    [&] { return w.stopping; });
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
