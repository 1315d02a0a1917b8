// Checks a list of would-be group members: the rules every group kind shares.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "raid/device/block_device.h"

namespace strata::raid {

// A clear error if the list has fewer than `min_members` or more than
// `max_members`, a missing member, a member listed twice, or members that
// differ in block size or block count or live on different loops.
// `kind` names the group in the message ("RAID-6").
std::optional<error> check_members(std::span<device::block_device* const> members,
                                   unsigned min_members, unsigned max_members,
                                   std::string_view kind);

}  // namespace strata::raid
