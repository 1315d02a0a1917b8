// Invariants that stay on in release builds (TigerBeetle's assertion
// discipline): a broken invariant on the data path means the state in
// memory no longer describes the data on disk, and going on could
// acknowledge a write that is lost or return stale data. Stopping the
// process is the safe outcome: the next start recovers from what is on
// disk (superblocks, write-intent bitmaps, the metadata store).
//
// Use for conditions that no input, fault or timing can make false, only a
// bug; never for validating input or device results (those are errors,
// returned as values). Cheap checks only: they run on every request.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace strata::device::detail {
[[noreturn]] inline void invariant_failed(const char* condition, const char* file,
                                          int line) noexcept {
  std::fprintf(stderr, "strata: invariant broken: %s (%s:%d)\n", condition, file, line);
  std::fflush(stderr);
  std::abort();
}
}  // namespace strata::device::detail

#define STRATA_INVARIANT(condition)                                               \
  do {                                                                            \
    if (!(condition)) [[unlikely]]                                                \
      ::strata::device::detail::invariant_failed(#condition, __FILE__, __LINE__); \
  } while (false)
