// NVMe/TCP PDU framing (target/nvme/tcp_pdu.h): what a host's common
// header must be before the rest is read, and the headers the controller
// builds, against NVMe/TCP 1.0 section 3.6.
#include <catch2/catch.hpp>
#include <vector>

#include "target/crc32c.h"
#include "target/nvme/tcp_pdu.h"

namespace strata::nvme {
namespace {

// A PDU as a host would send it: its common header, HLEN bytes of
// header (the rest zeros), the header digest if `digest`, zeros up to
// `pdo`, then `data` and its digest if `data_digest`.
std::vector<std::uint8_t> host_pdu(pdu_type type, std::vector<std::uint8_t> data = {},
                                   bool digest = false, bool data_digest = false,
                                   std::uint8_t pdo = 0, std::uint8_t extra_flags = 0) {
  const std::uint8_t hlen = header_length(type);
  std::vector<std::uint8_t> p(hlen, 0);
  p[0] = static_cast<std::uint8_t>(type);
  p[1] = static_cast<std::uint8_t>((digest ? pdu_flag::header_digest : 0) |
                                   (data_digest && !data.empty() ? pdu_flag::data_digest : 0) |
                                   extra_flags);
  p[2] = hlen;
  if (digest) {
    p.resize(hlen + digest_bytes);
  }
  if (!data.empty()) {
    if (pdo == 0) pdo = static_cast<std::uint8_t>(p.size());
    p[3] = pdo;
    p.resize(pdo, 0);
    p.insert(p.end(), data.begin(), data.end());
    if (data_digest) {
      p.resize(p.size() + digest_bytes);
      put_digest(crc32c(data), p.data() + p.size() - digest_bytes);
    }
  }
  const auto plen = static_cast<std::uint32_t>(p.size());
  for (int i = 0; i < 4; ++i) p[4 + i] = static_cast<std::uint8_t>(plen >> (8 * i));
  if (digest) put_digest(crc32c({p.data(), hlen}), p.data() + hlen);
  return p;
}

std::expected<pdu_layout, fatal> check(const std::vector<std::uint8_t>& pdu,
                                       const connection_terms& terms) {
  return check_common_header(
      std::span<const std::uint8_t, common_header_bytes>(pdu.data(), common_header_bytes), terms);
}

connection_terms running(bool digests = false) {
  connection_terms t;
  t.initialized = true;
  t.header_digest = digests;
  t.data_digest = digests;
  return t;
}

}  // namespace

TEST_CASE("nvme/tcp: the ICReq comes first and once; nothing else before it") {
  const connection_terms fresh;
  auto icreq = host_pdu(pdu_type::ic_req);
  auto l = check(icreq, fresh);
  REQUIRE(l);
  CHECK(l->type == pdu_type::ic_req);
  CHECK(l->total_bytes == 128);
  CHECK(l->data_bytes == 0);
  const auto twice = check(icreq, running());
  REQUIRE_FALSE(twice);
  CHECK(twice.error().status == fatal_error::pdu_sequence_error);
  const auto early = check(host_pdu(pdu_type::capsule_cmd), fresh);
  REQUIRE_FALSE(early);
  CHECK(early.error().status == fatal_error::pdu_sequence_error);

  icreq[4] = 129;  // PLEN is the header, exactly
  CHECK(check(icreq, fresh).error().information == 4);

  auto fields = host_pdu(pdu_type::ic_req);
  fields[10] = 3;     // HPDA: 16-byte alignment
  fields[11] = 0x03;  // both digests
  fields[12] = 7;     // MAXR2T
  const auto r = parse_ic_req(fields);
  REQUIRE(r);
  CHECK(r->host_pdu_data_alignment == 3);
  CHECK(r->header_digest);
  CHECK(r->data_digest);
  CHECK(r->max_r2t == 7);
  fields[8] = 1;  // a PDU format version Strata does not know
  CHECK(parse_ic_req(fields).error().information == 8);
  fields[8] = 0;
  fields[10] = 32;  // HPDA past 31
  CHECK(parse_ic_req(fields).error().information == 10);
}

TEST_CASE(
    "nvme/tcp: a type the host never sends, or the wrong header length, is an invalid header "
    "field, naming its byte") {
  for (const pdu_type t : {pdu_type::ic_resp, pdu_type::c2h_term_req, pdu_type::capsule_resp,
                           pdu_type::c2h_data, pdu_type::r2t}) {
    auto p = host_pdu(pdu_type::capsule_cmd);
    p[0] = static_cast<std::uint8_t>(t);
    const auto l = check(p, running());
    REQUIRE_FALSE(l);
    CHECK(l.error().status == fatal_error::invalid_header_field);
    CHECK(l.error().information == 0);
  }
  auto unknown = host_pdu(pdu_type::capsule_cmd);
  unknown[0] = 0x08;
  CHECK(check(unknown, running()).error().information == 0);
  auto long_header = host_pdu(pdu_type::capsule_cmd);
  long_header[2] = 76;
  CHECK(check(long_header, running()).error().information == 2);
}

TEST_CASE("nvme/tcp: a command capsule's digests, data offset and in-capsule data, as negotiated") {
  // No data: the header and its digest are the whole PDU.
  auto plain = host_pdu(pdu_type::capsule_cmd, {}, true);
  auto l = check(plain, running(true));
  REQUIRE(l);
  CHECK(l->header_digest);
  CHECK(l->data_bytes == 0);
  CHECK(l->total_bytes == 76);
  CHECK(check_header_digest(plain, *l));
  plain[20] ^= 1;  // a bit of the command flipped on the way
  CHECK(check_header_digest(plain, *l).error().status == fatal_error::header_digest_error);

  // A header digest the connection did not negotiate, or one missing that it did.
  CHECK(check(host_pdu(pdu_type::capsule_cmd, {}, true), running(false)).error().information == 1);
  CHECK(check(host_pdu(pdu_type::capsule_cmd, {}, false), running(true)).error().information == 1);

  // 512 bytes of in-capsule data after a pad: the data lies at PDO.
  const std::vector<std::uint8_t> data(512, 0xab);
  auto with_data = host_pdu(pdu_type::capsule_cmd, data, true, true, 80);
  l = check(with_data, running(true));
  REQUIRE(l);
  CHECK(l->data_offset == 80);
  CHECK(l->data_bytes == 512);
  CHECK(l->pad_bytes() == 4);
  CHECK(l->data_digest);
  CHECK(get_digest(with_data.data() + 80 + 512) == crc32c(data));

  // PDO inside the header, or off the controller's alignment.
  auto inside = host_pdu(pdu_type::capsule_cmd, data, true, true, 80);
  inside[3] = 72;
  CHECK(check(inside, running(true)).error().information == 3);
  connection_terms aligned = running(true);
  aligned.cpda = 7;  // 32 bytes
  CHECK(check(with_data, aligned).error().information == 3);
  CHECK(check(host_pdu(pdu_type::capsule_cmd, data, true, true, 96), aligned));

  // More in-capsule data than offered: the data limit, not an allocation.
  connection_terms small = running(true);
  small.max_in_capsule_data_bytes = 256;
  CHECK(check(with_data, small).error().status == fatal_error::data_limit_exceeded);
  auto huge = host_pdu(pdu_type::capsule_cmd, data, true, true, 80);
  huge[7] = 0x40;  // PLEN of a gigabyte
  CHECK(check(huge, running(true)).error().status == fatal_error::data_limit_exceeded);

  // PLEN short of the header and its digest, or with no data past PDO.
  auto short_plen = host_pdu(pdu_type::capsule_cmd, {}, true);
  short_plen[4] = 72;
  CHECK(check(short_plen, running(true)).error().information == 4);
  auto empty_data = host_pdu(pdu_type::capsule_cmd, data, true, true, 80);
  empty_data[4] = 84;  // PDO 80, then only the data digest
  empty_data[5] = 0;
  CHECK(check(empty_data, running(true)).error().information == 4);
}

TEST_CASE("nvme/tcp: an H2CData PDU's DATAL is the data it carries, within MAXH2CDATA") {
  std::vector<std::uint8_t> data(4096, 0x5a);
  auto pdu = host_pdu(pdu_type::h2c_data, data, false, false, 0, pdu_flag::last_pdu);
  pdu[8] = 0x34;   // CCCID
  pdu[10] = 0x02;  // TTAG
  pdu[13] = 0x10;  // DATAO 4096
  pdu[17] = 0x10;  // DATAL 4096
  auto l = check(pdu, running());
  REQUIRE(l);
  CHECK(l->data_offset == 24);
  CHECK(l->data_bytes == 4096);
  const auto d = parse_h2c_data(pdu, *l, running());
  REQUIRE(d);
  CHECK(d->command_id == 0x34);
  CHECK(d->transfer_tag == 2);
  CHECK(d->data_offset == 4096);
  CHECK(d->last);
  pdu[17] = 0x08;  // DATAL says 2048
  CHECK(parse_h2c_data(pdu, *l, running()).error().information == 16);
  connection_terms narrow = running();
  narrow.max_h2c_data_bytes = 2048;
  CHECK(check(pdu, narrow).error().status == fatal_error::data_limit_exceeded);
  // A data PDU without data.
  CHECK(check(host_pdu(pdu_type::h2c_data), running()).error().information == 4);
}

TEST_CASE(
    "nvme/tcp: a host's terminate request carries at most 128 bytes of the header it found in "
    "error") {
  auto term = host_pdu(pdu_type::h2c_term_req);
  term.resize(24 + 72);
  term[4] = 96;
  auto l = check(term, running());
  REQUIRE(l);
  CHECK(l->data_offset == 24);
  CHECK(l->data_bytes == 72);
  term[4] = 153;
  CHECK(check(term, running()).error().information == 4);
}

TEST_CASE(
    "nvme/tcp: the controller's headers: ICResp, response capsule, C2HData at the host's "
    "alignment, R2T, C2HTermReq") {
  connection_terms t;
  t.cpda = 0;
  t.header_digest = true;
  t.max_h2c_data_bytes = 131072;
  const auto icresp = ic_resp(t);
  REQUIRE(icresp.size == 128);
  CHECK(icresp.bytes[0] == 0x01);
  CHECK(get32(icresp.wire(), 4) == 128);
  CHECK(icresp.bytes[11] == 0x01);
  CHECK(get32(icresp.wire(), 12) == 131072);

  std::array<std::uint8_t, cqe_bytes> cqe{};
  cqe[12] = 0x21;  // CID
  const auto resp = capsule_resp(cqe, true);
  REQUIRE(resp.size == 28);
  CHECK(get32(resp.wire(), 4) == 28);
  CHECK(resp.bytes[8 + 12] == 0x21);
  CHECK(get_digest(resp.bytes.data() + 24) == crc32c(resp.wire().first(24)));

  // HPDA 3: the data at a multiple of 16 bytes past the 24-byte header and its digest.
  const auto data = c2h_data(0x21, 8192, 4096, true, true, true, true, 3);
  REQUIRE(data.size == 32);
  CHECK(data.bytes[1] ==
        (pdu_flag::header_digest | pdu_flag::data_digest | pdu_flag::last_pdu | pdu_flag::success));
  CHECK(data.bytes[3] == 32);
  CHECK(get32(data.wire(), 4) == 32 + 4096 + 4);
  CHECK(get32(data.wire(), 12) == 8192);
  CHECK(get32(data.wire(), 16) == 4096);
  CHECK(get_digest(data.bytes.data() + 24) == crc32c(data.wire().first(24)));
  CHECK(data.bytes[28] == 0);  // the pad
  // SUCCESS only with the last data PDU.
  CHECK((c2h_data(1, 0, 512, false, true, false, false, 0).bytes[1] & pdu_flag::success) == 0);

  const auto ready = r2t(0x21, 7, 65536, 131072, false);
  REQUIRE(ready.size == 24);
  CHECK(get16(ready.wire(), 10) == 7);
  CHECK(get32(ready.wire(), 12) == 65536);
  CHECK(get32(ready.wire(), 16) == 131072);

  const std::vector<std::uint8_t> offending(200, 0xee);
  const auto term = c2h_term_req({fatal_error::invalid_header_field, 3}, offending);
  REQUIRE(term.size == 152);
  CHECK(term.bytes[0] == 0x03);
  CHECK(get16(term.wire(), 8) == 1);
  CHECK(get32(term.wire(), 10) == 3);
  CHECK(get32(term.wire(), 4) == 152);
  CHECK(term.bytes[151] == 0xee);
}

}  // namespace strata::nvme
