// The policies share one structure, line_table: a slab of fixed-size
// entries (resident and ghost lines alike), each on one of a few intrusive
// doubly linked lists, found through an open-addressing index. Everything is
// allocated at construction, because every policy bounds its entries (ARC
// at 2 x capacity, S3-FIFO at capacity + ghost). A std::unordered_map would
// cost a heap node per line (~32 bytes with malloc's overhead) plus a
// bucket pointer; at 64M lines (4 TiB of 64 KiB lines) that difference is
// gigabytes of controller DRAM.
#include "tiering/cache_policy.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <limits>
#include <queue>
#include <unordered_map>
#include <utility>

namespace strata::tiering {
namespace {

// splitmix64's finalizer. Line ids are dense (consecutive offsets of one
// volume), and both the index and the sketch need their bits spread.
constexpr std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Up to max_entries lines, each on one of max_lists lists ordered from the
// front (newest) to the back (oldest), with a byte of per-line state for
// the policy (a visited bit, a frequency).
class line_table {
 public:
  using slot = std::uint32_t;
  static constexpr slot none = std::numeric_limits<slot>::max();
  static constexpr unsigned max_lists = 4;

  explicit line_table(std::size_t max_entries);

  // The line's slot, or none.
  slot find(std::uint64_t line) const;
  // REQUIRES: `line` absent, count() < max_entries. Adds it at the front of
  // `list` with bits 0.
  slot add(std::uint64_t line, unsigned list);
  void remove(slot s);
  // Moves s to the front of `list`, its own or another; its bits stay.
  void move_to_front(slot s, unsigned list);

  slot back(unsigned list) const { return lists_[list].back; }
  // The entry in front of s on its list (none at the front).
  slot newer(slot s) const { return entries_[s].newer; }
  std::size_t size(unsigned list) const { return lists_[list].size; }
  std::size_t count() const { return count_; }

  std::uint64_t line(slot s) const { return entries_[s].line; }
  unsigned list_of(slot s) const { return entries_[s].list; }
  std::uint8_t bits(slot s) const { return entries_[s].bits; }
  void set_bits(slot s, std::uint8_t bits) { entries_[s].bits = bits; }

  std::size_t memory_bytes() const;

 private:
  // 18 bytes of fields padded to 24. Packing the list and bits into the
  // line id would save a third, but would take 8 bits from every caller's
  // id space; not worth it before the cache exists.
  struct entry {
    std::uint64_t line;
    slot newer;
    slot older;  // also the free list's link
    std::uint8_t list;
    std::uint8_t bits;
  };
  static_assert(sizeof(entry) == 24);

  struct list_ends {
    slot front = none;
    slot back = none;
    std::size_t size = 0;
  };

  std::size_t home(std::uint64_t line) const { return mix(line) & index_mask_; }
  void link_front(slot s, unsigned list);
  void unlink(slot s);

