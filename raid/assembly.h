// Assembly's first half, the same for every kind of group: read the
// superblocks on a list of devices and work out which group they describe,
// which device is which member, and which members cannot be trusted
// (docs/raid-superblock.md, "Assembly").
#pragma once

#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/member_health.h"
#include "raid/superblock.h"

namespace strata::raid {

struct assembly_plan {
  superblock newest;  // the newest superblock, which speaks for the group
  // By member index. A missing member has a stand-in that fails every
  // request, so the group's order and geometry stay whole.
  std::vector<device::block_device*> members;
  std::vector<unsigned> missing;   // no device holds it
  std::vector<unsigned> recorded;  // the newest superblock records it failed
  std::vector<std::unique_ptr<device::block_device>> stand_ins;
};

// Reads every device's superblock. Devices with none (blank spares) are
// ignored. A clear error if no device holds a superblock of `level`, the
// devices hold more than one group, or more members are missing or
// recorded failed than `tolerated(member_count)`.
void plan_assembly(std::vector<device::block_device*> devices, group_level level,
                   unsigned (*tolerated)(unsigned member_count),
                   std::function<void(std::expected<assembly_plan, error>)> done);

// Whether the newest superblock's write-intent bitmap (one bit per
// bitmap_region_stripes of its `stripes` units: stripes for RAID-6,
// blocks for RAID-1) lies inside the reserved area.
std::optional<error> check_bitmap_placement(const superblock& newest);

// Per member: working, or why it is not (recorded failed, or absent).
std::vector<member_failure> member_failures(const assembly_plan& plan);

// Format's first step: every member must be blank. A member that holds a
// superblock belongs to some group (or did), and formatting over it would
// destroy that group; a damaged or unreadable one is refused too. `done`
// gets nothing if all are blank, else the first problem, naming the member.
void check_blank(std::vector<device::block_device*> members,
                 std::function<void(std::optional<error>)> done);

}  // namespace strata::raid
