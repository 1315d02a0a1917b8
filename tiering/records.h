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

enum class tier : std::uint8_t { performance = 0, capacity = 1 };
std::string_view to_string(tier t) noexcept;

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
  archive = 2,      // never promoted
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

namespace keys {
// column::pool
std::string pool();                     // "pool"
std::string volume(std::uint32_t id);   // "volume/" + be32(id)
constexpr std::string_view volume_prefix = "volume/";
// column::extent_map
std::string extent(std::uint32_t volume, std::uint64_t volume_extent);  // be32 + be64
std::optional<std::pair<std::uint32_t, std::uint64_t>> parse_extent(std::string_view key);
// column::heat: the same key as the extent map's
inline std::string heat(std::uint32_t volume, std::uint64_t volume_extent) { return extent(volume, volume_extent); }
}  // namespace keys

std::string encode(const pool_record& r);
std::optional<pool_record> decode_pool(std::string_view value);
std::string encode(const volume_record& r);
std::optional<volume_record> decode_volume(std::string_view value);
std::string encode(const extent_location& l);
std::optional<extent_location> decode_location(std::string_view value);

}  // namespace strata::tiering
