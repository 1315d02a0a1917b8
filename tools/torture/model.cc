#include "tools/torture/model.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace strata::torture {

namespace {

constexpr std::uint64_t magic =
    0x5354524154544f52ull;  // "STRATTOR"; words 0-3: magic, seq, lba, ~seq

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t word_at(std::uint64_t seq, std::uint64_t lba, std::size_t i) {
  switch (i) {
    case 0:
      return magic;
    case 1:
      return seq;
    case 2:
      return lba;
    case 3:
      return ~seq;
    default:
      return mix(seq * 0x100000001b3ull ^ mix(lba) ^ i);
  }
}

std::uint64_t load(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

void fill_block(std::span<std::byte> block, std::uint64_t seq, std::uint64_t lba) {
  for (std::size_t i = 0; i < block_bytes / 8; ++i) {
    const std::uint64_t w = word_at(seq, lba, i);
    std::memcpy(block.data() + i * 8, &w, sizeof w);
  }
}

std::optional<block_value> decode_block(std::span<const std::byte> block, std::uint64_t lba) {
  if (block.size() != block_bytes) return std::nullopt;
  if (std::all_of(block.begin(), block.end(), [](std::byte b) { return b == std::byte{0}; }))
    return 0;
  const std::uint64_t seq = load(block.data() + 8);
  if (seq == 0) return std::nullopt;
  for (std::size_t i = 0; i < block_bytes / 8; ++i) {
    if (load(block.data() + i * 8) != word_at(seq, lba, i)) return std::nullopt;
  }
  return seq;
}

std::string describe_block(std::span<const std::byte> block) {
  if (block.size() != block_bytes) return "a block of " + std::to_string(block.size()) + " bytes";
  const std::uint64_t seq = load(block.data() + 8);
  const std::uint64_t lba = load(block.data() + 16);
  std::string s = load(block.data()) == magic
                      ? "header: write " + std::to_string(seq) + " to block " + std::to_string(lba)
                      : "no header";
  s += "; sectors ";
  for (std::size_t sector = 0; sector < block_bytes / 512; ++sector) {
    bool zeros = true, ours = true;
    for (std::size_t i = sector * 64; i < (sector + 1) * 64; ++i) {
      const std::uint64_t w = load(block.data() + i * 8);
      zeros = zeros && w == 0;
      ours = ours && w == word_at(seq, lba, i);
    }
    s += ours ? 'W' : zeros ? 'Z' : '?';
  }
  return s;
}

round_model::round_model(std::vector<block_value> base, std::uint64_t first_seq)
    : base_(std::move(base)), first_seq_(first_seq) {}

std::uint64_t round_model::write_sent(std::uint64_t lba, std::uint32_t block_count, bool fua) {
  const std::uint64_t seq = next_seq();
  writes_.push_back({lba, block_count, fua, ++tick_, never});
  for (std::uint64_t b = lba; b < lba + block_count; ++b) covering_[b].push_back(seq);
  return seq;
}

void round_model::write_done(std::uint64_t seq, bool acknowledged) {
  ++tick_;
  if (acknowledged) writes_[seq - first_seq_].done_tick = tick_;
}

void round_model::owner_cut() {
  cut_tick_ = ++tick_;
}

std::size_t round_model::flush_sent() {
  flushes_.push_back({++tick_, false});
  return flushes_.size() - 1;
}

void round_model::flush_done(std::size_t flush, bool completed) {
  ++tick_;
  flushes_[flush].completed = completed;
}

bool round_model::plausible(std::uint64_t lba, block_value value) const {
  if (lba >= base_.size()) return false;
  if (value == base_[lba]) return true;
  const auto c = covering_.find(lba);
  return c != covering_.end() &&
         std::find(c->second.begin(), c->second.end(), value) != c->second.end();
}

round_verdict round_model::verify(std::span<const std::optional<block_value>> found) const {
  round_verdict v;
  // A write is durable if a flush sent after its acknowledgement completed:
  // the latest such flush's send tick decides for all.
  std::uint64_t last_flush_sent = 0, last_before_cut = 0;
  for (const flush_record& f : flushes_) {
    if (f.completed) {
      ++v.flushes_completed;
      last_flush_sent = std::max(last_flush_sent, f.sent_tick);
      if (cut_tick_ == 0 || f.sent_tick < cut_tick_)
        last_before_cut = std::max(last_before_cut, f.sent_tick);
    }
  }
  auto durable = [&](const write_record& w) {
    if (w.done_tick == never) return false;
    if (w.fua) return true;
    // Acknowledged by the owner that was cut: only its own flushes count.
    if (cut_tick_ != 0 && w.done_tick < cut_tick_) return w.done_tick < last_before_cut;
    return w.done_tick < last_flush_sent;
  };
  std::set<std::uint64_t> lost;  // durable writes with a block holding older data
  std::set<std::uint64_t> seen;  // writes found on at least one of their blocks
  auto problem = [&](std::string line) {
    if (v.problems.size() < 20) v.problems.push_back(std::move(line));
  };
  for (std::uint64_t lba = 0; lba < base_.size() && lba < found.size(); ++lba) {
    const auto c = covering_.find(lba);
    if (!found[lba]) {
      ++v.garbage_blocks;
      problem("block " + std::to_string(lba) + ": garbage (no write's data for this block)");
      continue;
    }
    const block_value value = *found[lba];
    if (c == covering_.end()) {
      if (value != base_[lba]) {
        ++v.garbage_blocks;
        problem("block " + std::to_string(lba) + ": changed with no write to it (write " +
                std::to_string(base_[lba]) + " expected, write " + std::to_string(value) +
                " found)");
      }
      continue;
    }
    const std::vector<std::uint64_t>& seqs = c->second;
    const bool from_round = std::find(seqs.begin(), seqs.end(), value) != seqs.end();
    if (!from_round && value != base_[lba]) {
      ++v.garbage_blocks;
      problem("block " + std::to_string(lba) + ": holds write " + std::to_string(value) +
              ", which never wrote it in this round");
      continue;
    }
    if (from_round) seen.insert(value);
    // Older than durable write d: the round's base, or a write acknowledged before d was sent.
    for (std::uint64_t d : seqs) {
      const write_record& dw = write(d);
      if (!durable(dw) || d == value) continue;
      const bool older = !from_round || write(value).done_tick < dw.sent_tick;
      if (older && lost.insert(d).second) {
        problem("write " + std::to_string(d) + " (blocks " + std::to_string(dw.lba) + "+" +
                std::to_string(dw.block_count) + (dw.fua ? ", FUA" : "") +
                ") acknowledged and flushed, lost: block " + std::to_string(lba) + " holds " +
                (from_round
                     ? "the older write " + std::to_string(value)
                     : "what it held before the round (write " + std::to_string(value) + ")"));
      }
    }
  }
  for (std::size_t i = 0; i < writes_.size(); ++i) {
    const write_record& w = writes_[i];
    const std::uint64_t seq = first_seq_ + i;
    ++v.writes_sent;
    if (w.done_tick == never) continue;
    ++v.writes_acknowledged;
    if (durable(w)) {
      ++v.writes_durable;
      if (lost.contains(seq)) {
        ++v.writes_lost;
      } else {
        ++v.writes_verified;
      }
    } else if (!seen.contains(seq)) {
      ++v.unflushed_not_found;
    }
  }
  return v;
}

}  // namespace strata::torture
