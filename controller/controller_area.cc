#include "controller/controller_area.h"

#include <isa-l/crc.h>

#include <cstring>
#include <memory>

#include "raid/superblock.h"
#include "raid/superblock_io.h"

namespace strata::controller::area {

namespace {

constexpr std::uint64_t magic = 0x4143415441525453;  // "STRATACA" as a little-endian u64
constexpr std::uint32_t version = 1;
constexpr std::size_t payload_offset = 32;
constexpr std::size_t max_name_bytes = 63;

enum class kind : std::uint32_t { array = 1, heartbeat = 2, ownership = 3 };

std::uint32_t checksum(std::span<const std::byte> slot) {
  // Over the whole slot with the checksum field (bytes 24..27) taken as zero.
  std::array<std::byte, 4> zero{};
  std::uint32_t crc =
      crc32_iscsi(const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(slot.data())),
                  24, 0xffffffff);
  crc = crc32_iscsi(reinterpret_cast<unsigned char*>(zero.data()), 4, crc);
  return crc32_iscsi(
      const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(slot.data() + 28)),
      static_cast<int>(slot.size() - 28), crc);
}

// Little-endian fields into a slot.
class writer {
 public:
  explicit writer(std::vector<std::byte>& out) : out_(out) {}
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void bytes(std::span<const std::uint8_t> b) {
    std::memcpy(out_.data() + at_, b.data(), b.size());
    at_ += b.size();
  }
  void name(const std::string& n) {
    const std::size_t len = std::min(n.size(), max_name_bytes);
    out_[at_++] = static_cast<std::byte>(len);
    std::memcpy(out_.data() + at_, n.data(), len);
    at_ += len;
  }
  std::size_t at() const noexcept { return at_; }
  void seek(std::size_t to) { at_ = to; }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_[at_++] = static_cast<std::byte>(v >> (8 * i));
  }
  std::vector<std::byte>& out_;
  std::size_t at_ = 0;
};

class reader {
 public:
  explicit reader(std::span<const std::byte> in) : in_(in) {}
  std::uint64_t u32() { return get(4); }
  std::uint64_t u64() { return get(8); }
  void bytes(std::span<std::uint8_t> into) {
    if (!fits(into.size())) return;
    std::memcpy(into.data(), in_.data() + at_, into.size());
    at_ += into.size();
  }
  std::string name() {
    if (!fits(1)) return {};
    const auto len = static_cast<std::size_t>(in_[at_]);
    if (len > max_name_bytes || !fits(1 + len)) {
      ok_ = false;
      return {};
    }
    std::string n(reinterpret_cast<const char*>(in_.data() + at_ + 1), len);
    at_ += 1 + len;
    return n;
  }
  void seek(std::size_t to) { at_ = to; }
  bool ok() const noexcept { return ok_; }
  std::size_t remaining() const noexcept { return at_ < in_.size() ? in_.size() - at_ : 0; }

 private:
  bool fits(std::size_t n) {
    if (at_ + n > in_.size()) ok_ = false;
    return ok_;
  }
  std::uint64_t get(int n) {
    if (!fits(static_cast<std::size_t>(n))) return 0;
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i)
      v = (v << 8) | static_cast<std::uint8_t>(in_[at_ + static_cast<std::size_t>(i)]);
    at_ += static_cast<std::size_t>(n);
    return v;
  }
  std::span<const std::byte> in_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

// The frame around every record: magic, version, kind, sequence; seal()
// fills in the checksum and the payload's length.
void frame(writer& w, kind k, std::uint64_t sequence) {
  w.u64(magic);
  w.u32(version);
  w.u32(static_cast<std::uint32_t>(k));
  w.u64(sequence);
  w.seek(payload_offset);
}

std::vector<std::byte> seal(std::vector<std::byte> out, std::size_t payload_end) {
  writer w(out);
  w.seek(28);
  w.u32(static_cast<std::uint32_t>(payload_end - payload_offset));
  w.seek(24);
  w.u32(checksum(out));
  return out;
}

struct decoded_slot {
  kind k;
  std::uint64_t sequence;
  reader payload;
};

// A slot's record, if it holds a valid one.
std::optional<decoded_slot> open_slot(std::span<const std::byte> slot) {
  reader r(slot);
  if (r.u64() != magic || r.u32() != version) return std::nullopt;
  const auto k = static_cast<kind>(r.u32());
  const std::uint64_t sequence = r.u64();
  const auto stored = static_cast<std::uint32_t>(r.u32());
  const auto length = r.u32();
  if (!r.ok() || stored != checksum(slot) || length > slot_bytes - payload_offset)
    return std::nullopt;
  reader payload(slot.subspan(payload_offset, length));
  return decoded_slot{k, sequence, payload};
}

template <class Record>
void keep_newer(std::optional<Record>& into, std::uint64_t& into_sequence, Record r,
                std::uint64_t sequence) {
  if (!into || sequence > into_sequence) {
    into = std::move(r);
    into_sequence = sequence;
  }
}

}  // namespace

std::vector<std::byte> encode(const array_identity& a, std::uint64_t sequence) {
  std::vector<std::byte> out(slot_bytes);
  writer w(out);
  frame(w, kind::array, sequence);
  w.bytes(a.id);
  w.bytes(a.link_key);
  w.u64(static_cast<std::uint64_t>(a.created_unix_ms));
  return seal(std::move(out), w.at());
}

