// iSCSI PDUs (RFC 7143 section 11): the 48-byte Basic Header Segment and
// the fields of each opcode, read and written in place on the wire bytes.
//
// A `bhs` is the header as it travels: 48 bytes, big-endian fields. The
// accessors name RFC 7143's fields for the opcodes Strata receives and
// sends, so that the connection code never does offset arithmetic. Nothing
// here allocates or does I/O; digests (CRC32C) are in target/crc32c.h.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace strata::iscsi {

constexpr std::size_t bhs_bytes = 48;
// The largest data segment Strata accepts in any PDU, whatever was negotiated:
// a PDU that declares more is a protocol error, not an allocation.
constexpr std::uint32_t max_data_segment_bytes = 16u << 20;

enum class opcode : std::uint8_t {
  // initiator to target
  nop_out = 0x00,
  scsi_command = 0x01,
  task_management_request = 0x02,
  login_request = 0x03,
  text_request = 0x04,
  data_out = 0x05,
  logout_request = 0x06,
  snack_request = 0x10,
  // target to initiator
  nop_in = 0x20,
  scsi_response = 0x21,
  task_management_response = 0x22,
  login_response = 0x23,
  text_response = 0x24,
  data_in = 0x25,
  logout_response = 0x26,
  r2t = 0x31,
  async_message = 0x32,
  reject = 0x3f,
};

// Reject reasons (RFC 7143 11.17.1).
enum class reject_reason : std::uint8_t {
  data_digest_error = 0x02,
  snack_reject = 0x03,
  protocol_error = 0x04,
  command_not_supported = 0x05,
  immediate_command_reject = 0x06,
  task_in_progress = 0x07,
  invalid_data_ack = 0x08,
  invalid_pdu_field = 0x09,
  long_operation_reject = 0x0a,
  waiting_for_logout = 0x0c,
};

constexpr std::uint32_t reserved_tag = 0xffffffff;

class bhs {
 public:
  bhs() { bytes_.fill(0); }
  explicit bhs(std::span<const std::uint8_t, bhs_bytes> wire) {
    std::copy(wire.begin(), wire.end(), bytes_.begin());
  }

  std::span<std::uint8_t, bhs_bytes> wire() noexcept { return bytes_; }
  std::span<const std::uint8_t, bhs_bytes> wire() const noexcept { return bytes_; }

  // Every PDU.
  iscsi::opcode opcode() const noexcept { return static_cast<iscsi::opcode>(bytes_[0] & 0x3f); }
  void set_opcode(iscsi::opcode o) noexcept { bytes_[0] = static_cast<std::uint8_t>(o); }
  bool immediate() const noexcept { return (bytes_[0] & 0x40) != 0; }
  bool final() const noexcept { return (bytes_[1] & 0x80) != 0; }
  void set_final(bool f) noexcept { bytes_[1] = f ? (bytes_[1] | 0x80) : (bytes_[1] & 0x7f); }
  std::uint8_t flags() const noexcept { return bytes_[1]; }
  void set_flags(std::uint8_t f) noexcept { bytes_[1] = f; }
  // Total AHS length, in bytes (the wire holds 4-byte words).
  std::uint32_t ahs_bytes() const noexcept { return bytes_[4] * 4u; }
  std::uint32_t data_segment_bytes() const noexcept { return be(5, 3); }
  void set_data_segment_bytes(std::uint32_t n) noexcept { put(5, 3, n); }
  std::uint64_t lun_field() const noexcept { return be64(8); }
  void set_lun_field(std::uint64_t l) noexcept { put64(8, l); }
  std::uint32_t initiator_task_tag() const noexcept { return be(16, 4); }
  void set_initiator_task_tag(std::uint32_t t) noexcept { put(16, 4, t); }

  // Bytes 2..3 (response, status, reason, versions) and 20..47, by offset,
  // for the opcode-specific fields named below.
  std::uint8_t byte(std::size_t i) const noexcept { return bytes_[i]; }
  void set_byte(std::size_t i, std::uint8_t v) noexcept { bytes_[i] = v; }
  std::uint32_t u32(std::size_t offset) const noexcept { return be(offset, 4); }
  void set_u32(std::size_t offset, std::uint32_t v) noexcept { put(offset, 4, v); }
  std::uint16_t u16(std::size_t offset) const noexcept {
    return static_cast<std::uint16_t>(be(offset, 2));
  }
  void set_u16(std::size_t offset, std::uint16_t v) noexcept { put(offset, 2, v); }

 private:
  std::uint32_t be(std::size_t offset, int n) const noexcept {
    std::uint32_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | bytes_[offset + static_cast<std::size_t>(i)];
    return v;
  }
  void put(std::size_t offset, int n, std::uint32_t v) noexcept {
    for (int i = n - 1; i >= 0; --i, v >>= 8)
      bytes_[offset + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v);
  }
  std::uint64_t be64(std::size_t offset) const noexcept {
    return (std::uint64_t{be(offset, 4)} << 32) | be(offset + 4, 4);
  }
  void put64(std::size_t offset, std::uint64_t v) noexcept {
    put(offset, 4, static_cast<std::uint32_t>(v >> 32));
    put(offset + 4, 4, static_cast<std::uint32_t>(v));
  }

