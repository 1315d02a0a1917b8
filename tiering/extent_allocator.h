// Free extents of one group: a bitmap, a count, and a rotor so that
// allocation walks the group instead of reusing the same few extents.
// Not persisted: at start-up the pool marks every extent the extent map
// references, and the rest are free.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace strata::tiering {

class extent_allocator {
 public:
  explicit extent_allocator(std::uint64_t extent_count);

  std::uint64_t extent_count() const noexcept { return extent_count_; }
  std::uint64_t free_count() const noexcept { return free_count_; }
  bool used(std::uint64_t extent) const noexcept;

  std::optional<std::uint64_t> allocate() noexcept;
  // REQUIRES: `extent` free. For loading the extent map.
  void mark_used(std::uint64_t extent) noexcept;
  // REQUIRES: `extent` used.
  void release(std::uint64_t extent) noexcept;

 private:
  std::uint64_t extent_count_;
  std::uint64_t free_count_;
  std::uint64_t rotor_ = 0;          // the word the next search starts at
  std::vector<std::uint64_t> used_;  // bit set: allocated
};

}  // namespace strata::tiering
