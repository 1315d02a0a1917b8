// What every management change shares (management.cc and
// management_storage.cc only): refusals, the wait for the array's loop,
// records read from the config store, and the checks of names and fields.
#pragma once

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cctype>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "controller/array.h"
#include "controller/management.h"
#include "controller/names.h"
#include "controller/tiers.h"
#include "tiering/migrator.h"

namespace strata::controller::management_detail {

using kind = refusal::kind;

inline std::unexpected<refusal> refuse(kind why, std::string field, std::string message) {
  return std::unexpected(refusal{why, std::move(field), std::move(message)});
}

inline std::unexpected<refusal> invalid(std::string field, std::string message) {
  return refuse(kind::invalid, std::move(field), std::move(message));
}

inline std::unexpected<refusal> refused(const error& e, const std::string& field = {}) {
  return std::unexpected(refusal_of(e, field));
}

// Runs `change` on the array's loop and waits for what it reports. No
// time limit (management.h).
inline std::expected<void, error> on_loop(
    array& a, std::function<void(std::function<void(std::expected<void, error>)>)> change) {
  auto result = std::make_shared<std::promise<std::expected<void, error>>>();
  auto reported = result->get_future();
  boost::asio::post(a.executor(), [result, change = std::move(change)] {
    change([result](std::expected<void, error> r) { result->set_value(std::move(r)); });
  });
  return reported.get();
}

template <class Message>
inline std::optional<Message> read(const config_store& config, const std::string& name) {
  const auto bytes = config.get(name);
  Message m;
  if (!bytes || !m.ParseFromString(*bytes)) return std::nullopt;
  return m;
}

// A short name for a new resource: [a-z][a-z0-9-]*, at most 63.
inline bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 63 || id[0] < 'a' || id[0] > 'z') return false;
  return std::ranges::all_of(
      id, [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

inline std::unexpected<refusal> bad_id(const std::string& field, const std::string& id) {
  return invalid(field, "\"" + id + "\" is not [a-z][a-z0-9-]*, at most 63");
}

// The fields an update names, each checked against the ones `allowed`.
inline outcome<void> check_fields(const std::vector<std::string>& fields,
                                  std::initializer_list<std::string_view> allowed) {
  std::string names;
  for (const std::string_view a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
  if (fields.empty())
    return invalid("update_mask", "empty; name the fields to change (" + names + ")");
  for (const std::string& f : fields) {
    if (std::ranges::find(allowed, f) == allowed.end())
      return invalid("update_mask", "\"" + f + "\" cannot be changed; these can: " + names);
  }
  return {};
}

// What is wrong with a pool's cold_cooling_seconds, if anything.
inline std::optional<std::string> cooling_problem(std::uint64_t seconds) {
  if (seconds <= tiering::max_cold_cooling_seconds) return std::nullopt;
  return std::to_string(seconds) + " is more than " +
         std::to_string(tiering::max_cold_cooling_seconds) + " (100 years)";
}

// iSCSI names compare case-insensitively (RFC 3722 folds them to lower case).
inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

inline bool is_volume_name(const std::string& name) {
  return name.find("/volumes/") != std::string::npos;
}

inline std::unexpected<refusal> no_array(const std::string& to) {
  return refuse(kind::unavailable, "", "no array " + to);
}

}  // namespace strata::controller::management_detail
