#include "raid/write_log_format.h"

#include <isa-l/crc.h>

#include <cstring>

namespace strata::raid::wlog {
namespace {

// Little-endian fields at fixed offsets (docs/write-log.md); the last four
// bytes of each block are the CRC-32C of the rest.
constexpr std::uint64_t superblock_magic = 0x474f4c5741525453;  // "STRAWLOG"
constexpr std::uint64_t record_magic = 0x434552574c525453;      // "STRLWREC"
constexpr std::uint32_t version = 1;
constexpr std::size_t crc_offset = block_bytes - 4;

template <class T>
void put(std::span<std::byte, block_bytes> out, std::size_t offset, T value) noexcept {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out[offset + i] = static_cast<std::byte>(static_cast<std::uint64_t>(value) >> (8 * i));
  }
}

template <class T>
T get(std::span<const std::byte, block_bytes> in, std::size_t offset) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<std::uint64_t>(in[offset + i]) << (8 * i);
  return static_cast<T>(value);
}

std::uint32_t crc(const std::byte* bytes, std::size_t n,
                  std::uint32_t seed = 0xffffffffu) noexcept {
  return crc32_iscsi(const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(bytes)),
                     static_cast<int>(n), seed);
}

void seal(std::span<std::byte, block_bytes> out) noexcept {
  put<std::uint32_t>(out, crc_offset, crc(out.data(), crc_offset));
}
bool sealed(std::span<const std::byte, block_bytes> in) noexcept {
  return get<std::uint32_t>(in, crc_offset) == crc(in.data(), crc_offset);
}

void put_id(std::span<std::byte, block_bytes> out, std::size_t offset, const log_id& id) noexcept {
  std::memcpy(out.data() + offset, id.data(), id.size());
}
log_id get_id(std::span<const std::byte, block_bytes> in, std::size_t offset) noexcept {
  log_id id;
  std::memcpy(id.data(), in.data() + offset, id.size());
  return id;
}

}  // namespace

void encode(const superblock& s, std::span<std::byte, block_bytes> out) noexcept {
  std::memset(out.data(), 0, out.size());
  put<std::uint64_t>(out, 0, superblock_magic);
  put<std::uint32_t>(out, 8, version);
  put_id(out, 16, s.id);
  put<std::uint64_t>(out, 32, s.generation);
  put<std::uint64_t>(out, 40, s.data_blocks);
  put<std::uint64_t>(out, 48, s.backing_blocks);
  put<std::uint32_t>(out, 56, s.backing_block_bytes);
  put<std::uint64_t>(out, 64, s.tail_position);
  put<std::uint64_t>(out, 72, s.tail_seq);
  seal(out);
}

std::optional<superblock> decode_superblock(std::span<const std::byte, block_bytes> in) noexcept {
  if (get<std::uint64_t>(in, 0) != superblock_magic || get<std::uint32_t>(in, 8) != version ||
      !sealed(in)) {
    return std::nullopt;
  }
  superblock s;
  s.id = get_id(in, 16);
  s.generation = get<std::uint64_t>(in, 32);
  s.data_blocks = get<std::uint64_t>(in, 40);
  s.backing_blocks = get<std::uint64_t>(in, 48);
  s.backing_block_bytes = get<std::uint32_t>(in, 56);
  s.tail_position = get<std::uint64_t>(in, 64);
  s.tail_seq = get<std::uint64_t>(in, 72);
  return s;
}

void encode(const record_header& h, std::span<std::byte, block_bytes> out) noexcept {
  std::memset(out.data(), 0, out.size());
  put<std::uint64_t>(out, 0, record_magic);
  put<std::uint32_t>(out, 8, version);
  put_id(out, 16, h.id);
  put<std::uint64_t>(out, 32, h.seq);
  put<std::uint64_t>(out, 40, h.next_seq);
  put<std::uint64_t>(out, 48, h.position);
  put<std::uint64_t>(out, 56, h.lba);
  put<std::uint32_t>(out, 64, h.data_blocks);
  put<std::uint32_t>(out, 68, h.data_crc);
  put<std::uint64_t>(out, 72, h.acked_below);
  seal(out);
}

std::optional<record_header> decode_record(std::span<const std::byte, block_bytes> in) noexcept {
  if (get<std::uint64_t>(in, 0) != record_magic || get<std::uint32_t>(in, 8) != version ||
      !sealed(in)) {
    return std::nullopt;
  }
  record_header h;
  h.id = get_id(in, 16);
  h.seq = get<std::uint64_t>(in, 32);
  h.next_seq = get<std::uint64_t>(in, 40);
  h.position = get<std::uint64_t>(in, 48);
  h.lba = get<std::uint64_t>(in, 56);
  h.data_blocks = get<std::uint32_t>(in, 64);
  h.data_crc = get<std::uint32_t>(in, 68);
  h.acked_below = get<std::uint64_t>(in, 72);
  return h;
}

std::uint32_t data_crc(std::span<const iovec> buffers, std::uint64_t bytes) noexcept {
  std::uint32_t c = 0xffffffffu;
  for (const iovec& s : buffers) {
    if (bytes == 0) break;
    const std::uint64_t n = std::min<std::uint64_t>(s.iov_len, bytes);
    c = crc(static_cast<const std::byte*>(s.iov_base), n, c);
    bytes -= n;
  }
  return c;
}

}  // namespace strata::raid::wlog
