// The array's event log: what happened to it, with a severity, for the
// administrator (ListEvents, `strata events`) and for support. Each event
// is a record "events/<20-digit sequence>" in the config store, so the log
// survives restarts; past max_events the oldest are dropped.
//
// Threads: record() from any thread, the loops' included: it never blocks.
// It numbers the event at once and hands the write to the log's own writer
// thread (a synced RocksDB write is a disk flush). The record is readable
// once written, a few milliseconds later; drain() waits for that.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "controller/config_store.h"
#include "controller/record_writer.h"

namespace strata::controller {

enum class severity : std::uint8_t { info = 1, warning = 2, error = 3, critical = 4 };
const char* to_string(severity s) noexcept;

class event_log {
 public:
  static constexpr std::uint64_t max_events = 10'000;

  // Continues the numbering of the events `config` holds. `echo`, if
  // given, also gets each event as a line of text (stratad logs it).
  explicit event_log(config_store& config,
                     std::function<void(severity, std::string_view)> echo = {});
  ~event_log() = default;  // drains
  event_log(const event_log&) = delete;
  event_log& operator=(const event_log&) = delete;

  // `resource`: what the event is about ("groups/g1"), or empty.
  void record(severity level, std::string resource, std::string message);
  // Waits until every event recorded so far is in the store.
  void drain() { writer_.drain(); }

 private:
  config_store& config_;
  std::function<void(severity, std::string_view)> echo_;
  std::mutex mutex_;
  std::uint64_t next_ = 1;  // the next event's sequence number
  record_writer writer_;    // last: it drains before the rest goes
};

}  // namespace strata::controller
