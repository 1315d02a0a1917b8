#include "target/nvme/tcp_pdu.h"

#include <algorithm>
#include <cstring>

#include "target/crc32c.h"

namespace strata::nvme {

namespace {

// Byte offsets of the common header's fields: a FEI names the one in error.
constexpr std::uint32_t at_type = 0, at_flags = 1, at_hlen = 2, at_pdo = 3, at_plen = 4;

std::unexpected<fatal> refuse(fatal_error status, std::uint32_t information = 0) {
  return std::unexpected(fatal{status, information});
}

// The common header, and the PDU-specific header's bytes zeroed.
outgoing_header begin(pdu_type type, std::uint8_t flags, std::uint8_t hlen, std::uint8_t pdo,
                      std::uint32_t plen) {
  outgoing_header h;
  h.bytes[0] = static_cast<std::uint8_t>(type);
  h.bytes[1] = flags;
  h.bytes[2] = hlen;
  h.bytes[3] = pdo;
  put32(h.bytes.data() + 4, plen);
  h.size = hlen;
  return h;
}

// The header digest after the header's HLEN bytes, if enabled.
void digest_header(outgoing_header& h, bool header_digest) {
  if (!header_digest) return;
  const std::uint8_t hlen = h.bytes[2];
  put_digest(crc32c({h.bytes.data(), hlen}), h.bytes.data() + hlen);
  h.size = hlen + digest_bytes;
}

}  // namespace

std::expected<pdu_layout, fatal> check_common_header(
    std::span<const std::uint8_t, common_header_bytes> common, const connection_terms& terms) {
  pdu_layout l;
  l.type = static_cast<pdu_type>(common[at_type]);
  l.flags = common[at_flags];
  l.header_bytes = common[at_hlen];
  const std::uint32_t pdo = common[at_pdo];
  l.total_bytes = get32(common, at_plen);
  switch (l.type) {
    case pdu_type::ic_req:
    case pdu_type::h2c_term_req:
    case pdu_type::capsule_cmd:
    case pdu_type::h2c_data:
      break;
    default:
      return refuse(fatal_error::invalid_header_field,
                    at_type);  // unknown, or one the controller sends
  }
  if (terms.initialized == (l.type == pdu_type::ic_req))
    return refuse(fatal_error::pdu_sequence_error);
  if (l.header_bytes != header_length(l.type))
    return refuse(fatal_error::invalid_header_field, at_hlen);
  if (l.type == pdu_type::ic_req) {
    // Never digested: the digests are what it negotiates.
    if (l.total_bytes != l.header_bytes) return refuse(fatal_error::invalid_header_field, at_plen);
    return l;
  }
  if (l.type == pdu_type::h2c_term_req) {
    // Its data (the header of the PDU the host found in error) follows its
    // header at once, undigested.
    if (l.total_bytes < l.header_bytes || l.total_bytes > max_term_req_bytes)
      return refuse(fatal_error::invalid_header_field, at_plen);
    l.data_offset = l.header_bytes;
    l.data_bytes = l.total_bytes - l.header_bytes;
    return l;
  }
  l.header_digest = (l.flags & pdu_flag::header_digest) != 0;
  if (l.header_digest != terms.header_digest)
    return refuse(fatal_error::invalid_header_field, at_flags);
  const std::uint32_t header_end = l.header_bytes + (l.header_digest ? digest_bytes : 0);
  if (l.total_bytes < header_end) return refuse(fatal_error::invalid_header_field, at_plen);
  if (l.total_bytes == header_end) {
    // No data: a command without in-capsule data. A data PDU always has some.
    if (l.type == pdu_type::h2c_data) return refuse(fatal_error::invalid_header_field, at_plen);
    return l;
  }
  l.data_digest = (l.flags & pdu_flag::data_digest) != 0;
  if (l.data_digest != terms.data_digest)
    return refuse(fatal_error::invalid_header_field, at_flags);
  const std::uint32_t alignment = (terms.cpda + 1u) * 4u;
  if (pdo < header_end || (terms.cpda != 0 && pdo % alignment != 0))
    return refuse(fatal_error::invalid_header_field, at_pdo);
  const std::uint32_t after_data = l.data_digest ? digest_bytes : 0;
  if (l.total_bytes <= pdo + after_data) return refuse(fatal_error::invalid_header_field, at_plen);
  l.data_offset = pdo;
  l.data_bytes = l.total_bytes - pdo - after_data;
  const std::uint32_t limit =
      l.type == pdu_type::capsule_cmd ? terms.max_in_capsule_data_bytes : terms.max_h2c_data_bytes;
  if (l.data_bytes > limit) return refuse(fatal_error::data_limit_exceeded);
  return l;
}

std::expected<void, fatal> check_header_digest(std::span<const std::uint8_t> header,
                                               const pdu_layout& layout) {
  if (!layout.header_digest) return {};
  if (header.size() < layout.header_bytes + digest_bytes)
    return refuse(fatal_error::header_digest_error);
  if (get_digest(header.data() + layout.header_bytes) !=
      crc32c(header.first(layout.header_bytes))) {
    return refuse(fatal_error::header_digest_error);
  }
  return {};
}

std::expected<ic_req, fatal> parse_ic_req(std::span<const std::uint8_t> header) {
  if (header.size() < header_length(pdu_type::ic_req))
    return refuse(fatal_error::invalid_header_field, at_plen);
  ic_req r;
  r.pdu_format_version = get16(header, 8);
  r.host_pdu_data_alignment = header[10];
  r.header_digest = (header[11] & 0x01) != 0;
  r.data_digest = (header[11] & 0x02) != 0;
  r.max_r2t = get32(header, 12);
  if (r.pdu_format_version != 0) return refuse(fatal_error::invalid_header_field, 8);
  if (r.host_pdu_data_alignment > 31) return refuse(fatal_error::invalid_header_field, 10);
  return r;
}

std::expected<h2c_data, fatal> parse_h2c_data(std::span<const std::uint8_t> header,
                                              const pdu_layout& layout,
                                              const connection_terms& terms) {
  if (header.size() < header_length(pdu_type::h2c_data))
    return refuse(fatal_error::invalid_header_field, at_plen);
  h2c_data d;
  d.command_id = get16(header, 8);
  d.transfer_tag = get16(header, 10);
  d.data_offset = get32(header, 12);
  d.data_bytes = get32(header, 16);
  d.last = (layout.flags & pdu_flag::last_pdu) != 0;
  if (d.data_bytes != layout.data_bytes) return refuse(fatal_error::invalid_header_field, 16);
  if (d.data_bytes > terms.max_h2c_data_bytes) return refuse(fatal_error::data_limit_exceeded);
  return d;
}

outgoing_header ic_resp(const connection_terms& terms) {
  const std::uint8_t hlen = header_length(pdu_type::ic_resp);
  outgoing_header h = begin(pdu_type::ic_resp, 0, hlen, 0, hlen);
  put16(h.bytes.data() + 8, 0);  // PFV
  h.bytes[10] = terms.cpda;
  h.bytes[11] =
      static_cast<std::uint8_t>((terms.header_digest ? 0x01 : 0) | (terms.data_digest ? 0x02 : 0));
  put32(h.bytes.data() + 12, terms.max_h2c_data_bytes);
  return h;
}

outgoing_header capsule_resp(std::span<const std::uint8_t, cqe_bytes> cqe, bool header_digest) {
  const std::uint8_t hlen = header_length(pdu_type::capsule_resp);
  outgoing_header h = begin(pdu_type::capsule_resp, header_digest ? pdu_flag::header_digest : 0,
                            hlen, 0, hlen + (header_digest ? digest_bytes : 0));
  std::memcpy(h.bytes.data() + common_header_bytes, cqe.data(), cqe_bytes);
  digest_header(h, header_digest);
  return h;
}

outgoing_header c2h_data(std::uint16_t command_id, std::uint32_t data_offset,
                         std::uint32_t data_bytes, bool last, bool success, bool header_digest,
                         bool data_digest, std::uint8_t host_pdu_data_alignment) {
  const std::uint8_t hlen = header_length(pdu_type::c2h_data);
  const std::uint32_t header_end = hlen + (header_digest ? digest_bytes : 0);
  const std::uint32_t alignment = (std::min<std::uint32_t>(host_pdu_data_alignment, 31) + 1) * 4;
  const std::uint32_t pdo = (header_end + alignment - 1) / alignment * alignment;  // at most 128
  const std::uint8_t flags = static_cast<std::uint8_t>(
      (header_digest ? pdu_flag::header_digest : 0) | (data_digest ? pdu_flag::data_digest : 0) |
      (last ? pdu_flag::last_pdu : 0) | (last && success ? pdu_flag::success : 0));
  outgoing_header h = begin(pdu_type::c2h_data, flags, hlen, static_cast<std::uint8_t>(pdo),
                            pdo + data_bytes + (data_digest ? digest_bytes : 0));
  put16(h.bytes.data() + 8, command_id);
  put32(h.bytes.data() + 12, data_offset);
  put32(h.bytes.data() + 16, data_bytes);
  digest_header(h, header_digest);
  h.size = pdo;  // the pad is zeros
  return h;
}

outgoing_header r2t(std::uint16_t command_id, std::uint16_t transfer_tag, std::uint32_t offset,
                    std::uint32_t bytes, bool header_digest) {
  const std::uint8_t hlen = header_length(pdu_type::r2t);
  outgoing_header h = begin(pdu_type::r2t, header_digest ? pdu_flag::header_digest : 0, hlen, 0,
                            hlen + (header_digest ? digest_bytes : 0));
  put16(h.bytes.data() + 8, command_id);
  put16(h.bytes.data() + 10, transfer_tag);
  put32(h.bytes.data() + 12, offset);
  put32(h.bytes.data() + 16, bytes);
  digest_header(h, header_digest);
  return h;
}

outgoing_header c2h_term_req(const fatal& why, std::span<const std::uint8_t> offending) {
  const std::size_t carried =
      std::min(offending.size(), max_term_req_bytes - term_req_header_bytes);
  const std::uint8_t hlen = header_length(pdu_type::c2h_term_req);
  outgoing_header h =
      begin(pdu_type::c2h_term_req, 0, hlen, 0, static_cast<std::uint32_t>(hlen + carried));
  put16(h.bytes.data() + 8, static_cast<std::uint16_t>(why.status));
  put32(h.bytes.data() + 10, why.information);
  if (carried > 0) std::memcpy(h.bytes.data() + hlen, offending.data(), carried);
  h.size = hlen + carried;
  return h;
}

}  // namespace strata::nvme
