#include "raid/device/rbd_device.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <utility>

namespace strata::device {
namespace {

std::string errno_text(int negative_errno) {
  return std::strerror(-negative_errno);
}

// `ceph PREFIX --format json` to the monitors, its answer parsed; `key`:
// a member every answer of its has. Blocks for a monitor round trip.
std::expected<nlohmann::json, error> mon_command(rados_t cluster, const std::string& prefix,
                                                 const char* key) {
  const std::string command_text = R"({"prefix": ")" + prefix + R"(", "format": "json"})";
  const char* command[] = {command_text.c_str()};
  char* out = nullptr;
  char* status = nullptr;
  std::size_t out_len = 0, status_len = 0;
  const int r =
      rados_mon_command(cluster, command, 1, nullptr, 0, &out, &out_len, &status, &status_len);
  const std::string text(out != nullptr ? out : "", out_len);
  rados_buffer_free(out);
  rados_buffer_free(status);
  if (r < 0)
    return std::unexpected(
        make_error(errc_from_errno(-r), "ceph " + prefix + ": " + errno_text(r)));
  auto json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.contains(key)) {
    return std::unexpected(
        make_error(errc::io_error,
                   "ceph " + prefix + ": an answer that is not its JSON: " + text.substr(0, 200)));
  }
  return json;
}

// librbd's and librados's -errno as a device error.
std::error_code code_of(int negative_errno) noexcept {
  return make_error_code(errc_from_errno(-negative_errno));
}

}  // namespace

std::expected<std::shared_ptr<ceph_cluster>, error> ceph_cluster::connect(
    const ceph_connection_options& options) {
  if (options.monitors.empty())
    return std::unexpected(make_error(errc::invalid_argument, "no Ceph monitor address given"));
  if (options.user.empty())
    return std::unexpected(make_error(errc::invalid_argument, "no cephx user given"));
  // Ceph would report a missing keyring as a refused authentication, after
  // its timeout: say what is wrong at once.
  if (options.keyring_path.empty()) {
    return std::unexpected(make_error(errc::invalid_argument, "no cephx keyring file given"));
  }
  if (std::ifstream probe(options.keyring_path); !probe) {
    return std::unexpected(make_error(
        errc::not_found,
        "cannot read the cephx keyring " + options.keyring_path + ": " + std::strerror(errno)));
  }
  rados_t cluster = nullptr;
  if (int r = rados_create(&cluster, options.user.c_str()); r < 0) {
    return std::unexpected(
        make_error(errc_from_errno(-r), "cannot create a Ceph client: " + errno_text(r)));
  }
  const std::string connect_s = std::to_string(options.connect_timeout.count());
  const std::string op_s = std::to_string(options.op_timeout.count());
  // No ceph.conf is read: everything the client needs is here, so that
  // the host's /etc/ceph never changes what the array does.
  const std::pair<const char*, std::string> settings[] = {
      {"mon_host", options.monitors},
      {"keyring", options.keyring_path},
      {"client_mount_timeout", connect_s},
      {"rados_mon_op_timeout", op_s},
      {"rados_osd_op_timeout", op_s},
      // Writes complete when the OSDs hold them, not in the client's
      // memory: the array acknowledges writes it has made durable, and a
      // controller that dies must not take acknowledged data with it.
      {"rbd_cache", "false"},
      // Logs go nowhere (the array logs what it needs), and no admin socket.
      {"log_file", ""},
      {"log_to_stderr", "false"},
      {"err_to_stderr", "false"},
      {"admin_socket", ""},
  };
  for (const auto& [key, value] : settings) {
    if (int r = rados_conf_set(cluster, key, value.c_str()); r < 0) {
      rados_shutdown(cluster);
      return std::unexpected(
          make_error(errc::invalid_argument,
                     std::string("Ceph option ") + key + "=" + value + ": " + errno_text(r)));
    }
  }
  if (int r = rados_connect(cluster); r < 0) {
    rados_shutdown(cluster);
    std::string why;
    switch (-r) {
      case ETIMEDOUT:
        why = "no monitor answered within " + connect_s + " s";
        break;
      case EACCES:
      case EPERM:
        why =
            "the monitors refused client." + options.user + "'s key (" + options.keyring_path + ")";
        break;
      case ENOENT:
        why = "no key for client." + options.user + " in " + options.keyring_path;
        break;
      default:
        why = errno_text(r);
    }
    return std::unexpected(make_error(
        errc_from_errno(-r), "cannot connect to Ceph at " + options.monitors + ": " + why));
  }
  return std::shared_ptr<ceph_cluster>(new ceph_cluster(cluster, options));
}