  std::size_t max_entries_;
  std::size_t count_ = 0;
  std::vector<entry> entries_;  // reserved to max_entries_; never reallocates
  slot free_ = none;            // removed entries, chained through `older`
  // Linear probing over slot numbers (keys are read from entries_), at most
  // 2/3 full; removal shifts back, so there are no tombstones to age.
  std::vector<slot> index_;
  std::size_t index_mask_;
  std::array<list_ends, max_lists> lists_{};
};

line_table::line_table(std::size_t max_entries) : max_entries_(max_entries) {
  assert(max_entries < none);
  entries_.reserve(max_entries);
  const std::size_t index_slots =
      std::bit_ceil(std::max<std::size_t>(16, max_entries + max_entries / 2 + 1));
  index_.assign(index_slots, none);
  index_mask_ = index_slots - 1;
}

line_table::slot line_table::find(std::uint64_t line) const {
  for (std::size_t i = home(line);; i = (i + 1) & index_mask_) {
    const slot s = index_[i];
    if (s == none || entries_[s].line == line) return s;
  }
}

line_table::slot line_table::add(std::uint64_t line, unsigned list) {
  assert(count_ < max_entries_ && list < max_lists && find(line) == none);
  slot s = free_;
  if (s != none) {
    free_ = entries_[s].older;
  } else {
    s = static_cast<slot>(entries_.size());
    entries_.emplace_back();
  }
  entries_[s] = entry{.line = line, .newer = none, .older = none, .list = 0, .bits = 0};
  std::size_t i = home(line);
  while (index_[i] != none) i = (i + 1) & index_mask_;
  index_[i] = s;
  link_front(s, list);
  ++count_;
  return s;
}

void line_table::remove(slot s) {
  std::size_t hole = home(entries_[s].line);
  while (index_[hole] != s) hole = (hole + 1) & index_mask_;
  // Close the hole: a later entry of the same probe run moves into it if
  // its home is at or before the hole (cyclically), so that every entry
  // stays reachable from its home without crossing an empty slot.
  for (std::size_t i = (hole + 1) & index_mask_; index_[i] != none; i = (i + 1) & index_mask_) {
    const std::size_t entry_home = home(entries_[index_[i]].line);
    if (((i - entry_home) & index_mask_) >= ((i - hole) & index_mask_)) {
      index_[hole] = index_[i];
      hole = i;
    }
  }
  index_[hole] = none;
  unlink(s);
  entries_[s].older = free_;
  free_ = s;
  --count_;
}

void line_table::move_to_front(slot s, unsigned list) {
  unlink(s);
  link_front(s, list);
}

void line_table::link_front(slot s, unsigned list) {
  entry& e = entries_[s];
  list_ends& ends = lists_[list];
  e.list = static_cast<std::uint8_t>(list);
  e.newer = none;
  e.older = ends.front;
  if (ends.front != none) {
    entries_[ends.front].newer = s;
  } else {
    ends.back = s;
  }
  ends.front = s;
  ++ends.size;
}

void line_table::unlink(slot s) {
  const entry& e = entries_[s];
  list_ends& ends = lists_[e.list];
  if (e.newer != none) {
    entries_[e.newer].older = e.older;
  } else {
    ends.front = e.older;
  }
  if (e.older != none) {
    entries_[e.older].newer = e.newer;
  } else {
    ends.back = e.newer;
  }
  --ends.size;
}

std::size_t line_table::memory_bytes() const {
  return sizeof(*this) + entries_.capacity() * sizeof(entry) + index_.capacity() * sizeof(slot);
}

// How often each line was read lately: a count-min sketch of 4-bit
// counters in 4 rows, sized as Caffeine's FrequencySketch (4 x
// bit_ceil(capacity) counters per row: 8 to 16 bytes per line). All
// counters are halved every `halve_every_reads` recorded reads, so that
// popularity from long ago fades and a once-hot line can be displaced.
class frequency_sketch {
 public:
  static constexpr unsigned counter_max = 15;

  frequency_sketch(std::size_t capacity_lines, std::uint64_t halve_every_reads);

  void record(std::uint64_t line);
  // At least the line's own count (halved with all the others); more when
  // each of its four counters is shared with other lines.
  unsigned estimate(std::uint64_t line) const;
  std::size_t memory_bytes() const;

 private:
  static constexpr unsigned rows = 4;
  static constexpr unsigned counters_per_word = 16;

  // The counter of `line` in each row, as indices into the whole table.
  std::array<std::size_t, rows> counters_of(std::uint64_t line) const;
  unsigned get(std::size_t counter) const;
  void halve();

