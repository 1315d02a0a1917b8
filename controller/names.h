// The names hosts give themselves, checked the one way the management API
// and the configuration file both check them.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace strata::controller {

// An iSCSI name (RFC 3720 3.2.6.3), loosely: iqn., eui. or naa. (any case),
// no spaces, commas or control characters, at most 223 bytes.
inline bool valid_iscsi_name(std::string_view n) {
  if (n.size() > 223 || n.size() < 5) return false;
  std::string folded(n.substr(0, 4));
  for (char& c : folded) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (folded != "iqn." && folded != "eui." && folded != "naa.") return false;
  return std::ranges::none_of(
      n, [](char c) { return c <= ' ' || c == ',' || static_cast<unsigned char>(c) >= 0x7f; });
}

// An NVMe qualified name (NVMe Base 2.0, 4.5): "nqn." and at most 223
// bytes, printable (the Connect data carries it NUL-terminated, and hosts
// compare it exactly).
inline bool valid_nvme_name(std::string_view n) {
  if (n.size() > 223 || n.size() < 5 || !n.starts_with("nqn.")) return false;
  return std::ranges::none_of(
      n, [](char c) { return c <= ' ' || static_cast<unsigned char>(c) >= 0x7f; });
}

}  // namespace strata::controller
