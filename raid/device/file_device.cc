#include "raid/device/file_device.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

namespace strata::device {
namespace {

constexpr std::uint32_t max_segments = 64;
// Longest single read/write handed to the kernel; Linux moves at most about
// 2 GiB per call anyway, and a longer request continues as a short transfer.
constexpr std::uint64_t max_call_bytes = 1ull << 30;

error os_error(const std::string& path, const char* what, int errno_value) {
  return make_error(errc_from_errno(errno_value),
                    path + ": " + what + ": " + std::strerror(errno_value));
}

// Where the byte `done` of a scatter-gather list is, and how much of its
// segment remains from there.
iovec remaining_segment(std::span<const iovec> buffers, std::uint64_t done) {
  for (const iovec& segment : buffers) {
    if (done < segment.iov_len) {
      return {static_cast<std::byte*>(segment.iov_base) + done, segment.iov_len - done};
    }
    done -= segment.iov_len;
  }
  return {nullptr, 0};
}

struct opened_file {
  int fd = -1;
  bool direct = false;
};

// Opens with O_DIRECT if asked and possible; falls back to buffered I/O
// when allowed and the file system refuses O_DIRECT or needs a coarser
// alignment than the block size.
std::expected<opened_file, error> open_file(const std::string& path, const file_options& options) {
  const int base_flags = O_RDWR | O_CLOEXEC;
  if (options.direct != direct_io::never) {
    const int fd = ::open(path.c_str(), base_flags | O_DIRECT);
    if (fd >= 0) {
      struct statx sx {};
      bool aligned = true;
      if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
          (sx.stx_mask & STATX_DIOALIGN) != 0) {
        aligned = sx.stx_dio_offset_align != 0 &&
                  sx.stx_dio_offset_align <= options.logical_block_size_bytes &&
                  sx.stx_dio_mem_align <= options.logical_block_size_bytes;
      }
      if (aligned) return opened_file{fd, true};
      ::close(fd);
      if (options.direct == direct_io::always) {
        return std::unexpected(make_error(
            errc::not_supported, path + ": O_DIRECT needs an alignment coarser than " +
                                     std::to_string(options.logical_block_size_bytes) + " bytes"));
      }
    } else if (errno != EINVAL || options.direct == direct_io::always) {
      return std::unexpected(os_error(path, "open", errno));
    }
  }
  const int fd = ::open(path.c_str(), base_flags);
  if (fd < 0) return std::unexpected(os_error(path, "open", errno));
  return opened_file{fd, false};
}

// The usable size of a regular file or block device, in bytes.
std::expected<std::uint64_t, error> size_of(const std::string& path, int fd,
                                            std::uint32_t block_size) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::unexpected(os_error(path, "fstat", errno));
  if (S_ISREG(st.st_mode)) return static_cast<std::uint64_t>(st.st_size);
  if (!S_ISBLK(st.st_mode)) {
    return std::unexpected(
        make_error(errc::invalid_argument, path + ": not a regular file or a block device"));
  }
  std::uint64_t size_bytes = 0;
  int sector_bytes = 0;
  if (::ioctl(fd, BLKGETSIZE64, &size_bytes) != 0) {
    return std::unexpected(os_error(path, "BLKGETSIZE64", errno));
  }
  if (::ioctl(fd, BLKSSZGET, &sector_bytes) != 0) {
    return std::unexpected(os_error(path, "BLKSSZGET", errno));
  }
  if (static_cast<std::uint32_t>(sector_bytes) > block_size) {
    return std::unexpected(make_error(
        errc::invalid_argument, path + ": its logical sector is " + std::to_string(sector_bytes) +
                                    " bytes, larger than the requested block size " +
                                    std::to_string(block_size)));
  }
  return size_bytes;
}

}  // namespace

std::expected<std::unique_ptr<file_device>, error> file_device::open(io_ring& ring,
                                                                     const std::string& path,
                                                                     const file_options& options) {
  const std::uint32_t block_size = options.logical_block_size_bytes;
  if (block_size != 512 && block_size != 4096) {
    return std::unexpected(make_error(
        errc::invalid_argument,
        path + ": logical block size must be 512 or 4096, not " + std::to_string(block_size)));
  }
  if (options.queue_depth == 0 || options.queue_depth > 4096) {
    return std::unexpected(make_error(
        errc::invalid_argument,
        path + ": queue depth must be 1..4096, not " + std::to_string(options.queue_depth)));
  }
  if (options.block_count > UINT64_MAX / block_size) {
    return std::unexpected(make_error(errc::invalid_argument, path + ": block count too large"));
  }
  const std::uint64_t wanted_bytes = options.block_count * block_size;

  if (options.create) {
    if (options.block_count == 0) {
      return std::unexpected(
          make_error(errc::invalid_argument, path + ": creating a file needs a block count"));
    }
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      const bool sized = ::ftruncate(fd, static_cast<off_t>(wanted_bytes)) == 0;
      const int e = errno;
      ::close(fd);
      if (!sized) return std::unexpected(os_error(path, "ftruncate", e));
    } else if (errno != EEXIST) {
      return std::unexpected(os_error(path, "create", errno));
    }
  }

  auto file = open_file(path, options);
  if (!file) return std::unexpected(file.error());
  auto size_bytes = size_of(path, file->fd, block_size);
  if (!size_bytes) {
    ::close(file->fd);
    return std::unexpected(size_bytes.error());
  }
  const std::uint64_t available_blocks = *size_bytes / block_size;
  if (available_blocks == 0 || available_blocks < options.block_count) {
    ::close(file->fd);
    const std::uint64_t needed_bytes = options.block_count == 0 ? block_size : wanted_bytes;
    return std::unexpected(make_error(
        errc::too_small, path + " is " + std::to_string(*size_bytes) +
                             " bytes; the geometry needs " + std::to_string(needed_bytes) + " (" +
                             std::to_string(needed_bytes / block_size) + " blocks of " +
                             std::to_string(block_size) + " bytes)"));
  }

  block_geometry geometry;
  geometry.logical_block_size_bytes = block_size;
  geometry.block_count = options.block_count == 0 ? available_blocks : options.block_count;
  geometry.buffer_alignment_bytes = block_size;
  geometry.max_segments = max_segments;
  std::unique_ptr<file_device> device(
      new file_device(ring, path, file->fd, file->direct, geometry, options.queue_depth));
  return device;
}

