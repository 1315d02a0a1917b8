// Loops beyond the caller's own: each an io_context run by a thread of its
// own (run_loop.h), so that work spread over them runs on several cores.
// The caller's loop stays loop 0 (the daemon's, where its pools live);
// these are loops 1 to N - 1, where connections go.
//
// Threads: construction and destruction on one thread; executors() from
// any. Work reaches a loop by posting to its executor, never by touching
// its objects from another thread.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "raid/device/run_loop.h"

namespace strata::device {

class loop_threads {
 public:
  // `count` loops, each spinning `spin` for more work before it sleeps.
  loop_threads(unsigned count, std::chrono::microseconds spin) {
    for (unsigned i = 0; i < count; ++i) {
      loops_.push_back(std::make_unique<boost::asio::io_context>(1));
      guards_.emplace_back(loops_.back()->get_executor());
    }
    for (auto& l : loops_) threads_.emplace_back([loop = l.get(), spin] { run_loop(*loop, spin); });
  }
  // Lets each loop finish what it was given, then joins its thread.
  ~loop_threads() { stop(); }
  loop_threads(const loop_threads&) = delete;
  loop_threads& operator=(const loop_threads&) = delete;

  std::vector<boost::asio::any_io_executor> executors() const {
    std::vector<boost::asio::any_io_executor> out;
    for (const auto& l : loops_) out.push_back(l->get_executor());
    return out;
  }
  void stop() {
    for (auto& g : guards_) g.reset();
    for (auto& l : loops_) l->stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  std::vector<std::unique_ptr<boost::asio::io_context>> loops_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guards_;
  std::vector<std::thread> threads_;
};

}  // namespace strata::device
