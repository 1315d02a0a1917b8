// libFuzzer target for the NVMe/TCP PDU framing (target/nvme/tcp_pdu.h).
//
// The input: a byte of terms (bit 0: header digests negotiated, bit 1:
// data digests, bit 7: the harness writes each PDU's header digest right,
// so that mutations reach past it), a byte of CPDA (its low 5 bits), a
// byte of the host's alignment for the C2HData built back, then the byte
// stream of one connection from the host. The harness reads the stream as
// a connection does: each common header checked, then the whole PDU, its
// header digest, its type's fields; the ICReq sets the connection up with
// the digests it asks for. Properties:
//   - a refused header names a fatal error status the spec defines, and,
//     for an invalid header field, a byte of the common or PDU header; the
//     C2HTermReq built for it is well formed (at most 152 bytes, PLEN its
//     size, the status and information as given);
//   - an accepted layout is consistent: PLEN covers the header and its
//     digest, the data lies after them at PDO and ends with its digest at
//     PLEN, within the negotiated limits; nothing is read past PLEN;
//   - an H2CData's DATAL, when accepted, is the data the PDU carries;
//   - the ICResp and a C2HData built for the connection are well formed:
//     the data at the host's alignment, PLEN its parts, SUCCESS only with
//     LAST; and the ICResp's fields are the terms.
//
// Threads: libFuzzer's one thread. No state between inputs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "target/crc32c.h"
#include "target/nvme/tcp_pdu.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace strata;
using namespace strata::nvme;

void check_term_req(const fatal& why, std::span<const std::uint8_t> offending) {
  const auto s = static_cast<std::uint16_t>(why.status);
  FUZZ_REQUIRE(s >= 1 && s <= 6, "a fatal error status the spec defines");
  if (why.status == fatal_error::invalid_header_field)
    FUZZ_REQUIRE(why.information < 128, "an invalid field is a byte of the header");
  const outgoing_header t = c2h_term_req(why, offending);
  FUZZ_REQUIRE(t.size >= term_req_header_bytes && t.size <= max_term_req_bytes,
               "a C2HTermReq is 24 to 152 bytes");
  FUZZ_REQUIRE(get32(t.wire(), 4) == t.size, "a C2HTermReq's PLEN is its size");
  FUZZ_REQUIRE(get16(t.wire(), 8) == s && get32(t.wire(), 10) == why.information,
               "a C2HTermReq says the status and information");
}

void check_layout(const pdu_layout& l, const connection_terms& terms) {
  const std::uint32_t header_end = l.header_bytes + (l.header_digest ? digest_bytes : 0);
  FUZZ_REQUIRE(l.header_bytes == header_length(l.type), "HLEN is its type's");
  FUZZ_REQUIRE(l.total_bytes >= header_end, "PLEN covers the header and its digest");
  if (l.data_bytes == 0) {
    FUZZ_REQUIRE(l.total_bytes == header_end, "without data, PLEN is the header and its digest");
    FUZZ_REQUIRE(l.type != pdu_type::h2c_data, "a data PDU has data");
    return;
  }
  FUZZ_REQUIRE(l.data_offset >= header_end, "the data lies after the header and its digest");
  FUZZ_REQUIRE(std::uint64_t{l.data_offset} + l.data_bytes + (l.data_digest ? digest_bytes : 0) ==
                   l.total_bytes,
               "the data and its digest end at PLEN");
  if (l.type == pdu_type::capsule_cmd)
    FUZZ_REQUIRE(l.data_bytes <= terms.max_in_capsule_data_bytes,
                 "in-capsule data within the limit");
  if (l.type == pdu_type::h2c_data)
    FUZZ_REQUIRE(l.data_bytes <= terms.max_h2c_data_bytes, "H2CData within MAXH2CDATA");
  if (l.type == pdu_type::h2c_term_req)
    FUZZ_REQUIRE(l.total_bytes <= max_term_req_bytes, "a terminate request within 152 bytes");
  if (terms.cpda != 0 && l.type != pdu_type::h2c_term_req)
    FUZZ_REQUIRE(l.data_offset % ((terms.cpda + 1u) * 4u) == 0, "PDO at CPDA");
}

