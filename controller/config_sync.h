// The array-wide part of the configuration, as the two controllers copy it
// between their config stores over the partner link (README.md, "Two
// controllers"): which records are array-wide, and their encoding on the
// link. A controller's own records (its event log, its operations, the
// state of its own background work) stay its own.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
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
// Request: one committed change (encode_change), to commit as it is.
// Answer: empty, once it is committed (synced) on the partner.
constexpr std::uint16_t config_apply = partner_link::first_user_type + 1;
// Request: empty. Answer: the partner's configuration generation (8 bytes).
constexpr std::uint16_t config_generation = partner_link::first_user_type + 2;
}  // namespace link_type

// The configuration generation: bumped by every change to the array-wide
// records, in the change's own batch; the controller with the higher one
// holds the newer configuration.
constexpr std::string_view generation_key = "array/generation";
std::uint64_t generation_of(const config_store& config);
// Adds the bump to `b`: the generation after `current`.
void bump_generation(config_batch& b, std::uint64_t current);

// One change: puts (with a value) and erases (without), in order.
using config_change = std::vector<std::pair<std::string, std::optional<std::string>>>;
config_change change_of(const config_batch& b);
config_batch batch_of(const config_change& c);
// On the wire: a u32 count, then each as a byte (1 put, 0 erase), the key
// (u32 length, bytes) and for a put the value (likewise).
link_bytes encode_change(const config_change& c);
std::expected<config_change, error> decode_change(std::span<const std::uint8_t> bytes);
// The batch that makes a store's array-wide records exactly `snapshot`:
// everything in it put, every array-wide record not in it erased.
config_batch replace_with(const config_store& config, const config_records& snapshot);

// Whether `key` is array-wide: disks, groups, pools (and their volumes),
// hosts, mappings, the controllers' records (failed_over), and the
// array's identity.
bool array_wide(std::string_view key);
// Every array-wide record in `config`, in key order. Blocking (RocksDB).
config_records array_wide_records(const config_store& config);

// key/value pairs on the wire: a u32 count, then each as a u32 length and
// bytes, key then value (little-endian).
link_bytes encode_records(const config_records& records);
// invalid_argument when the bytes are not such a list.
std::expected<config_records, error> decode_records(std::span<const std::uint8_t> bytes);

}  // namespace strata::controller
