// Crashes at every step of an extent move and of the host I/O around it.
//
// The disks have volatile write caches (fault_device): a power cut loses,
// or tears, every block written since the disk's last completed flush. The
// metadata store keeps every write it has applied (a process crash: the
// synced ones are what the design counts on). Each run replays the same
// scenario and stops the world after `k` loop steps, for every k: the store
// is checkpointed, the power cut, the old pool wound down, and a new pool
// opened over the crash image. Then every block must hold a value the host
// may see: the last one a completed flush covered, or a later one it wrote.
//
// The store's completions come from its own thread, so two runs may
// interleave them differently: step k is then a neighbouring crash point,
// still a valid one. The test also checks that it saw both outcomes of the
// move and of the new extent's allocation.
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "tests/tiering/rig.h"

namespace strata::tiering {
namespace {
using namespace testing;

constexpr std::uint64_t volume_extents = 3;
constexpr std::uint64_t volume_blocks = volume_extents * extent_blocks;
// Extent 0 is written before the scenario and moved during it, extent 1 is
// first written during it, extent 2 is written before and discarded whole.

// A block's contents: its index and the sequence number of the write that
// put it there, then bytes derived from both. Sequence 0 is zeros.
std::vector<std::byte> block_value(std::uint64_t block, std::uint64_t seq) {
  if (seq == 0) return std::vector<std::byte>(block_size, std::byte{0});
  auto v = pattern(block_size, block * 1'000'003 + seq);
  std::memcpy(v.data(), &block, 8);
  std::memcpy(v.data() + 8, &seq, 8);
  return v;
}
// The sequence number a block holds, or nullopt if it is neither zeros nor
// a value some write put there (garbage, or another extent's data).
std::optional<std::uint64_t> decode(std::uint64_t block, std::span<const std::byte> got) {
  std::uint64_t seq = 0;
  std::memcpy(&seq, got.data() + 8, 8);
  const auto want = block_value(block, seq);
  if (std::memcmp(want.data(), got.data(), block_size) == 0) return seq;
  if (std::all_of(got.begin(), got.end(), [](std::byte b) { return b == std::byte{0}; })) return 0;
  return std::nullopt;
}

// What the host did, and so what each block may hold after a crash.
struct host_model {
  std::vector<std::uint64_t> completed;  // per block: the last write that completed
  std::vector<std::uint64_t> durable;    // per block: the last write a completed flush covered
  std::vector<std::vector<std::uint64_t>>
      may_hold;                         // per block: every value written since `durable`
  std::vector<std::uint64_t> flushing;  // `completed` when the flush in flight began

  host_model() : completed(volume_blocks, 0), durable(volume_blocks, 0), may_hold(volume_blocks) {}
  void written_before(std::uint64_t first, std::uint64_t n, std::uint64_t seq) {
    for (std::uint64_t b = first; b < first + n; ++b) completed[b] = durable[b] = seq;
  }
  void issued(std::uint64_t first, std::uint64_t n, std::uint64_t seq) {
    for (std::uint64_t b = first; b < first + n; ++b) may_hold[b].push_back(seq);
  }
  void completed_write(std::uint64_t first, std::uint64_t n, std::uint64_t seq) {
    for (std::uint64_t b = first; b < first + n; ++b) completed[b] = seq;
  }
  void flush_issued() { flushing = completed; }
  void flush_completed() {
    for (std::uint64_t b = 0; b < volume_blocks; ++b) {
      if (flushing[b] == durable[b]) continue;
      durable[b] = flushing[b];
      // Values older than the durable one can no longer come back.
      auto& m = may_hold[b];
      m.erase(m.begin(), std::find(m.begin(), m.end(), durable[b]));
    }
  }
  bool allowed(std::uint64_t block, std::uint64_t seq) const {
    return seq == durable[block] ||
           std::ranges::find(may_hold[block], seq) != may_hold[block].end();
  }
};

// One host operation of the scenario.
struct host_op {
  enum kind { write, flush, discard } what;
  std::uint64_t first = 0, count = 0;
};

std::vector<host_op> scenario_ops(std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<host_op> ops;
  for (int i = 0; i < 14; ++i) {
    if (i == 5)
      ops.push_back({host_op::write, extent_blocks + 2, 3});  // the first write to extent 1
    if (i == 8) ops.push_back({host_op::discard, 2 * extent_blocks, extent_blocks});
    if (i % 4 == 3) ops.push_back({host_op::flush});
    const std::uint64_t n = 1 + random() % 3;
    ops.push_back({host_op::write, random() % (extent_blocks - n + 1), n});
  }
  ops.push_back({host_op::flush});
  return ops;
}

// Which move the scenario makes of extent 0.
enum class move_kind { promotion, demotion, to_cold, from_cold };
const char* name(move_kind k) {
  switch (k) {
    case move_kind::promotion:
      return "promotion (capacity to performance)";
    case move_kind::demotion:
      return "demotion (performance to capacity)";
    case move_kind::to_cold:
      return "to the cold tier (capacity to cold)";
    case move_kind::from_cold:
      return "back from the cold tier (cold to capacity)";
  }
  return "?";
}

// The scenario, run one loop step at a time.
struct scenario {
  rig& r;
  host_model model;
  std::vector<host_op> ops;
  std::size_t next_op = 0;
  std::unique_ptr<io> current;
  host_op current_op{};
  std::uint64_t seq = 1;
  tier from = tier::capacity;   // where extent 0 starts
  tier to = tier::performance;  // where it moves
  bool move_done = false;
  std::error_code move_result;