void check_c2h_data(std::uint8_t hpda, const connection_terms& terms, std::uint32_t bytes) {
  const outgoing_header d = c2h_data(1, 0, bytes, (bytes & 1) != 0, (bytes & 2) != 0,
                                     terms.header_digest, terms.data_digest, hpda);
  const std::uint32_t alignment = (std::min<std::uint32_t>(hpda, 31) + 1) * 4;
  const std::uint8_t pdo = d.bytes[3];
  FUZZ_REQUIRE(pdo == d.size && pdo % alignment == 0, "C2HData's data at the host's alignment");
  FUZZ_REQUIRE(pdo >= 24 + (terms.header_digest ? digest_bytes : 0),
               "C2HData's data after its header");
  FUZZ_REQUIRE(get32(d.wire(), 4) == pdo + bytes + (terms.data_digest ? digest_bytes : 0),
               "C2HData's PLEN is its parts");
  FUZZ_REQUIRE((d.bytes[1] & pdu_flag::success) == 0 || (d.bytes[1] & pdu_flag::last_pdu) != 0,
               "SUCCESS only with LAST");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in({data, size});
  const std::uint8_t options = in.u8();
  connection_terms terms;
  terms.cpda = in.u8() & 31;
  const std::uint8_t hpda = in.u8();
  const bool fix_digests = (options & 0x80) != 0;
  std::span<const std::uint8_t> stream = in.rest();
  std::vector<std::uint8_t> pdu;
  while (stream.size() >= common_header_bytes) {
    const auto layout = check_common_header(stream.first<common_header_bytes>(), terms);
    if (!layout) {
      check_term_req(layout.error(), stream.first(std::min<std::size_t>(stream.size(), 128)));
      break;
    }
    check_layout(*layout, terms);
    if (stream.size() < layout->total_bytes) break;  // the rest never came
    pdu.assign(stream.begin(), stream.begin() + layout->total_bytes);
    stream = stream.subspan(layout->total_bytes);
    if (fix_digests && layout->header_digest)
      put_digest(crc32c({pdu.data(), layout->header_bytes}), pdu.data() + layout->header_bytes);
    if (auto digest = check_header_digest(pdu, *layout); !digest) {
      FUZZ_REQUIRE(!fix_digests, "a header digest the harness wrote right passes");
      check_term_req(digest.error(), {pdu.data(), layout->header_bytes});
      break;
    }
    if (layout->data_digest) (void)crc32c({pdu.data() + layout->data_offset, layout->data_bytes});
    if (layout->type == pdu_type::ic_req) {
      const auto r = parse_ic_req(pdu);
      if (!r) {
        check_term_req(r.error(), pdu);
        break;
      }
      terms.initialized = true;
      terms.header_digest = r->header_digest && (options & 0x01) != 0;
      terms.data_digest = r->data_digest && (options & 0x02) != 0;
      const outgoing_header resp = ic_resp(terms);
      FUZZ_REQUIRE(resp.size == 128 && get32(resp.wire(), 4) == 128, "an ICResp is 128 bytes");
      FUZZ_REQUIRE(
          resp.bytes[10] == terms.cpda && get32(resp.wire(), 12) == terms.max_h2c_data_bytes,
          "the ICResp offers the terms");
      FUZZ_REQUIRE(((resp.bytes[11] & 1) != 0) == terms.header_digest &&
                       ((resp.bytes[11] & 2) != 0) == terms.data_digest,
                   "the ICResp's digests are the terms'");
      check_c2h_data(r->host_pdu_data_alignment, terms, r->max_r2t % 65536);
    } else if (layout->type == pdu_type::h2c_data) {
      const auto d = parse_h2c_data(pdu, *layout, terms);
      if (!d) {
        check_term_req(d.error(), {pdu.data(), layout->header_bytes});
        break;
      }
      FUZZ_REQUIRE(d->data_bytes == layout->data_bytes, "an accepted DATAL is the data carried");
    } else if (layout->type == pdu_type::h2c_term_req) {
      break;  // the host ends the connection
    }
  }
  check_c2h_data(hpda, terms, static_cast<std::uint32_t>(size));
  return 0;
}
