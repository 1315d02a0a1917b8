#include "tests/sim/model.h"

#include <algorithm>
#include <cstring>
#include <random>

namespace strata::sim {

void fill_block(std::span<std::byte> block, std::uint64_t block_index, std::uint64_t seq) {
  if (seq == 0) {
    std::memset(block.data(), 0, block.size());
    return;
  }
  std::mt19937_64 bytes(block_index * 1'000'003 + seq);
  for (std::size_t i = 0; i < block.size(); i += 8) {
    const std::uint64_t word = bytes();
    std::memcpy(block.data() + i, &word, std::min<std::size_t>(8, block.size() - i));
  }
  std::memcpy(block.data(), &block_index, 8);
  std::memcpy(block.data() + 8, &seq, 8);
}

std::optional<std::uint64_t> decode_block(std::span<const std::byte> block,
                                          std::uint64_t block_index) {
  if (std::all_of(block.begin(), block.end(), [](std::byte b) { return b == std::byte{0}; }))
    return 0;
  std::uint64_t index = 0, seq = 0;
  std::memcpy(&index, block.data(), 8);
  std::memcpy(&seq, block.data() + 8, 8);
  if (index != block_index || seq == 0) return std::nullopt;
  std::vector<std::byte> want(block.size());
  fill_block(want, block_index, seq);
  if (std::memcmp(want.data(), block.data(), block.size()) != 0) return std::nullopt;
  return seq;
}

block_model::block_model(std::uint64_t block_count)
    : blocks_(block_count), anything_(block_count, false) {
  ops_.push_back({0, block_count, 0, true});  // id 0: the zeros every block starts with
  for (auto& b : blocks_) b.push_back({0, 0, 0, 0, true, true});
}

std::uint64_t block_model::submitted(std::uint64_t first, std::uint64_t count, std::uint64_t seq,
                                     sim_time now) {
  const std::uint64_t id = ops_.size();
  ops_.push_back({first, count, never, false});
  for (std::uint64_t b = first; b < first + count; ++b)
    blocks_[b].push_back({id, seq, now, never, false, false});
  return id;
}

void block_model::completed(std::uint64_t id, bool ok, sim_time now) {
  op& o = ops_[id];
  o.completed = now;
  o.ok = ok;
  for (std::uint64_t b = o.first; b < o.first + o.count; ++b) {
    for (write& w : blocks_[b]) {
      if (w.id != id) continue;
      w.completed = now;
      w.ok = ok;
    }
  }
  if (ok) not_durable_.push_back(id);
}

bool block_model::in_flight(std::uint64_t id) const {
  return ops_[id].completed == never;
}

void block_model::flush_completed(sim_time submitted_at) {
  std::erase_if(not_durable_, [&](std::uint64_t id) {
    const op& o = ops_[id];
    if (o.completed >= submitted_at) return false;
    for (std::uint64_t b = o.first; b < o.first + o.count; ++b) {
      anything_[b] = false;  // a durable value again
      for (write& w : blocks_[b]) {
        if (w.id == id) w.durable = true;
      }
    }
    return true;
  });
}

bool block_model::overwritten(const std::vector<write>& history, const write& w, sim_time before,
                              bool durable_only) const {
  if (w.completed == never) return false;
  return std::any_of(history.begin(), history.end(), [&](const write& w2) {
    return w2.ok && w2.completed != never && w2.completed < before && w2.submitted > w.completed &&
           (w2.durable || !durable_only);
  });
}

std::optional<std::string> block_model::check(std::uint64_t block, std::optional<std::uint64_t> seq,
                                              sim_time read_began, bool after_crash) const {
  const auto& history = blocks_[block];
  for (const write& w : history) {
    // Forgiven: anything goes here until a durable write replaces it.
    if (w.seq == garbage &&
        !overwritten(history, w, after_crash ? never : read_began, after_crash)) {
      return std::nullopt;
    }
  }
  const std::uint64_t value = seq.value_or(garbage);
  bool known = false;
  for (const write& w : history) {
    if (w.seq != value) continue;
    known = true;
    if (!overwritten(history, w, after_crash ? never : read_began, after_crash))
      return std::nullopt;
  }
  if (!seq && !known)
    return "block " + std::to_string(block) +
           " holds data no write put there (garbage or another block's)";
  std::string why = "block " + std::to_string(block) + " holds write " + std::to_string(value) +
                    (known ? ", which a later write had certainly replaced"
                           : ", which the model no longer allows") +
                    (after_crash ? " (after a crash, by a durable write)" : "") + "; possible:";
  for (const write& w : history) {
    if (!overwritten(history, w, after_crash ? never : read_began, after_crash)) {
      why += " " + std::to_string(w.seq) +
             (w.durable              ? "(durable)"
              : w.completed == never ? "(in flight)"
                                     : "");
    }
  }
  return why;
}

std::optional<std::string> block_model::check_read(std::uint64_t block,
                                                   std::optional<std::uint64_t> seq,
                                                   sim_time read_began) const {
  return check(block, seq, read_began, false);
}

std::optional<std::string> block_model::check_after_crash(std::uint64_t block,
                                                          std::optional<std::uint64_t> seq) const {
  return check(block, seq, never, true);
}

void block_model::settle_after_crash(std::uint64_t block, std::optional<std::uint64_t> seq) {
  if (!seq) anything_[block] = true;
  if (anything_[block]) seq = std::nullopt;
  blocks_[block].clear();
  blocks_[block].push_back({0, seq.value_or(garbage), 0, 0, true, true});
  not_durable_.clear();  // ops from before the crash: never acknowledged, or in the history no more
}

void block_model::prune(sim_time oldest_read) {
  for (auto& history : blocks_) {
    if (history.size() < 2) continue;
    std::vector<write> kept;
    for (const write& w : history) {
      if (!overwritten(history, w, oldest_read, true)) kept.push_back(w);
    }
    history = std::move(kept);
  }
}

}  // namespace strata::sim