  std::size_t row_counters_;  // a power of two
  std::vector<std::uint64_t> words_;
  std::uint64_t recorded_ = 0;
  std::uint64_t halve_at_;
};

frequency_sketch::frequency_sketch(std::size_t capacity_lines, std::uint64_t halve_every_reads)
    : row_counters_(4 * std::bit_ceil(std::max<std::size_t>(capacity_lines, 16))),
      words_(rows * row_counters_ / counters_per_word, 0),
      halve_at_(std::max<std::uint64_t>(halve_every_reads, 1)) {}

std::array<std::size_t, frequency_sketch::rows> frequency_sketch::counters_of(
    std::uint64_t line) const {
  // Double hashing (Kirsch & Mitzenmacher): rows from two hashes.
  const std::uint64_t h1 = mix(line);
  const std::uint64_t h2 = mix(h1) | 1;
  std::array<std::size_t, rows> counters;
  for (unsigned row = 0; row < rows; ++row) {
    counters[row] = row * row_counters_ + ((h1 + row * h2) & (row_counters_ - 1));
  }
  return counters;
}

unsigned frequency_sketch::get(std::size_t counter) const {
  const unsigned shift = 4 * (counter % counters_per_word);
  return (words_[counter / counters_per_word] >> shift) & 0xf;
}

void frequency_sketch::record(std::uint64_t line) {
  bool counted = false;
  for (const std::size_t counter : counters_of(line)) {
    if (get(counter) < counter_max) {
      const unsigned shift = 4 * (counter % counters_per_word);
      words_[counter / counters_per_word] += std::uint64_t{1} << shift;
      counted = true;
    }
  }
  // As Caffeine: reads of lines already at the maximum do not advance the
  // aging clock, so a few very hot lines do not age everyone else.
  if (counted && ++recorded_ >= halve_at_) halve();
}

unsigned frequency_sketch::estimate(std::uint64_t line) const {
  unsigned lowest = counter_max;
  for (const std::size_t counter : counters_of(line)) lowest = std::min(lowest, get(counter));
  return lowest;
}

void frequency_sketch::halve() {
  // Shifting the whole word halves all 16 counters at once; the mask drops
  // the bit each counter would receive from its neighbour.
  for (std::uint64_t& word : words_) word = (word >> 1) & 0x7777777777777777ULL;
  recorded_ /= 2;
}

std::size_t frequency_sketch::memory_bytes() const {
  return sizeof(*this) + words_.capacity() * sizeof(std::uint64_t);
}

using slot = line_table::slot;
constexpr slot none = line_table::none;

// What every policy here shares: a capacity and a line_table whose first
// `resident_lists` lists hold cached lines and whose others hold ghosts.
class table_policy : public cache_policy {
 public:
  void invalidate(std::uint64_t line) override {
    if (const slot s = table_.find(line); s != none) table_.remove(s);
  }
  bool contains(std::uint64_t line) const override {
    const slot s = table_.find(line);
    return s != none && resident(s);
  }
  std::size_t size_lines() const override {
    std::size_t lines = 0;
    for (unsigned list = 0; list < resident_lists_; ++list) lines += table_.size(list);
    return lines;
  }
  std::size_t capacity_lines() const override { return capacity_; }
  double bytes_per_line() const override {
    return static_cast<double>(table_.memory_bytes()) / static_cast<double>(capacity_);
  }

 protected:
  table_policy(std::size_t capacity_lines, std::size_t max_entries, unsigned resident_lists)
      : capacity_(capacity_lines), table_(max_entries), resident_lists_(resident_lists) {}

  bool resident(slot s) const { return table_.list_of(s) < resident_lists_; }
  bool full() const { return size_lines() >= capacity_; }
  // Drops a resident line for good (no ghost) and reports it.
  void evict(slot s, std::vector<std::uint64_t>& evicted) {
    evicted.push_back(table_.line(s));
    table_.remove(s);
  }

  const std::size_t capacity_;
  line_table table_;

 private:
  const unsigned resident_lists_;
};

class lru_policy final : public table_policy {
 public:
  explicit lru_policy(std::size_t capacity_lines)
      : table_policy(capacity_lines, capacity_lines, 1) {}

