// Replacement policies for the SSD read cache: which lines a cache of
// capacity_lines holds. A line is an opaque 64-bit id (the read cache uses
// a 64 KiB piece of a volume, key = volume << 40 | offset_bytes / 65536); a
// policy knows nothing of data, devices or I/O. The cache asks it on every
// read lookup, copies a line in when it says `admitted`, and drops the lines
// it lists as evicted.
//
// Policies, by make_cache_policy name:
//   "lru"      least recently used. The baseline.
//   "arc"      ARC (Megiddo & Modha, FAST'03): recency list T1, frequency
//              list T2, and ghost lists B1/B2 of evicted ids that move the
//              target size of T1.
//   "s3fifo"   S3-FIFO (Yang et al., SOSP'23): a small FIFO (10%) that new
//              lines pass through, a main FIFO with 2-bit frequency
//              (reinsertion), and a ghost FIFO of lines evicted from the
//              small one; a ghost hit goes straight to main.
//   "sieve"    SIEVE (Zhang et al., NSDI'24): one FIFO with a visited bit and
//              a hand that evicts the first unvisited line it meets.
//   "tinylfu"  W-TinyLFU (Einziger et al.; Caffeine's layout): a 1% LRU
//              window in front of a segmented-LRU main (20% probation, 80%
//              protected), and a count-min sketch of read frequencies with
//              periodic halving. A line leaving the window enters main only
//              if it is read more often than main's victim.
//   "<any>+2hit"  any of the above behind a frequency admission filter: a
//              miss is admitted only if the line was read at least twice
//              within the filter sketch's memory (its counters are halved
//              every 10 x capacity_lines reads). This is "admission by
//              frequency, not on first miss": a line read once is not
//              written to the SSD. Limits: it gives up the hit of every
//              line's second read; and a long run of lines read once
//              saturates the sketch (after 20 x capacity_lines of them,
//              about 30% pass), so big scans still need bypassing upstream.
//              Halving more often saturates less but remembers less: every
//              2 x capacity_lines, 0.15% pass, but on the traces in
//              /work/shared/traces misses rose by up to 10 points.
//
// Only "+2hit" policies ever decline to admit. The others admit every miss
// (tinylfu's window and s3fifo's small FIFO are part of the cache: a line
// in them is cached and costs an SSD write), so their admission count
// equals their miss count.
//
// invalidate() forgets the line entirely: its resident entry and any ghost
// entry, so a rewritten or discarded line comes back as a line never seen.
// A ghost hit means "evicting this was a mistake", which a write does not
// show, and ARC adapts its target on ghost hits. Count-min sketches
// (tinylfu, +2hit) cannot forget one key without lowering others' counts;
// there the line's past reads still count until halving ages them out.
//
// Cost: every operation is O(1) (amortized for the FIFO policies'
// reinsertion loops). Memory is allocated in full at construction: a slab
// of 24-byte entries for resident and ghost lines, an open-addressing index
// of 4-byte slots at load <= 2/3, and the sketches; bytes_per_line() reports
// it, divided by capacity_lines. At 2^20 lines: lru and sieve 32 bytes,
// tinylfu 40, s3fifo 62 (its ghost), arc 64 (its ghosts); "+2hit" adds 8.
//
// Threads: none. A policy is used from one thread (the loop that owns the
// cache partition). It never blocks, and allocates nothing after
// construction (only the caller's `evicted` vector may grow).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace strata::tiering {

class cache_policy {
 public:
  virtual ~cache_policy() = default;

  struct outcome {
    bool hit = false;       // the line was resident
    bool admitted = false;  // a miss the cache must now fill (always false on a hit)
  };

  // A read of `line`. On a hit, updates recency/frequency. On a miss,
  // decides whether to admit it; admitting may evict lines, appended to
  // `evicted` (never `line` itself, never a line that was not resident).
  virtual outcome access(std::uint64_t line, std::vector<std::uint64_t>& evicted) = 0;

  // The line's contents changed or were discarded: it is no longer cached,
  // and its ghost entry, if any, is dropped. A no-op for an unknown line.
  virtual void invalidate(std::uint64_t line) = 0;

  virtual bool contains(std::uint64_t line) const = 0;
  virtual std::size_t size_lines() const = 0;
  virtual std::size_t capacity_lines() const = 0;

  // Bytes of memory this policy holds, divided by capacity_lines: the
  // entries, ghosts, index and sketches as allocated, not estimated.
  virtual double bytes_per_line() const = 0;
};

// The policy called `name` (see above), for a cache of capacity_lines
// lines. nullptr for an unknown name, or capacity_lines of 0 or above
// max_policy_capacity_lines.
std::unique_ptr<cache_policy> make_cache_policy(std::string_view name, std::size_t capacity_lines);

// Entries are indexed with 32 bits, and ARC keeps twice its capacity.
inline constexpr std::size_t max_policy_capacity_lines = std::size_t{1} << 30;

// The base names make_cache_policy knows (each may also take "+2hit").
std::span<const std::string_view> cache_policy_names();

// The fewest misses any demand-fetch cache of capacity_lines can have on
// `lines` (Belady's MIN: on a miss the line is inserted, evicting the line
// whose next use is furthest away). O(n log n) time, O(n) memory.
//
// It bounds every policy that admits every miss. A policy that may decline
// (the "+2hit" ones, or a cache bypassing sequential reads) keeps the
// missed line out of the cache, which is worth up to one line of capacity:
// bound those with capacity_lines + 1.
//
// To model writes that invalidate, give each line a new id after each write
// (the stale id is never read again, so MIN evicts it first, as if freed).
std::uint64_t belady_misses(std::span<const std::uint64_t> lines, std::size_t capacity_lines);

}  // namespace strata::tiering
