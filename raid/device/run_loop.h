// Running a loop thread: handlers as they come, and, when the loop runs out
// of them, a short spin before it sleeps.
//
// Why: a loop that sleeps in epoll_wait after each request pays a wake-up
// (and on a virtual machine a halt and its exit) for the next one. At queue
// depth 1 over loopback that cost is most of a request's CPU time: on the
// 2-core build VM, iSCSI 4 KiB reads at QD 1 ran at 14 k IOPS sleeping and
// 39 k spinning 100 µs (tools/iscsibench). The spin only follows work: an
// idle loop sleeps, and costs nothing; and it stops once it stops paying
// (spin_advisor): on the embedded default at QD 8, a spin after every
// handler cost about 15 % more CPU per host I/O than sleeping at once
// (tools/nvmebench/stratad-cpu.sh).
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>

namespace strata::device {

// Whether spinning pays, from the idle gaps seen lately: a gap (from the
// loop running out of handlers to its next one) no longer than the spin is
// a wake-up saved; a longer one is the whole spin burnt for nothing. The
// share of short gaps is a moving average over about the last eight; the
// spin stops when it falls below a half, and starts again above three
// quarters, so that a load near the line does not flip it at every gap.
class spin_advisor {
 public:
  bool spin() const noexcept { return spinning_; }
  void gap(bool short_enough) noexcept {
    short_share_ += ((short_enough ? 1.0 : 0.0) - short_share_) / 8;
    if (spinning_ && short_share_ < 0.5) spinning_ = false;
    if (!spinning_ && short_share_ >= 0.75) spinning_ = true;
  }

 private:
  double short_share_ = 1.0;
  bool spinning_ = true;
};

// Runs `loop` until it is stopped. After the last ready handler, polls for
// up to `spin` more before blocking, while that pays (spin_advisor: at a
// low rate of work, a loop that spun after every handler would burn `spin`
// per request and save nothing); zero: block at once (io_context::run).
inline void run_loop(boost::asio::io_context& loop, std::chrono::microseconds spin) {
  if (spin.count() <= 0) {
    loop.run();
    return;
  }
  using steady = std::chrono::steady_clock;
  spin_advisor advisor;
  while (!loop.stopped()) {
    if (loop.poll() > 0) continue;
    const auto idle = steady::now();
    const auto until = idle + spin;
    if (advisor.spin()) {
      bool ran = false;
      while (!ran && !loop.stopped() && steady::now() < until) ran = loop.poll() > 0;
      if (ran) {
        advisor.gap(true);
        continue;
      }
    }
    if (loop.stopped()) break;
    loop.run_one();
    // The wait, plus the handler that ended it (short beside a spin).
    advisor.gap(steady::now() <= until);
  }
}

}  // namespace strata::device