  outcome access(std::uint64_t line, std::vector<std::uint64_t>& evicted) override {
    if (const slot s = table_.find(line); s != none) {
      table_.move_to_front(s, 0);
      return {.hit = true};
    }
    if (full()) evict(table_.back(0), evicted);
    table_.add(line, 0);
    return {.admitted = true};
  }
};

// ARC as in the paper's Figure 4, with one change for invalidation: the
// paper's cache is always full once |T1| + |T2| reaches c, so it replaces
// whenever the directory is large; here an invalidated line leaves a hole,
// so REPLACE runs only when the resident lines fill the cache.
class arc_policy final : public table_policy {
 public:
  explicit arc_policy(std::size_t capacity_lines)
      : table_policy(capacity_lines, 2 * capacity_lines, 2) {}

  outcome access(std::uint64_t line, std::vector<std::uint64_t>& evicted) override {
    const double capacity = static_cast<double>(capacity_);
    if (const slot s = table_.find(line); s != none) {
      switch (table_.list_of(s)) {
        case t1:
        case t2:
          table_.move_to_front(s, t2);
          return {.hit = true};
        case b1: {
          // Evicting a recent line was a mistake: give recency more room,
          // by more when B1 is the smaller ghost list.
          const double step = std::max(1.0, lines(b2) / lines(b1));
          target_t1_lines_ = std::min(capacity, target_t1_lines_ + step);
          if (full()) replace(false, evicted);
          table_.move_to_front(s, t2);
          return {.admitted = true};
        }
        default: {  // b2
          const double step = std::max(1.0, lines(b1) / lines(b2));
          target_t1_lines_ = std::max(0.0, target_t1_lines_ - step);
          if (full()) replace(true, evicted);
          table_.move_to_front(s, t2);
          return {.admitted = true};
        }
      }
    }
    // Never seen, or forgotten: keep L1 = T1 + B1 to c entries and the
    // whole directory to 2c.
    if (table_.size(t1) + table_.size(b1) >= capacity_) {
      if (table_.size(b1) > 0) {
        table_.remove(table_.back(b1));
        if (full()) replace(false, evicted);
      } else {
        evict(table_.back(t1), evicted);  // T1 alone fills the cache; no ghost
      }
    } else {
      if (table_.count() >= 2 * capacity_) table_.remove(table_.back(b2));
      if (full()) replace(false, evicted);
    }
    table_.add(line, t1);
    return {.admitted = true};
  }

 private:
  enum list : unsigned { t1, t2, b1, b2 };

  double lines(list l) const { return static_cast<double>(table_.size(l)); }

  // Moves the LRU line of T1 or T2 to its ghost list, whichever is over the
  // target. REQUIRES: the cache is full.
  void replace(bool hit_in_b2, std::vector<std::uint64_t>& evicted) {
    const double t1_lines = lines(t1);
    const bool t1_over_target =
        t1_lines > target_t1_lines_ || (hit_in_b2 && t1_lines == target_t1_lines_);
    const bool from_t1 = table_.size(t1) > 0 && (t1_over_target || table_.size(t2) == 0);
    const slot victim = table_.back(from_t1 ? t1 : t2);
    evicted.push_back(table_.line(victim));
    table_.move_to_front(victim, from_t1 ? b1 : b2);
  }

  double target_t1_lines_ = 0;  // the paper's p
};

// S3-FIFO after the paper's Algorithm 1, with libCacheSim's choices where
// the paper leaves room: a line moves from small to main if it was read at
// least twice while in small (libCacheSim's move-to-main-threshold=2; 1
// missed more on the CloudPhysics and 64 KiB OLTP traces); one make_room()
// evicts exactly one line, moving as many as it takes between queues.
class s3fifo_policy final : public table_policy {
 public:
  explicit s3fifo_policy(std::size_t capacity_lines)
      : table_policy(capacity_lines, capacity_lines + ghost_lines(capacity_lines), 2),
        small_target_lines_(small_lines(capacity_lines)),
        main_target_lines_(capacity_lines - small_target_lines_),
        ghost_capacity_lines_(ghost_lines(capacity_lines)) {}