  std::array<std::uint8_t, bhs_bytes> bytes_;
};

// Field offsets shared by several opcodes (RFC 7143 section 11).
namespace field {
constexpr std::size_t target_transfer_tag = 20;       // Data-Out, R2T, NOP, Text, Data-In
constexpr std::size_t expected_transfer_length = 20;  // SCSI Command
constexpr std::size_t cmd_sn = 24;                    // requests
constexpr std::size_t exp_stat_sn = 28;               // requests
constexpr std::size_t stat_sn = 24;                   // responses
constexpr std::size_t exp_cmd_sn = 28;                // responses
constexpr std::size_t max_cmd_sn = 32;                // responses
constexpr std::size_t cdb = 32;                       // SCSI Command: 16 bytes
constexpr std::size_t data_sn = 36;                   // Data-In, Data-Out; R2TSN in R2T
constexpr std::size_t buffer_offset = 40;             // Data-In, Data-Out, R2T
constexpr std::size_t residual_count = 44;            // SCSI Response, Data-In
constexpr std::size_t desired_transfer_length = 44;   // R2T
// Login
constexpr std::size_t isid = 8;   // 6 bytes
constexpr std::size_t tsih = 14;  // 2 bytes
constexpr std::size_t cid = 20;   // 2 bytes (Login, Logout)
constexpr std::size_t status_class = 36;
constexpr std::size_t status_detail = 37;
// Task Management Function Request
constexpr std::size_t referenced_task_tag = 20;
constexpr std::size_t ref_cmd_sn = 32;
// Asynchronous Message
constexpr std::size_t async_event = 36;
constexpr std::size_t async_parameter3 = 42;  // 2 bytes: seconds, for event 1 (logout requested)
}  // namespace field

// Task management functions (RFC 7143 11.5.1) and responses (11.6.1).
namespace tmf {
constexpr std::uint8_t abort_task = 1;
constexpr std::uint8_t abort_task_set = 2;
constexpr std::uint8_t clear_aca = 3;
constexpr std::uint8_t clear_task_set = 4;
constexpr std::uint8_t logical_unit_reset = 5;
constexpr std::uint8_t target_warm_reset = 6;
constexpr std::uint8_t target_cold_reset = 7;
constexpr std::uint8_t task_reassign = 8;

constexpr std::uint8_t function_complete = 0;
constexpr std::uint8_t task_does_not_exist = 1;
constexpr std::uint8_t lun_does_not_exist = 2;
constexpr std::uint8_t reassign_not_supported = 4;
constexpr std::uint8_t function_not_supported = 5;
constexpr std::uint8_t authorization_failed = 6;
}  // namespace tmf

// Logout reasons (RFC 7143 11.14.1) and responses (11.15.1).
namespace logout {
constexpr std::uint8_t close_session = 0;
constexpr std::uint8_t close_connection = 1;
constexpr std::uint8_t remove_for_recovery = 2;

constexpr std::uint8_t closed = 0;
constexpr std::uint8_t cid_not_found = 1;
constexpr std::uint8_t recovery_not_supported = 2;
}  // namespace logout

// Asynchronous events (RFC 7143 11.9.1).
namespace async_event {
constexpr std::uint8_t logout_requested = 1;
}  // namespace async_event

// Login request/response flags (byte 1).
namespace login_flags {
constexpr std::uint8_t transit = 0x80;
constexpr std::uint8_t continue_ = 0x40;
inline unsigned csg(std::uint8_t f) noexcept {
  return (f >> 2) & 3;
}
inline unsigned nsg(std::uint8_t f) noexcept {
  return f & 3;
}
inline std::uint8_t make(bool t, unsigned csg, unsigned nsg) noexcept {
  return static_cast<std::uint8_t>((t ? transit : 0) | (csg << 2) | (t ? nsg : 0));
}
}  // namespace login_flags
// Login stages.
constexpr unsigned security_negotiation = 0;
constexpr unsigned operational_negotiation = 1;
constexpr unsigned full_feature_phase = 3;

// SCSI Command flags (byte 1).
namespace command_flags {
constexpr std::uint8_t read = 0x40;
constexpr std::uint8_t write = 0x20;
}  // namespace command_flags

// Data-In flags (byte 1).
namespace data_in_flags {
constexpr std::uint8_t final = 0x80;
constexpr std::uint8_t acknowledge = 0x40;
constexpr std::uint8_t residual_overflow = 0x04;
constexpr std::uint8_t residual_underflow = 0x02;
constexpr std::uint8_t status = 0x01;
}  // namespace data_in_flags

// Padding of a data segment to a multiple of 4 bytes.
constexpr std::uint32_t padded(std::uint32_t n) noexcept {
  return (n + 3) & ~3u;
}

// Serial number arithmetic (RFC 1982, 32 bits), for CmdSN windows.
constexpr bool sn_less(std::uint32_t a, std::uint32_t b) noexcept {
  return a != b && static_cast<std::int32_t>(a - b) < 0;
}
constexpr bool sn_less_equal(std::uint32_t a, std::uint32_t b) noexcept {
  return a == b || sn_less(a, b);
}

}  // namespace strata::iscsi
