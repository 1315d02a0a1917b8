#include "controller/event_log.h"

#include <cstdio>

#include "strata/v1/operations.pb.h"

namespace strata::controller {

namespace {

constexpr std::string_view prefix = "events/";

// Fixed width, so that key order is numeric order.
std::string key_of(std::uint64_t sequence) {
  char digits[21];
  std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(sequence));
  return std::string(prefix) + digits;
}

}  // namespace

const char* to_string(severity s) noexcept {
  switch (s) {
    case severity::info:
      return "info";
    case severity::warning:
      return "warning";
    case severity::error:
      return "error";
    case severity::critical:
      return "critical";
  }
  return "?";
}

event_log::event_log(config_store& config, std::function<void(severity, std::string_view)> echo)
    : config_(config), echo_(std::move(echo)), writer_(config, [this](const std::string& why) {
        if (echo_) echo_(severity::error, "the event log cannot be written: " + why);
      }) {
  const auto last = config_.list_backward(prefix, {}, 1);
  if (!last.empty()) next_ = std::stoull(last.front().first.substr(prefix.size())) + 1;
}

void event_log::record(severity level, std::string resource, std::string message) {
  v1::Event e;
  e.set_time_unix_ms(unix_ms_now());
  e.set_severity(static_cast<v1::Severity>(level));
  e.set_resource(std::move(resource));
  e.set_message(std::move(message));
  std::uint64_t sequence;
  {
    std::lock_guard hold(mutex_);
    sequence = next_++;
  }
  e.set_name(key_of(sequence));
  if (echo_) echo_(level, e.resource().empty() ? e.message() : e.resource() + ": " + e.message());
  config_batch b;
  b.put(e.name(), e.SerializeAsString());
  if (sequence > max_events) b.erase(key_of(sequence - max_events));
  writer_.write(std::move(b));
}

}  // namespace strata::controller