ceph_cluster::~ceph_cluster() {
  rados_shutdown(cluster_);
}

std::string ceph_cluster::fsid() const {
  std::array<char, 64> buffer{};
  if (rados_cluster_fsid(cluster_, buffer.data(), buffer.size()) < 0) return {};
  return buffer.data();
}

std::expected<ceph_health, error> ceph_cluster::health() const {
  auto answer = mon_command(cluster_, "health", "status");
  if (!answer) return std::unexpected(answer.error());
  const nlohmann::json& json = *answer;
  ceph_health health;
  health.status = json.value("status", "");
  if (auto checks = json.find("checks"); checks != json.end() && checks->is_object()) {
    for (const auto& [code, check] : checks->items()) {
      std::string message;
      if (auto summary = check.find("summary"); summary != check.end())
        message = summary->value("message", "");
      health.checks.push_back({code, check.value("severity", ""), message});
    }
  }
  return health;
}

std::expected<ceph_usage, error> ceph_cluster::usage() const {
  rados_cluster_stat_t stat{};
  if (int r = rados_cluster_stat(cluster_, &stat); r < 0) {
    return std::unexpected(make_error(errc_from_errno(-r), "ceph df: " + errno_text(r)));
  }
  return ceph_usage{stat.kb * 1024, stat.kb_used * 1024, stat.kb_avail * 1024};
}

std::expected<std::uint64_t, error> ceph_cluster::pool_available_bytes(
    const std::string& pool) const {
  auto answer = mon_command(cluster_, "df", "pools");
  if (!answer) return std::unexpected(answer.error());
  const nlohmann::json& json = *answer;
  if (!json["pools"].is_array())
    return std::unexpected(make_error(errc::io_error, "ceph df: its pools are not a list"));
  for (const auto& p : json["pools"]) {
    if (p.value("name", "") != pool) continue;
    if (auto stats = p.find("stats"); stats != p.end() && stats->contains("max_avail")) {
      return (*stats)["max_avail"].get<std::uint64_t>();
    }
  }
  return std::unexpected(make_error(errc::not_found, "ceph df: no RADOS pool " + pool));
}

std::expected<void, error> create_rbd_image(const ceph_cluster& cluster, const std::string& pool,
                                            const std::string& image, std::uint64_t size_bytes) {
  const std::string name = pool + "/" + image;
  if (size_bytes == 0)
    return std::unexpected(make_error(errc::invalid_argument, name + ": a size of 0 bytes"));
  rados_ioctx_t ioctx = nullptr;
  if (int r = rados_ioctx_create(cluster.handle(), pool.c_str(), &ioctx); r < 0) {
    return std::unexpected(make_error(
        errc_from_errno(-r), r == -ENOENT
                                 ? "the RADOS pool " + pool + " does not exist"
                                 : "cannot open the RADOS pool " + pool + ": " + errno_text(r)));
  }
  int order = 0;  // rbd's default object size (4 MiB)
  const int r = rbd_create(ioctx, image.c_str(), size_bytes, &order);
  rados_ioctx_destroy(ioctx);
  if (r == -EEXIST)
    return std::unexpected(
        make_error(errc::invalid_argument, "the RBD image " + name + " exists already"));
  if (r < 0)
    return std::unexpected(make_error(
        errc_from_errno(-r), "cannot create the RBD image " + name + ": " + errno_text(r)));
  return {};
}

