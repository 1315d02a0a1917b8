// NVMe commands as a capsule carries them (NVM Express Base 2.0, "Submission
// Queue Entry"; NVMe over Fabrics 1.1, "Fabrics Commands"): the 64-byte
// submission queue entry read in place (little-endian), the Fabrics
// commands' fields, and the Connect command's data, checked.
//
// Nothing here allocates or does I/O.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <span>
#include <string>

#include "target/nvme/little_endian.h"
#include "target/nvme/status.h"

namespace strata::nvme {

namespace opcode {
constexpr std::uint8_t fabrics = 0x7f;  // with fctype
// admin
constexpr std::uint8_t get_log_page = 0x02;
constexpr std::uint8_t identify = 0x06;
constexpr std::uint8_t set_features = 0x09;
constexpr std::uint8_t get_features = 0x0a;
constexpr std::uint8_t async_event_request = 0x0c;
constexpr std::uint8_t keep_alive = 0x18;
// NVM I/O
constexpr std::uint8_t flush = 0x00;
constexpr std::uint8_t write = 0x01;
constexpr std::uint8_t read = 0x02;
constexpr std::uint8_t compare = 0x05;
constexpr std::uint8_t write_zeroes = 0x08;
constexpr std::uint8_t dataset_management = 0x09;
constexpr std::uint8_t reservation_register = 0x0d;
constexpr std::uint8_t reservation_report = 0x0e;
constexpr std::uint8_t reservation_acquire = 0x11;
constexpr std::uint8_t reservation_release = 0x15;
}  // namespace opcode

namespace fctype {
constexpr std::uint8_t property_set = 0x00;
constexpr std::uint8_t connect = 0x01;
constexpr std::uint8_t property_get = 0x04;
constexpr std::uint8_t disconnect = 0x08;
}  // namespace fctype

// A submission queue entry, read in place.
class command_view {
 public:
  explicit command_view(std::span<const std::uint8_t, 64> sqe) noexcept : b_(sqe) {}

  std::uint8_t opcode() const noexcept { return b_[0]; }
  // FUSE: 0 normal, 1 the first of a fused pair (Compare), 2 the second (Write).
  std::uint8_t fuse() const noexcept { return b_[1] & 0x03; }
  // PSDT: 01b (SGLs, 40h in byte 1) for every capsule over a fabric, as
  // Linux sends it and its nvmet requires.
  std::uint8_t psdt() const noexcept { return b_[1] >> 6; }
  std::uint16_t command_id() const noexcept { return u16(2); }
  std::uint32_t nsid() const noexcept { return u32(4); }
  std::uint8_t fabrics_type() const noexcept { return b_[4]; }  // fctype, when opcode() is fabrics
  // Command dword 10 to 15.
  std::uint32_t cdw(int n) const noexcept { return u32(40 + 4 * static_cast<std::size_t>(n - 10)); }

  // The data pointer's SGL descriptor: over TCP, a Transport SGL Data
  // Block (type 5, subtype 0xA: data that R2T/H2CData or C2HData carry) or
  // a Data Block with Offset (type 0, subtype 1: in-capsule data).
  std::uint64_t sgl_address() const noexcept { return u32(24) | std::uint64_t{u32(28)} << 32; }
  std::uint32_t sgl_length() const noexcept { return u32(32); }
  std::uint8_t sgl_type() const noexcept { return b_[39] >> 4; }
  std::uint8_t sgl_subtype() const noexcept { return b_[39] & 0x0f; }

  // Byte offsets of fields, for the error location a status may name.
  std::uint16_t u16(std::size_t at) const noexcept { return get16(b_, at); }
  std::uint32_t u32(std::size_t at) const noexcept { return get32(b_, at); }
  std::uint64_t u64(std::size_t at) const noexcept { return get64(b_, at); }

 private:
  std::span<const std::uint8_t, 64> b_;
};

namespace sgl {
constexpr std::uint8_t data_block = 0x0;  // with subtype offset: in-capsule data
constexpr std::uint8_t transport_data_block =
    0x5;  // with subtype transport: R2T/H2CData or C2HData
constexpr std::uint8_t subtype_address = 0x0;
constexpr std::uint8_t subtype_offset = 0x1;
constexpr std::uint8_t subtype_transport = 0xa;
}  // namespace sgl

// A Connect command's fields (Fabrics 1.1, 3.3).
struct connect_command {
  std::uint16_t record_format = 0;  // RECFMT: 0
  std::uint16_t queue_id = 0;       // QID: 0 the admin queue, else an I/O queue
  std::uint32_t queue_entries = 0;  // SQSIZE + 1
  std::uint32_t keep_alive_ms = 0;  // KATO (admin queue)
};
connect_command parse_connect(const command_view& c) noexcept;

// The Connect command's 1024 bytes of data.
struct connect_data {
  std::array<std::uint8_t, 16> host_id{};  // HOSTID
  std::uint16_t controller_id = 0;  // CNTLID: 0xffff asks for a dynamic one (admin queue); an I/O
                                    // queue names its controller's
  std::string subsystem_nqn;
  std::string host_nqn;
};
constexpr std::size_t connect_data_bytes = 1024;
// The data, or the Connect's answer to it: invalid parameters, with the
// offset of the field in error (an NQN without its NUL, or one that does
// not begin "nqn.").
struct connect_refusal {
  status why;
  std::uint16_t data_offset = 0;  // IPO: the byte of the data in error
};
std::expected<connect_data, connect_refusal> parse_connect_data(std::span<const std::uint8_t> data);

// The result dword of a Connect refused for invalid parameters (Fabrics
// 1.1, figure 21): IPO, the byte offset, in bits 15:0, and IATTR in bit
// 16: 1 for a field of the data, 0 for one of the command (as Linux's
// IPO_IATTR_CONNECT_DATA and IPO_IATTR_CONNECT_SQE encode them).
constexpr std::uint32_t connect_invalid_parameter_result(std::uint16_t data_offset) noexcept {
  return 1u << 16 | data_offset;
}
constexpr std::uint32_t connect_invalid_command_field_result(std::uint16_t sqe_offset) noexcept {
  return sqe_offset;
}

// Property Get and Set (Fabrics 1.1, 3.4 and 3.5).
struct property_access {
  std::uint32_t offset = 0;  // OFST: the register
  unsigned size_bytes = 4;   // ATTRIB bits 2:0: 0 four bytes, 1 eight; 0 here for a reserved value
  std::uint64_t value = 0;   // Property Set's VALUE
};
property_access parse_property(const command_view& c) noexcept;

}  // namespace strata::nvme
