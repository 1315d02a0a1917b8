// What the array's start-up, changes and statistics share about its
// config-store records (README.md): reading one with a message that names
// its key, which records are top-level, group kinds both ways, and the
// tiering volumes' block size. Internal to array*.cc.
#pragma once

#include <expected>
#include <random>
#include <string>
#include <string_view>

#include "controller/disk_group.h"
#include "controller/tiers.h"
#include "raid/device/status.h"
#include "strata/v1/resources.pb.h"

namespace strata::controller::records {

// The block size of every tiering volume: the pool's groups' (RAID works in
// 4096-byte blocks). What a LUN presents is the volume record's
// block_size_bytes; a 512-byte one is emulated over this (map_volume).
inline constexpr std::uint32_t tiering_block_bytes = 4096;

inline std::string random_hex(int bytes) {
  std::random_device seed;
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    const unsigned b = seed() & 0xff;
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

template <class Message>
std::expected<Message, error> decode(const std::string& key, const std::string& bytes) {
  Message m;
  if (!m.ParseFromString(bytes))
    return std::unexpected(
        make_error(errc::invalid_argument, "config: record " + key + " is corrupt"));
  return m;
}

// Top-level records of a collection: "pools/p1", not "pools/p1/volumes/v1".
inline bool top_level(std::string_view key, std::string_view collection) {
  return key.substr(collection.size()).find('/') == std::string_view::npos;
}

inline std::string short_name(std::string_view resource) {
  return std::string(resource.substr(resource.rfind('/') + 1));
}

inline group_kind kind_of(v1::GroupKind k) {
  return k == v1::RAID6       ? group_kind::raid6
         : k == v1::RAID1     ? group_kind::raid1
         : k == v1::WRITE_LOG ? group_kind::write_log
         : k == v1::CEPH      ? group_kind::ceph
                              : group_kind::read_cache;
}
inline v1::GroupKind kind_of(group_kind k) {
  return k == group_kind::raid6       ? v1::RAID6
         : k == group_kind::raid1     ? v1::RAID1
         : k == group_kind::write_log ? v1::WRITE_LOG
         : k == group_kind::ceph      ? v1::CEPH
                                      : v1::READ_CACHE;
}

}  // namespace strata::controller::records
