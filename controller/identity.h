// The array's identity on its shelf (docs/controller-area.md): made when
// the array is built and written to the controller area of every group
// member, with each pool's ownership on its groups' members; read back at
// every start, so that a controller never builds over, or starts on,
// another array's drives.
//
// Threads: the loop's (the drives'); callbacks run there.
#pragma once

#include <cstddef>
#include <expected>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "controller/controller_area.h"
#include "raid/device/block_device.h"

namespace strata::controller {

// A new identity: a random id and link key (OpenSSL's RAND_bytes);
// io_error if it has no randomness to give.
std::expected<array_identity, error> make_identity();
// The id as 32 hex digits, for people and events.
std::string id_text(const array_identity& a);

// One drive's controller area: where it is and what it held.
struct drive_area {
  std::size_t drive = 0;  // index into the list read
  std::uint64_t offset_bytes = 0;
  area_contents contents;  // empty when the area held no record yet
};

// The controller areas of `drives`: one entry per drive that has one (a
// group member formatted with the area); a drive with none is left out,
// as is one that could not be read. Reads only. With no drives, `done`
// is called at once.
void read_areas(const std::vector<device::block_device*>& drives,
                std::function<void(std::vector<drive_area>)> done);

// What to write to one drive's area: the identity, and the ownership of
// the pool its group belongs to, if it belongs to one.
struct area_stamp {
  device::block_device* drive = nullptr;
  std::uint64_t offset_bytes = 0;
  std::optional<array_identity> identity;
  std::optional<pool_ownership> ownership;
};
// Writes every stamp (each record in its two copies, written and flushed
// in turn); all drives at once. `done` gets the first error (at once, with
// nothing to write).
void write_stamps(std::vector<area_stamp> stamps, std::function<void(std::error_code)> done);

}  // namespace strata::controller

namespace strata::controller {

// The identity on a simulated shelf's drive files (`directory`/*.img),
// read with plain reads before any drive is opened: how controller b,
// starting with an empty state directory, learns which array it joins and
// the link key to prove itself to controller a with. not_found: no file
// there holds one.
std::expected<array_identity, error> identity_in_files(const std::filesystem::path& directory);

}  // namespace strata::controller