  scenario(rig& rg, std::uint64_t seed, move_kind kind) : r(rg), ops(scenario_ops(seed)) {
    volume& v = r.create("db", volume_blocks);
    write(v, 0, extent_blocks, seq);
    write(v, 2 * extent_blocks, extent_blocks, seq);
    flush(r.loop, v);
    model.written_before(0, extent_blocks, seq);
    model.written_before(2 * extent_blocks, extent_blocks, seq);
    if (kind == move_kind::from_cold) {  // it starts there: a move before the scenario
      std::optional<std::error_code> there;
      v.move_extent(0, tier::cold, [&](std::error_code ec) { there = ec; });
      r.loop.run_until([&] { return there.has_value(); });
      REQUIRE_FALSE(*there);
      flush(r.loop, v);
    }
    from = r.p->tier_of(v.location(0)->group);
    to = kind == move_kind::promotion ? tier::performance
         : kind == move_kind::to_cold ? tier::cold
                                      : tier::capacity;
    v.move_extent(0, to, [this](std::error_code ec) {
      move_done = true;
      move_result = ec;
    });
  }
  volume& vol() { return *r.p->find_volume("db"); }
  void write(volume& v, std::uint64_t first, std::uint64_t n, std::uint64_t s) {
    std::vector<std::byte> data;
    for (std::uint64_t b = first; b < first + n; ++b) {
      const auto one = block_value(b, s);
      data.insert(data.end(), one.begin(), one.end());
    }
    write_blocks(r.loop, v, first, data);
  }
  bool finished() const { return move_done && next_op == ops.size() && current == nullptr; }

