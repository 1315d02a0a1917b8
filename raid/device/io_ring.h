// One io_uring ring per loop thread, with its completions delivered into the
// loop's Asio io_context through an eventfd.
//
// Devices on the loop (file_device) prepare submission entries through
// prepare(); the ring submits them in one io_uring_enter per loop turn (at
// the end of a batch of completions, or from one posted handler), and calls
// each operation's on_cqe() from the loop when its completion arrives.
//
// Threads: everything here runs on the io_context's one thread, which must
// also be the thread that creates the ring (the kernel binds a
// single-issuer ring to its creator). The ring
// must outlive every device that uses it, and the io_context must outlive
// the ring.
#pragma once

#include <liburing.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <expected>
#include <memory>

#include "raid/device/status.h"

namespace strata::device {

class io_ring {
 public:
  // What waits for one submission's completion. Implementations live as
  // long as their submission is in flight (devices keep them in fixed slots).
  class operation {
   public:
    // `result` is the completion's res: bytes moved, 0, or -errno.
    virtual void on_cqe(int result) noexcept = 0;
    // Asked of every prepared entry right before the io_uring_enter that
    // hands it to the kernel (once some device asked for it: checks_at_
    // submit): true turns it into a no-op, whose completion the operation
    // then takes for a refusal. A fence's last check (file_device.h): a
    // request checked when it was prepared, inside a batch of completions,
    // reaches the kernel only at the batch's end, and a process stopped in
    // between would hand it over after its thaw.
    virtual bool refuse_at_submit() noexcept { return false; }

   protected:
    ~operation() = default;
  };

  // `entries`: submission queue size; the completion queue is twice that.
  static std::expected<std::unique_ptr<io_ring>, error> create(boost::asio::io_context& context,
                                                               unsigned entries = 256);
  ~io_ring();
  io_ring(const io_ring&) = delete;
  io_ring& operator=(const io_ring&) = delete;

  // A zeroed-for-use submission entry whose completion goes to `op`, or
  // nullptr if the submission queue stays full even after submitting (the
  // caller retries from a later completion). Fill it with io_uring_prep_*;
  // do not touch user_data.
  io_uring_sqe* prepare(operation& op) noexcept;

  // From now on, operation::refuse_at_submit is asked of each entry.
  void checks_at_submit() noexcept { checks_at_submit_ = true; }

  boost::asio::io_context& context() const noexcept { return context_; }
  std::uint64_t in_flight() const noexcept { return in_flight_; }

 private:
  io_ring(boost::asio::io_context& context, int event_fd);
  void wait_for_completions();
  void reap() noexcept;
  void submit_now() noexcept;
  void schedule_submit() noexcept;

  boost::asio::io_context& context_;
  io_uring ring_{};
  boost::asio::posix::stream_descriptor event_fd_;
  // The eventfd's counter is read into this: larger than the 8 bytes a read
  // returns, so that Asio sees the descriptor drained (io_ring.cc).
  std::array<std::uint64_t, 2> event_count_{};
  std::uint64_t in_flight_ = 0;
  unsigned unsubmitted_ = 0;
  bool reaping_ = false;
  bool deferred_task_run_ = false;  // IORING_SETUP_DEFER_TASKRUN in force
  bool submit_posted_ = false;
  bool checks_at_submit_ = false;
  void check_before_submit() noexcept;
  // Handlers queued in the io_context hold a weak reference, so one that
  // runs after the ring is gone does nothing.
  std::shared_ptr<io_ring*> self_;
};

}  // namespace strata::device