std::expected<std::unique_ptr<rbd_device>, error> rbd_device::open(
    boost::asio::io_context& context, std::shared_ptr<ceph_cluster> cluster,
    const std::string& pool, const std::string& image, const rbd_options& options) {
  const std::string name = pool + "/" + image;
  if (options.logical_block_size_bytes != 512 && options.logical_block_size_bytes != 4096) {
    return std::unexpected(
        make_error(errc::invalid_argument, name + ": block size " +
                                               std::to_string(options.logical_block_size_bytes) +
                                               " is not 512 or 4096"));
  }
  if (options.queue_depth == 0)
    return std::unexpected(make_error(errc::invalid_argument, name + ": queue depth 0"));
  rados_ioctx_t ioctx = nullptr;
  if (int r = rados_ioctx_create(cluster->handle(), pool.c_str(), &ioctx); r < 0) {
    return std::unexpected(make_error(
        errc_from_errno(-r), r == -ENOENT
                                 ? "the RADOS pool " + pool + " does not exist"
                                 : "cannot open the RADOS pool " + pool + ": " + errno_text(r)));
  }
  rbd_image_t handle = nullptr;
  if (int r = rbd_open(ioctx, image.c_str(), &handle, nullptr); r < 0) {
    rados_ioctx_destroy(ioctx);
    return std::unexpected(make_error(
        errc_from_errno(-r), r == -ENOENT
                                 ? "the RBD image " + name + " does not exist"
                                 : "cannot open the RBD image " + name + ": " + errno_text(r)));
  }
  auto fail = [&](errc e, std::string message) {
    rbd_close(handle);
    rados_ioctx_destroy(ioctx);
    return std::unexpected(make_error(e, std::move(message)));
  };
  std::uint64_t size_bytes = 0;
  if (int r = rbd_get_size(handle, &size_bytes); r < 0) {
    return fail(errc_from_errno(-r), "cannot read the size of " + name + ": " + errno_text(r));
  }
  const std::uint64_t block = options.logical_block_size_bytes;
  if (size_bytes % block != 0 || size_bytes == 0) {
    return fail(errc::invalid_argument, name + " is " + std::to_string(size_bytes) +
                                            " bytes: not a positive multiple of " +
                                            std::to_string(block));
  }
  if (options.block_count != 0 && size_bytes != options.block_count * block) {
    return fail(errc::invalid_argument,
                name + " is " + std::to_string(size_bytes) + " bytes, not the " +
                    std::to_string(options.block_count * block) + " expected");
  }
  if (options.lock != rbd_lock::none) {
    // Whoever held the image's exclusive lock: none, this controller's own
    // earlier life (killed), or a partner that died. A dead owner's lock
    // would stall the first write until its watch times out (30 s); a
    // fenced owner must never write again. So the owner breaks it, which
    // blocklists the old client at the OSDs, and takes the lock now.
    rbd_lock_mode_t mode{};
    char* owners[8] = {};
    std::size_t count = std::size(owners);
    const int r = rbd_lock_get_owners(handle, &mode, owners, &count);
    if (r == 0 && count > 0) {
      if (options.lock == rbd_lock::take_if_free) {
        const std::string owner = owners[0];
        rbd_lock_get_owners_cleanup(owners, count);
        return fail(errc::busy, name + " is in use: " + owner + " holds its exclusive lock");
      }
      for (std::size_t i = 0; i < count; ++i) {
        if (int b = rbd_lock_break(handle, mode, owners[i]); b < 0 && b != -ENOENT) {
          const std::string owner = owners[i];
          rbd_lock_get_owners_cleanup(owners, count);
          return fail(errc_from_errno(-b),
                      name + ": cannot break " + owner + "'s lock: " + errno_text(b));
        }
      }
      rbd_lock_get_owners_cleanup(owners, count);
    } else if (r < 0 && r != -ENOENT && r != -EOPNOTSUPP) {
      return fail(errc_from_errno(-r), name + ": cannot read its lock owners: " + errno_text(r));
    }
    if (int a = rbd_lock_acquire(handle, RBD_LOCK_MODE_EXCLUSIVE);
        a < 0 && a != -EOPNOTSUPP && a != -EINVAL) {
      return fail(errc_from_errno(-a), name + ": cannot take its exclusive lock: " + errno_text(a));
    }
  }
  const int event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd < 0)
    return fail(errc_from_errno(errno), std::string("eventfd: ") + std::strerror(errno));
  if (int r = rbd_set_image_notification(handle, event_fd, EVENT_TYPE_EVENTFD); r < 0) {
    ::close(event_fd);
    return fail(errc_from_errno(-r),
                name + ": cannot set its completion notification: " + errno_text(r));
  }
  block_geometry geometry;
  geometry.logical_block_size_bytes = options.logical_block_size_bytes;
  geometry.block_count = size_bytes / block;
  geometry.buffer_alignment_bytes = options.logical_block_size_bytes;
  geometry.max_segments = 64;
  return std::unique_ptr<rbd_device>(new rbd_device(context, std::move(cluster), ioctx, handle,
                                                    event_fd, pool, image, geometry,
                                                    options.queue_depth));
}

