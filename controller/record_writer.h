// The writer thread the event and operation logs share the shape of: a
// record's synced write is a disk flush, so it goes to a thread of its own
// and the caller, a loop included, never waits for it. Writes are applied
// in the order they were handed over.
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <string>

#include "controller/config_store.h"

namespace strata::controller {

class record_writer {
 public:
  // `failed`, if given, hears why a write did not happen (on the writer thread).
  explicit record_writer(config_store& config, std::function<void(const std::string&)> failed = {})
      : config_(config), failed_(std::move(failed)) {}
  ~record_writer() {
    drain();
    thread_.join();
  }
  record_writer(const record_writer&) = delete;
  record_writer& operator=(const record_writer&) = delete;

  void write(config_batch batch) {
    boost::asio::post(thread_, [this, batch = std::move(batch)] {
      if (auto done = config_.commit(batch); !done && failed_) failed_(done.error().message);
    });
  }
  // Waits until every batch handed over so far is in the store.
  void drain() {
    std::promise<void> written;
    boost::asio::post(thread_, [&] { written.set_value(); });
    written.get_future().wait();
  }

 private:
  config_store& config_;
  std::function<void(const std::string&)> failed_;
  boost::asio::thread_pool thread_{1};
};

// Wall-clock time for records an administrator reads.
inline std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace strata::controller