  outcome access(std::uint64_t line, std::vector<std::uint64_t>& evicted) override {
    const slot s = table_.find(line);
    if (s != none && resident(s)) {
      table_.set_bits(s, static_cast<std::uint8_t>(std::min(table_.bits(s) + 1, +frequency_max)));
      return {.hit = true};
    }
    // A ghost hit: the line was evicted from small too early; it goes to
    // main, with its frequency starting again from 0.
    const bool ghost_hit = s != none;
    if (ghost_hit) table_.remove(s);
    make_room(evicted);
    table_.add(line, ghost_hit ? main_fifo : small_fifo);
    return {.admitted = true};
  }

 private:
  enum list : unsigned { small_fifo, main_fifo, ghost_fifo };
  static constexpr std::uint8_t frequency_max = 3;  // two bits
  static constexpr std::uint8_t move_to_main_reads = 2;

  static std::size_t small_lines(std::size_t capacity_lines) {
    return std::clamp<std::size_t>(capacity_lines / 10, 1, capacity_lines);
  }
  // The ghost remembers as many lines as main holds (the paper's choice).
  static std::size_t ghost_lines(std::size_t capacity_lines) {
    return capacity_lines - small_lines(capacity_lines);
  }

  void make_room(std::vector<std::uint64_t>& evicted) {
    // Small is drained while it is over its share (or main is at its own);
    // otherwise main. Each step either moves a line or evicts one, and a
    // line can be moved at most frequency_max + 1 times per eviction round.
    while (full()) {
      if (table_.size(small_fifo) > 0 && table_.size(main_fifo) <= main_target_lines_) {
        step_small(evicted);
      } else {
        step_main(evicted);
      }
    }
  }

  void step_small(std::vector<std::uint64_t>& evicted) {
    const slot oldest = table_.back(small_fifo);
    if (table_.bits(oldest) >= move_to_main_reads) {
      table_.move_to_front(oldest, main_fifo);
      table_.set_bits(oldest, 0);
      return;
    }
    evicted.push_back(table_.line(oldest));
    table_.move_to_front(oldest, ghost_fifo);
    table_.set_bits(oldest, 0);
    if (table_.size(ghost_fifo) > ghost_capacity_lines_) table_.remove(table_.back(ghost_fifo));
  }

  void step_main(std::vector<std::uint64_t>& evicted) {
    const slot oldest = table_.back(main_fifo);
    if (const std::uint8_t frequency = table_.bits(oldest); frequency > 0) {
      table_.move_to_front(oldest, main_fifo);
      table_.set_bits(oldest, static_cast<std::uint8_t>(frequency - 1));
      return;
    }
    evict(oldest, evicted);
  }

  const std::size_t small_target_lines_;
  const std::size_t main_target_lines_;
  const std::size_t ghost_capacity_lines_;
};

// SIEVE: lines enter at the front with the visited bit clear and never
// move; a hit sets the bit. The hand walks from the back towards the front,
// clearing bits, and evicts the first line it finds unvisited; it stays
// where it stopped, so survivors are not revisited until the next lap.
class sieve_policy final : public table_policy {
 public:
  explicit sieve_policy(std::size_t capacity_lines)
      : table_policy(capacity_lines, capacity_lines, 1) {}

  outcome access(std::uint64_t line, std::vector<std::uint64_t>& evicted) override {
    if (const slot s = table_.find(line); s != none) {
      table_.set_bits(s, 1);
      return {.hit = true};
    }
    if (full()) evict_one(evicted);
    table_.add(line, queue);
    return {.admitted = true};
  }

  void invalidate(std::uint64_t line) override {
    const slot s = table_.find(line);
    if (s == none) return;
    if (s == hand_) hand_ = table_.newer(s);
    table_.remove(s);
  }

 private:
  static constexpr unsigned queue = 0;

