// Private to the logical unit's own files (logical_unit.cc, spc.cc,
// sbc.cc, command_engine.cc, extended_copy.cc may use it): the CDB field
// helpers, the response builder, and the per-command state of commands
// that do device I/O. Nothing outside target/scsi/ includes it.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "target/scsi/big_endian.h"
#include "target/scsi/logical_unit.h"

namespace strata::scsi::detail {

inline std::uint16_t get16(const std::uint8_t* p) noexcept {
  return static_cast<std::uint16_t>(get_be(p, 2));
}
inline std::uint32_t get32(const std::uint8_t* p) noexcept {
  return static_cast<std::uint32_t>(get_be(p, 4));
}
inline std::uint64_t get64(const std::uint8_t* p) noexcept {
  return get_be(p, 8);
}

using scsi::put_be;

// Appends big-endian fields to a response under construction. Responses are
// built whole, then cut to the ALLOCATION LENGTH (set_data_in), which is how
// SPC-4 4.2.5.6 defines truncation.
struct response {
  std::vector<std::uint8_t> bytes;
  void u8(std::uint64_t v) { bytes.push_back(static_cast<std::uint8_t>(v)); }
  void be(std::uint64_t v, int length_bytes) {
    const std::size_t at = bytes.size();
    bytes.resize(at + length_bytes);
    put_be(bytes.data() + at, v, length_bytes);
  }
  void zeros(std::size_t n) { bytes.resize(bytes.size() + n, 0); }
  void ascii(const std::string& s, std::size_t width) {  // space-padded, cut to width
    for (std::size_t i = 0; i < width; ++i) {
      const char c = i < s.size() ? s[i] : ' ';
      bytes.push_back(c >= 0x20 && c <= 0x7e ? static_cast<std::uint8_t>(c) : ' ');
    }
  }
  std::size_t size() const noexcept { return bytes.size(); }
  // Patches a big-endian length field already appended.
  void patch(std::size_t at, std::uint64_t v, int length_bytes) noexcept {
    put_be(bytes.data() + at, v, length_bytes);
  }
};

inline bool all_zero(std::span<const std::byte> bytes) noexcept {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

inline bool in_range(std::uint64_t lba, std::uint64_t blocks,
                     std::uint64_t capacity_blocks) noexcept {
  // Written so that a huge lba or count cannot overflow the sum.
  return lba <= capacity_blocks && blocks <= capacity_blocks - lba;
}

}  // namespace strata::scsi::detail

namespace strata::scsi {

// ---------------------------------------------------------------------------
// Per-command state for commands that do device I/O.
//
// A command runs up to three steps (write then flush; write then read back;
// read, write and flush for COMPARE AND WRITE and ORWRITE with FUA); a step
// moves a list of block ranges in pieces of at most
// piece_blocks, up to max_pieces_in_flight at once, in order. When a piece
// fails, no more pieces are issued; the step ends when those in flight are
// back. Pieces are issued in order, so every piece before the earliest
// failed one was issued and succeeded: the failure reported is the earliest
// (lowest sequence), and what lies before it is good.
struct logical_unit::command {
  struct range {
    std::uint64_t lba = 0;
    std::uint64_t block_count = 0;
  };
  struct step {
    device::op operation = device::op::read;
    std::byte* data = nullptr;  // the first range's data (read, write); null for discard and flush
    bool repeat = false;        // every piece's data starts at `data` (WRITE SAME)
    std::uint64_t piece_blocks = 1;
    const range* ranges = nullptr;
    std::size_t range_count = 0;
    range single;  // the range of a one-range step; `ranges` points here
  };
  struct piece {
    device::request req;
    iovec segment{};
    std::uint64_t sequence = 0;
    bool busy = false;
  };
  enum class comparison : std::uint8_t { none, whole, each_block };
  // The range interlock (logical_unit::start): whether this command reads
  // or writes blocks, and whether it must have them to itself while it
  // runs: from other writes (exclusive: COMPARE AND WRITE, ORWRITE), or
  // from reads too (atomic: WRITE ATOMIC).
  enum class access : std::uint8_t { none, read, write, exclusive, atomic };
  // Whether two commands holding these kinds of access to overlapping
  // ranges must not run at once (neither is none).
  static bool conflicting(access a, access b) noexcept {
    if (a == access::read || b == access::read) return a == access::atomic || b == access::atomic;
    return a == access::exclusive || a == access::atomic || b == access::exclusive ||
           b == access::atomic;
  }
  // What a read-modify-write command does between its read (step 0) and
  // its write: COMPARE AND WRITE compares, ORWRITE ORs in the data.
  enum class merge : std::uint8_t { none, compare, bitwise_or };
  struct failure {
    std::error_code error;
    device::op operation = device::op::read;
    std::uint64_t lba = 0;
    std::uint64_t block_count = 0;
    std::byte* data = nullptr;  // the failed piece's data, for locating a read error
    std::uint64_t sequence = 0;
  };

  logical_unit* owner = nullptr;
  task* t = nullptr;
  std::uint64_t lba = 0;  // the command's own range, for data_in_bytes on failure
  bool returns_data = false;
  comparison compare = comparison::none;
  // data_out: what VERIFY and COMPARE AND WRITE compare with, what ORWRITE ORs in
  std::span<const std::byte> expected;
  merge between_steps = merge::none;
  std::optional<std::uint64_t> miscompare_offset;  // COMPARE AND WRITE found a difference

  // The range interlock. `locked` is what a one-range command reads or
  // writes; UNMAP's ranges are `ranges`.
  access lock = access::none;
  range locked;
  bool running = false;  // issued: its range counts against commands admitted after it
  command* next_waiting = nullptr;

  std::array<step, 3> steps;
  unsigned step_count = 0;
  unsigned step_index = 0;
  std::vector<range> ranges;       // UNMAP's descriptors
  device::aligned_buffer scratch;  // verify reads; WRITE SAME's pattern
  device::aligned_buffer bounce;   // data_out that was not aligned for the volume

  // The running step.
  std::size_t range_index = 0;
  std::uint64_t next_lba = 0;
  std::uint64_t next_sequence = 0;
  unsigned in_flight = 0;
  bool stopped = false;
  failure first_failure;
  // Locating a read error: the failure found by whole pieces, reported if
  // single-block reads of that piece find none.
  bool locating = false;
  failure piece_failure;

  std::array<piece, max_pieces_in_flight> pieces;

  void on_piece_done(device::request& req) noexcept { owner->on_piece_done(req); }

  std::span<const range> locked_ranges() const noexcept {
    return ranges.empty() ? std::span<const range>(&locked, 1) : std::span<const range>(ranges);
  }

  step& add_step(device::op operation, std::byte* data, std::uint64_t lba_, std::uint64_t blocks,
                 std::uint64_t piece_blocks) noexcept {
    step& s = steps[step_count++];
    s = step{};
    s.operation = operation;
    s.data = data;
    s.piece_blocks = piece_blocks;
    s.single = range{lba_, blocks};
    s.ranges = &s.single;
    s.range_count = 1;
    return s;
  }
};

}  // namespace strata::scsi
