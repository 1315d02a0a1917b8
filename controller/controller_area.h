// The controller area: the last 64 KiB of a group member's reserved area
// (raid::controller_area), where the two controllers of an array meet on
// the drives they share, with no other medium between them. Format:
// docs/controller-area.md.
//
// What it holds, in 4 KiB slots, each a checksummed record:
// - the array's identity (two copies): its id, so that a controller never
//   joins another array's shelf, and the partner link's key, so that the
//   partner can prove itself with no other shared secret;
// - each controller's drive heartbeat (a counter it bumps every beat, its
//   state and its configuration generation), the heartbeat that still
//   beats when the partner link is cut;
// - on the members of a pool's groups, the pool's ownership (two copies):
//   which controller owns it, since which epoch. A controller that finds
//   a higher epoch naming its partner has lost the pool.
//
// Records are encoded and decoded here, and read and written through the
// member's block_device (raid/superblock_io.h: whole blocks, a write then a
// flush). Callbacks run on the member's loop.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "raid/device/block_device.h"

namespace strata::controller {

struct array_identity {
  std::array<std::uint8_t, 16> id{};  // random, made when the array is built
  std::array<std::uint8_t, 32> link_key{};
  std::int64_t created_unix_ms = 0;
  bool operator==(const array_identity&) const = default;
};

enum class controller_state : std::uint32_t {
  running = 1,  // beating
  stopped = 2,  // stopped cleanly: its pools were closed and handed over, not lost
};

struct drive_heartbeat {
  std::string controller;  // "a" or "b"
  std::uint64_t counter = 0;
  std::int64_t unix_ms = 0;  // the writer's clock: for people; liveness is the counter moving
  controller_state state = controller_state::running;
  std::uint64_t config_generation = 0;  // the newest configuration change it holds
  // The echo: the partner's newest counter this controller had read at a
  // moment when no ownership record it began writing before that read was
  // still unwritten (heartbeat.h, claims). A thawed controller confirms its
  // pools only once its partner echoes a beat it wrote after the thaw.
  std::uint64_t partner_counter_seen = 0;
  bool operator==(const drive_heartbeat&) const = default;
};

struct pool_ownership {
  std::string pool;         // "pools/p1"
  std::string owner;        // "a" or "b"
  std::uint64_t epoch = 0;  // bumped by every change of owner; the higher wins
  std::int64_t unix_ms = 0;
  // Rewritten by the owner within its epoch, each time with a higher
  // serial: whether the partner holds a current copy of the pool's
  // metadata (controller/metadata_mirror.h). A controller takes a pool
  // over only from a record that says so: the copy is what it opens.
  std::uint64_t serial = 0;
  bool partner_copy = false;
  // Which of two records is the newer: the higher epoch, then serial.
  std::uint64_t sequence() const noexcept { return (epoch << 32) | (serial & 0xffffffffu); }
  bool operator==(const pool_ownership&) const = default;
};

// One member's controller area, as read: each record if a valid copy was found.
struct area_contents {
  std::optional<array_identity> array;
  std::optional<drive_heartbeat> heartbeat_a, heartbeat_b;
  std::optional<pool_ownership> ownership;
};

namespace area {

constexpr std::size_t slot_bytes = 4096;
constexpr std::size_t slots = 16;
// Slots: the array identity (two copies), a's and b's heartbeats, the
// pool ownership (two copies); the rest are free for later records.
constexpr std::size_t array_slot = 0;
constexpr std::size_t heartbeat_a_slot = 2;
constexpr std::size_t heartbeat_b_slot = 3;
constexpr std::size_t ownership_slot = 4;

// Encoders: one whole slot, checksummed. `sequence` orders the copies of a
// record: a reader takes the valid copy with the higher one.
std::vector<std::byte> encode(const array_identity& a, std::uint64_t sequence);
std::vector<std::byte> encode(const drive_heartbeat& h, std::uint64_t sequence);
std::vector<std::byte> encode(const pool_ownership& o, std::uint64_t sequence);
// Decodes the 64 KiB area: not_found if it holds no record at all (a
// member formatted before the area, or blank).
std::expected<area_contents, std::error_code> decode(std::span<const std::byte> area_bytes);
// The slot a controller's heartbeat goes to; nullopt for a name that is neither "a" nor "b".
std::optional<std::size_t> heartbeat_slot(const std::string& controller);

// The area's place on `member`: from its superblock (data offset) and
// bitmap, which must end before it. not_found: no superblock (not a group
// member); not_supported: a reserved area too small for one, or a bitmap
// reaching into it (a group formatted before the area existed).
void locate(device::block_device& member,
            std::function<void(std::expected<std::uint64_t, std::error_code>)> done);
// Reads the whole area at `offset_bytes` on `member`.
void read(device::block_device& member, std::uint64_t offset_bytes,
          std::function<void(std::expected<area_contents, std::error_code>)> done);
// Writes `slot` (bytes from an encoder) and flushes.
void write(device::block_device& member, std::uint64_t offset_bytes, std::size_t slot,
           std::vector<std::byte> bytes, std::function<void(std::error_code)> done);
// Writes a two-copy record: the first copy, a flush, the second, a flush,
// so that a torn write spoils at most one (as the superblock does).
void write_both(device::block_device& member, std::uint64_t offset_bytes, std::size_t first_slot,
                std::vector<std::byte> bytes, std::function<void(std::error_code)> done);

}  // namespace area
}  // namespace strata::controller
