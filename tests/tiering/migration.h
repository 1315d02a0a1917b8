// What the migrator's tests share (migrator_test.cc, cold_tier_test.cc).
#pragma once

#include "tests/tiering/rig.h"
#include "tiering/migrator.h"

namespace strata::tiering::testing {

// Random reads (one block, never continuing a stream) that heat an extent.
inline void heat_up(rig& r, volume& v, std::uint64_t extent, int reads) {
  for (int i = 0; i < reads; ++i) {
    const std::uint64_t block = (i % 2 == 0) ? 3 : 9;  // alternating: never sequential
    read_blocks(r.loop, v, extent * extent_blocks + block, 1);
  }
}

// Writes a block to each extent [first, first + n), with data that names it.
inline void fill(rig& r, volume& v, std::uint64_t first, std::uint64_t n) {
  for (std::uint64_t e = first; e < first + n; ++e)
    write_blocks(r.loop, v, e * extent_blocks, pattern(block_size, e + 1));
}

inline tier tier_of(rig& r, volume& v, std::uint64_t extent) {
  return r.p->tier_of(v.location(extent)->group);
}

// Rounds until the migrator has nothing planned or in flight.
inline void settle(rig& r, migrator& m) {
  for (int i = 0; i < 50; ++i) {
    m.run_round();
    r.loop.run_until([&] { return m.moves_in_flight() == 0; });
    if (m.planned() == 0) return;
    r.loop.clock.advance_by(std::chrono::seconds(1));  // the rate limit refills
  }
  FAIL("the migrator never settled");
}

}  // namespace strata::tiering::testing
