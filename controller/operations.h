// Long-running work as the management API shows it: each operation a
// record "operations/op-NNNNNN" in the config store of the controller
// that runs it ("operations/op-b-NNNNNN" on controller b: the two
// controllers' names never meet), RUNNING with its
// progress while it works, then SUCCEEDED, FAILED (with the error) or
// CANCELLED. The records survive restarts; an operation a restart cut
// short is ended FAILED at the next start unless its owner finishes it
// (interrupted() lists them first).
//
// Threads: every call from any thread, without blocking: the log keeps
// the running operations in memory and hands each record's write to its
// own writer thread. Progress is written at most once per second per
// operation; the end at once.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/config_store.h"
#include "controller/record_writer.h"
#include "raid/device/status.h"
#include "strata/v1/operations.pb.h"

namespace strata::controller {

class operation_log {
 public:
  // Reads the operations `config` holds; those still RUNNING were cut
  // short by a stop (interrupted()).
  explicit operation_log(config_store& config, std::string_view controller = "a");
  ~operation_log() = default;  // drains
  operation_log(const operation_log&) = delete;
  operation_log& operator=(const operation_log&) = delete;

  // The controller whose operation `name` is ("a" or "b").
  static std::string controller_of(std::string_view name);

  // Operations left RUNNING by the last stop, for their owners to finish
  // or fail (finish()).
  std::vector<v1::Operation> interrupted() const;

  // Records a new RUNNING operation and returns it. `cancel`, if given,
  // asks the work to stop; it runs on the caller of cancel(), and the work
  // then ends itself with finish(…, cancelled).
  v1::Operation start(std::string kind, std::string resource, std::function<void()> cancel = {});
  void progress(const std::string& name, double fraction);
  // Ends it: an error, or success; `cancelled` ends it CANCELLED.
  void finish(const std::string& name, const std::expected<void, error>& outcome,
              bool cancelled = false);
  // Asks operation `name` to stop. not_found; invalid_argument if it has
  // ended or cannot be stopped.
  std::expected<v1::Operation, error> cancel(const std::string& name);
  // The operation as it stands now (running ones from memory; blocks on
  // drain() for the others).
  std::optional<v1::Operation> get(const std::string& name);
  // Waits until every change so far is in the store (so that a list read
  // from it is current).
  void drain() { writer_.drain(); }

 private:
  struct running {
    v1::Operation record;
    std::function<void()> cancel;
    std::int64_t written_ms = 0;  // when its progress was last written
  };
  void write(const v1::Operation& op);

  std::string name_of(std::uint64_t sequence) const;

  config_store& config_;
  const std::string prefix_;  // "operations/op-" or "operations/op-b-"
  mutable std::mutex mutex_;
  std::uint64_t next_ = 1;
  std::map<std::string, running> running_;
  std::vector<v1::Operation> interrupted_;
  record_writer writer_{config_};  // last: it drains before the rest goes
};

}  // namespace strata::controller
