// Running a loop thread: handlers as they come, and, when the loop runs out
// of them, a short spin before it sleeps.
//
// Why: a loop that sleeps in epoll_wait after each request pays a wake-up
// (and on a virtual machine a halt and its exit) for the next one. At queue
// depth 1 over loopback that cost is most of a request's CPU time: on the
// 2-core build VM, iSCSI 4 KiB reads at QD 1 ran at 14 k IOPS sleeping and
// 39 k spinning 100 µs (tools/iscsibench). The spin only follows work: an
// idle loop sleeps, and costs nothing.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>

namespace strata::device {

// Runs `loop` until it is stopped. After the last ready handler, polls for
// up to `spin` more before blocking; zero: block at once (io_context::run).
inline void run_loop(boost::asio::io_context& loop, std::chrono::microseconds spin) {
  if (spin.count() <= 0) {
    loop.run();
    return;
  }
  while (!loop.stopped()) {
    if (loop.poll() > 0) continue;
    const auto until = std::chrono::steady_clock::now() + spin;
    bool ran = false;
    while (!ran && !loop.stopped() && std::chrono::steady_clock::now() < until) ran = loop.poll() > 0;
    if (!ran && !loop.stopped()) loop.run_one();
  }
}

}  // namespace strata::device
