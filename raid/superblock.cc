#include "raid/superblock.h"

#include <isa-l/crc.h>

#include <cstring>

#include "raid/write_intent.h"

namespace strata::raid {
namespace {

constexpr std::uint64_t magic = 0x4253415441525453;  // "STRATASB", little-endian
constexpr std::size_t checksum_offset = superblock::size_bytes - 4;

// Little-endian fields at fixed offsets (docs/raid-superblock.md).
template <class T>
void put(std::span<std::byte, superblock::size_bytes> out, std::size_t offset, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out[offset + i] = static_cast<std::byte>(static_cast<std::uint64_t>(value) >> (8 * i));
  }
}

template <class T>
T get(std::span<const std::byte, superblock::size_bytes> in, std::size_t offset) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<std::uint64_t>(in[offset + i]) << (8 * i);
  }
  return static_cast<T>(value);
}

std::uint32_t checksum(std::span<const std::byte, superblock::size_bytes> bytes) {
  return crc32_iscsi(
      const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(bytes.data())),
      static_cast<int>(checksum_offset), 0xffffffffu);
}

}  // namespace

void superblock::encode(std::span<std::byte, size_bytes> out) const {
  std::memset(out.data(), 0, out.size());
  put<std::uint64_t>(out, 0, magic);
  put<std::uint32_t>(out, 8, current_version);
  put<std::uint32_t>(out, 12, static_cast<std::uint32_t>(level));
  std::memcpy(out.data() + 16, group_id.data(), group_id.size());
  put<std::uint32_t>(out, 32, member_count);
  put<std::uint32_t>(out, 36, member_index);
  put<std::uint32_t>(out, 40, logical_block_size_bytes);
  put<std::uint64_t>(out, 48, member_block_count);
  put<std::uint64_t>(out, 56, data_offset_blocks);
  put<std::uint64_t>(out, 64, strip_blocks);
  put<std::uint64_t>(out, 72, stripes);
  put<std::uint64_t>(out, 80, events);
  for (std::size_t i = 0; i < failed.size(); ++i) {
    if (failed[i]) out[96 + i / 8] |= static_cast<std::byte>(1u << (i % 8));
  }
  put<std::uint64_t>(out, 128, bitmap_offset_blocks);
  put<std::uint64_t>(out, 136, bitmap_region_stripes);
  put<std::uint32_t>(out, checksum_offset, checksum(out));
}

std::uint64_t superblock::bitmap_end_bytes() const noexcept {
  if (bitmap_offset_blocks == 0 || bitmap_region_stripes == 0) return 0;
  // Bits over `stripes`: a RAID-6 group's stripes, a RAID-1 group's blocks.
  const std::uint64_t regions = (stripes + bitmap_region_stripes - 1) / bitmap_region_stripes;
  return bitmap_offset_blocks * logical_block_size_bytes +
         write_intent::bytes_for(regions, logical_block_size_bytes);
}

std::expected<superblock, std::error_code> superblock::decode(
    std::span<const std::byte, size_bytes> in) {
  if (get<std::uint64_t>(in, 0) != magic) return std::unexpected(make_error_code(errc::not_found));
  if (get<std::uint32_t>(in, checksum_offset) != checksum(in)) {
    return std::unexpected(make_error_code(errc::media_error));
  }
  if (get<std::uint32_t>(in, 8) != current_version) {
    return std::unexpected(make_error_code(errc::not_supported));
  }
  superblock sb;
  sb.level = static_cast<group_level>(get<std::uint32_t>(in, 12));
  std::memcpy(sb.group_id.data(), in.data() + 16, sb.group_id.size());
  sb.member_count = get<std::uint32_t>(in, 32);
  sb.member_index = get<std::uint32_t>(in, 36);
  sb.logical_block_size_bytes = get<std::uint32_t>(in, 40);
  sb.member_block_count = get<std::uint64_t>(in, 48);
  sb.data_offset_blocks = get<std::uint64_t>(in, 56);
  sb.strip_blocks = get<std::uint64_t>(in, 64);
  sb.stripes = get<std::uint64_t>(in, 72);
  sb.events = get<std::uint64_t>(in, 80);
  for (std::size_t i = 0; i < sb.failed.size(); ++i) {
    sb.failed[i] = (static_cast<unsigned>(in[96 + i / 8]) >> (i % 8)) & 1u;
  }
  sb.bitmap_offset_blocks = get<std::uint64_t>(in, 128);
  sb.bitmap_region_stripes = get<std::uint64_t>(in, 136);
  return sb;
}

}  // namespace strata::raid