rbd_device::rbd_device(boost::asio::io_context& context, std::shared_ptr<ceph_cluster> cluster,
                       rados_ioctx_t ioctx, rbd_image_t image, int event_fd, std::string pool,
                       std::string image_name, const block_geometry& geometry,
                       std::uint32_t queue_depth)
    : context_(context),
      cluster_(std::move(cluster)),
      ioctx_(ioctx),
      image_handle_(image),
      pool_(std::move(pool)),
      image_(std::move(image_name)),
      geometry_(geometry),
      events_(context, event_fd),
      slots_(queue_depth),
      polled_(queue_depth),
      completed_later_(context.get_executor()),
      self_(std::make_shared<rbd_device*>(this)) {
  free_slots_.reserve(queue_depth);
  for (slot& s : slots_) free_slots_.push_back(&s);
  wait_for_events();
}

rbd_device::~rbd_device() {
  *self_ = nullptr;
  if (image_handle_ == nullptr) return;  // released: closed on another thread
  boost::system::error_code ignored;
  events_.cancel(ignored);
  rbd_close(image_handle_);
  rados_ioctx_destroy(ioctx_);
  events_.close(ignored);
}

std::function<void()> rbd_device::release(std::unique_ptr<rbd_device> device) {
  rbd_device& d = *device;
  *d.self_ = nullptr;
  boost::system::error_code ignored;
  d.events_.cancel(ignored);
  // Out of the reactor, still open: librbd may write to it until rbd_close.
  const int event_fd = d.events_.release();
  auto close = [image = std::exchange(d.image_handle_, nullptr),
                ioctx = std::exchange(d.ioctx_, nullptr), cluster = d.cluster_, event_fd] {
    rbd_close(image);
    rados_ioctx_destroy(ioctx);
    if (event_fd >= 0) ::close(event_fd);
  };
  device.reset();
  return close;
}

void rbd_device::submit(request& req) noexcept {
  if (auto ec = validate(geometry_, req)) {
    completed_later_.complete_later(req, ec);
    return;
  }
  if (req.operation == op::flush) {
    // With librbd's cache off (ceph_cluster::connect), a write completes
    // once every replica's OSD holds it: the writes a flush must cover
    // (those completed before it) are durable already. rbd_aio_flush
    // would wait for every write in flight as well, which held a move's
    // commit behind the next moves' copies (demotion at 0.69x rbd bench).
    completed_later_.complete_later(req, {});
    return;
  }
  if (free_slots_.empty()) {
    waiting_.push_back(req);
    return;
  }
  slot* s = free_slots_.back();
  free_slots_.pop_back();
  start(*s, req);
}

