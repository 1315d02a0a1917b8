// The array-wide part of the configuration, as the two controllers copy it
// between their config stores over the partner link (README.md, "Two
// controllers"): which records are array-wide, and their encoding on the
// link. A controller's own records (its event log, its operations, the
// state of its own background work) stay its own.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/config_store.h"
#include "controller/partner_link.h"

namespace strata::controller {

using config_records = std::vector<std::pair<std::string, std::string>>;

// Frame types on the partner link for the configuration.
namespace link_type {
// Request: empty. Answer: every array-wide record (encode_records).
constexpr std::uint16_t config_snapshot = partner_link::first_user_type + 0;
}  // namespace link_type

// Whether `key` is array-wide: disks, groups, pools (and their volumes),
// hosts, mappings, and the array's identity.
bool array_wide(std::string_view key);
// Every array-wide record in `config`, in key order. Blocking (RocksDB).
config_records array_wide_records(const config_store& config);

// key/value pairs on the wire: a u32 count, then each as a u32 length and
// bytes, key then value (little-endian).
link_bytes encode_records(const config_records& records);
// invalid_argument when the bytes are not such a list.
std::expected<config_records, error> decode_records(std::span<const std::uint8_t> bytes);

}  // namespace strata::controller
