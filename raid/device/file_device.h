// A regular file or a block device, read and written through the loop's
// io_uring ring.
//
// O_DIRECT where the file system allows it (and the block size fits its
// direct-I/O alignment), buffered I/O otherwise; uses_direct_io() says which.
// Short transfers are continued until the request is whole. Flush is
// fdatasync; discard punches a hole (fallocate), which also works on block
// devices that support write-zeroes.
//
// The hot path allocates nothing: each request in flight occupies one of
// `queue_depth` slots fixed at open; requests beyond that wait in a FIFO
// linked through the requests themselves.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/device/io_ring.h"
#include "raid/device/request_queue.h"
#include "raid/device/reservations.h"

namespace strata::device {

enum class direct_io { when_possible, always, never };

struct file_options {
  std::uint32_t logical_block_size_bytes = 4096;  // 512 or 4096
  // 0: every whole block of the file or device. Otherwise the device is
  // exactly this many blocks, and the file must hold at least that many.
  std::uint64_t block_count = 0;
  // Create a sparse file of block_count blocks if the path does not exist.
  bool create = false;
  direct_io direct = direct_io::when_possible;
  std::uint32_t queue_depth = 128;  // requests in the ring at once
};

class file_device final : public block_device {
 public:
  // Opens `path` on `ring`'s loop. A clear error, naming the path, for a
  // missing or unreadable path, a directory, a file smaller than the
  // geometry needs, or options that make no sense.
  // Blocks (open, statx, ftruncate, ioctl): a set-up call, made before the
  // device serves I/O or from a control thread, never on a busy loop.
  static std::expected<std::unique_ptr<file_device>, error> open(io_ring& ring,
                                                                 const std::string& path,
                                                                 const file_options& options);
  ~file_device() override;

  const block_geometry& geometry() const noexcept override { return geometry_; }
  boost::asio::any_io_executor executor() const noexcept override {
    return ring_.context().get_executor();
  }
  void submit(request& req) noexcept override;

  // The fence's last check, made as each request is handed to the kernel
  // (io_ring::operation::refuse_at_submit: inside the io_uring_enter's
  // caller, after every queue of this process), and where a request it
  // refuses goes instead of completing (controller/shelf.h: the bottom
  // gate, which holds it). A request is refused when
  // - `allowed` says no (the lease), unless it is fence_exempt;
  // - it writes or discards and `model`, a simulated drive's persistent
  //   reservations, does not admit `key` (a real drive checks its own:
  //   model null);
  // - the drive refused it for its reservation (EBADE).
  // Without `refused`, it completes with reservation_conflict.
  struct fence_checks {
    std::function<bool()> allowed;
    const file_reservations* model = nullptr;
    std::uint64_t key = 0;
    std::function<void(request&)> refused;
  };
  void fence(fence_checks checks);

  bool uses_direct_io() const noexcept { return direct_; }
  const std::string& path() const noexcept { return path_; }

 private:
  struct slot final : io_ring::operation {
    file_device* device = nullptr;
    request* req = nullptr;
    std::uint64_t bytes_done = 0;  // of the request's transfer, for short transfers
    bool refused = false;          // turned into a no-op at submission: its completion is a refusal
    void on_cqe(int result) noexcept override { device->on_cqe(*this, result); }
    bool refuse_at_submit() noexcept override {
      // Once a no-op, always: its completion must not pass for the write's.
      return refused = refused || (req != nullptr && device->refuses(*req));
    }
  };

  file_device(io_ring& ring, std::string path, int fd, bool direct, const block_geometry& geometry,
              std::uint32_t queue_depth);
  void start(slot& s, request& req) noexcept;
  void issue(slot& s) noexcept;
  void on_cqe(slot& s, int result) noexcept;
  // Gives the slot to the oldest waiting request (or frees it); returns
  // the request that had it.
  request& release(slot& s) noexcept;
  void finish(slot& s, std::error_code result) noexcept;
  void refuse(slot& s) noexcept;
  bool refuses(const request& req) const noexcept;
  void retry_later() noexcept;

  io_ring& ring_;
  std::string path_;
  int fd_;
  bool direct_;
  block_geometry geometry_;
  std::vector<slot> slots_;
  std::vector<slot*> free_slots_;
  request_list waiting_;        // submitted, no slot yet
  std::vector<slot*> stalled_;  // have a slot, found the ring full; retried from the loop
  completion_queue rejected_;
  bool retry_posted_ = false;
  fence_checks fence_;
};

}  // namespace strata::device
