// How the pool's records are laid out in RocksDB: keys that sort the way
// they are scanned (big-endian integers), values with a leading format
// version. The prose specification is docs/tiering-keys.md; this file is
// the only code that knows it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tiering {

// Where extents live. The cold tier is outside the enclosure (an RBD image
// in a Ceph cluster): the coldest extents go there after a cooling time,
// and come back when they heat up. A tier's number is written in records:
// a decoder refuses one it does not know rather than misread it.
enum class tier : std::uint8_t { performance = 0, capacity = 1, cold = 2 };
constexpr std::uint8_t tier_count = 3;
std::string_view to_string(tier t) noexcept;
// The read cache keeps copies of what lives on the HDDs and in the cold
// tier; the performance tier is as fast as the cache.
constexpr bool read_cached(tier t) noexcept {
  return t != tier::performance;
}

// Where a volume extent lives: a group of the pool (its index in the
// pool's group list) and an extent of that group.
struct extent_location {
  std::uint16_t group = 0;
  std::uint64_t extent = 0;
  auto operator<=>(const extent_location&) const = default;
};

// Per-volume placement rule.
enum class affinity : std::uint8_t {
  automatic = 0,    // the migrator decides
  performance = 1,  // kept on SSD while there is room
  archive = 2,      // never promoted to the performance tier
  local = 3,        // never moved to the cold tier (kept in the enclosure)
};
std::string_view to_string(affinity a) noexcept;
std::optional<affinity> parse_affinity(std::string_view name) noexcept;

struct pool_record {
  std::uint64_t extent_size_bytes = 0;
  struct group {
    tier where = tier::capacity;
    std::uint64_t extent_count = 0;
  };
  std::vector<group> groups;
};

struct volume_record {
  std::uint32_t id = 0;
  std::string name;
  std::uint32_t block_size_bytes = 4096;
  std::uint64_t block_count = 0;
  affinity placement = affinity::automatic;
};

// The pieces every record is made of: big-endian integers, and a format
// version byte first in every value.
namespace codec {
constexpr std::uint8_t format_version = 1;
inline void put_be(std::string& out, std::uint64_t v, int bytes) {
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
    for (int i = 0; i < bytes; ++i)
      v = (v << 8) | static_cast<std::uint8_t>(in[static_cast<std::size_t>(i)]);
    in.remove_prefix(static_cast<std::size_t>(bytes));
    return v;
  }
  std::string_view bytes(std::size_t n) {
    if (!ok || in.size() < n) {
      ok = false;
      return {};
    }
    const std::string_view s = in.substr(0, n);
    in.remove_prefix(n);
    return s;
  }
  std::string text() { return std::string(bytes(static_cast<std::size_t>(be(2)))); }
  bool version() { return be(1) == format_version && ok; }
  bool done() const { return ok && in.empty(); }
};
}  // namespace codec

namespace keys {
// column::pool
std::string pool();  // "pool"
// The pool's age: the seconds it has been served, written with its heat.
// Extents' last I/O times are kept in it, so that time spent down does
// not count towards the cold tier's cooling (as it does not decay heat).
std::string pool_age();                // "age"
std::string volume(std::uint32_t id);  // "volume/" + be32(id)
constexpr std::string_view volume_prefix = "volume/";
// A volume's SCSI unit state (its persistent reservations), saved by the
// controller's unit (controller/unit_state.h), erased with the volume.
std::string unit_state(std::uint32_t volume_id);  // "unit_state/" + be32(id)
// column::extent_map
std::string extent(std::uint32_t volume, std::uint64_t volume_extent);  // be32 + be64
std::optional<std::pair<std::uint32_t, std::uint64_t>> parse_extent(std::string_view key);
// column::heat: the same key as the extent map's
inline std::string heat(std::uint32_t volume, std::uint64_t volume_extent) {
  return extent(volume, volume_extent);
}
// column::heat_history: a snapshot's header, then its extents
std::string history_snapshot(std::uint64_t sequence);  // be64
std::string history_extent(std::uint64_t sequence, std::uint32_t volume,
                           std::uint64_t volume_extent);  // be64 + be32 + be64
struct history_key {
  std::uint64_t sequence = 0;
  bool header = false;  // else an extent's entry
  std::uint32_t volume = 0;
  std::uint64_t volume_extent = 0;
};
std::optional<history_key> parse_history(std::string_view key);
// column::cache_index
std::string cache_line(std::uint64_t line);  // be64
std::optional<std::uint64_t> parse_cache_line(std::string_view key);
}  // namespace keys

std::string encode(const pool_record& r);
std::optional<pool_record> decode_pool(std::string_view value);
std::string encode_pool_age(std::uint64_t seconds);
std::optional<std::uint64_t> decode_pool_age(std::string_view value);
std::string encode(const volume_record& r);
std::optional<volume_record> decode_volume(std::string_view value);
std::string encode(const extent_location& l);
std::optional<extent_location> decode_location(std::string_view value);

// Heat history values. `heat` fields hold heat_map::encode's value, opaque here.
struct history_header {
  std::int64_t taken_unix_seconds = 0;
  std::uint64_t extents_tracked = 0;  // mapped extents when it was taken
  std::string total_heat;             // the sum over all of them
};
struct history_entry {
  tier where = tier::capacity;  // where the extent lived when it was taken
  std::string heat;
};
std::string encode(const history_header& h);
std::optional<history_header> decode_history_header(std::string_view value);
std::string encode(const history_entry& e);
std::optional<history_entry> decode_history_entry(std::string_view value);

// A read cache index value: the cache slot that holds the line.
std::string encode_cache_slot(std::uint64_t slot);
std::optional<std::uint64_t> decode_cache_slot(std::string_view value);

}  // namespace strata::tiering
