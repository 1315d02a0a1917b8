// The superblock: what every member of a group says about the group and
// itself, so a group can be assembled from its members alone after a
// restart. Format: docs/raid-superblock.md.
//
// Two copies per member, in the reserved area at its start: copy A at byte
// 0, copy B at byte 4096. An update writes A, flushes, writes B, flushes,
// so a torn write spoils at most one copy; a reader takes the valid copy
// with the higher event count.
#pragma once

#include <array>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <span>

#include "raid/device/status.h"

namespace strata::raid {

enum class group_level : std::uint32_t { raid1 = 1, raid6 = 6 };

struct superblock {
  static constexpr std::size_t size_bytes = 4096;
  static constexpr std::uint64_t copy_a_offset_bytes = 0;
  static constexpr std::uint64_t copy_b_offset_bytes = 4096;
  static constexpr std::uint32_t current_version = 1;

  group_level level = group_level::raid6;
  std::array<std::uint8_t, 16> group_id{};
  std::uint32_t member_count = 0;
  std::uint32_t member_index = 0;
  std::uint32_t logical_block_size_bytes = 0;
  std::uint64_t member_block_count = 0;
  std::uint64_t data_offset_blocks = 0;
  std::uint64_t strip_blocks = 0;  // RAID-6
  std::uint64_t stripes = 0;       // RAID-6
  // Bumped on every change of the group's membership; a member whose copy
  // is behind the others missed a change (and the writes after it): stale.
  std::uint64_t events = 0;
  // The write-intent bitmap (docs/raid-write-hole.md): where it starts on
  // the member, and the stripes each bit covers. 0: no bitmap.
  std::uint64_t bitmap_offset_blocks = 0;
  std::uint64_t bitmap_region_stripes = 0;
  std::bitset<256> failed;  // members failed out, as of `events`

  // Where the member's write-intent bitmap ends, in bytes from the
  // member's start; 0 without a bitmap.
  std::uint64_t bitmap_end_bytes() const noexcept;

  // Exactly size_bytes bytes, checksummed (CRC32C).
  void encode(std::span<std::byte, size_bytes> out) const;
  // not_found: no Strata superblock here (wrong magic); media_error: one,
  // but corrupt (checksum); not_supported: a newer format version.
  static std::expected<superblock, std::error_code> decode(
      std::span<const std::byte, size_bytes> in);
};

// The last 64 KiB of a member's reserved area belong to the controller
// (docs/controller-area.md: the array's identity, the controllers' drive
// heartbeats, pool ownership), where the reserved area is at least
// 256 KiB; the write-intent bitmap stays clear of them.
struct controller_area {
  static constexpr std::uint64_t size_bytes = 64 * 1024;
  static constexpr std::uint64_t smallest_reserved_bytes = 256 * 1024;
  // Where it starts on a member whose reserved area is `reserved_bytes`
  // long; none in a smaller one.
  static std::optional<std::uint64_t> offset_bytes(std::uint64_t reserved_bytes) noexcept {
    if (reserved_bytes < smallest_reserved_bytes) return std::nullopt;
    return reserved_bytes - size_bytes;
  }
  // The bytes of the reserved area before it: the superblocks and the bitmap's room.
  static std::uint64_t room_before(std::uint64_t reserved_bytes) noexcept {
    return offset_bytes(reserved_bytes).value_or(reserved_bytes);
  }
};

}  // namespace strata::raid
