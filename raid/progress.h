// Progress of a group's background work, as the management plane shows it.
#pragma once

#include <cstdint>

#include "raid/device/clock.h"

namespace strata::raid {

struct rebuild_progress {
  bool running = false;
  std::uint64_t bytes_done = 0;  // of the new member's strips
  std::uint64_t bytes_total = 0;
  device::duration eta{};  // at the rate so far (needs a clock)
};

struct resync_progress {
  bool running = false;
  // Stopped by a clean shutdown (mark_clean) before the end: the regions
  // not yet resynced stay marked, and the next assembly resyncs them.
  bool paused = false;
  std::uint64_t stripes_done = 0;
  std::uint64_t stripes_total = 0;  // in the regions marked at the crash
  // Stripes of a degraded group whose lost strips could not be checked
  // against a second parity: their content is as good as the parity that
  // survived the crash (docs/raid-write-hole.md).
  std::uint64_t unverifiable = 0;
};

}  // namespace strata::raid
