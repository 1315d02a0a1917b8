// iSCSI text keys (RFC 7143 sections 6 and 13): the key=value pairs of
// Login and Text PDUs, and the negotiation of a session's operational
// parameters.
//
// parse() reads a data segment of NUL-terminated "key=value" strings;
// format() writes them back. negotiate() takes the keys an initiator
// offered and returns the target's answers, updating the session's
// parameters: list keys pick the first value Strata supports, numbers take
// the minimum or maximum the RFC names, booleans AND or OR, an unknown key
// is answered NotUnderstood, a malformed or out-of-range value Reject.
// Pure functions over strings: no I/O, no threads.
#pragma once

#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::iscsi {

using key_values = std::vector<std::pair<std::string, std::string>>;

// A data segment's pairs, in order. Errors name the problem: a string with
// no '=', an empty or over-long key (63 bytes), a value over 8,192 bytes.
std::expected<key_values, std::string> parse_text(std::span<const std::uint8_t> data);
std::vector<std::uint8_t> format_text(const key_values& pairs);

enum class session_type : std::uint8_t { normal, discovery };

// What one session runs with once negotiation is done. Defaults are the
// RFC's, except where marked as Strata's own offer.
struct session_params {
  session_type type = session_type::normal;
  std::string initiator_name;
  std::string initiator_alias;
  std::string target_name;
  bool header_digest = false;  // CRC32C on headers
  bool data_digest = false;    // CRC32C on data segments
  // The most data the target sends in one PDU (the initiator's
  // MaxRecvDataSegmentLength) and the most it accepts (its own).
  std::uint32_t initiator_max_recv_data_segment_bytes = 8192;
  std::uint32_t target_max_recv_data_segment_bytes = 262144;  // Strata's
  std::uint32_t max_burst_bytes = 262144;
  std::uint32_t first_burst_bytes = 65536;
  bool initial_r2t = true;
  bool immediate_data = true;
  std::uint32_t max_outstanding_r2t = 1;
  bool data_pdu_in_order = true;
  bool data_sequence_in_order = true;
  std::uint32_t error_recovery_level = 0;
  std::uint32_t max_connections = 1;
  std::uint32_t default_time2wait_s = 2;
  std::uint32_t default_time2retain_s = 20;
};

// What Strata offers, and the most it allows, for the keys it negotiates.
struct target_offer {
  std::uint32_t max_recv_data_segment_bytes = 262144;
  std::uint32_t max_burst_bytes = 1u << 20;
  std::uint32_t first_burst_bytes = 65536;
  bool initial_r2t = false;  // unsolicited data welcome
  bool immediate_data = true;
  std::uint32_t max_outstanding_r2t = 1;
  // Connections one session may have (MC/S, RFC 7143 6.3.2).
  std::uint32_t max_connections = 8;
};

// Answers `offered` (operational keys and the declarative names) into
// `params`. Keys that belong to security negotiation (AuthMethod, CHAP_*)
// are not answered here: the login code handles them.
key_values negotiate(const key_values& offered, const target_offer& offer, session_params& params);

// Key names that belong to the security stage.
bool is_security_key(std::string_view key) noexcept;
// Keys a session negotiates on its first (leading) connection only (LO in
// RFC 7143 13): a connection joining the session runs with the session's.
bool is_leading_only_key(std::string_view key) noexcept;

}  // namespace strata::iscsi