std::vector<std::byte> encode(const drive_heartbeat& h, std::uint64_t sequence) {
  std::vector<std::byte> out(slot_bytes);
  writer w(out);
  frame(w, kind::heartbeat, sequence);
  w.name(h.controller);
  w.u64(h.counter);
  w.u64(static_cast<std::uint64_t>(h.unix_ms));
  w.u32(static_cast<std::uint32_t>(h.state));
  w.u64(h.config_generation);
  w.u64(h.partner_counter_seen);
  return seal(std::move(out), w.at());
}

std::vector<std::byte> encode(const pool_ownership& o, std::uint64_t sequence) {
  std::vector<std::byte> out(slot_bytes);
  writer w(out);
  frame(w, kind::ownership, sequence);
  w.name(o.pool);
  w.name(o.owner);
  w.u64(o.epoch);
  w.u64(static_cast<std::uint64_t>(o.unix_ms));
  w.u64(o.serial);
  w.u32(o.partner_copy ? 1 : 0);
  return seal(std::move(out), w.at());
}

std::optional<std::size_t> heartbeat_slot(const std::string& controller) {
  if (controller == "a") return heartbeat_a_slot;
  if (controller == "b") return heartbeat_b_slot;
  return std::nullopt;
}

std::expected<area_contents, std::error_code> decode(std::span<const std::byte> area_bytes) {
  if (area_bytes.size() < slots * slot_bytes)
    return std::unexpected(make_error_code(errc::invalid_argument));
  area_contents c;
  std::uint64_t array_seq = 0, owner_seq = 0, a_seq = 0, b_seq = 0;
  bool any = false;
  for (std::size_t i = 0; i < slots; ++i) {
    auto slot = open_slot(area_bytes.subspan(i * slot_bytes, slot_bytes));
    if (!slot) continue;
    reader& r = slot->payload;
    switch (slot->k) {
      case kind::array: {
        if (i != array_slot && i != array_slot + 1) break;
        array_identity a;
        r.bytes(a.id);
        r.bytes(a.link_key);
        a.created_unix_ms = static_cast<std::int64_t>(r.u64());
        if (r.ok()) keep_newer(c.array, array_seq, a, slot->sequence);
        break;
      }
      case kind::heartbeat: {
        drive_heartbeat h;
        h.controller = r.name();
        h.counter = r.u64();
        h.unix_ms = static_cast<std::int64_t>(r.u64());
        h.state = static_cast<controller_state>(r.u32());
        h.config_generation = r.u64();
        if (r.remaining() >= 8) h.partner_counter_seen = r.u64();  // 0 in older beats: no echo
        if (!r.ok() || heartbeat_slot(h.controller) != i) break;
        if (h.controller == "a") {
          keep_newer(c.heartbeat_a, a_seq, h, slot->sequence);
        } else {
          keep_newer(c.heartbeat_b, b_seq, h, slot->sequence);
        }
        break;
      }
      case kind::ownership: {
        if (i != ownership_slot && i != ownership_slot + 1) break;
        pool_ownership o;
        o.pool = r.name();
        o.owner = r.name();
        o.epoch = r.u64();
        o.unix_ms = static_cast<std::int64_t>(r.u64());
        if (!r.ok()) break;
        if (r.remaining() >= 12) {  // records written before the copy's state have neither field
          o.serial = r.u64();
          o.partner_copy = r.u32() == 1;
        }
        if (r.ok()) keep_newer(c.ownership, owner_seq, o, slot->sequence);
        break;
      }
    }
    any = true;
  }
  if (!any) return std::unexpected(make_error_code(errc::not_found));
  return c;
}

void locate(device::block_device& member,
            std::function<void(std::expected<std::uint64_t, std::error_code>)> done) {
  raid::read_superblock(
      member, [done = std::move(done)](std::expected<raid::superblock, std::error_code> sb) {
        if (!sb) return done(std::unexpected(sb.error()));
        const std::uint64_t reserved_bytes = sb->data_offset_blocks * sb->logical_block_size_bytes;
        const auto at = raid::controller_area::offset_bytes(reserved_bytes);
        if (!at || sb->bitmap_end_bytes() > *at)
          return done(std::unexpected(make_error_code(errc::not_supported)));
        done(*at);
      });
}

void read(device::block_device& member, std::uint64_t offset_bytes,
          std::function<void(std::expected<area_contents, std::error_code>)> done) {
  const std::uint32_t block_size = member.geometry().logical_block_size_bytes;
  raid::read_reserved(
      member, offset_bytes / block_size, slots * slot_bytes,
      [done = std::move(done)](std::expected<std::vector<std::byte>, std::error_code> bytes) {
        if (!bytes) return done(std::unexpected(bytes.error()));
        done(decode(*bytes));
      });
}

void write(device::block_device& member, std::uint64_t offset_bytes, std::size_t slot,
           std::vector<std::byte> bytes, std::function<void(std::error_code)> done) {
  const std::uint32_t block_size = member.geometry().logical_block_size_bytes;
  raid::write_reserved(member, (offset_bytes + slot * slot_bytes) / block_size, bytes,
                       std::move(done));
}

void write_both(device::block_device& member, std::uint64_t offset_bytes, std::size_t first_slot,
                std::vector<std::byte> bytes, std::function<void(std::error_code)> done) {
  auto copy = std::make_shared<std::vector<std::byte>>(bytes);
  write(
      member, offset_bytes, first_slot, std::move(bytes),
      [&member, offset_bytes, first_slot, copy, done = std::move(done)](std::error_code e) mutable {
        if (e) return done(e);
        write(member, offset_bytes, first_slot + 1, std::move(*copy), std::move(done));
      });
}

}  // namespace strata::controller::area
