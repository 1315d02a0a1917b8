#include "raid/device/io_ring.h"

#include <sys/eventfd.h>

#include <array>
#include <boost/asio/post.hpp>
#include <cstring>
#include <string>

namespace strata::device {

std::expected<std::unique_ptr<io_ring>, error> io_ring::create(boost::asio::io_context& context,
                                                               unsigned entries) {
  const int event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd < 0) {
    const int e = errno;
    return std::unexpected(
        make_error(errc_from_errno(e), std::string("eventfd: ") + std::strerror(e)));
  }
  std::unique_ptr<io_ring> ring(new io_ring(context, event_fd));

  // Completions run when this thread asks for them (DEFER_TASKRUN, which
  // needs SINGLE_ISSUER: the ring is used only by the thread that made it)
  // rather than by interrupting it, and are then reaped in batches. Older
  // kernels refuse the flags: fall back to cooperative task running, then
  // to none.
  int rc = -EINVAL;
  for (unsigned flags : {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
                         unsigned{IORING_SETUP_COOP_TASKRUN}, 0u}) {
    io_uring_params params{};
    params.flags = flags | IORING_SETUP_CQSIZE;
    params.cq_entries = entries * 2;
    rc = io_uring_queue_init_params(entries, &ring->ring_, &params);
    if (rc != -EINVAL) {
      ring->deferred_task_run_ = (flags & IORING_SETUP_DEFER_TASKRUN) != 0;
      break;
    }
  }
  if (rc < 0) {
    ring->ring_.ring_fd = -1;
    return std::unexpected(make_error(errc_from_errno(-rc),
                                      std::string("io_uring_queue_init: ") + std::strerror(-rc) +
                                          " (is io_uring disabled by kernel.io_uring_disabled?)"));
  }
  rc = io_uring_register_eventfd(&ring->ring_, event_fd);
  if (rc < 0) {
    return std::unexpected(make_error(
        errc_from_errno(-rc), std::string("io_uring_register_eventfd: ") + std::strerror(-rc)));
  }
  ring->wait_for_completions();
  return ring;
}

io_ring::io_ring(boost::asio::io_context& context, int event_fd)
    : context_(context), event_fd_(context, event_fd), self_(std::make_shared<io_ring*>(this)) {
  ring_.ring_fd = -1;
}

io_ring::~io_ring() {
  self_.reset();
  boost::system::error_code ignored;
  event_fd_.close(ignored);
  if (ring_.ring_fd >= 0) io_uring_queue_exit(&ring_);
}

io_uring_sqe* io_ring::prepare(operation& op) noexcept {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    submit_now();  // make room
    sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return nullptr;
  }
  io_uring_sqe_set_data(sqe, &op);
  ++unsubmitted_;
  ++in_flight_;
  schedule_submit();
  return sqe;
}

void io_ring::schedule_submit() noexcept {
  // Inside reap() the submission happens when the batch is done; otherwise
  // once per loop turn, however many entries were prepared in it.
  if (reaping_ || submit_posted_) return;
  submit_posted_ = true;
  boost::asio::post(context_, [weak = std::weak_ptr<io_ring*>(self_)] {
    if (auto self = weak.lock()) {
      (*self)->submit_posted_ = false;
      (*self)->submit_now();
    }
  });
}

void io_ring::check_before_submit() noexcept {
  // The entries prepared since the last enter: liburing's own, between
  // its local head and tail, not yet published to the kernel. (Entries a
  // short submission published and the kernel left, when it was short of
  // resources, go at the next enter unasked: a rare window, left open.)
  for (unsigned i = ring_.sq.sqe_head; i != ring_.sq.sqe_tail; ++i) {
    io_uring_sqe* sqe = &ring_.sq.sqes[i & ring_.sq.ring_mask];
    auto* op = reinterpret_cast<operation*>(static_cast<std::uintptr_t>(sqe->user_data));
    if (op == nullptr || !op->refuse_at_submit()) continue;
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data(sqe, op);
  }
}

void io_ring::submit_now() noexcept {
  if (unsubmitted_ == 0 && !deferred_task_run_) return;
  if (checks_at_submit_ && unsubmitted_ > 0) check_before_submit();
  // With deferred task running, completions are posted only when asked
  // for, so every enter also collects them.
  const int rc =
      deferred_task_run_ ? io_uring_submit_and_get_events(&ring_) : io_uring_submit(&ring_);
  if (rc >= 0) unsubmitted_ -= std::min<unsigned>(unsubmitted_, static_cast<unsigned>(rc));
  if (unsubmitted_ == 0) return;
  // A short or refused submission (-EAGAIN, -EBUSY: the kernel is short of
  // resources or the completion queue is overflowing). The kernel then skips
  // running deferred completions, so collect them now, or they would wait
  // for a wake-up that does not come; the rest goes from the loop's next turn.
  if (deferred_task_run_) io_uring_get_events(&ring_);
  schedule_submit();
}

void io_ring::wait_for_completions() {
  // A read rather than a wait for readability: Asio re-registers a waited-on
  // descriptor with epoll (an epoll_ctl) at every wait, but queues a read
  // with none; and a read that returned less than its buffer holds is not
  // tried again before the next readiness, so each wake-up costs one
  // epoll_wait and one read. The read resets the counter before reaping: a
  // completion that lands after it signals again.
  event_fd_.async_read_some(
      boost::asio::buffer(event_count_),
      [weak = std::weak_ptr<io_ring*>(self_)](boost::system::error_code ec, std::size_t) {
        auto self = weak.lock();
        if (!self || ec == boost::asio::error::operation_aborted) return;
        io_ring& ring = **self;
        ring.reap();
        ring.wait_for_completions();
      });
}

void io_ring::reap() noexcept {
  reaping_ = true;
  struct completion {
    operation* op;
    int result;
  };
  std::array<io_uring_cqe*, 64> cqes;
  std::array<completion, 64> batch;
  for (bool first = true;; first = false) {
    // One io_uring_enter submits what the last batch prepared and, with
    // deferred task running, collects the completions waiting to be posted.
    // After the first, only if a batch prepared more: the kernel signals
    // the eventfd again as soon as a completion waits once more (its list
    // of deferred work was emptied by that enter), so a second enter with
    // nothing to submit would only cost a system call.
    if (deferred_task_run_ && (first || unsubmitted_ > 0)) submit_now();
    const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes.data(), cqes.size());
    if (n == 0) break;
    // Copy out and free the slots first, so completion callbacks that
    // prepare new work have the whole queue.
    for (unsigned i = 0; i < n; ++i) {
      batch[i] = {static_cast<operation*>(io_uring_cqe_get_data(cqes[i])), cqes[i]->res};
    }
    io_uring_cq_advance(&ring_, n);
    in_flight_ -= n;
    for (unsigned i = 0; i < n; ++i) batch[i].op->on_cqe(batch[i].result);
  }
  reaping_ = false;
  if (unsubmitted_ > 0) submit_now();  // with deferred task running, the loop above has entered
}

}  // namespace strata::device
