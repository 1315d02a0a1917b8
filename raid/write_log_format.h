// The write log's on-disk format (docs/write-log.md): two superblock copies
// and a circular area of records, each a header block and its data blocks.
//
// Positions are virtual: a record's `position` grows without bound and lies
// at physical block data_start + position % data_blocks of the log device.
// A record never wraps: one that would cross the area's end goes to the
// start of the next lap instead. So a reader that has read the record at
// v (n data blocks) finds the next one at v + 1 + n, or else at the next
// lap's start; its header must carry that position and the sequence number
// the previous header promised (`next_seq`), so stale records of earlier
// laps, or from after a crash's torn record, are never taken for it.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace strata::raid::wlog {

constexpr std::uint32_t block_bytes = 4096;
// Blocks 0 and 1 hold the superblock, written alternately (generation % 2),
// so that a torn superblock write leaves the other copy.
constexpr std::uint64_t data_start = 2;

// Names the group whose log this is (the controller uses the backing RAID
// group's id): a log is replayed only onto the group it was written for.
using log_id = std::array<std::uint8_t, 16>;

struct superblock {
  log_id id{};
  std::uint64_t generation = 0;  // the copy with the highest valid generation wins
  std::uint64_t data_blocks = 0;
  std::uint64_t backing_blocks = 0;
  std::uint32_t backing_block_bytes = 0;
  // The checkpoint: the oldest record replay needs, or, with none left,
  // where the next record goes.
  std::uint64_t tail_position = 0;
  std::uint64_t tail_seq = 0;
};

struct record_header {
  log_id id{};
  std::uint64_t seq = 0;
  // The seq of the record that follows: seq + 1, except in the marker a
  // restart appends, which skips past every seq a stale record can carry.
  std::uint64_t next_seq = 0;
  std::uint64_t position = 0;
  std::uint64_t lba = 0;          // where the data goes on the backing device
  std::uint32_t data_blocks = 0;  // 0: a marker
  std::uint32_t data_crc = 0;     // CRC-32C of the data blocks
  // Every record of a lower seq had been acknowledged (made durable) when
  // this header was written; 0 in logs written before the field. A record
  // whose data fails its checksum below a later header's acked_below was
  // acknowledged, so it is damage, not a tear (docs/write-log.md).
  std::uint64_t acked_below = 0;
};

void encode(const superblock& s, std::span<std::byte, block_bytes> out) noexcept;
std::optional<superblock> decode_superblock(std::span<const std::byte, block_bytes> in) noexcept;
void encode(const record_header& h, std::span<std::byte, block_bytes> out) noexcept;
std::optional<record_header> decode_record(std::span<const std::byte, block_bytes> in) noexcept;

// CRC-32C of `bytes` bytes of a scatter-gather list, from its start.
std::uint32_t data_crc(std::span<const iovec> buffers, std::uint64_t bytes) noexcept;

// Where a record of `need` blocks goes when the head is at `head`: there,
// or at the next lap's start if it would cross the area's end.
constexpr std::uint64_t place(std::uint64_t head, std::uint64_t need,
                              std::uint64_t data_blocks) noexcept {
  return head % data_blocks + need > data_blocks ? (head / data_blocks + 1) * data_blocks : head;
}
constexpr std::uint64_t physical(std::uint64_t position, std::uint64_t data_blocks) noexcept {
  return data_start + position % data_blocks;
}

}  // namespace strata::raid::wlog
