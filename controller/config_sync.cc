#include "controller/config_sync.h"

#include <array>
#include <charconv>
#include <set>

#include "controller/wire.h"

namespace strata::controller {

namespace {

constexpr std::array<std::string_view, 7> array_wide_prefixes = {
    "disks/", "groups/", "pools/", "hosts/", "mappings/", "controllers/", "array/"};

using wire::put32;
using wire::put_text;

}  // namespace

bool array_wide(std::string_view key) {
  for (std::string_view p : array_wide_prefixes) {
    if (key.starts_with(p)) return true;
  }
  return false;
}

config_records array_wide_records(const config_store& config) {
  config_records out;
  for (std::string_view p : array_wide_prefixes) {
    for (auto& record : config.list(p)) out.push_back(std::move(record));
  }
  return out;
}

link_bytes encode_records(const config_records& records) {
  link_bytes out;
  put32(out, static_cast<std::uint32_t>(records.size()));
  for (const auto& [key, value] : records) {
    put_text(out, key);
    put_text(out, value);
  }
  return out;
}

std::expected<config_records, error> decode_records(std::span<const std::uint8_t> bytes) {
  wire::reader in(bytes);
  const auto count = in.u32();
  config_records out;
  for (std::uint32_t i = 0; count && i < *count && in.ok(); ++i) {
    auto key = in.text();
    auto value = in.text();
    if (key && value) out.emplace_back(std::move(*key), std::move(*value));
  }
  if (!in.done())
    return std::unexpected(
        make_error(errc::invalid_argument, "a malformed list of configuration records"));
  return out;
}

std::uint64_t generation_of(const config_store& config) {
  const auto text = config.get(generation_key);
  std::uint64_t g = 0;
  if (text) std::from_chars(text->data(), text->data() + text->size(), g);
  return g;
}

void bump_generation(config_batch& b, std::uint64_t current) {
  b.put(std::string(generation_key), std::to_string(current + 1));
}

config_change change_of(const config_batch& b) {
  config_change c;
  b.visit([&](const std::string& key, const std::string* value) {
    c.emplace_back(key, value != nullptr ? std::optional<std::string>(*value) : std::nullopt);
  });
  return c;
}

config_batch batch_of(const config_change& c) {
  config_batch b;
  for (const auto& [key, value] : c) {
    if (value) {
      b.put(key, *value);
    } else {
      b.erase(key);
    }
  }
  return b;
}

link_bytes encode_change(const config_change& c) {
  link_bytes out;
  put32(out, static_cast<std::uint32_t>(c.size()));
  for (const auto& [key, value] : c) {
    out.push_back(value ? 1 : 0);
    put_text(out, key);
    if (value) put_text(out, *value);
  }
  return out;
}

std::expected<config_change, error> decode_change(std::span<const std::uint8_t> bytes) {
  wire::reader in(bytes);
  const auto count = in.u32();
  config_change c;
  for (std::uint32_t i = 0; count && i < *count && in.ok(); ++i) {
    const auto put = in.byte();
    auto key = in.text();
    if (!put || !key) break;
    if (*put == 1) {
      auto value = in.text();
      if (value) c.emplace_back(std::move(*key), std::move(*value));
    } else {
      c.emplace_back(std::move(*key), std::nullopt);
    }
  }
  if (!in.done())
    return std::unexpected(make_error(errc::invalid_argument, "a malformed configuration change"));
  for (const auto& [key, value] : c) {
    // A partner changes the array-wide records only.
    if (!array_wide(key))
      return std::unexpected(make_error(errc::invalid_argument, "a configuration change of " + key +
                                                                    ", which is not array-wide"));
  }
  return c;
}

config_batch replace_with(const config_store& config, const config_records& snapshot) {
  std::set<std::string> kept;
  config_batch b;
  for (const auto& [key, value] : snapshot) {
    kept.insert(key);
    b.put(key, value);
  }
  for (const auto& [key, value] : array_wide_records(config)) {
    if (!kept.contains(key)) b.erase(key);
  }
  return b;
}

}  // namespace strata::controller
