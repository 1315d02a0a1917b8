// libFuzzer target for the login and text key=value parser and the
// negotiation of operational keys (target/iscsi/text.h).
//
// The input is a data segment as an initiator sends it. Properties:
//   - parse_text() either refuses it with a reason, or returns pairs that
//     obey its own rules (keys of 1 to 63 bytes without '=', values of at
//     most 8192 bytes, neither holding a NUL);
//   - format_text() of those pairs parses back to the same pairs;
//   - negotiate() with Strata's default offer answers only keys that were
//     offered, never a security key or a declarative name, with values
//     Strata can send (a number, Yes/No, a digest name, Reject,
//     NotUnderstood, Irrelevant), and leaves every session parameter
//     within the RFC's range and Strata's offer; it is deterministic;
//   - every value read as a CHAP binary value (decode_binary, chap.h) is
//     refused with a reason, or decodes to bytes whose hex encoding
//     decodes to the same bytes.
//
// Threads: libFuzzer's one thread. No state between inputs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "target/iscsi/chap.h"
#include "target/iscsi/text.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace strata;

bool is_decimal(std::string_view v) {
  return !v.empty() && v.size() <= 10 &&
         std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A value the target may put in an answer: what it chose, or a verdict.
bool answerable(std::string_view v) {
  return is_decimal(v) || v == "Yes" || v == "No" || v == "CRC32C" || v == "None" ||
         v == "Reject" || v == "NotUnderstood" || v == "Irrelevant";
}

bool declarative(std::string_view key) {
  return key == "InitiatorName" || key == "InitiatorAlias" || key == "TargetName";
}

void check_pairs(const iscsi::key_values& pairs) {
  for (const auto& [k, v] : pairs) {
    FUZZ_REQUIRE(!k.empty() && k.size() <= 63, "a parsed key has 1 to 63 bytes");
    FUZZ_REQUIRE(k.find('=') == std::string::npos, "a parsed key holds no '='");
    FUZZ_REQUIRE(k.find('\0') == std::string::npos && v.find('\0') == std::string::npos,
                 "parsed keys and values hold no NUL");
    FUZZ_REQUIRE(v.size() <= 8192, "a parsed value has at most 8192 bytes");
  }
}

void check_negotiation(const iscsi::key_values& offered) {
  const iscsi::target_offer offer;
  iscsi::session_params p;
  const iscsi::key_values answers = iscsi::negotiate(offered, offer, p);
  FUZZ_REQUIRE(answers.size() <= offered.size(), "at most one answer per offered key");
  for (const auto& [k, v] : answers) {
    const bool was_offered = std::any_of(offered.begin(), offered.end(),
                                         [&k](const auto& pair) { return pair.first == k; });
    FUZZ_REQUIRE(was_offered, "negotiate answers only keys that were offered");
    FUZZ_REQUIRE(!iscsi::is_security_key(k), "negotiate leaves security keys to the login code");
    FUZZ_REQUIRE(!declarative(k), "declarative names get no answer");
    FUZZ_REQUIRE(answerable(v), "an answer is a number, Yes/No, a digest, or a verdict");
  }
  // The answers go out in a Login or Text Response: they must survive the wire.
  const auto wire = iscsi::format_text(answers);
  const auto back = iscsi::parse_text(wire);
  FUZZ_REQUIRE(back && *back == answers, "the answers format and parse back");

  FUZZ_REQUIRE(p.initiator_max_recv_data_segment_bytes >= 512 &&
                   p.initiator_max_recv_data_segment_bytes <= 16777215,
               "the initiator's MaxRecvDataSegmentLength is within 512..2^24-1");
  FUZZ_REQUIRE(p.target_max_recv_data_segment_bytes == offer.max_recv_data_segment_bytes ||
                   p.target_max_recv_data_segment_bytes ==
                       iscsi::session_params{}.target_max_recv_data_segment_bytes,
               "the target's MaxRecvDataSegmentLength is what it declared");
  FUZZ_REQUIRE(p.max_burst_bytes >= 512 &&
                   p.max_burst_bytes <=
                       std::max(offer.max_burst_bytes, iscsi::session_params{}.max_burst_bytes),
               "MaxBurstLength is within 512 and Strata's offer");
  FUZZ_REQUIRE(p.first_burst_bytes >= 512 && p.first_burst_bytes <= p.max_burst_bytes,
               "FirstBurstLength is at least 512 and at most MaxBurstLength");
  FUZZ_REQUIRE(p.max_outstanding_r2t >= 1 && p.max_outstanding_r2t <= offer.max_outstanding_r2t,
               "MaxOutstandingR2T is within 1 and Strata's offer");
  FUZZ_REQUIRE(p.error_recovery_level == 0, "ErrorRecoveryLevel 0");
  FUZZ_REQUIRE(p.max_connections >= 1 && p.max_connections <= offer.max_connections,
               "MaxConnections is within 1 and Strata's offer");
  FUZZ_REQUIRE(p.data_pdu_in_order && p.data_sequence_in_order, "data in order, as Strata insists");
  FUZZ_REQUIRE(!p.immediate_data || offer.immediate_data, "ImmediateData is the AND of both sides");
  FUZZ_REQUIRE(p.initial_r2t || !offer.initial_r2t, "InitialR2T is the OR of both sides");
  FUZZ_REQUIRE(p.default_time2wait_s <= 3600 && p.default_time2retain_s <= 3600,
               "time values within 0..3600");

  iscsi::session_params q;
  FUZZ_REQUIRE(iscsi::negotiate(offered, offer, q) == answers, "negotiate is deterministic");
}

void check_binary(const std::string& value) {
  const auto decoded = iscsi::decode_binary(value);
  if (!decoded) {
    FUZZ_REQUIRE(!decoded.error().empty(), "a refused binary value comes with its reason");
    return;
  }
  const std::string hex = iscsi::encode_hex(*decoded);
  const auto again = iscsi::decode_binary(hex);
  FUZZ_REQUIRE(again && *again == *decoded,
               "a binary value's hex encoding decodes to the same bytes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parsed = iscsi::parse_text(std::span<const std::uint8_t>(data, size));
  if (!parsed) {
    FUZZ_REQUIRE(!parsed.error().empty(), "a refused data segment comes with its reason");
    return 0;
  }
  check_pairs(*parsed);
  const auto wire = iscsi::format_text(*parsed);
  const auto again = iscsi::parse_text(wire);
  FUZZ_REQUIRE(again.has_value(), "format_text's output parses");
  FUZZ_REQUIRE(*again == *parsed, "format_text(parse_text(x)) parses back to the same pairs");
  check_negotiation(*parsed);
  for (const auto& [k, v] : *parsed) check_binary(v);
  return 0;
}
