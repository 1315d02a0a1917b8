// Small shelves over real files for the controller's tests, and their
// drives as a list.
#pragma once

#include <string>
#include <vector>

#include "controller/shelf.h"

namespace strata::controller::testing {

// `hdds` HDDs of 256 MiB ("hdd-00", ...), then `ssds` SSDs of 128 MiB
// ("ssd-00", ...): sparse files, small enough for any test.
inline std::vector<drive_spec> small_shelf(int hdds, int ssds) {
  auto name = [](const char* kind, int i) {
    return std::string(kind) + (i < 10 ? "-0" : "-") + std::to_string(i);
  };
  std::vector<drive_spec> d;
  for (int i = 0; i < hdds; ++i) d.push_back({name("hdd", i), drive_kind::hdd, 256ull << 20});
  for (int i = 0; i < ssds; ++i) d.push_back({name("ssd", i), drive_kind::ssd, 128ull << 20});
  return d;
}

// Drives [from, from + count) of `s`.
inline std::vector<device::block_device*> drives(const shelf& s, std::size_t from,
                                                 std::size_t count) {
  std::vector<device::block_device*> out;
  for (std::size_t i = from; i < from + count; ++i) out.push_back(&s.drive(i));
  return out;
}

}  // namespace strata::controller::testing