  // Between two steps: the host notes what completed and issues its next op.
  void drive() {
    if (current && current->completions == 0) return;
    if (current) {
      REQUIRE_FALSE(current->req.result);
      if (current_op.what == host_op::flush) {
        model.flush_completed();
      } else {
        model.completed_write(current_op.first, current_op.count,
                              current_op.what == host_op::discard ? 0 : seq);
      }
      current.reset();
    }
    if (next_op == ops.size()) return;
    current_op = ops[next_op++];
    switch (current_op.what) {
      case host_op::flush:
        current = io::flush();
        model.flush_issued();
        break;
      case host_op::discard:
        current = io::discard(current_op.first, current_op.count);
        model.issued(current_op.first, current_op.count, 0);
        break;
      case host_op::write:
        ++seq;
        current = io::make(op::write, current_op.first, current_op.count, block_size);
        for (std::uint64_t i = 0; i < current_op.count; ++i) {
          const auto one = block_value(current_op.first + i, seq);
          std::memcpy(current->buffer.data() + i * block_size, one.data(), block_size);
        }
        model.issued(current_op.first, current_op.count, seq);
        break;
    }
    vol().submit(current->req);
  }
  // Runs up to `steps` loop steps (all of them: SIZE_MAX); the step count taken.
  std::size_t run(std::size_t steps) {
    std::size_t taken = 0;
    for (drive(); taken < steps && !finished(); drive()) {
      REQUIRE(r.loop.step());
      ++taken;
    }
    return taken;
  }
};

// Power cut and controller crash now; the pool comes back from the image.
void crash(rig& r, device::power_loss mode) {
  r.store->drain();
  const std::string image = (r.dir.path() / "crash-image").string();
  REQUIRE(r.store->checkpoint(image));
  std::size_t settled = 0;
  for (auto& f : r.faults) f->power_cut(mode, [&] { ++settled; });
  r.loop.run_until([&] { return settled == r.faults.size(); });
  r.close();  // the old pool winds down: every I/O now fails
  std::filesystem::remove_all(r.store_path());
  std::filesystem::rename(image, r.store_path());
  for (auto& f : r.faults) f->power_on();
  r.open();
}

struct outcomes {
  int moved = 0, not_moved = 0, allocated = 0, not_allocated = 0;
};

void check_after_crash(rig& r, const host_model& model, tier from, outcomes& seen) {
  volume& v = *r.p->find_volume("db");
  const auto got = read_blocks(r.loop, v, 0, volume_blocks);
  for (std::uint64_t b = 0; b < volume_blocks; ++b) {
    const auto seq = decode(b, std::span(got).subspan(b * block_size, block_size));
    INFO("block " << b << " (extent " << b / extent_blocks << "): durable value "
                  << model.durable[b]);
    REQUIRE(seq.has_value());  // never garbage, never another extent's data
    INFO("holds value " << *seq);
    REQUIRE(model.allowed(b, *seq));
  }
  // Every extent is mapped once or free: nothing leaked, nothing shared.
  std::uint64_t used = 0;
  for (tier t : {tier::performance, tier::capacity, tier::cold})
    used += r.p->capacity_extents(t) - r.p->free_extents(t);
  REQUIRE(used == v.mapped_extents());
  REQUIRE(v.location(0).has_value());
  (r.p->tier_of(v.location(0)->group) != from ? seen.moved : seen.not_moved)++;
  (v.location(1).has_value() ? seen.allocated : seen.not_allocated)++;
}

TEST_CASE(
    "crash: every step of a move, with host writes, flushes and a discard around it, loses no "
    "flushed write",
    "[tiering][crash]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  const auto kind =
      GENERATE(move_kind::promotion, move_kind::demotion, move_kind::to_cold, move_kind::from_cold);
  INFO(name(kind));
  // New extents on the performance tier first for a demotion; on the
  // capacity tier for the others.
  const rig_shape shape{.performance_extents = 4,
                        .capacity_extents = 8,
                        .new_extents = kind == move_kind::demotion
                                           ? new_extent_tier::performance_first
                                           : new_extent_tier::capacity,
                        .volatile_write_caches = true,
                        .seed = seed,
                        .cold_extents = 8};
  std::size_t total = 0;
  {
    rig r(shape);
    scenario s(r, seed, kind);
    REQUIRE(s.from == (kind == move_kind::demotion    ? tier::performance
                       : kind == move_kind::from_cold ? tier::cold
                                                      : tier::capacity));
    total = s.run(SIZE_MAX);
    REQUIRE_FALSE(s.move_result);
    REQUIRE(r.p->tier_of(s.vol().location(0)->group) == s.to);
  }
  INFO("the scenario takes " << total << " steps");
  outcomes seen;
  for (std::size_t k = 0; k <= total; ++k) {
    INFO("crash after step " << k);
    rig r(shape);
    scenario s(r, seed, kind);
    s.run(k);
    crash(r, k % 2 == 0 ? device::power_loss::drop : device::power_loss::tear);
    check_after_crash(r, s.model, s.from, seen);
  }
  CHECK(seen.moved > 0);
  CHECK(seen.not_moved > 0);
  CHECK(seen.allocated > 0);
  CHECK(seen.not_allocated > 0);
}

}  // namespace
}  // namespace strata::tiering
