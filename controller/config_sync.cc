#include "controller/config_sync.h"

#include <array>
#include <charconv>
#include <set>

namespace strata::controller {

namespace {

constexpr std::array<std::string_view, 6> array_wide_prefixes = {"disks/", "groups/", "pools/", "hosts/", "mappings/", "array/"};

void put32(link_bytes& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

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
    put32(out, static_cast<std::uint32_t>(key.size()));
    out.insert(out.end(), key.begin(), key.end());
    put32(out, static_cast<std::uint32_t>(value.size()));
    out.insert(out.end(), value.begin(), value.end());
  }
  return out;
}

std::expected<config_records, error> decode_records(std::span<const std::uint8_t> bytes) {
  std::size_t at = 0;
  bool ok = true;
  auto u32 = [&]() -> std::uint32_t {
    if (at + 4 > bytes.size()) {
      ok = false;
      return 0;
    }
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | bytes[at + static_cast<std::size_t>(i)];
    at += 4;
    return v;
  };
  auto text = [&]() -> std::string {
    const std::uint32_t n = u32();
    if (!ok || at + n > bytes.size()) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(bytes.data() + at), n);
    at += n;
    return s;
  };
  const std::uint32_t count = u32();
  config_records out;
  for (std::uint32_t i = 0; ok && i < count; ++i) {
    std::string key = text();
    std::string value = text();
    if (ok) out.emplace_back(std::move(key), std::move(value));
  }
  if (!ok || at != bytes.size()) return std::unexpected(make_error(errc::invalid_argument, "a malformed list of configuration records"));
  return out;
}

std::uint64_t generation_of(const config_store& config) {
  const auto text = config.get(generation_key);
  std::uint64_t g = 0;
  if (text) std::from_chars(text->data(), text->data() + text->size(), g);
  return g;
}

void bump_generation(config_batch& b, std::uint64_t current) { b.put(std::string(generation_key), std::to_string(current + 1)); }

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
    put32(out, static_cast<std::uint32_t>(key.size()));
    out.insert(out.end(), key.begin(), key.end());
    if (value) {
      put32(out, static_cast<std::uint32_t>(value->size()));
      out.insert(out.end(), value->begin(), value->end());
    }
  }
  return out;
}

std::expected<config_change, error> decode_change(std::span<const std::uint8_t> bytes) {
  std::size_t at = 0;
  bool ok = true;
  auto u32 = [&]() -> std::uint32_t {
    if (at + 4 > bytes.size()) {
      ok = false;
      return 0;
    }
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | bytes[at + static_cast<std::size_t>(i)];
    at += 4;
    return v;
  };
  auto text = [&]() -> std::string {
    const std::uint32_t n = u32();
    if (!ok || at + n > bytes.size()) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(bytes.data() + at), n);
    at += n;
    return s;
  };
  const std::uint32_t count = u32();
  config_change c;
  for (std::uint32_t i = 0; ok && i < count; ++i) {
    if (at >= bytes.size()) {
      ok = false;
      break;
    }
    const bool put = bytes[at++] == 1;
    std::string key = text();
    if (put) {
      std::string value = text();
      c.emplace_back(std::move(key), std::move(value));
    } else {
      c.emplace_back(std::move(key), std::nullopt);
    }
  }
  if (!ok || at != bytes.size()) return std::unexpected(make_error(errc::invalid_argument, "a malformed configuration change"));
  for (const auto& [key, value] : c) {
    // A partner changes the array-wide records only.
    if (!array_wide(key)) return std::unexpected(make_error(errc::invalid_argument, "a configuration change of " + key + ", which is not array-wide"));
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
