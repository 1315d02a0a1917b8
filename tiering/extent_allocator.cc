#include "tiering/extent_allocator.h"

#include <bit>
#include <cassert>

namespace strata::tiering {

extent_allocator::extent_allocator(std::uint64_t extent_count)
    : extent_count_(extent_count), free_count_(extent_count), used_((extent_count + 63) / 64, 0) {
  // Bits past the end are set, so the search never returns them.
  if (extent_count % 64 != 0) used_.back() = ~0ull << (extent_count % 64);
}

bool extent_allocator::used(std::uint64_t extent) const noexcept {
  return (used_[extent / 64] >> (extent % 64)) & 1;
}

std::optional<std::uint64_t> extent_allocator::allocate() noexcept {
  if (free_count_ == 0) return std::nullopt;
  const std::size_t words = used_.size();
  for (std::size_t i = 0; i < words; ++i) {
    const std::size_t w = (rotor_ + i) % words;
    if (used_[w] == ~0ull) continue;
    const auto bit = static_cast<std::uint64_t>(std::countr_one(used_[w]));
    used_[w] |= 1ull << bit;
    --free_count_;
    rotor_ = w;
    return w * 64 + bit;
  }
  assert(false && "free_count_ disagrees with the bitmap");
  return std::nullopt;
}

void extent_allocator::mark_used(std::uint64_t extent) noexcept {
  assert(!used(extent));
  used_[extent / 64] |= 1ull << (extent % 64);
  --free_count_;
}

void extent_allocator::release(std::uint64_t extent) noexcept {
  assert(used(extent));
  used_[extent / 64] &= ~(1ull << (extent % 64));
  ++free_count_;
}

}  // namespace strata::tiering
