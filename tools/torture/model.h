// strata-torture's oracle: what each block written over iSCSI says, and
// which writes a crash may lose (README.md).
//
// Every block a write puts down carries the write's sequence number and
// the block's own address, and the rest of the block is a pattern made
// from both, so any block read back names the one write that put it there,
// or is garbage (torn, misplaced, a stale cache line, a mix).
//
// round_model records, in the order the initiator saw them, when each
// write and each SYNCHRONIZE CACHE was sent and when it completed. A write
// is durable once acknowledged if it had FUA, or if a flush sent after its
// acknowledgement completed. After the crash and restart, each block must
// hold the last durable write's data or that of a write not known to be
// older (one in flight with it, or sent later); the value a block held
// when the round began only if no durable write covered it since. Writes
// acknowledged but not flushed may be lost; durable ones never; garbage
// never.
//
// Single-threaded; no I/O: main.cc drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace strata::torture {

constexpr std::uint32_t block_bytes = 4096;
// What a block holds: the sequence number of the write that put it there;
// 0 is the zeros of a block never written.
using block_value = std::uint64_t;

// Fills `block` (block_bytes) with what write `seq` puts at `lba`.
void fill_block(std::span<std::byte> block, std::uint64_t seq, std::uint64_t lba);
// Which write's data `block`, read at `lba`, is: 0 for all zeros, nullopt
// for anything else than one whole block of one write to this lba.
std::optional<block_value> decode_block(std::span<const std::byte> block, std::uint64_t lba);
// For a report: what a block that does not decode holds. Its header (the
// write and block it names) and each 512-byte sector: 'W' that write's
// data for that block, 'Z' zeros, '?' anything else.
std::string describe_block(std::span<const std::byte> block);

struct round_verdict {
  std::uint64_t writes_sent = 0;
  std::uint64_t writes_acknowledged = 0;
  std::uint64_t flushes_completed = 0;
  std::uint64_t writes_durable = 0;   // acknowledged, then covered by a completed flush (or FUA)
  std::uint64_t writes_verified = 0;  // durable, and every block of it holds it or a newer write
  std::uint64_t writes_lost = 0;      // durable, and some block holds older data
  std::uint64_t unflushed_not_found =
      0;  // acknowledged, not durable, on none of its blocks (lost or overwritten): allowed
  std::uint64_t garbage_blocks = 0;   // no write's data for that block, or changed with no write
  std::vector<std::string> problems;  // one line per lost write or bad block (the first few)
  bool ok() const noexcept { return writes_lost == 0 && garbage_blocks == 0; }
};

class round_model {
 public:
  // `base`: what each block of the area [0, base.size()) holds as the round
  // begins. Writes get sequence numbers from `first_seq` on.
  round_model(std::vector<block_value> base, std::uint64_t first_seq);

  // Events, as the initiator sees them, in order.
  std::uint64_t write_sent(std::uint64_t lba, std::uint32_t block_count,
                           bool fua);  // its sequence number
  void write_done(std::uint64_t seq, bool acknowledged);
  std::size_t flush_sent();  // its index
  void flush_done(std::size_t flush, bool completed);
  // The controller that acknowledged the writes so far froze (--freeze):
  // with --volatile-drive-caches each stratad's drive caches live in its
  // own memory, so what it held there unflushed is out of every other
  // controller's reach, as at a kill or a power cut. A flush sent after
  // this (through the partner) covers only writes acknowledged after it;
  // those before are durable only through a flush sent before it, or FUA.
  void owner_cut();

  // A read during the round found `value` at `lba`: is it the block's
  // value at the start or a write to it already sent?
  bool plausible(std::uint64_t lba, block_value value) const;

  // After the crash and restart: `found` is every block of the area
  // (nullopt: garbage). Next round's base is `found`, if the verdict is ok.
  round_verdict verify(std::span<const std::optional<block_value>> found) const;

  std::uint64_t next_seq() const noexcept { return first_seq_ + writes_.size(); }
  std::uint64_t area_blocks() const noexcept { return base_.size(); }

 private:
  static constexpr std::uint64_t never = UINT64_MAX;
  struct write_record {
    std::uint64_t lba = 0;
    std::uint32_t block_count = 0;
    bool fua = false;
    std::uint64_t sent_tick = 0;
    std::uint64_t done_tick = never;  // acknowledged at; never: failed or still in flight
  };
  struct flush_record {
    std::uint64_t sent_tick = 0;
    bool completed = false;
  };
  const write_record& write(std::uint64_t seq) const { return writes_[seq - first_seq_]; }
  std::uint64_t cut_tick_ = 0;  // owner_cut()'s; 0: none

  std::vector<block_value> base_;
  std::uint64_t first_seq_;
  std::uint64_t tick_ = 0;
  std::vector<write_record> writes_;  // by seq - first_seq_
  std::vector<flush_record> flushes_;
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>>
      covering_;  // lba -> seqs of writes to it, in send order
};

}  // namespace strata::torture
