#include "controller/operations.h"

#include <algorithm>
#include <cstdio>

namespace strata::controller {

namespace {

constexpr std::string_view prefix = "operations/op-";

}  // namespace

std::string operation_log::controller_of(std::string_view name) {
  return name.starts_with(prefix) && name.size() > prefix.size() + 2 &&
                 name[prefix.size() + 1] == '-' && name[prefix.size()] >= 'a' &&
                 name[prefix.size()] <= 'z'
             ? std::string(1, name[prefix.size()])
             : "a";
}

std::string operation_log::name_of(std::uint64_t sequence) const {
  char digits[21];
  std::snprintf(digits, sizeof digits, "%06llu", static_cast<unsigned long long>(sequence));
  return prefix_ + digits;
}

operation_log::operation_log(config_store& config, std::string_view controller)
    : config_(config),
      prefix_(std::string(prefix) + (controller == "a" ? "" : std::string(controller) + "-")) {
  for (const auto& [key, bytes] : config_.list(prefix_)) {
    v1::Operation op;
    const std::string_view digits = std::string_view(key).substr(prefix_.size());
    if (!op.ParseFromString(bytes) || digits.empty() ||
        !std::ranges::all_of(digits, [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    next_ = std::max<std::uint64_t>(next_, std::stoull(std::string(digits)) + 1);
    if (op.state() == v1::Operation::RUNNING) interrupted_.push_back(op);
  }
}

std::vector<v1::Operation> operation_log::interrupted() const {
  std::lock_guard hold(mutex_);
  return interrupted_;
}

void operation_log::write(const v1::Operation& op) {
  config_batch b;
  b.put(op.name(), op.SerializeAsString());
  writer_.write(std::move(b));
}

v1::Operation operation_log::start(std::string kind, std::string resource,
                                   std::function<void()> cancel) {
  std::lock_guard hold(mutex_);
  running r;
  r.record.set_name(name_of(next_++));
  r.record.set_kind(std::move(kind));
  r.record.set_resource(std::move(resource));
  r.record.set_state(v1::Operation::RUNNING);
  r.record.set_create_time_unix_ms(unix_ms_now());
  r.cancel = std::move(cancel);
  r.written_ms = r.record.create_time_unix_ms();
  write(r.record);
  const v1::Operation out = r.record;
  running_.emplace(out.name(), std::move(r));
  return out;
}

void operation_log::progress(const std::string& name, double fraction) {
  std::lock_guard hold(mutex_);
  const auto it = running_.find(name);
  if (it == running_.end()) return;
  it->second.record.set_progress_fraction(std::clamp(fraction, 0.0, 1.0));
  const std::int64_t now = unix_ms_now();
  if (now - it->second.written_ms < 1000) return;
  it->second.written_ms = now;
  write(it->second.record);
}

void operation_log::finish(const std::string& name, const std::expected<void, error>& outcome,
                           bool cancelled) {
  std::lock_guard hold(mutex_);
  v1::Operation op;
  if (const auto it = running_.find(name); it != running_.end()) {
    op = std::move(it->second.record);
    running_.erase(it);
  } else if (const auto old = std::ranges::find(interrupted_, name, &v1::Operation::name);
             old != interrupted_.end()) {
    op = *old;
    interrupted_.erase(old);
  } else {
    return;
  }
  op.set_state(cancelled ? v1::Operation::CANCELLED
               : outcome ? v1::Operation::SUCCEEDED
                         : v1::Operation::FAILED);
  if (outcome) op.set_progress_fraction(cancelled ? op.progress_fraction() : 1.0);
  if (!outcome) {
    op.mutable_error()->set_code(13);  // INTERNAL, unless the owner says better in words
    op.mutable_error()->set_message(outcome.error().message);
  }
  op.set_end_time_unix_ms(unix_ms_now());
  write(op);
}

std::expected<v1::Operation, error> operation_log::cancel(const std::string& name) {
  std::function<void()> stop;
  v1::Operation op;
  {
    std::lock_guard hold(mutex_);
    const auto it = running_.find(name);
    if (it == running_.end()) {
      if (!config_.get(name))
        return std::unexpected(make_error(errc::not_found, name + " does not exist"));
      return std::unexpected(make_error(errc::invalid_argument, name + " has ended"));
    }
    if (!it->second.cancel)
      return std::unexpected(make_error(
          errc::invalid_argument, name + " (" + it->second.record.kind() + ") cannot be stopped"));
    stop = it->second.cancel;
    op = it->second.record;
  }
  stop();  // outside the lock: the work may finish() at once
  return get(name).value_or(op);
}

std::optional<v1::Operation> operation_log::get(const std::string& name) {
  {
    std::lock_guard hold(mutex_);
    if (const auto it = running_.find(name); it != running_.end()) return it->second.record;
  }
  drain();  // an end just recorded is in the store then
  const auto bytes = config_.get(name);
  v1::Operation op;
  if (!bytes || !op.ParseFromString(*bytes)) return std::nullopt;
  return op;
}

}  // namespace strata::controller