file_device::file_device(io_ring& ring, std::string path, int fd, bool direct,
                         const block_geometry& geometry, std::uint32_t queue_depth)
    : ring_(ring),
      path_(std::move(path)),
      fd_(fd),
      direct_(direct),
      geometry_(geometry),
      slots_(queue_depth),
      rejected_(ring.context().get_executor()) {
  free_slots_.reserve(queue_depth);
  stalled_.reserve(queue_depth);
  for (slot& s : slots_) {
    s.device = this;
    free_slots_.push_back(&s);
  }
}

file_device::~file_device() {
  ::close(fd_);
}

void file_device::submit(request& req) noexcept {
  if (auto ec = validate(geometry_, req)) {
    rejected_.complete_later(req, ec);
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

void file_device::start(slot& s, request& req) noexcept {
  s.req = &req;
  s.bytes_done = 0;
  issue(s);
}

void file_device::fence(fence_checks checks) {
  fence_ = std::move(checks);
  ring_.checks_at_submit();
}

bool file_device::refuses(const request& req) const noexcept {
  if (!req.fence_exempt && fence_.allowed && !fence_.allowed()) return true;
  return fence_.model != nullptr && (req.operation == op::write || req.operation == op::discard) &&
         !fence_.model->admits_write(fence_.key);
}

void file_device::issue(slot& s) noexcept {
  io_uring_sqe* sqe = ring_.prepare(s);
  if (sqe == nullptr) {
    stalled_.push_back(&s);
    retry_later();
    return;
  }
  const request& req = *s.req;
  const std::uint64_t offset_bytes = req.lba * geometry_.logical_block_size_bytes;
  switch (req.operation) {
    case op::read:
    case op::write: {
      const bool reading = req.operation == op::read;
      if (s.bytes_done == 0 && req.buffers.size() > 1) {
        const auto count = static_cast<unsigned>(req.buffers.size());
        if (reading) {
          io_uring_prep_readv(sqe, fd_, req.buffers.data(), count, offset_bytes);
        } else {
          io_uring_prep_writev(sqe, fd_, req.buffers.data(), count, offset_bytes);
        }
      } else {
        // One segment, or the rest of a short transfer: the segment holding
        // the next byte, from that byte on.
        const iovec next = remaining_segment(req.buffers, s.bytes_done);
        const auto length =
            static_cast<unsigned>(std::min<std::uint64_t>(next.iov_len, max_call_bytes));
        if (reading) {
          io_uring_prep_read(sqe, fd_, next.iov_base, length, offset_bytes + s.bytes_done);
        } else {
          io_uring_prep_write(sqe, fd_, next.iov_base, length, offset_bytes + s.bytes_done);
        }
      }
      break;
    }
    case op::flush:
      io_uring_prep_fsync(sqe, fd_, IORING_FSYNC_DATASYNC);
      break;
    case op::discard:
      io_uring_prep_fallocate(sqe, fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                              static_cast<off_t>(offset_bytes),
                              static_cast<off_t>(transfer_bytes(geometry_, req)));
      break;
  }
}

void file_device::on_cqe(slot& s, int result) noexcept {
  if (s.refused) {  // a no-op in its place: the fence refused it at submission
    s.refused = false;
    refuse(s);
    return;
  }
  if (result == -EAGAIN || result == -EINTR) {
    issue(s);
    return;
  }
  if (result == -EBADE) {
    refuse(s);
    return;
  }
  if (result < 0) {
    finish(s, errc_from_errno(-result));
    return;
  }
  const request& req = *s.req;
  if (req.operation == op::read || req.operation == op::write) {
    if (result == 0) {
      // Nothing moved though the range was checked at open: the file
      // shrank underneath us.
      finish(s, errc::io_error);
      return;
    }
    s.bytes_done += static_cast<std::uint64_t>(result);
    if (s.bytes_done < transfer_bytes(geometry_, req)) {
      issue(s);  // a short transfer: carry on from where it stopped
      return;
    }
  }
  finish(s, {});
}

request& file_device::release(slot& s) noexcept {
  request& done = *s.req;
  // Hand the slot straight to the oldest waiting request.
  if (request* next = waiting_.pop_front()) {
    start(s, *next);
  } else {
    s.req = nullptr;
    free_slots_.push_back(&s);
  }
  return done;
}

void file_device::finish(slot& s, std::error_code result) noexcept {
  complete(release(s), result);
}

void file_device::refuse(slot& s) noexcept {
  request& refused = release(s);
  // Later, not now: this may run inside submit().
  if (!fence_.refused) return rejected_.complete_later(refused, errc::reservation_conflict);
  fence_.refused(refused);
}

void file_device::retry_later() noexcept {
  if (retry_posted_) return;
  retry_posted_ = true;
  // Stalled slots are requests in flight, so the device outlives this handler.
  boost::asio::post(ring_.context(), [this] {
    retry_posted_ = false;
    std::vector<slot*> stalled;
    stalled.swap(stalled_);
    stalled_.reserve(slots_.size());
    for (slot* s : stalled) issue(*s);
  });
}

}  // namespace strata::device
