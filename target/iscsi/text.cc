#include "target/iscsi/text.h"

#include <algorithm>
#include <charconv>
#include <optional>

namespace strata::iscsi {

namespace {

constexpr std::size_t max_key_bytes = 63;
constexpr std::size_t max_value_bytes = 8192;

// A numerical value (RFC 7143 6.1): decimal, or hexadecimal with 0x.
std::optional<std::uint64_t> number(std::string_view v) {
  int base = 10;
  if (v.starts_with("0x") || v.starts_with("0X")) {
    v.remove_prefix(2);
    base = 16;
  }
  if (v.empty() || v.size() > 16) return std::nullopt;
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n, base);
  if (ec != std::errc{} || end != v.data() + v.size()) return std::nullopt;
  return n;
}

std::optional<bool> boolean(std::string_view v) {
  if (v == "Yes") return true;
  if (v == "No") return false;
  return std::nullopt;
}

const char* yes_no(bool b) {
  return b ? "Yes" : "No";
}

// A list value's items, in the initiator's order of preference.
std::vector<std::string_view> items(std::string_view v) {
  std::vector<std::string_view> out;
  while (true) {
    const auto comma = v.find(',');
    out.push_back(v.substr(0, comma));
    if (comma == std::string_view::npos) return out;
    v.remove_prefix(comma + 1);
  }
}

}  // namespace

std::expected<key_values, std::string> parse_text(std::span<const std::uint8_t> data) {
  key_values out;
  std::string_view rest(reinterpret_cast<const char*>(data.data()), data.size());
  while (!rest.empty()) {
    const auto nul = rest.find('\0');
    // The last pair may lack its NUL only if the data segment ends there.
    const std::string_view pair = rest.substr(0, nul);
    rest.remove_prefix(nul == std::string_view::npos ? rest.size() : nul + 1);
    if (pair.empty()) continue;  // padding
    const auto eq = pair.find('=');
    if (eq == std::string_view::npos)
      return std::unexpected("text key without '=': '" + std::string(pair.substr(0, 64)) + "'");
    const std::string_view key = pair.substr(0, eq);
    const std::string_view value = pair.substr(eq + 1);
    if (key.empty() || key.size() > max_key_bytes)
      return std::unexpected("text key of " + std::to_string(key.size()) +
                             " bytes (1 to 63 allowed)");
    if (value.size() > max_value_bytes)
      return std::unexpected("value of " + std::string(key) + " longer than 8192 bytes");
    out.emplace_back(std::string(key), std::string(value));
  }
  return out;
}

std::vector<std::uint8_t> format_text(const key_values& pairs) {
  std::vector<std::uint8_t> out;
  for (const auto& [k, v] : pairs) {
    out.insert(out.end(), k.begin(), k.end());
    out.push_back('=');
    out.insert(out.end(), v.begin(), v.end());
    out.push_back('\0');
  }
  return out;
}

bool is_security_key(std::string_view key) noexcept {
  return key == "AuthMethod" || key.starts_with("CHAP_");
}

bool is_leading_only_key(std::string_view key) noexcept {
  static constexpr std::string_view leading_only[] = {
      "SessionType",       "MaxConnections",    "InitialR2T",          "ImmediateData",
      "MaxBurstLength",    "FirstBurstLength",  "DefaultTime2Wait",    "DefaultTime2Retain",
      "MaxOutstandingR2T", "DataPDUInOrder",    "DataSequenceInOrder", "ErrorRecoveryLevel",
      "TaskReporting",     "iSCSIProtocolLevel"};
  return std::ranges::find(leading_only, key) != std::end(leading_only);
}

