#include "target/nvme/nvm.h"

#include <algorithm>

#include "target/scsi/big_endian.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/sense.h"

namespace strata::nvme {

namespace {

// SCSI operation codes the NVM commands become.
namespace cdb_op {
constexpr std::uint8_t read16 = 0x88;
constexpr std::uint8_t write16 = 0x8a;
constexpr std::uint8_t compare_and_write = 0x89;
constexpr std::uint8_t verify16 = 0x8f;
constexpr std::uint8_t synchronize_cache16 = 0x91;
constexpr std::uint8_t write_same16 = 0x93;
constexpr std::uint8_t unmap = 0x42;
}  // namespace cdb_op

using scsi::put_be;  // CDBs and SCSI parameter lists are big-endian

// A 16-byte CDB of the READ(16) shape: opcode, flags, LBA, blocks.
std::array<std::uint8_t, 16> cdb16(std::uint8_t op, std::uint8_t flags, std::uint64_t lba,
                                   std::uint32_t blocks) noexcept {
  std::array<std::uint8_t, 16> c{};
  c[0] = op;
  c[1] = flags;
  put_be(c.data() + 2, lba, 8);
  put_be(c.data() + 10, blocks, 4);
  return c;
}

constexpr std::uint8_t fua_bit = 0x08;  // READ(16)/WRITE(16)/COMPARE AND WRITE byte 1

// NLB, 0's based.
std::uint32_t blocks_of(const command_view& c) noexcept {
  return (c.cdw(12) & 0xffff) + 1;
}
std::uint64_t lba_of(const command_view& c) noexcept {
  return c.cdw(10) | std::uint64_t{c.cdw(11)} << 32;
}
bool fua_of(const command_view& c) noexcept {
  return (c.cdw(12) & (1u << 30)) != 0;
}

// FNV-1a over the serial, seeded, twice: 16 bytes that differ per volume.
std::array<std::uint8_t, 16> hashed(std::string_view serial, std::uint64_t seed) noexcept {
  std::array<std::uint8_t, 16> out{};
  for (int half = 0; half < 2; ++half) {
    std::uint64_t h = 0xcbf29ce484222325ull ^ seed ^ static_cast<std::uint64_t>(half);
    for (const char ch : serial) {
      h ^= static_cast<std::uint8_t>(ch);
      h *= 0x100000001b3ull;
    }
    put_be(out.data() + 8 * half, h, 8);
  }
  return out;
}

// Dataset Management range: 16 bytes (context attributes, length in
// blocks, starting LBA), little-endian.
constexpr std::size_t dsm_range_bytes = 16;
// UNMAP's parameter list: an 8-byte header, then 16-byte block descriptors.
constexpr std::size_t unmap_header_bytes = 8;
constexpr std::size_t unmap_descriptor_bytes = 16;

}  // namespace

std::array<std::uint8_t, 16> namespace_nguid(std::string_view serial) noexcept {
  return hashed(serial, 0x4e475549);
}

std::array<std::uint8_t, 16> namespace_uuid(std::string_view serial) noexcept {
  auto u = hashed(serial, 0x55554944);
  u[6] = static_cast<std::uint8_t>((u[6] & 0x0f) | 0x80);  // version 8: vendor-specific
  u[8] = static_cast<std::uint8_t>((u[8] & 0x3f) | 0x80);  // the RFC 4122 variant
  return u;
}

std::expected<nvm_transfer, status> nvm_transfer_of(const command_view& c,
                                                    std::uint32_t block_bytes,
                                                    std::uint32_t max_transfer_bytes) noexcept {
  const auto within = [&](std::uint64_t bytes) -> std::expected<nvm_transfer, status> {
    if (bytes > max_transfer_bytes) return std::unexpected(generic(code::invalid_field));
    return nvm_transfer{};
  };
  switch (c.opcode()) {
    case opcode::read: {
      const std::uint64_t bytes = std::uint64_t{blocks_of(c)} * block_bytes;
      auto t = within(bytes);
      if (t) t->to_host_bytes = static_cast<std::uint32_t>(bytes);
      return t;
    }
    case opcode::write:
    case opcode::compare: {
      const std::uint64_t bytes = std::uint64_t{blocks_of(c)} * block_bytes;
      auto t = within(bytes);
      if (t) t->to_controller_bytes = static_cast<std::uint32_t>(bytes);
      return t;
    }
    case opcode::flush:
    case opcode::write_zeroes:
      return nvm_transfer{};
    case opcode::dataset_management: {
      const std::uint32_t ranges = (c.cdw(10) & 0xff) + 1;
      return nvm_transfer{static_cast<std::uint32_t>(ranges * dsm_range_bytes), 0,
                          256 * dsm_range_bytes};
    }
    case opcode::reservation_register:
    case opcode::reservation_acquire:
      return nvm_transfer{16, 0, 0};  // CRKEY, and NRKEY or PRKEY
    case opcode::reservation_release:
      return nvm_transfer{8, 0, 0};  // CRKEY
    case opcode::reservation_report: {
      const std::uint64_t bytes = (std::uint64_t{c.cdw(10)} + 1) * 4;  // NUMD, 0's based dwords
      auto t = within(bytes);
      if (t) t->to_host_bytes = static_cast<std::uint32_t>(bytes);
      return t;
    }
    default:
      return std::unexpected(generic(code::invalid_opcode));
  }
}

std::optional<status> nvm_command::start(const command_view& c, const namespace_config& ns,
                                         std::span<std::byte> data, scsi::task& t,
                                         bool compare_and_write) noexcept {
  opcode_ = c.opcode();
  compare_and_write_ = compare_and_write;
  block_bytes_ = ns.block_bytes;
  data_ = data;
  result_ = success;
  retries_ = 0;
  attention_.reset();
  to_host_bytes_ = 0;
  ranges_done_ = 0;
  range_count_ = 0;
  range_sent_blocks_ = 0;
  report_step_ = 0;
  report_.clear();
  t.data_out = {};
  t.expected_transfer_bytes = 0;
  const std::uint64_t lba = lba_of(c);
  const std::uint32_t blocks = blocks_of(c);
  const std::uint8_t fua = fua_of(c) ? fua_bit : 0;
  switch (opcode_) {
    case opcode::read:
      t.cdb = cdb16(cdb_op::read16, fua, lba, blocks);
      t.expected_transfer_bytes = blocks * block_bytes_;
      return std::nullopt;
    case opcode::write:
      t.cdb = cdb16(cdb_op::write16, fua, lba, blocks);
      t.expected_transfer_bytes = blocks * block_bytes_;
      t.data_out = data;
      return std::nullopt;
    case opcode::compare:
      if (compare_and_write) {
        // COMPARE AND WRITE's NUMBER OF LOGICAL BLOCKS is one byte.
        if (blocks > scsi::logical_unit::max_compare_and_write_blocks)
          return generic(code::invalid_field);
        t.cdb = cdb16(cdb_op::compare_and_write, fua, lba, 0);
        t.cdb[10] = t.cdb[11] = t.cdb[12] = 0;
        t.cdb[13] = static_cast<std::uint8_t>(blocks);
        t.expected_transfer_bytes = 2 * blocks * block_bytes_;
      } else {
        // VERIFY(16), BYTCHK 01b: the blocks against the data sent.
        t.cdb = cdb16(cdb_op::verify16, 0x02, lba, blocks);
        t.expected_transfer_bytes = blocks * block_bytes_;
      }
      t.data_out = data;
      return std::nullopt;
    case opcode::flush:
      t.cdb = cdb16(cdb_op::synchronize_cache16, 0, 0, 0);
      return std::nullopt;
    case opcode::write_zeroes:
      lba_ = lba;
      blocks_left_ = blocks;
      deallocate_ = (c.cdw(12) & (1u << 25)) != 0;
      fua_ = fua != 0;
      prepare(t);
      return std::nullopt;
    case opcode::reservation_register:
    case opcode::reservation_acquire:
    case opcode::reservation_release:
    case opcode::reservation_report:
      return start_reservation(c, t);
    case opcode::dataset_management:
      // Only deallocation (AD) asks the volume for anything; the
      // integral read and write hints (IDR, IDW) are hints.
      if ((c.cdw(11) & (1u << 2)) == 0) return success;
      range_count_ = (c.cdw(10) & 0xff) + 1;
      if (!prepare(t)) return success;  // every range empty
      return std::nullopt;
    default:
      return generic(code::invalid_opcode);
  }
}

bool nvm_command::prepare(scsi::task& t) noexcept {
  t.data_out = {};
  t.expected_transfer_bytes = 0;
  if (opcode_ == opcode::write_zeroes) {
    if (blocks_left_ == 0) return false;
    // No more than WRITE SAME takes at once (its limit is the unit's
    // transfer cap); longer ones go in turn.
    const std::uint64_t most = scsi::logical_unit::max_write_same_bytes / block_bytes_;
    const auto n = static_cast<std::uint32_t>(std::min(blocks_left_, most));
    // NDOB: no data, zeros; UNMAP (DEAC): the blocks may be deallocated,
    // which a thin volume does, and they read as zeros either way.
    t.cdb = cdb16(cdb_op::write_same16, static_cast<std::uint8_t>(0x01 | (deallocate_ ? 0x08 : 0)),
                  lba_, n);
    lba_ += n;
    blocks_left_ -= n;
    return true;
  }
  // Dataset Management: the next UNMAP, as many ranges as one takes
  // (descriptors, and blocks in all), a long range cut where it must be.
  const std::uint32_t most_descriptors = scsi::logical_unit::max_unmap_descriptors;
  const std::uint64_t most_blocks = scsi::logical_unit::max_unmap_bytes / block_bytes_;
  parameters_.assign(unmap_header_bytes, 0);
  std::uint64_t blocks = 0;
  std::uint32_t descriptors = 0;
  while (ranges_done_ < range_count_ && descriptors < most_descriptors && blocks < most_blocks) {
    const std::span<const std::uint8_t> range(
        reinterpret_cast<const std::uint8_t*>(data_.data()) + ranges_done_ * dsm_range_bytes,
        dsm_range_bytes);
    const std::uint64_t range_lba = get64(range, 8) + range_sent_blocks_;
    const std::uint64_t range_blocks = get32(range, 4) - range_sent_blocks_;
    const std::uint64_t n = std::min(range_blocks, most_blocks - blocks);
    if (n > 0) {
      const std::size_t at = parameters_.size();
      parameters_.resize(at + unmap_descriptor_bytes, 0);
      put_be(parameters_.data() + at, range_lba, 8);
      put_be(parameters_.data() + at + 8, n, 4);
      ++descriptors;
      blocks += n;
    }
    if (n == range_blocks) {
      ++ranges_done_;
      range_sent_blocks_ = 0;
    } else {
      range_sent_blocks_ += n;  // the rest of this range goes in the next UNMAP
    }
  }
  if (descriptors == 0) return false;
  const std::size_t list = parameters_.size();
  put_be(parameters_.data(), list - 2, 2);                       // UNMAP DATA LENGTH
  put_be(parameters_.data() + 2, list - unmap_header_bytes, 2);  // BLOCK DESCRIPTOR DATA LENGTH
  t.cdb = {};
  t.cdb[0] = cdb_op::unmap;
  put_be(t.cdb.data() + 7, list, 2);
  t.data_out = {reinterpret_cast<std::byte*>(parameters_.data()), list};
  t.expected_transfer_bytes = static_cast<std::uint32_t>(list);
  return true;
}

bool nvm_command::next(scsi::task& t) noexcept {
  attention_.reset();
  if (t.result == scsi::status::check_condition &&
      t.sense_data.key == scsi::sense_key::unit_attention) {
    // Reporting it cleared it: the same command again meets the next one,
    // or runs. The unit keeps at most 8 per nexus.
    attention_ = t.sense_data;
    if (++retries_ <= 16) return true;
  }
  if (t.result != scsi::status::good) {
    result_ = status_of(t.result, t.sense_data);
    to_host_bytes_ = 0;
    return false;
  }
  if (opcode_ == opcode::read) to_host_bytes_ = t.data_in_bytes;
  if (opcode_ == opcode::reservation_report) {
    retries_ = 0;
    return report_step(t);
  }
  if (opcode_ == opcode::write_zeroes || opcode_ == opcode::dataset_management) {
    retries_ = 0;
    return prepare(t);
  }
  return false;
}

std::span<const std::uint8_t> nvm_command::to_host(const scsi::task& t) const noexcept {
  if (opcode_ == opcode::reservation_report) return report_;
  return {reinterpret_cast<const std::uint8_t*>(t.data_in.data()), to_host_bytes_};
}

status status_of(scsi::status result, const scsi::sense& s) noexcept {
  using scsi::sense_key;
  switch (result) {
    case scsi::status::good:
    case scsi::status::condition_met:
      return success;
    case scsi::status::reservation_conflict:
      return generic(code::reservation_conflict);
    case scsi::status::busy:
    case scsi::status::task_set_full:
    case scsi::status::task_aborted:
      return generic(code::command_interrupted, false);  // the host retries it
    case scsi::status::check_condition:
      break;
    default:
      return generic(code::internal_error, false);
  }
  switch (s.key) {
    case sense_key::illegal_request:
      if (s.asc == 0x21) return generic(code::lba_out_of_range);
      if (s.asc == 0x20) return generic(code::invalid_opcode);
      return generic(code::invalid_field);  // 24/00, 26/xx, 0E/03, 1A/00: what the host sent
    case sense_key::medium_error:
      // 11/xx: the blocks could not be read; 0C/xx: nor written.
      return {status_type::media, s.asc == 0x11 ? code::unrecovered_read_error : code::write_fault,
              true};
    case sense_key::miscompare:
      return {status_type::media, code::compare_failure, true};
    case sense_key::data_protect:
      if (s.asc == 0x27 && s.ascq == 0x07) return generic(code::capacity_exceeded);
      return generic(code::namespace_write_protected);
    case sense_key::not_ready:
      // The path's ALUA state (04/0A transitioning, 04/0B standby, 04/0C
      // unavailable): ANA's, so that the host tries another path.
      if (s.asc == 0x04 && s.ascq == 0x0a) return {status_type::path, code::ana_transition, false};
      if (s.asc == 0x04 && (s.ascq == 0x0b || s.ascq == 0x0c))
        return {status_type::path, code::ana_inaccessible, false};
      return generic(code::namespace_not_ready, false);
    case sense_key::aborted_command:
      return generic(code::command_interrupted, false);
    case sense_key::unit_attention:
      // Sixteen in a row: the unit is being reset over and over. Retry later.
      return generic(code::command_interrupted, false);
    case sense_key::hardware_error:
    default:
      // The volume is gone for good (target/scsi/sense.cc): not a path error.
      return generic(code::internal_error);
  }
}

}  // namespace strata::nvme
