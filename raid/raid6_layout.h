// Where a RAID-6 group's blocks live: Linux md's left-symmetric layout.
//
// Each member holds, after `data_offset_blocks` reserved for its superblock
// and journal, a sequence of strips of `strip_blocks` blocks. Stripe s puts
// P on member (m - 1 - s mod m), Q on the next member, and data strips
// 0..n-1 on the members after Q, wrapping around:
//
//   members:   0    1    2    3    4        (m = 5, n = 3)
//   stripe 0: D1   D2   ..  ...   P  -> P on 4, Q on 0, D0 on 1, D1 on 2, D2 on 3
//
// so parity rotates over every member and a sequential read touches every
// member in turn.
#pragma once

#include <cstdint>

namespace strata::raid {

struct raid6_layout {
  unsigned members = 0;
  std::uint64_t strip_blocks = 0;
  std::uint64_t data_offset_blocks = 0;  // reserved at the start of each member
  std::uint64_t stripes = 0;

  unsigned data_strips() const noexcept { return members - 2; }
  std::uint64_t stripe_data_blocks() const noexcept { return data_strips() * strip_blocks; }
  std::uint64_t block_count() const noexcept { return stripes * stripe_data_blocks(); }

  unsigned p_member(std::uint64_t stripe) const noexcept {
    return members - 1 - static_cast<unsigned>(stripe % members);
  }
  unsigned q_member(std::uint64_t stripe) const noexcept {
    return (p_member(stripe) + 1) % members;
  }
  unsigned data_member(std::uint64_t stripe, unsigned data_index) const noexcept {
    return (p_member(stripe) + 2 + data_index) % members;
  }
  // The member holding strip `strip` of the codec's numbering (0..n-1 data, n = P, n+1 = Q).
  unsigned member_of(std::uint64_t stripe, unsigned strip) const noexcept {
    if (strip < data_strips()) return data_member(stripe, strip);
    return strip == data_strips() ? p_member(stripe) : q_member(stripe);
  }
  // The member block where row `row` (0..strip_blocks-1) of a stripe's strips sits.
  std::uint64_t member_lba(std::uint64_t stripe, std::uint64_t row) const noexcept {
    return data_offset_blocks + stripe * strip_blocks + row;
  }
};

}  // namespace strata::raid