void rbd_device::start(slot& s, request& req) noexcept {
  s.req = &req;
  s.completion = nullptr;
  // No callback: with the image's notification set, librbd queues the
  // finished completion for rbd_poll_io_events and signals the eventfd.
  if (int r = rbd_aio_create_completion(&s, nullptr, &s.completion); r < 0) {
    s.completion = nullptr;
    finish(s, code_of(r));
    return;
  }
  const std::uint64_t offset = req.lba * geometry_.logical_block_size_bytes;
  const std::uint64_t length = transfer_bytes(geometry_, req);
  int r = 0;
  switch (req.operation) {
    case op::read:
      r = rbd_aio_readv(image_handle_, req.buffers.data(), static_cast<int>(req.buffers.size()),
                        offset, s.completion);
      break;
    case op::write:
      r = rbd_aio_writev(image_handle_, req.buffers.data(), static_cast<int>(req.buffers.size()),
                         offset, s.completion);
      break;
    case op::flush:
      r = rbd_aio_flush(image_handle_, s.completion);
      break;
    case op::discard:
      // Write-zeroes, not rbd's discard: a discard that covers only part of
      // a RADOS object may leave its old data (rbd_skip_partial_discard),
      // and the contract is that a discarded range reads as zeros.
      r = rbd_aio_write_zeroes(image_handle_, offset, length, s.completion, 0, 0);
      break;
  }
  if (r < 0) {
    // Not started: librbd will not complete it.
    rbd_aio_release(s.completion);
    s.completion = nullptr;
    finish(s, code_of(r));
  }
}

void rbd_device::finish(slot& s, std::error_code result) noexcept {
  request& req = *s.req;
  rbd_completion_t completion = std::exchange(s.completion, nullptr);
  s.req = nullptr;
  if (completion != nullptr) rbd_aio_release(completion);
  // The slot is free before the caller hears: its completion may submit
  // more, or (the last request done) destroy this device.
  free_slots_.push_back(&s);
  if (!waiting_.empty()) {
    slot* next = free_slots_.back();
    free_slots_.pop_back();
    start(*next, *waiting_.pop_front());
  }
  if (completion == nullptr && result) {
    // Failed before librbd had it, perhaps inside submit(): completed later.
    completed_later_.complete_later(req, result);
  } else {
    complete(req, result);
  }
}

void rbd_device::wait_for_events() noexcept {
  events_.async_wait(
      boost::asio::posix::stream_descriptor::wait_read,
      [weak = std::weak_ptr<rbd_device*>(self_)](const boost::system::error_code& ec) {
        auto self = weak.lock();
        if (!self || *self == nullptr || ec) return;
        (*self)->on_events();
      });
}

void rbd_device::on_events() noexcept {
  // Reset the counter first: a completion that lands after the poll below
  // signals again, so none is missed.
  [[maybe_unused]] ssize_t n = ::read(events_.native_handle(), &event_count_, sizeof(event_count_));
  // Completions may destroy this device once nothing is in flight (the
  // contract lets the owner do so): re-arm before them, and stop touching
  // members once the weak reference says it is gone.
  auto alive = std::weak_ptr<rbd_device*>(self_);
  wait_for_events();
  for (;;) {
    const int count =
        rbd_poll_io_events(image_handle_, polled_.data(), static_cast<int>(polled_.size()));
    if (count <= 0) return;
    for (int i = 0; i < count; ++i) {
      rbd_completion_t c = polled_[static_cast<std::size_t>(i)];
      auto* s = static_cast<slot*>(rbd_aio_get_arg(c));
      const ssize_t r = rbd_aio_get_return_value(c);
      finish(*s, r < 0 ? code_of(static_cast<int>(r)) : std::error_code{});
      auto self = alive.lock();
      if (!self || *self == nullptr) return;
    }
    if (count < static_cast<int>(polled_.size())) return;
  }
}

}  // namespace strata::device
