#include "raid/members.h"

#include <string>

namespace strata::raid {

std::optional<error> check_members(std::span<device::block_device* const> members,
                                   unsigned min_members, unsigned max_members,
                                   std::string_view kind) {
  const std::size_t m = members.size();
  if (m < min_members || m > max_members) {
    return make_error(errc::invalid_argument,
                      std::string(kind) + " needs " + std::to_string(min_members) + " to " +
                          std::to_string(max_members) + " members, not " + std::to_string(m));
  }
  for (std::size_t i = 0; i < m; ++i) {
    if (members[i] == nullptr) {
      return make_error(errc::invalid_argument, "member " + std::to_string(i) + " is missing");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (members[j] == members[i]) {
        return make_error(errc::invalid_argument, "member " + std::to_string(i) + " is member " +
                                                      std::to_string(j) + " again");
      }
    }
  }
  const device::block_geometry& first = members[0]->geometry();
  for (std::size_t i = 1; i < m; ++i) {
    const device::block_geometry& g = members[i]->geometry();
    if (g.logical_block_size_bytes != first.logical_block_size_bytes) {
      return make_error(errc::invalid_argument,
                        "member " + std::to_string(i) + " has " +
                            std::to_string(g.logical_block_size_bytes) + "-byte blocks, member 0 has " +
                            std::to_string(first.logical_block_size_bytes));
    }
    if (g.block_count != first.block_count) {
      return make_error(errc::invalid_argument,
                        "member " + std::to_string(i) + " has " + std::to_string(g.block_count) +
                            " blocks, member 0 has " + std::to_string(first.block_count) +
                            ": members must be the same size");
    }
    if (members[i]->executor() != members[0]->executor()) {
      return make_error(errc::invalid_argument, "member " + std::to_string(i) + " lives on another loop");
    }
  }
  return std::nullopt;
}

}  // namespace strata::raid