key_values negotiate(const key_values& offered, const target_offer& offer, session_params& p) {
  key_values answers;
  auto answer = [&](const std::string& key, std::string value) {
    answers.emplace_back(key, std::move(value));
  };
  for (const auto& [key, value] : offered) {
    if (is_security_key(key)) continue;
    // Declarative names: nothing to answer.
    if (key == "InitiatorName") {
      p.initiator_name = value;
      continue;
    }
    if (key == "InitiatorAlias") {
      p.initiator_alias = value;
      continue;
    }
    if (key == "TargetName") {
      p.target_name = value;
      continue;
    }
    if (key == "SessionType") {
      if (value == "Discovery") {
        p.type = session_type::discovery;
      } else if (value == "Normal") {
        p.type = session_type::normal;
      } else {
        answer(key, "Reject");
      }
      continue;
    }
    if (key == "HeaderDigest" || key == "DataDigest") {
      // Strata does CRC32C and None: the initiator's first choice wins.
      std::string chosen = "Reject";
      for (std::string_view item : items(value)) {
        if (item == "CRC32C" || item == "None") {
          chosen = std::string(item);
          break;
        }
      }
      if (chosen != "Reject")
        (key == "HeaderDigest" ? p.header_digest : p.data_digest) = chosen == "CRC32C";
      answer(key, chosen);
      continue;
    }
    if (key == "MaxRecvDataSegmentLength") {
      // Declarative: the initiator's receive limit; Strata declares its own.
      const auto n = number(value);
      if (!n || *n < 512 || *n > 16777215) {
        answer(key, "Reject");
        continue;
      }
      p.initiator_max_recv_data_segment_bytes = static_cast<std::uint32_t>(*n);
      p.target_max_recv_data_segment_bytes = offer.max_recv_data_segment_bytes;
      answer(key, std::to_string(offer.max_recv_data_segment_bytes));
      continue;
    }
    if (key == "MaxBurstLength" || key == "FirstBurstLength") {
      const auto n = number(value);
      if (!n || *n < 512 || *n > 16777215) {
        answer(key, "Reject");
        continue;
      }
      const bool max = key == "MaxBurstLength";
      const auto v = static_cast<std::uint32_t>(
          std::min<std::uint64_t>(*n, max ? offer.max_burst_bytes : offer.first_burst_bytes));
      (max ? p.max_burst_bytes : p.first_burst_bytes) = v;
      answer(key, std::to_string(v));
      continue;
    }
    if (key == "InitialR2T" || key == "DataPDUInOrder" || key == "DataSequenceInOrder") {
      // OR: either side may insist.
      const auto b = boolean(value);
      if (!b) {
        answer(key, "Reject");
        continue;
      }
      bool result = *b;
      if (key == "InitialR2T") {
        result = *b || offer.initial_r2t;
        p.initial_r2t = result;
      } else if (key == "DataPDUInOrder") {
        result = true;  // Strata sends and expects data in order
        p.data_pdu_in_order = result;
      } else {
        result = true;
        p.data_sequence_in_order = result;
      }
      answer(key, yes_no(result));
      continue;
    }
    if (key == "ImmediateData") {
      // AND: both must agree.
      const auto b = boolean(value);
      if (!b) {
        answer(key, "Reject");
        continue;
      }
      p.immediate_data = *b && offer.immediate_data;
      answer(key, yes_no(p.immediate_data));
      continue;
    }
    if (key == "MaxOutstandingR2T" || key == "MaxConnections" || key == "ErrorRecoveryLevel" ||
        key == "DefaultTime2Retain" || key == "DefaultTime2Wait") {
      const auto n = number(value);
      const bool wait = key == "DefaultTime2Wait";
      const bool retain = key == "DefaultTime2Retain";
      const bool ranged = wait || retain || key == "ErrorRecoveryLevel";
      if (!n || (!ranged && (*n < 1 || *n > 65535)) || (ranged && *n > 3600)) {
        answer(key, "Reject");
        continue;
      }
      std::uint32_t v = static_cast<std::uint32_t>(*n);
      if (key == "MaxOutstandingR2T") {
        v = std::min(v, offer.max_outstanding_r2t);
        p.max_outstanding_r2t = v;
      } else if (key == "MaxConnections") {
        v = std::min(v, offer.max_connections);
        p.max_connections = v;
      } else if (key == "ErrorRecoveryLevel") {
        v = 0;  // Strata recovers by session, as most targets do
        p.error_recovery_level = v;
      } else if (wait) {
        v = std::max(v, p.default_time2wait_s);  // the later of the two
        p.default_time2wait_s = v;
      } else {
        v = std::min(v, p.default_time2retain_s);
        p.default_time2retain_s = v;
      }
      answer(key, std::to_string(v));
      continue;
    }
    if (key == "IFMarker" || key == "OFMarker") {
      answer(key, "No");  // RFC 3720's markers: Strata never uses them
      continue;
    }
    if (key == "IFMarkInt" || key == "OFMarkInt") {
      answer(key, "Irrelevant");
      continue;
    }
    answer(key, "NotUnderstood");
  }
  // FirstBurstLength may not exceed MaxBurstLength, whatever order they came in.
  p.first_burst_bytes = std::min(p.first_burst_bytes, p.max_burst_bytes);
  return answers;
}

}  // namespace strata::iscsi