  void evict_one(std::vector<std::uint64_t>& evicted) {
    slot s = hand_ != none ? hand_ : table_.back(queue);
    while (table_.bits(s) != 0) {
      table_.set_bits(s, 0);
      s = table_.newer(s);
      if (s == none) s = table_.back(queue);  // past the front: wrap around
    }
    hand_ = table_.newer(s);
    evict(s, evicted);
  }

  slot hand_ = none;  // none: start from the back
};

// W-TinyLFU with Caffeine's fixed proportions (1% window, main 20%
// probation / 80% protected). Left out: Caffeine's adaptive window sizing
// (hill climbing) and its random admission of warm candidates, which
// defends against hash flooding by a client who can choose keys; line ids
// are block addresses, which a client can choose, so revisit that if the
// cache is exposed to hostile tenants.
class tinylfu_policy final : public table_policy {
 public:
  explicit tinylfu_policy(std::size_t capacity_lines)
      : table_policy(capacity_lines, capacity_lines, 3),
        window_capacity_lines_(
            std::clamp<std::size_t>(capacity_lines * window_percent / 100, 1, capacity_lines)),
        protected_capacity_lines_((capacity_lines - window_capacity_lines_) * 8 / 10),
        sketch_(capacity_lines, 10 * capacity_lines) {}  // Caffeine's sample size

  outcome access(std::uint64_t line, std::vector<std::uint64_t>& evicted) override {
    sketch_.record(line);
    if (const slot s = table_.find(line); s != none) {
      switch (table_.list_of(s)) {
        case probation_lru:
          table_.move_to_front(s, protected_lru);
          if (table_.size(protected_lru) > protected_capacity_lines_) {
            table_.move_to_front(table_.back(protected_lru), probation_lru);
          }
          break;
        default:  // window_lru, protected_lru
          table_.move_to_front(s, table_.list_of(s));
          break;
      }
      return {.hit = true};
    }
    // Every miss enters the window. If that pushes the window's oldest line
    // out, it enters main if there is room, or if the sketch says it is read
    // more often than main's victim; otherwise it is the one evicted.
    if (table_.size(window_lru) >= window_capacity_lines_) {
      const slot candidate = table_.back(window_lru);
      if (!full()) {
        table_.move_to_front(candidate, probation_lru);
      } else if (const slot victim = main_victim();
                 victim != none &&
                 sketch_.estimate(table_.line(candidate)) > sketch_.estimate(table_.line(victim))) {
        evict(victim, evicted);
        table_.move_to_front(candidate, probation_lru);
      } else {
        evict(candidate, evicted);
      }
    } else if (full()) {
      // The window is short of its share (invalidations), so main is over
      // its own: evict from main with no contest.
      evict(main_victim(), evicted);
    }
    table_.add(line, window_lru);
    return {.admitted = true};
  }

  double bytes_per_line() const override {
    return table_policy::bytes_per_line() +
           static_cast<double>(sketch_.memory_bytes()) / static_cast<double>(capacity_);
  }

 private:
  enum list : unsigned { window_lru, probation_lru, protected_lru };
  static constexpr std::size_t window_percent = 1;

  slot main_victim() const {
    const slot victim = table_.back(probation_lru);
    return victim != none ? victim : table_.back(protected_lru);
  }

  const std::size_t window_capacity_lines_;
  const std::size_t protected_capacity_lines_;
  frequency_sketch sketch_;
};

// "+2hit": a miss is admitted only if the sketch has seen the line read at
// least twice (this read included). Hits are counted too, so a line that
// was popular, evicted, and read again comes straight back.
class second_hit_filter final : public cache_policy {
 public:
  explicit second_hit_filter(std::unique_ptr<cache_policy> inner)
      : inner_(std::move(inner)),
        sketch_(inner_->capacity_lines(), halve_every_capacities * inner_->capacity_lines()) {}

