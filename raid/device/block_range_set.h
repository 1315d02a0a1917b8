// A set of block numbers kept as disjoint, non-adjacent ranges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>

namespace strata::device {

class block_range_set {
 public:
  // Adds [lba, lba + count).
  void insert(std::uint64_t lba, std::uint64_t count) {
    if (count == 0) return;
    std::uint64_t start = lba;
    std::uint64_t end = lba + count;
    // Merge with every range that overlaps or touches [start, end).
    auto it = ranges_.upper_bound(start);
    if (it != ranges_.begin() && std::prev(it)->second >= start) --it;
    while (it != ranges_.end() && it->first <= end) {
      start = std::min(start, it->first);
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    ranges_.emplace(start, end);
  }

  // Removes [lba, lba + count).
  void erase(std::uint64_t lba, std::uint64_t count) {
    if (count == 0) return;
    const std::uint64_t end = lba + count;
    auto it = ranges_.upper_bound(lba);
    if (it != ranges_.begin() && std::prev(it)->second > lba) --it;
    while (it != ranges_.end() && it->first < end) {
      const std::uint64_t range_start = it->first;
      const std::uint64_t range_end = it->second;
      it = ranges_.erase(it);
      if (range_start < lba) ranges_.emplace(range_start, lba);
      if (range_end > end) ranges_.emplace(end, range_end);
    }
  }

  // Whether any block of [lba, lba + count) is in the set.
  bool intersects(std::uint64_t lba, std::uint64_t count) const {
    if (count == 0) return false;
    auto it = ranges_.upper_bound(lba);
    if (it != ranges_.begin() && std::prev(it)->second > lba) return true;
    return it != ranges_.end() && it->first < lba + count;
  }

  // Whether every block of [lba, lba + count) is in the set.
  bool covers(std::uint64_t lba, std::uint64_t count) const {
    if (count == 0) return true;
    auto it = ranges_.upper_bound(lba);
    if (it == ranges_.begin()) return false;
    --it;  // the range starting at or before lba; ranges never touch, so one must hold it all
    return it->second >= lba + count;
  }

  // How many blocks of [lba, lba + count) are in the set.
  std::uint64_t count_in(std::uint64_t lba, std::uint64_t count) const {
    const std::uint64_t end = lba + count;
    std::uint64_t n = 0;
    auto it = ranges_.upper_bound(lba);
    if (it != ranges_.begin()) --it;
    for (; it != ranges_.end() && it->first < end; ++it) {
      const std::uint64_t a = std::max(it->first, lba), b = std::min(it->second, end);
      if (a < b) n += b - a;
    }
    return n;
  }

  // Calls f(lba, count) for each range, in order.
  template <class F>
  void for_each(F f) const {
    for (const auto& [start, end] : ranges_) f(start, end - start);
  }

  bool empty() const noexcept { return ranges_.empty(); }
  void clear() noexcept { ranges_.clear(); }
  std::uint64_t block_count() const noexcept {
    std::uint64_t n = 0;
    for (const auto& [start, end] : ranges_) n += end - start;
    return n;
  }

 private:
  std::map<std::uint64_t, std::uint64_t> ranges_;  // start -> end (exclusive)
};

}  // namespace strata::device
