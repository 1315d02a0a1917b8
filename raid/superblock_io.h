// Reading and writing a member's superblock copies through its block_device.
// For set-up and membership changes, not the data path: each call allocates
// its own small state. Callbacks run on the member's loop.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/superblock.h"

namespace strata::raid {

// Reads both copies and hands back the valid one with more events; if
// neither is valid, not_found (no superblock: a blank or foreign device),
// else the error of copy A.
void read_superblock(device::block_device& member,
                     std::function<void(std::expected<superblock, std::error_code>)> done);

// Writes copy A, flushes, writes copy B, flushes: a torn write spoils at
// most one copy. `done` gets the first error.
void write_superblock(device::block_device& member, const superblock& sb,
                      std::function<void(std::error_code)> done);

// Other metadata in the reserved area (the write-intent bitmap): whole
// blocks at a block offset. The write is followed by a flush, so `done`
// means durable; it copies `data`, which the caller may reuse at once.
void write_reserved(device::block_device& member, std::uint64_t lba,
                    std::span<const std::byte> data, std::function<void(std::error_code)> done);
void read_reserved(
    device::block_device& member, std::uint64_t lba, std::size_t bytes,
    std::function<void(std::expected<std::vector<std::byte>, std::error_code>)> done);

}  // namespace strata::raid
