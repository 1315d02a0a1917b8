// NVMe/TCP PDUs (NVM Express TCP Transport Specification 1.0, section 3.6):
// the 8-byte common header, the PDU-specific headers read in place on the
// wire bytes (little-endian), the checks a PDU the host sent passes before
// anything else reads it, and the headers the controller sends, built
// whole (header digest and the pad up to the data offset included).
//
// A received PDU is read in three steps, as Linux's nvmet-tcp and SPDK
// read it: the common header (check_common_header says how long the rest
// is and where its data lies, or why the connection must end), then the
// rest of the header and its digest (check_header_digest, and
// check_h2c_data for a data PDU's own fields), then the data and its
// digest. A fatal error is answered with a C2HTermReq (c2h_term_req) and
// the connection closes; a data digest error is not fatal (the command
// fails with a transient transport error), so it is the caller's to check.
//
// Nothing here allocates or does I/O; the digests are target/crc32c.h's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <span>

#include "target/nvme/little_endian.h"

namespace strata::nvme {

enum class pdu_type : std::uint8_t {
  ic_req = 0x00,        // host: initialize connection
  ic_resp = 0x01,       // controller
  h2c_term_req = 0x02,  // host: terminate the connection, and why
  c2h_term_req = 0x03,  // controller
  capsule_cmd = 0x04,   // host: a submission queue entry, with in-capsule data or none
  capsule_resp = 0x05,  // controller: a completion queue entry
  h2c_data = 0x06,      // host: write data the controller asked for (R2T)
  c2h_data = 0x07,      // controller: read data
  r2t = 0x09,           // controller: ready to transfer (part of) a write's data
};

// The common header's FLAGS.
namespace pdu_flag {
constexpr std::uint8_t header_digest = 0x01;  // HDGSTF: a header digest follows the header
constexpr std::uint8_t data_digest = 0x02;    // DDGSTF: a data digest follows the data
constexpr std::uint8_t last_pdu = 0x04;       // H2CData and C2HData: the command's last data PDU
constexpr std::uint8_t success =
    0x08;  // C2HData: the command succeeded; no response capsule follows
}  // namespace pdu_flag

constexpr std::size_t common_header_bytes = 8;
constexpr std::size_t digest_bytes = 4;
constexpr std::size_t sqe_bytes = 64;  // a submission queue entry: a command capsule's header
constexpr std::size_t cqe_bytes = 16;  // a completion queue entry: a response capsule's header
// A terminate request carries the header of the PDU in error after its own
// 24 bytes: at most 152 bytes in all (NVMe/TCP 1.0, 3.6.2.3 and 3.6.2.4).
constexpr std::size_t term_req_header_bytes = 24;
constexpr std::size_t max_term_req_bytes = 152;
// The smallest MAXH2CDATA a controller may offer.
constexpr std::uint32_t min_max_h2c_data_bytes = 4096;

// HLEN, which is fixed for each type.
constexpr std::uint8_t header_length(pdu_type t) noexcept {
  switch (t) {
    case pdu_type::ic_req:
    case pdu_type::ic_resp:
      return 128;
    case pdu_type::capsule_cmd:
      return common_header_bytes + sqe_bytes;
    case pdu_type::capsule_resp:
      return common_header_bytes + cqe_bytes;
    case pdu_type::h2c_term_req:
    case pdu_type::c2h_term_req:
    case pdu_type::h2c_data:
    case pdu_type::c2h_data:
    case pdu_type::r2t:
      return 24;
  }
  return 0;
}

// A terminate request's fatal error status (FES).
enum class fatal_error : std::uint16_t {
  invalid_header_field = 0x01,  // FEI: the byte offset of the field in the PDU header
  pdu_sequence_error = 0x02,    // a PDU out of its place (anything before ICReq, a second ICReq)
  header_digest_error = 0x03,
  data_out_of_range = 0x04,    // data past what the command or its R2T allows
  data_limit_exceeded = 0x05,  // more data in one PDU than negotiated (MAXH2CDATA, in-capsule data)
  unsupported_parameter = 0x06,  // FEI: the byte offset of the parameter
};

// Why the connection must end: what the C2HTermReq says.
struct fatal {
  fatal_error status = fatal_error::invalid_header_field;
  std::uint32_t information = 0;  // FEI
};

// What the connection negotiated and accepts.
struct connection_terms {
  bool initialized = false;  // the ICReq came and was answered
  bool header_digest = false;
  bool data_digest = false;
  std::uint8_t cpda = 0;  // the controller's PDU data alignment: (cpda + 1) * 4 bytes, 0's based
  std::uint32_t max_in_capsule_data_bytes = 8192;
  std::uint32_t max_h2c_data_bytes = 128 * 1024;  // MAXH2CDATA, offered in the ICResp
};

// Where the parts of a PDU the host sent lie, from its common header.
struct pdu_layout {
  pdu_type type = pdu_type::ic_req;
  std::uint8_t flags = 0;
  std::uint32_t header_bytes = 0;  // HLEN: the common header and the PDU-specific one
  bool header_digest = false;      // a digest follows the header
  std::uint32_t data_offset = 0;   // from the PDU's first byte (PDO); the pad before it is ignored
  std::uint32_t data_bytes = 0;
  bool data_digest = false;       // a digest follows the data
  std::uint32_t total_bytes = 0;  // PLEN
  // The bytes after the header (and its digest) up to the data: the pad.
  std::uint32_t pad_bytes() const noexcept {
    return data_bytes == 0 ? 0 : data_offset - header_bytes - (header_digest ? digest_bytes : 0);
  }
};

// Checks the common header of a PDU from the host against the spec and
// the connection's terms: a type a host sends, in its place (the ICReq
// first and once), the header length its type has, digests as
// negotiated, the data offset and length within PLEN, and the limits.
std::expected<pdu_layout, fatal> check_common_header(
    std::span<const std::uint8_t, common_header_bytes> common, const connection_terms& terms);

// Checks the header digest of a PDU whose header (`header`: HLEN bytes
// and the digest after them) has been read.
std::expected<void, fatal> check_header_digest(std::span<const std::uint8_t> header,
                                               const pdu_layout& layout);

// An ICReq's fields (its HLEN bytes).
struct ic_req {
  std::uint16_t pdu_format_version = 0;  // PFV: 0
  std::uint8_t host_pdu_data_alignment =
      0;                       // HPDA: C2HData's data at a multiple of (hpda + 1) * 4 bytes
  bool header_digest = false;  // DGST bit 0: the host asks for header digests
  bool data_digest = false;    // DGST bit 1
  std::uint32_t max_r2t = 0;   // MAXR2T: R2Ts outstanding per command, 0's based
};
// The ICReq's fields, or what is wrong with them (PFV not 0, HPDA above 31).
std::expected<ic_req, fatal> parse_ic_req(std::span<const std::uint8_t> header);

// An H2CData PDU's fields (its HLEN bytes), checked against its layout:
// DATAL must be the data the PDU carries, and no more than MAXH2CDATA.
// (`last` before the offsets: no tail padding, which libc++ 16's
// std::expected, in the fuzz build, reuses for its flag and then clobbers,
// LLVM issue 70494.)
struct h2c_data {
  std::uint16_t command_id = 0;    // CCCID
  std::uint16_t transfer_tag = 0;  // TTAG: the R2T's
  bool last = false;
  std::uint32_t data_offset = 0;  // DATAO: within the command's data
  std::uint32_t data_bytes = 0;   // DATAL
};
std::expected<h2c_data, fatal> parse_h2c_data(std::span<const std::uint8_t> header,
                                              const pdu_layout& layout,
                                              const connection_terms& terms);

// A header the controller sends: its bytes, then its digest if enabled,
// then the pad up to the data offset (the host's alignment, HPDA).
struct outgoing_header {
  std::array<std::uint8_t, 256> bytes{};
  std::size_t size = 0;
  std::span<const std::uint8_t> wire() const noexcept { return {bytes.data(), size}; }
};

// The ICResp to an accepted ICReq, offering `terms`.
outgoing_header ic_resp(const connection_terms& terms);
// A response capsule carrying `cqe`.
outgoing_header capsule_resp(std::span<const std::uint8_t, cqe_bytes> cqe, bool header_digest);
// A C2HData header for `data_bytes` at `data_offset` of command `command_id`'s
// data; `success`: the command's last data, and it succeeded (no response
// capsule follows). The caller sends the data, then its digest if enabled.
outgoing_header c2h_data(std::uint16_t command_id, std::uint32_t data_offset,
                         std::uint32_t data_bytes, bool last, bool success, bool header_digest,
                         bool data_digest, std::uint8_t host_pdu_data_alignment);
// An R2T: the host may send `bytes` of command `command_id`'s data from `offset`.
outgoing_header r2t(std::uint16_t command_id, std::uint16_t transfer_tag, std::uint32_t offset,
                    std::uint32_t bytes, bool header_digest);
// A C2HTermReq for `why`, carrying as much of the offending PDU's header
// (`offending`) as fits. Never digested.
outgoing_header c2h_term_req(const fatal& why, std::span<const std::uint8_t> offending);

}  // namespace strata::nvme
