#include "tiering/records.h"

namespace strata::tiering {

using codec::format_version;
using codec::put_be;
using codec::reader;

std::string_view to_string(tier t) noexcept {
  switch (t) {
    case tier::performance:
      return "performance";
    case tier::capacity:
      return "capacity";
    case tier::cold:
      return "cold";
  }
  return "unknown";
}

std::string_view to_string(affinity a) noexcept {
  switch (a) {
    case affinity::automatic:
      return "auto";
    case affinity::performance:
      return "performance";
    case affinity::archive:
      return "archive";
    case affinity::local:
      return "local";
  }
  return "unknown";
}

std::optional<affinity> parse_affinity(std::string_view name) noexcept {
  if (name == "auto") return affinity::automatic;
  if (name == "performance") return affinity::performance;
  if (name == "archive") return affinity::archive;
  if (name == "local") return affinity::local;
  return std::nullopt;
}

namespace keys {
std::string pool() {
  return "pool";
}
std::string pool_age() {
  return "age";
}
std::string volume(std::uint32_t id) {
  std::string k(volume_prefix);
  put_be(k, id, 4);
  return k;
}
std::string unit_state(std::uint32_t volume_id) {
  std::string k("unit_state/");
  put_be(k, volume_id, 4);
  return k;
}
std::string extent(std::uint32_t volume, std::uint64_t volume_extent) {
  std::string k;
  put_be(k, volume, 4);
  put_be(k, volume_extent, 8);
  return k;
}
std::optional<std::pair<std::uint32_t, std::uint64_t>> parse_extent(std::string_view key) {
  reader r{key};
  const auto volume = static_cast<std::uint32_t>(r.be(4));
  const std::uint64_t e = r.be(8);
  if (!r.done()) return std::nullopt;
  return std::pair{volume, e};
}
std::string history_snapshot(std::uint64_t sequence) {
  std::string k;
  put_be(k, sequence, 8);
  return k;
}
std::string history_extent(std::uint64_t sequence, std::uint32_t volume,
                           std::uint64_t volume_extent) {
  std::string k = history_snapshot(sequence);
  put_be(k, volume, 4);
  put_be(k, volume_extent, 8);
  return k;
}
std::optional<history_key> parse_history(std::string_view key) {
  reader r{key};
  history_key k;
  k.sequence = r.be(8);
  if (r.done()) {
    k.header = true;
    return k;
  }
  k.volume = static_cast<std::uint32_t>(r.be(4));
  k.volume_extent = r.be(8);
  if (!r.done()) return std::nullopt;
  return k;
}
std::string cache_line(std::uint64_t line) {
  std::string k;
  put_be(k, line, 8);
  return k;
}
std::optional<std::uint64_t> parse_cache_line(std::string_view key) {
  reader r{key};
  const std::uint64_t line = r.be(8);
  if (!r.done()) return std::nullopt;
  return line;
}
}  // namespace keys

std::string encode(const pool_record& r) {
  std::string out;
  put_be(out, format_version, 1);
  put_be(out, r.extent_size_bytes, 8);
  put_be(out, r.groups.size(), 2);
  for (const auto& g : r.groups) {
    put_be(out, static_cast<std::uint8_t>(g.where), 1);
    put_be(out, g.extent_count, 8);
  }
  return out;
}

std::optional<pool_record> decode_pool(std::string_view value) {
  reader r{value};
  if (!r.version()) return std::nullopt;
  pool_record p;
  p.extent_size_bytes = r.be(8);
  const auto n = r.be(2);
  for (std::uint64_t i = 0; i < n && r.ok; ++i) {
    pool_record::group g;
    const auto t = r.be(1);
    if (t >= tier_count) return std::nullopt;
    g.where = static_cast<tier>(t);
    g.extent_count = r.be(8);
    p.groups.push_back(g);
  }
  if (!r.done()) return std::nullopt;
  return p;
}

std::string encode_pool_age(std::uint64_t seconds) {
  std::string out;
  put_be(out, format_version, 1);
  put_be(out, seconds, 8);
  return out;
}

std::optional<std::uint64_t> decode_pool_age(std::string_view value) {
  reader r{value};
  if (!r.version()) return std::nullopt;
  const std::uint64_t seconds = r.be(8);
  if (!r.done()) return std::nullopt;
  return seconds;
}

std::string encode(const volume_record& v) {
  std::string out;
  put_be(out, format_version, 1);
  put_be(out, v.id, 4);
  put_be(out, v.name.size(), 2);
  out += v.name;
  put_be(out, v.block_size_bytes, 4);
  put_be(out, v.block_count, 8);
  put_be(out, static_cast<std::uint8_t>(v.placement), 1);
  return out;
}

std::optional<volume_record> decode_volume(std::string_view value) {
  reader r{value};
  if (!r.version()) return std::nullopt;
  volume_record v;
  v.id = static_cast<std::uint32_t>(r.be(4));
  v.name = r.text();
  v.block_size_bytes = static_cast<std::uint32_t>(r.be(4));
  v.block_count = r.be(8);
  const auto a = r.be(1);
  if (a > static_cast<std::uint8_t>(affinity::local)) return std::nullopt;
  v.placement = static_cast<affinity>(a);
  if (!r.done()) return std::nullopt;
  return v;
}

std::string encode(const extent_location& l) {
  std::string out;
  put_be(out, format_version, 1);
  put_be(out, l.group, 2);
  put_be(out, l.extent, 8);
  return out;
}

std::optional<extent_location> decode_location(std::string_view value) {
  reader r{value};
  if (!r.version()) return std::nullopt;
  extent_location l;
  l.group = static_cast<std::uint16_t>(r.be(2));
  l.extent = r.be(8);
  if (!r.done()) return std::nullopt;
  return l;
}

std::string encode(const history_header& h) {
  std::string out;
  put_be(out, format_version, 1);
  put_be(out, static_cast<std::uint64_t>(h.taken_unix_seconds), 8);
  put_be(out, h.extents_tracked, 8);
  out += h.total_heat;
  return out;
}

std::optional<history_header> decode_history_header(std::string_view value) {
  reader r{value};
  if (!r.version()) return std::nullopt;
  history_header h;
  h.taken_unix_seconds = static_cast<std::int64_t>(r.be(8));
  h.extents_tracked = r.be(8);
  if (!r.ok) return std::nullopt;
  h.total_heat = std::string(r.in);
  return h;
}

std::string encode(const history_entry& e) {
  std::string out;
  put_be(out, format_version, 1);
  put_be(out, static_cast<std::uint8_t>(e.where), 1);
  out += e.heat;
  return out;
}

std::optional<history_entry> decode_history_entry(std::string_view value) {
  reader r{value};
  if (!r.version()) return std::nullopt;
  const std::uint64_t where = r.be(1);
  if (!r.ok || where >= tier_count) return std::nullopt;
  return history_entry{static_cast<tier>(where), std::string(r.in)};
}

std::string encode_cache_slot(std::uint64_t slot) {
  std::string out;
  put_be(out, format_version, 1);
  put_be(out, slot, 8);
  return out;
}

std::optional<std::uint64_t> decode_cache_slot(std::string_view value) {
  reader r{value};
  if (!r.version()) return std::nullopt;
  const std::uint64_t slot = r.be(8);
  if (!r.done()) return std::nullopt;
  return slot;
}

}  // namespace strata::tiering