  outcome access(std::uint64_t line, std::vector<std::uint64_t>& evicted) override {
    sketch_.record(line);
    if (!inner_->contains(line) && sketch_.estimate(line) < admit_at_reads) return {};
    return inner_->access(line, evicted);
  }
  void invalidate(std::uint64_t line) override { inner_->invalidate(line); }
  bool contains(std::uint64_t line) const override { return inner_->contains(line); }
  std::size_t size_lines() const override { return inner_->size_lines(); }
  std::size_t capacity_lines() const override { return inner_->capacity_lines(); }
  double bytes_per_line() const override {
    return inner_->bytes_per_line() + static_cast<double>(sketch_.memory_bytes()) /
                                          static_cast<double>(inner_->capacity_lines());
  }

 private:
  static constexpr unsigned admit_at_reads = 2;
  static constexpr std::uint64_t halve_every_capacities = 10;

  std::unique_ptr<cache_policy> inner_;
  frequency_sketch sketch_;
};

constexpr std::array<std::string_view, 5> base_names = {"lru", "arc", "s3fifo", "sieve", "tinylfu"};
constexpr std::string_view filter_suffix = "+2hit";

std::unique_ptr<cache_policy> make_base_policy(std::string_view name, std::size_t capacity_lines) {
  if (name == "lru") return std::make_unique<lru_policy>(capacity_lines);
  if (name == "arc") return std::make_unique<arc_policy>(capacity_lines);
  if (name == "s3fifo") return std::make_unique<s3fifo_policy>(capacity_lines);
  if (name == "sieve") return std::make_unique<sieve_policy>(capacity_lines);
  if (name == "tinylfu") return std::make_unique<tinylfu_policy>(capacity_lines);
  return nullptr;
}

}  // namespace

std::unique_ptr<cache_policy> make_cache_policy(std::string_view name, std::size_t capacity_lines) {
  if (capacity_lines == 0 || capacity_lines > max_policy_capacity_lines) return nullptr;
  if (name.ends_with(filter_suffix)) {
    name.remove_suffix(filter_suffix.size());
    auto inner = make_base_policy(name, capacity_lines);
    if (inner == nullptr) return nullptr;
    return std::make_unique<second_hit_filter>(std::move(inner));
  }
  return make_base_policy(name, capacity_lines);
}

std::span<const std::string_view> cache_policy_names() {
  return base_names;
}

std::uint64_t belady_misses(std::span<const std::uint64_t> lines, std::size_t capacity_lines) {
  if (capacity_lines == 0) return lines.size();
  constexpr std::size_t never = std::numeric_limits<std::size_t>::max();

  // next_use[i]: where lines[i] is read next (never if not again).
  std::vector<std::size_t> next_use(lines.size());
  {
    std::unordered_map<std::uint64_t, std::size_t> read_next_at;
    for (std::size_t i = lines.size(); i-- > 0;) {
      const auto [it, first] = read_next_at.try_emplace(lines[i], never);
      next_use[i] = it->second;
      it->second = i;
    }
  }

  // Resident lines with the position of their next use, and a max-heap of
  // the same pairs. A hit pushes the line's new next use rather than
  // updating the heap; the old pair goes stale and is skipped when popped
  // (positions are distinct, so a pair is current iff it matches the map).
  std::unordered_map<std::uint64_t, std::size_t> resident;
  std::priority_queue<std::pair<std::size_t, std::uint64_t>> furthest;
  std::uint64_t misses = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::uint64_t line = lines[i];
    if (const auto it = resident.find(line); it != resident.end()) {
      it->second = next_use[i];
      furthest.emplace(next_use[i], line);
      continue;
    }
    ++misses;
    if (resident.size() == capacity_lines) {
      for (;;) {
        const auto [when, victim] = furthest.top();
        furthest.pop();
        if (const auto v = resident.find(victim); v != resident.end() && v->second == when) {
          resident.erase(v);
          break;
        }
      }
    }
    resident.emplace(line, next_use[i]);
    furthest.emplace(next_use[i], line);
  }
  return misses;
}

}  // namespace strata::tiering
