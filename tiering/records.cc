#include "tiering/records.h"

namespace strata::tiering {

namespace {

constexpr std::uint8_t format_version = 1;

void put_be(std::string& out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads big-endian integers off the front of a value; `ok` stays false
// once it runs short.
struct reader {
  std::string_view in;
  bool ok = true;
  std::uint64_t be(int bytes) {
    if (in.size() < static_cast<std::size_t>(bytes)) {
      ok = false;
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<std::uint8_t>(in[static_cast<std::size_t>(i)]);
    in.remove_prefix(static_cast<std::size_t>(bytes));
    return v;
  }
  std::string text() {
    const auto n = static_cast<std::size_t>(be(2));
    if (!ok || in.size() < n) {
      ok = false;
      return {};
    }
    std::string s(in.substr(0, n));
    in.remove_prefix(n);
    return s;
  }
  bool version() { return be(1) == format_version && ok; }
  bool done() const { return ok && in.empty(); }
};

}  // namespace

std::string_view to_string(tier t) noexcept { return t == tier::performance ? "performance" : "capacity"; }

std::string_view to_string(affinity a) noexcept {
  switch (a) {
    case affinity::automatic: return "auto";
    case affinity::performance: return "performance";
    case affinity::archive: return "archive";
  }
  return "unknown";
}

std::optional<affinity> parse_affinity(std::string_view name) noexcept {
  if (name == "auto") return affinity::automatic;
  if (name == "performance") return affinity::performance;
  if (name == "archive") return affinity::archive;
  return std::nullopt;
}

namespace keys {
std::string pool() { return "pool"; }
std::string volume(std::uint32_t id) {
  std::string k(volume_prefix);
  put_be(k, id, 4);
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
    if (t > 1) return std::nullopt;
    g.where = static_cast<tier>(t);
    g.extent_count = r.be(8);
    p.groups.push_back(g);
  }
  if (!r.done()) return std::nullopt;
  return p;
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
  if (a > 2) return std::nullopt;
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

}  // namespace strata::tiering
