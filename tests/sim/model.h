// What each block of a volume may hold, from what the host did: the
// simulation's oracle (tests/sim/README.md).
//
// Every write puts a value of its own in each block it covers (the block's
// index and the write's sequence number, then bytes derived from both), so
// a read says which write it saw. Times are the simulation's event counter:
// a write is submitted at one time and completes at a later one.
//
// A read that began at time s may return the value of write w unless w was
// certainly overwritten before s: some write w2 to the block succeeded, was
// submitted after w completed, and completed before s. Concurrent writes
// may land in either order, so either may then be read, until a later one
// settles it. After a crash the same rule holds with w2 restricted to
// durable writes: those a completed flush covered (the flush was submitted
// after w2 completed). A failed write may have landed in part, so it counts
// as a value the block may hold, but never as an overwrite.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace strata::sim {

using sim_time = std::uint64_t;
constexpr sim_time never = std::numeric_limits<sim_time>::max();
// In a block's history: anything (a block the test forgave).
constexpr std::uint64_t garbage = std::numeric_limits<std::uint64_t>::max();

// Block contents: [0,8) the block's index, [8,16) the write's sequence
// number, the rest derived from both. Sequence 0 is the zeros of a
// never-written block or of a discard.
void fill_block(std::span<std::byte> block, std::uint64_t block_index, std::uint64_t seq);
// The write a block's contents came from: its sequence number (0: zeros),
// or nothing if no write could have left it (garbage, another block's data).
std::optional<std::uint64_t> decode_block(std::span<const std::byte> block,
                                          std::uint64_t block_index);

class block_model {
 public:
  explicit block_model(std::uint64_t block_count);

  // A write (seq > 0) or a discard (zeros) of [first, first + count).
  // Returns its id for completed().
  std::uint64_t submitted(std::uint64_t first, std::uint64_t count, std::uint64_t seq,
                          sim_time now);
  void completed(std::uint64_t id, bool ok, sim_time now);
  // A flush submitted at `submitted_at` completed: every write that had
  // completed successfully by then is durable.
  void flush_completed(sim_time submitted_at);

  // Why a value read from `block` (by a read that began at `read_began`)
  // could not be there, or nothing if it could.
  std::optional<std::string> check_read(std::uint64_t block, std::optional<std::uint64_t> seq,
                                        sim_time read_began) const;
  // The same for the first read after a crash.
  std::optional<std::string> check_after_crash(std::uint64_t block,
                                               std::optional<std::uint64_t> seq) const;
  // After a crash, the block holds what was read: that value alone,
  // durable. Nothing: a block the test forgave (the degraded write hole),
  // which may then read as anything until a durable write replaces it --
  // across later crashes too: what a read returns then may be a copy (the
  // read cache's) of a value the capacity tier no longer holds.
  void settle_after_crash(std::uint64_t block, std::optional<std::uint64_t> seq);
  // Drops what no read still possible can return: values certainly
  // overwritten by a durable write that completed before `oldest_read`.
  void prune(sim_time oldest_read);

  std::uint64_t block_count() const noexcept { return blocks_.size(); }
  bool in_flight(std::uint64_t id) const;

 private:
  struct write {
    std::uint64_t id = 0;   // the op that wrote it
    std::uint64_t seq = 0;  // 0: zeros
    sim_time submitted = 0;
    sim_time completed = never;  // never: still in flight
    bool ok = false;
    bool durable = false;
  };
  struct op {
    std::uint64_t first = 0, count = 0;
    sim_time completed = never;
    bool ok = false;
  };
  bool overwritten(const std::vector<write>& history, const write& w, sim_time before,
                   bool durable_only) const;
  std::optional<std::string> check(std::uint64_t block, std::optional<std::uint64_t> seq,
                                   sim_time read_began, bool after_crash) const;

  std::vector<std::vector<write>> blocks_;
  std::vector<bool> anything_;  // per block: forgiven, and no durable write since
  std::vector<op> ops_;         // by id
  std::vector<std::uint64_t>
      not_durable_;  // ids of ops that completed successfully, not yet durable
};

}  // namespace strata::sim
