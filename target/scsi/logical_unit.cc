#include "target/scsi/logical_unit.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cassert>
#include <cstring>
#include <limits>
#include <new>

#include "raid/device/aligned_buffer.h"
#include "raid/device/status.h"
#include "target/scsi/big_endian.h"

namespace strata::scsi {

namespace {

std::uint16_t get16(const std::uint8_t* p) noexcept {
  return static_cast<std::uint16_t>(get_be(p, 2));
}
std::uint32_t get32(const std::uint8_t* p) noexcept {
  return static_cast<std::uint32_t>(get_be(p, 4));
}
std::uint64_t get64(const std::uint8_t* p) noexcept {
  return get_be(p, 8);
}

void put_be(std::uint8_t* p, std::uint64_t v, int length_bytes) noexcept {
  for (int i = length_bytes - 1; i >= 0; --i) {
    p[i] = static_cast<std::uint8_t>(v);
    v >>= 8;
  }
}

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

constexpr std::size_t max_serial_bytes = 64;

std::string printable_serial(const std::string& serial) {
  std::string s = serial.substr(0, max_serial_bytes);
  for (char& c : s) {
    if (c < 0x21 || c > 0x7e) c = '_';  // VPD 80h is ASCII graphic characters
  }
  return s;
}

std::uint64_t fnv1a(const std::string& s, std::uint64_t basis) noexcept {
  std::uint64_t h = basis;
  for (const char c : s) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// SPC-4 version descriptors: SAM-5, SPC-4, SBC-3 (no particular revision).
constexpr std::uint16_t version_descriptors[] = {0x00a0, 0x0460, 0x04c0};

// The commands this unit supports, for REPORT SUPPORTED OPERATION CODES:
// the CDB USAGE DATA of each says which bits the unit looks at (SPC-4
// 6.35.3). Keep it in step with logical_unit::dispatch() (a test checks
// that each entry is answered by something other than INVALID COMMAND
// OPERATION CODE).
struct command_info {
  std::uint8_t opcode;
  std::uint16_t service_action;
  bool has_service_action;
  std::uint8_t cdb_bytes;
  std::array<std::uint8_t, 16> usage;
};

// clang-format off: one command per entry, its usage bytes as in SPC-4 tables.
constexpr command_info supported_commands[] = {
    // TEST UNIT READY
    {0x00, 0x00, false, 6, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    // REQUEST SENSE
    {0x03, 0x00, false, 6, {0x03, 0x01, 0x00, 0x00, 0xff, 0x00}},
    // READ(6)
    {0x08, 0x00, false, 6, {0x08, 0x1f, 0xff, 0xff, 0xff, 0x00}},
    // WRITE(6)
    {0x0a, 0x00, false, 6, {0x0a, 0x1f, 0xff, 0xff, 0xff, 0x00}},
    // INQUIRY
    {0x12, 0x00, false, 6, {0x12, 0x03, 0xff, 0xff, 0xff, 0x00}},
    // MODE SELECT(6)
    {0x15, 0x00, false, 6, {0x15, 0x11, 0x00, 0x00, 0xff, 0x00}},
    // MODE SENSE(6)
    {0x1a, 0x00, false, 6, {0x1a, 0x08, 0xff, 0xff, 0xff, 0x00}},
    // START STOP UNIT: POWER CONDITION and LOEJ are looked at (an eject is
    // refused); IMMED and START change nothing on a volume.
    {0x1b, 0x00, false, 6, {0x1b, 0x00, 0x00, 0x00, 0xf2, 0x00}},
    // RESERVE(6), RELEASE(6): 3RDPTY and EXTENT are refused (reservations.h)
    {0x16, 0x00, false, 6, {0x16, 0x11, 0x00, 0x00, 0x00, 0x00}},
    {0x17, 0x00, false, 6, {0x17, 0x11, 0x00, 0x00, 0x00, 0x00}},
    // READ CAPACITY(10)
    {0x25, 0x00, false, 10, {0x25, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    // READ(10)
    {0x28, 0x00, false, 10, {0x28, 0xf8, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}},
    // WRITE(10)
    {0x2a, 0x00, false, 10, {0x2a, 0xf8, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}},
    // WRITE AND VERIFY(10)
    {0x2e, 0x00, false, 10, {0x2e, 0xf6, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}},
    // VERIFY(10)
    {0x2f, 0x00, false, 10, {0x2f, 0xf6, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}},
    // PRE-FETCH(10)
    {0x34, 0x00, false, 10, {0x34, 0x02, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}},
    // SYNCHRONIZE CACHE(10)
    {0x35, 0x00, false, 10, {0x35, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}},
    // READ DEFECT DATA(10)
    {0x37, 0x00, false, 10, {0x37, 0x00, 0x1f, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}},
    // WRITE SAME(10)
    {0x41, 0x00, false, 10, {0x41, 0xf8, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}},
    // UNMAP
    {0x42, 0x00, false, 10, {0x42, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}},
    // MODE SELECT(10)
    {0x55, 0x00, false, 10, {0x55, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}},
    // RESERVE(10), RELEASE(10): 3RDPTY, LONGID and EXTENT are refused
    {0x56, 0x00, false, 10, {0x56, 0x13, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {0x57, 0x00, false, 10, {0x57, 0x13, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    // MODE SENSE(10)
    {0x5a, 0x00, false, 10, {0x5a, 0x18, 0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}},
    // PERSISTENT RESERVE IN: READ KEYS, READ RESERVATION, REPORT CAPABILITIES,
    // READ FULL STATUS
    {0x5e, 0x00, true, 10, {0x5e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}},
    {0x5e, 0x01, true, 10, {0x5e, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}},
    {0x5e, 0x02, true, 10, {0x5e, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}},
    {0x5e, 0x03, true, 10, {0x5e, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}},
    // PERSISTENT RESERVE OUT: REGISTER, RESERVE, RELEASE, CLEAR, PREEMPT,
    // PREEMPT AND ABORT, REGISTER AND IGNORE EXISTING KEY, REGISTER AND MOVE
    {0x5f, 0x00, true, 10, {0x5f, 0x00, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}},
    {0x5f, 0x01, true, 10, {0x5f, 0x01, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}},
    {0x5f, 0x02, true, 10, {0x5f, 0x02, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}},
    {0x5f, 0x03, true, 10, {0x5f, 0x03, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}},
    {0x5f, 0x04, true, 10, {0x5f, 0x04, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}},
    {0x5f, 0x05, true, 10, {0x5f, 0x05, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}},
    {0x5f, 0x06, true, 10, {0x5f, 0x06, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}},
    {0x5f, 0x07, true, 10, {0x5f, 0x07, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00}},
    // EXTENDED COPY(LID1) (extended_copy.h)
    {0x83, 0x00, true, 16, {0x83, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                            0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // RECEIVE COPY RESULTS: COPY STATUS, RECEIVE DATA, OPERATING PARAMETERS,
    // FAILED SEGMENT DETAILS (the LIST IDENTIFIER means nothing to the third)
    {0x84, 0x00, true, 16, {0x84, 0x00, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00,
                            0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    {0x84, 0x01, true, 16, {0x84, 0x01, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00,
                            0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    {0x84, 0x03, true, 16, {0x84, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                            0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    {0x84, 0x04, true, 16, {0x84, 0x04, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00,
                            0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // READ(16)
    {0x88, 0x00, false, 16, {0x88, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // COMPARE AND WRITE
    {0x89, 0x00, false, 16, {0x89, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0x00, 0x00}},
    // WRITE(16)
    {0x8a, 0x00, false, 16, {0x8a, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // ORWRITE(16)
    {0x8b, 0x00, false, 16, {0x8b, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // WRITE AND VERIFY(16)
    {0x8e, 0x00, false, 16, {0x8e, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // VERIFY(16)
    {0x8f, 0x00, false, 16, {0x8f, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // PRE-FETCH(16)
    {0x90, 0x00, false, 16, {0x90, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // SYNCHRONIZE CACHE(16)
    {0x91, 0x00, false, 16, {0x91, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // WRITE SAME(16)
    {0x93, 0x00, false, 16, {0x93, 0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // WRITE ATOMIC(16): WRPROTECT (refused), DPO, FUA, ATOMIC BOUNDARY
    // (refused unless 0), TRANSFER LENGTH
    {0x9c, 0x00, false, 16, {0x9c, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // READ CAPACITY(16)
    {0x9e, 0x10, true, 16, {0x9e, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                            0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // GET LBA STATUS
    {0x9e, 0x12, true, 16, {0x9e, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // REPORT LUNS: answered by the LUN map (lun_map.h), listed because it
    // is part of the command set an initiator reaches through this unit.
    {0xa0, 0x00, false, 12, {0xa0, 0x00, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff,
                             0xff, 0xff, 0x00, 0x00}},
    // REPORT TARGET PORT GROUPS
    {0xa3, 0x0a, true, 12, {0xa3, 0xea, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
                            0xff, 0xff, 0x00, 0x00}},
    // REPORT SUPPORTED OPERATION CODES
    {0xa3, 0x0c, true, 12, {0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff,
                            0xff, 0xff, 0x00, 0x00}},
    // READ(12)
    {0xa8, 0x00, false, 12, {0xa8, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0x00, 0x00}},
    // WRITE(12)
    {0xaa, 0x00, false, 12, {0xaa, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0x00, 0x00}},
    // WRITE AND VERIFY(12)
    {0xae, 0x00, false, 12, {0xae, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0x00, 0x00}},
    // VERIFY(12)
    {0xaf, 0x00, false, 12, {0xaf, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0x00, 0x00}},
    // READ DEFECT DATA(12)
    {0xb7, 0x00, false, 12, {0xb7, 0x1f, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
                             0xff, 0xff, 0x00, 0x00}},
};
// clang-format on

bool opcode_has_service_actions(std::uint8_t opcode) noexcept {
  return std::any_of(
      std::begin(supported_commands), std::end(supported_commands),
      [&](const command_info& c) { return c.opcode == opcode && c.has_service_action; });
}

const command_info* find_command(std::uint8_t opcode,
                                 std::optional<std::uint16_t> service_action) noexcept {
  for (const command_info& c : supported_commands) {
    if (c.opcode != opcode) continue;
    if (c.has_service_action && service_action && c.service_action != *service_action) continue;
    return &c;
  }
  return nullptr;
}

bool all_zero(std::span<const std::byte> bytes) noexcept {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

}  // namespace

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

// ---------------------------------------------------------------------------

logical_unit::logical_unit(device::block_device& volume, unit_identity identity,
                           unit_state_store* state_store)
    : volume_(volume),
      identity_(std::move(identity)),
      reservations_(attentions_, state_store, identity_.relative_port,
                    [this](task& t) { complete_later(t); }) {
  assert(identity_.relative_port != 0 && identity_.port_group != 0);
  const device::block_geometry& g = volume_.geometry();
  // Pieces start at multiples of the piece size within an aligned buffer,
  // so the piece size must keep them aligned.
  const std::uint64_t align_blocks =
      std::max<std::uint64_t>(1, g.buffer_alignment_bytes / g.logical_block_size_bytes);
  align_blocks_ = align_blocks;
  piece_blocks_ = std::max<std::uint64_t>(1, piece_bytes / g.logical_block_size_bytes);
  piece_blocks_ = (piece_blocks_ + align_blocks - 1) / align_blocks * align_blocks;
}

logical_unit::~logical_unit() {
  assert(commands_in_flight() == 0 && "logical_unit destroyed with commands in flight");
}

std::array<std::uint8_t, 16> logical_unit::naa_designator() const noexcept {
  // NAA 6 (IEEE Registered Extended, SPC-4 7.8.6.6.5): NAA, the 24-bit
  // company id, a 36-bit vendor specific identifier, and a 64-bit extension.
  const std::uint64_t id =
      identity_.unit_id.value_or(fnv1a(identity_.serial, 0xcbf29ce484222325ull));
  const std::uint64_t vendor_specific =
      fnv1a(identity_.serial, 0x84222325cbf29ce4ull) & 0xfffffffffull;
  const std::uint64_t high = (std::uint64_t{6} << 60) |
                             (std::uint64_t{identity_.ieee_company_id & 0xffffffu} << 36) |
                             vendor_specific;
  std::array<std::uint8_t, 16> out{};
  put_be(out.data(), high, 8);
  put_be(out.data() + 8, id, 8);
  return out;
}

bool set_data_in(task& t, std::span<const std::uint8_t> payload,
                 std::uint32_t allocation_length_bytes) noexcept {
  const std::size_t n = std::min<std::size_t>(payload.size(), allocation_length_bytes);
  if (n > t.data_in.size()) {
    try {
      t.data_in = device::aligned_buffer(n);
    } catch (const std::bad_alloc&) {
      return false;
    }
  }
  if (n > 0) std::memcpy(t.data_in.data(), payload.data(), n);
  t.data_in_bytes = static_cast<std::uint32_t>(n);
  return true;
}

std::array<std::uint8_t, standard_inquiry_bytes> standard_inquiry(
    const unit_identity& identity, std::uint8_t peripheral) noexcept {
  std::array<std::uint8_t, standard_inquiry_bytes> out{};
  out[0] = peripheral;
  out[2] = 0x06;                        // VERSION: SPC-4
  out[3] = 0x10 | 0x02;                 // HISUP (hierarchical LUNs), RESPONSE DATA FORMAT 2
  out[4] = standard_inquiry_bytes - 5;  // ADDITIONAL LENGTH
  out[5] = 0x10;                        // TPGS 01b: implicit ALUA (REPORT TARGET PORT GROUPS)
  out[7] = 0x02;                        // CMDQUE: tagged queueing
  auto ascii = [&](std::size_t at, const std::string& s, std::size_t width) {
    for (std::size_t i = 0; i < width; ++i) {
      const char c = i < s.size() ? s[i] : ' ';
      out[at + i] = c >= 0x20 && c <= 0x7e ? static_cast<std::uint8_t>(c) : ' ';
    }
  };
  ascii(8, identity.vendor, 8);
  ascii(16, identity.product, 16);
  ascii(32, identity.revision, 4);
  std::size_t at = 58;
  for (const std::uint16_t v : version_descriptors) {
    put_be(out.data() + at, v, 2);
    at += 2;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Dispatch

void logical_unit::execute(task& t) noexcept {
  t.result = status::good;
  t.sense_data = sense{};
  t.data_in_bytes = 0;
  try {
    // The common case, a unit with no reservation and no unit attention
    // pending, looks at nothing more than these two flags.
    if ((!attentions_.quiet() || !reservations_.quiet()) && !admitted(t)) return complete_later(t);
    dispatch(t);
  } catch (const std::bad_alloc&) {
    // Every allocation happens before a command starts any I/O or posts its
    // completion, so nothing of this task is in flight: answer BUSY, which
    // initiators retry.
    t.result = status::busy;
    t.data_in_bytes = 0;
    complete_later(t);
  }
}

namespace {

// The commands that change the medium, which a write-protected unit
// refuses (SBC-3 4.11): the writes, WRITE SAME, UNMAP, COMPARE AND WRITE,
// ORWRITE, WRITE ATOMIC and WRITE AND VERIFY. Not EXTENDED COPY, which may
// only read this unit: the copy's WRITE(16) to it is refused instead.
bool modifies_medium(std::uint8_t opcode) noexcept {
  switch (opcode) {
    case 0x0a: case 0x2a: case 0xaa: case 0x8a:  // WRITE(6/10/12/16)
    case 0x2e: case 0xae: case 0x8e:             // WRITE AND VERIFY(10/12/16)
    case 0x41: case 0x93:                        // WRITE SAME(10/16)
    case 0x42:                                   // UNMAP
    case 0x89: case 0x8b:                        // COMPARE AND WRITE, ORWRITE
    case 0x9c:                                   // WRITE ATOMIC(16)
      return true;
    default:
      return false;
  }
}

}  // namespace

void logical_unit::dispatch(task& t) {
  const std::uint8_t* cdb = t.cdb.data();
  if (identity_.write_protected && modifies_medium(cdb[0])) {
    return fail_later(t, make_sense(sense_key::data_protect, asc::write_protected));
  }
  const std::uint8_t protect =
      cdb[1] >> 5;  // RDPROTECT, WRPROTECT, VRPROTECT: no protection information here
  switch (cdb[0]) {
    case 0x00:  // TEST UNIT READY
      return complete_later(t);
    case 0x1b:
      return start_stop_unit(t);
    case 0x03:
      return request_sense(t);
    case 0x12:
      return inquiry(t);
    case 0x25:
      return read_capacity_10(t);
    case 0x9e:  // SERVICE ACTION IN(16)
      if ((cdb[1] & 0x1f) == 0x10) return read_capacity_16(t);
      if ((cdb[1] & 0x1f) == 0x12) return get_lba_status(t);
      return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
    case 0xa3:  // MAINTENANCE IN
      if ((cdb[1] & 0x1f) == 0x0a) return report_target_port_groups(t);
      if ((cdb[1] & 0x1f) == 0x0c) return report_supported_operation_codes(t);
      return fail_later(t, illegal_request(asc::invalid_field_in_cdb));

    case 0x08:    // READ(6)
    case 0x0a: {  // WRITE(6)
      const std::uint64_t lba = get_be(cdb + 1, 3) & 0x1fffff;
      const std::uint64_t blocks = cdb[4] == 0 ? 256 : cdb[4];  // SBC-3 5.15: 0 means 256
      return read_write(t, cdb[0] == 0x0a, lba, blocks, false);
    }
    case 0x28:  // READ(10)
    case 0x2a:  // WRITE(10)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return read_write(t, cdb[0] == 0x2a, get32(cdb + 2), get16(cdb + 7), (cdb[1] & 0x08) != 0);
    case 0xa8:  // READ(12)
    case 0xaa:  // WRITE(12)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return read_write(t, cdb[0] == 0xaa, get32(cdb + 2), get32(cdb + 6), (cdb[1] & 0x08) != 0);
    case 0x88:  // READ(16)
    case 0x8a:  // WRITE(16)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return read_write(t, cdb[0] == 0x8a, get64(cdb + 2), get32(cdb + 10), (cdb[1] & 0x08) != 0);

    case 0x2e:  // WRITE AND VERIFY(10)
    case 0x2f:  // VERIFY(10)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return verify(t, cdb[0] == 0x2e, get32(cdb + 2), get16(cdb + 7), (cdb[1] >> 1) & 0x03);
    case 0xae:  // WRITE AND VERIFY(12)
    case 0xaf:  // VERIFY(12)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return verify(t, cdb[0] == 0xae, get32(cdb + 2), get32(cdb + 6), (cdb[1] >> 1) & 0x03);
    case 0x8e:  // WRITE AND VERIFY(16)
    case 0x8f:  // VERIFY(16)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return verify(t, cdb[0] == 0x8e, get64(cdb + 2), get32(cdb + 10), (cdb[1] >> 1) & 0x03);

    case 0x89:
      return compare_and_write(t);
    case 0x8b:
      return orwrite(t);
    case 0x9c:
      return write_atomic(t);
    case 0x83:
      return extended_copy(t);
    case 0x84:
      return receive_copy_results(t);
    case 0x34:  // PRE-FETCH(10)
      return pre_fetch(t, get32(cdb + 2), get16(cdb + 7));
    case 0x90:  // PRE-FETCH(16)
      return pre_fetch(t, get64(cdb + 2), get32(cdb + 10));
    case 0x37:  // READ DEFECT DATA(10)
    case 0xb7:  // READ DEFECT DATA(12)
      return read_defect_data(t, cdb[0] == 0xb7);

    case 0x35:  // SYNCHRONIZE CACHE(10)
      return synchronize_cache(t, get32(cdb + 2), get16(cdb + 7));
    case 0x91:  // SYNCHRONIZE CACHE(16)
      return synchronize_cache(t, get64(cdb + 2), get32(cdb + 10));
    case 0x42:
      return unmap(t);
    case 0x41:  // WRITE SAME(10)
    case 0x93:  // WRITE SAME(16)
      // No protection information; ANCHOR needs ANC_SUP, which is 0.
      if (protect != 0 || (cdb[1] & 0x10) != 0)
        return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      if (cdb[0] == 0x41)
        return write_same(t, get32(cdb + 2), get16(cdb + 7), (cdb[1] & 0x08) != 0, false);
      return write_same(t, get64(cdb + 2), get32(cdb + 10), (cdb[1] & 0x08) != 0,
                        (cdb[1] & 0x01) != 0);

    case 0x1a:
      return mode_sense(t, false);
    case 0x5a:
      return mode_sense(t, true);
    case 0x15:
      return mode_select(t, false);
    case 0x55:
      return mode_select(t, true);

    case 0x5e:
      reservations_.persistent_reserve_in(t);
      return complete_later(t);
    case 0x5f:
      return reservations_.persistent_reserve_out(t);  // completes after saving
    case 0x16:  // RESERVE(6)
    case 0x56:  // RESERVE(10)
      reservations_.reserve(t);
      return complete_later(t);
    case 0x17:  // RELEASE(6)
    case 0x57:  // RELEASE(10)
      reservations_.release(t);
      return complete_later(t);
    default:
      // REPORT LUNS (A0h) lands here too: the LUN map answers it before
      // any unit sees it.
      return fail_later(t, illegal_request(asc::invalid_command_operation_code));
  }
}

bool logical_unit::admitted(task& t) {
  // A unit attention is reported before a reservation conflict, as Linux-IO does.
  return !attentions_.report(t) && reservations_.allows(t);
}

void logical_unit::complete_later(task& t) {
  ++in_flight_;
  boost::asio::post(volume_.executor(), [this, &t] {
    --in_flight_;  // first: the completion may destroy this unit
    t.on_complete(t);
  });
}

void logical_unit::fail_later(task& t, const sense& s) {
  set_check_condition(t, s);
  t.data_in_bytes = 0;
  complete_later(t);
}

// ---------------------------------------------------------------------------
// Commands answered at once

void logical_unit::request_sense(task& t) {
  // Sense data is returned with each CHECK CONDITION (autosense, which every
  // transport Strata serves provides), and no deferred errors are kept: what
  // may be pending is a unit attention, which this returns and clears
  // (SPC-4 6.39); otherwise NO SENSE.
  const bool descriptor_format = (t.cdb[1] & 0x01) != 0;
  const sense pending =
      attentions_.nexus_count() == 0 ? sense{} : attentions_.take(t.nexus).value_or(sense{});
  std::array<std::uint8_t, descriptor_sense_max_bytes> data{};
  std::size_t n = 0;
  if (descriptor_format) {
    n = encode_descriptor_sense(pending, data);
  } else {
    n = encode_fixed_sense(
        pending, std::span<std::uint8_t, fixed_sense_bytes>(data.data(), fixed_sense_bytes));
  }
  if (!set_data_in(t, std::span(data.data(), n), t.cdb[4])) t.result = status::busy;
  complete_later(t);
}

void logical_unit::inquiry(task& t) {
  const std::uint8_t* cdb = t.cdb.data();
  const bool evpd = (cdb[1] & 0x01) != 0;
  const bool cmddt = (cdb[1] & 0x02) != 0;  // obsolete in SPC-4
  const std::uint8_t page = cdb[2];
  const std::uint16_t allocation_length = get16(cdb + 3);
  if (cmddt || (!evpd && page != 0))
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));

  const std::uint32_t bs = block_size_bytes();
  const std::uint32_t granularity_blocks = std::max<std::uint32_t>(1, 4096 / bs);
  response r;
  if (!evpd) {
    const auto data = standard_inquiry(identity_, 0x00);
    r.bytes.assign(data.begin(), data.end());
    r.bytes[5] |= 0x08;  // 3PC: this unit is a copy manager (EXTENDED COPY)
  } else {
    // Every VPD page: peripheral byte, page code, 2-byte page length.
    r.u8(0x00);
    r.u8(page);
    r.be(0, 2);
    switch (page) {
      case 0x00:  // Supported VPD pages, ascending
        for (const std::uint8_t p : {0x00, 0x80, 0x83, 0x86, 0x8f, 0xb0, 0xb1}) r.u8(p);
        if (identity_.thin_provisioned) r.u8(0xb2);
        break;
      case 0x80: {  // Unit serial number
        const std::string serial = printable_serial(identity_.serial);
        r.bytes.insert(r.bytes.end(), serial.begin(), serial.end());
        break;
      }
      case 0x83: {  // Device identification
        // NAA 6, binary, associated with the logical unit.
        r.u8(0x01);
        r.u8(0x03);
        r.u8(0x00);
        r.u8(16);
        const auto naa = naa_designator();
        r.bytes.insert(r.bytes.end(), naa.begin(), naa.end());
        // T10 vendor ID, ASCII, logical unit: vendor then serial.
        const std::string serial = printable_serial(identity_.serial);
        r.u8(0x02);
        r.u8(0x01);
        r.u8(0x00);
        r.u8(8 + serial.size());
        r.ascii(identity_.vendor, 8);
        r.bytes.insert(r.bytes.end(), serial.begin(), serial.end());
        // Relative target port and target port group, associated with the
        // target port (01b); PIV 0, so no protocol identifier: this layer
        // does not know the transport.
        r.u8(0x01);
        r.u8(0x14);
        r.u8(0x00);
        r.u8(4);
        r.be(identity_.relative_port, 4);
        r.u8(0x01);
        r.u8(0x15);
        r.u8(0x00);
        r.u8(4);
        r.be(identity_.port_group, 4);
        break;
      }
      case 0x86:  // Extended INQUIRY data
        r.zeros(60);
        // UASK_SUP: unit attentions carry sense key specific data (the
        // queue's OVERFLOW bit, unit_attentions.h). HEADSUP, ORDSUP, SIMPSUP
        // (see the header on task attributes).
        r.bytes[5] = 0x20 | 0x07;
        r.bytes[6] =
            0x01;  // V_SUP: a volatile cache (the volume's: writes are durable after a flush)
        break;
      case 0x8f: {  // Third-party copy (extended_copy.h)
        const auto descriptors = third_party_copy_descriptors(bs);
        r.bytes.insert(r.bytes.end(), descriptors.begin(), descriptors.end());
        break;
      }
      case 0xb0:  // Block limits
        r.zeros(60);
        // WSNZ 0: WRITE SAME with 0 blocks writes to the last LBA.
        r.bytes[5] = max_compare_and_write_blocks;  // MAXIMUM COMPARE AND WRITE LENGTH
        put_be(&r.bytes[6], granularity_blocks, 2);     // OPTIMAL TRANSFER LENGTH GRANULARITY
        put_be(&r.bytes[8], max_transfer_blocks(), 4);  // MAXIMUM TRANSFER LENGTH
        put_be(&r.bytes[12], piece_blocks_, 4);         // OPTIMAL TRANSFER LENGTH
        if (identity_.thin_provisioned) {
          put_be(&r.bytes[20], max_unmap_bytes / bs, 4);  // MAXIMUM UNMAP LBA COUNT
          put_be(&r.bytes[24], max_unmap_descriptors, 4);
          put_be(&r.bytes[28], granularity_blocks, 4);  // OPTIMAL UNMAP GRANULARITY
        }
        put_be(&r.bytes[36], max_write_same_bytes / bs, 8);  // MAXIMUM WRITE SAME LENGTH
        // MAXIMUM ATOMIC TRANSFER LENGTH; ATOMIC ALIGNMENT, ATOMIC TRANSFER
        // LENGTH GRANULARITY, and the two atomic boundary fields stay 0
        // (none required; boundaries not supported).
        put_be(&r.bytes[44], max_atomic_transfer_blocks(), 4);
        break;
      case 0xb1:  // Block device characteristics
        r.zeros(60);
        put_be(&r.bytes[4], identity_.non_rotating ? 1 : 0, 2);  // MEDIUM ROTATION RATE
        // PRODUCT TYPE 0, NOMINAL FORM FACTOR 0: not reported; a volume has neither.
        break;
      case 0xb2:  // Logical block provisioning
        if (!identity_.thin_provisioned)
          return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
        r.zeros(4);
        // LBPU, LBPWS, LBPWS10, LBPRZ: a discarded range of a Strata
        // volume reads as zeros (block_device.h, op::discard).
        r.bytes[5] = 0x80 | 0x40 | 0x20 | 0x04;
        r.bytes[6] = 0x02;  // PROVISIONING TYPE: thin
        break;
      default:
        return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
    }
    r.patch(2, r.size() - 4, 2);
  }
  if (!set_data_in(t, r.bytes, allocation_length)) t.result = status::busy;
  complete_later(t);
}

void logical_unit::read_capacity_10(task& t) {
  std::array<std::uint8_t, 8> data{};
  const std::uint64_t last_lba = block_count() - 1;
  // SBC-3 5.16.2: a capacity the field cannot hold is reported as
  // FFFFFFFFh, sending the initiator to READ CAPACITY(16).
  put_be(data.data(), std::min<std::uint64_t>(last_lba, 0xffffffffu), 4);
  put_be(data.data() + 4, block_size_bytes(), 4);
  if (!set_data_in(t, data, data.size())) t.result = status::busy;
  complete_later(t);
}

void logical_unit::read_capacity_16(task& t) {
  std::array<std::uint8_t, 32> data{};
  put_be(data.data(), block_count() - 1, 8);
  put_be(data.data() + 8, block_size_bytes(), 4);
  // Byte 13: P_I_EXPONENT 0, LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT.
  // LOWEST ALIGNED LOGICAL BLOCK ADDRESS 0: volumes start on a physical block.
  for (std::uint32_t per = identity_.physical_block_bytes / block_size_bytes(); per > 1 && data[13] < 15; per >>= 1) ++data[13];
  if (identity_.thin_provisioned) data[14] = 0x80 | 0x40;  // LBPME, LBPRZ
  if (!set_data_in(t, data, get32(t.cdb.data() + 10))) t.result = status::busy;
  complete_later(t);
}

std::vector<std::uint8_t> logical_unit::mode_page(std::uint8_t page_code, bool changeable) const {
  // Nothing is changeable (MODE SELECT accepts only the current values), so
  // the changeable-values masks are all zero.
  std::vector<std::uint8_t> page;
  switch (page_code) {
    case 0x08:  // Caching (SBC-3 6.4.5)
      page.assign(20, 0);
      page[0] = 0x08;
      page[1] = 0x12;
      // WCE 1, RCD 0: writes may sit in a volatile cache until a flush
      // (block_device.h), so initiators must send SYNCHRONIZE CACHE.
      if (!changeable) page[2] = 0x04;
      break;
    case 0x0a:  // Control (SPC-4 7.5.8)
      page.assign(12, 0);
      page[0] = 0x0a;
      page[1] = 0x0a;
      // TST 000b, D_SENSE 0 (fixed-format sense), QERR 00b; QUEUE
      // ALGORITHM MODIFIER 1: commands run concurrently on the volume, so
      // overlapping ones may complete in any order.
      if (!changeable) page[3] = 0x10;
      break;
    default:
      break;
  }
  return page;
}

void logical_unit::mode_sense(task& t, bool ten) {
  const std::uint8_t* cdb = t.cdb.data();
  const bool dbd = (cdb[1] & 0x08) != 0;
  const bool llbaa = ten && (cdb[1] & 0x10) != 0;
  const std::uint8_t pc = cdb[2] >> 6;
  const std::uint8_t page_code = cdb[2] & 0x3f;
  const std::uint8_t subpage = cdb[3];
  const std::uint32_t allocation_length = ten ? get16(cdb + 7) : cdb[4];
  if (pc == 3) return fail_later(t, illegal_request(asc::saving_parameters_not_supported));
  const bool changeable = pc == 1;

  std::vector<std::uint8_t> pages;
  if (page_code == 0x3f) {
    if (subpage != 0x00 && subpage != 0xff)
      return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
    for (const std::uint8_t code : {0x08, 0x0a}) {
      const auto p = mode_page(code, changeable);
      pages.insert(pages.end(), p.begin(), p.end());
    }
  } else {
    pages = mode_page(page_code, changeable);
    if (pages.empty() || subpage != 0)
      return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  }

  response r;
  const std::size_t header_bytes = ten ? 8 : 4;
  r.zeros(header_bytes);
  // DPOFUA: FUA is honoured (write, then flush); WP for a write-protected unit.
  const std::uint8_t device_specific = 0x10 | (identity_.write_protected ? 0x80 : 0x00);
  if (!dbd) {
    const std::uint64_t blocks = changeable ? 0 : block_count();
    const std::uint32_t bs = changeable ? 0 : block_size_bytes();
    if (llbaa) {  // long LBA block descriptor, 16 bytes
      r.be(blocks, 8);
      r.zeros(4);
      r.be(bs, 4);
    } else {  // short block descriptor, 8 bytes; a count that does not fit reads FFFFFFFFh
      r.be(std::min<std::uint64_t>(blocks, 0xffffffffu), 4);
      r.u8(0);
      r.be(bs, 3);
    }
  }
  const std::size_t descriptor_bytes = r.size() - header_bytes;
  r.bytes.insert(r.bytes.end(), pages.begin(), pages.end());
  if (ten) {
    r.patch(0, r.size() - 2, 2);  // MODE DATA LENGTH excludes itself
    r.bytes[3] = device_specific;
    r.bytes[4] = llbaa && !dbd ? 0x01 : 0x00;  // LONGLBA
    r.patch(6, descriptor_bytes, 2);
  } else {
    r.bytes[0] = static_cast<std::uint8_t>(r.size() - 1);
    r.bytes[2] = device_specific;
    r.bytes[3] = static_cast<std::uint8_t>(descriptor_bytes);
  }
  if (!set_data_in(t, r.bytes, allocation_length)) t.result = status::busy;
  complete_later(t);
}

void logical_unit::mode_select(task& t, bool ten) {
  const std::uint8_t* cdb = t.cdb.data();
  const bool save = (cdb[1] & 0x01) != 0;
  const std::uint32_t list_bytes = ten ? get16(cdb + 7) : cdb[4];
  if (save)
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));  // nothing is saveable
  if (list_bytes == 0) return complete_later(t);
  if (t.data_out.size() < list_bytes)
    return fail_later(t, illegal_request(asc::invalid_field_in_command_iu));
  const auto* p = reinterpret_cast<const std::uint8_t*>(t.data_out.data());
  const std::size_t header_bytes = ten ? 8 : 4;
  if (list_bytes < header_bytes)
    return fail_later(t, illegal_request(asc::parameter_list_length_error));
  const bool long_lba = ten && (p[4] & 0x01) != 0;
  const std::size_t descriptors_bytes = ten ? get16(p + 6) : p[3];
  if (header_bytes + descriptors_bytes > list_bytes) {
    return fail_later(t, illegal_request(asc::parameter_list_length_error));
  }
  // Block descriptors may only restate the block length.
  const std::size_t descriptor_bytes = long_lba ? 16 : 8;
  if (descriptors_bytes % descriptor_bytes != 0) {
    return fail_later(t, illegal_request(asc::invalid_field_in_parameter_list));
  }
  for (std::size_t at = header_bytes; at < header_bytes + descriptors_bytes;
       at += descriptor_bytes) {
    const std::uint32_t bs =
        long_lba ? get32(p + at + 12) : static_cast<std::uint32_t>(get_be(p + at + 5, 3));
    if (bs != block_size_bytes())
      return fail_later(t, illegal_request(asc::invalid_field_in_parameter_list));
  }
  // Pages may only restate the current values: nothing is changeable.
  for (std::size_t at = header_bytes + descriptors_bytes; at < list_bytes;) {
    if (at + 2 > list_bytes)
      return fail_later(t, illegal_request(asc::parameter_list_length_error));
    const bool subpage_format = (p[at] & 0x40) != 0;
    const std::size_t page_bytes = std::size_t{p[at + 1]} + 2;
    if (at + page_bytes > list_bytes)
      return fail_later(t, illegal_request(asc::parameter_list_length_error));
    const auto current = mode_page(p[at] & 0x3f, false);
    // PS (bit 7 of byte 0) is reserved in MODE SELECT; the rest must match.
    if (subpage_format || current.size() != page_bytes ||
        !std::equal(current.begin() + 1, current.end(), p + at + 1)) {
      return fail_later(t, illegal_request(asc::invalid_field_in_parameter_list));
    }
    at += page_bytes;
  }
  complete_later(t);
}

void logical_unit::report_supported_operation_codes(task& t) {
  const std::uint8_t* cdb = t.cdb.data();
  const bool timeouts = (cdb[2] & 0x80) != 0;  // RCTD
  const std::uint8_t options = cdb[2] & 0x07;
  const std::uint8_t requested_opcode = cdb[3];
  const std::uint16_t requested_service_action = get16(cdb + 4);
  const std::uint32_t allocation_length = get32(cdb + 6);

  // Command timeouts descriptor (SPC-4 6.35.4): no timeouts are known, so
  // both are 0 ("not specified").
  auto timeouts_descriptor = [](response& r) {
    r.be(0x0a, 2);
    r.zeros(10);
  };
  response r;
  if (options == 0) {  // all commands
    r.zeros(4);
    for (const command_info& c : supported_commands) {
      r.u8(c.opcode);
      r.u8(0);
      r.be(c.service_action, 2);
      r.u8(0);
      r.u8((timeouts ? 0x02 : 0x00) | (c.has_service_action ? 0x01 : 0x00));  // CTDP, SERVACTV
      r.be(c.cdb_bytes, 2);
      if (timeouts) timeouts_descriptor(r);
    }
    r.patch(0, r.size() - 4, 4);
  } else if (options <= 3) {  // one command
    const bool has_service_actions = opcode_has_service_actions(requested_opcode);
    // 001b names an opcode without service actions; 010b one with them.
    if ((options == 1 && has_service_actions) ||
        (options == 2 && !has_service_actions &&
         find_command(requested_opcode, std::nullopt) != nullptr)) {
      return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
    }
    const command_info* c = nullptr;
    if (options == 2 || (options == 3 && has_service_actions)) {
      c = has_service_actions ? find_command(requested_opcode, requested_service_action) : nullptr;
    } else {
      c = find_command(requested_opcode, std::nullopt);
    }
    r.u8(0);
    if (c == nullptr) {
      r.u8(0x01);  // SUPPORT 001b: not supported
      r.be(0, 2);
    } else {
      r.u8((timeouts ? 0x80 : 0x00) | 0x03);  // CTDP, SUPPORT 011b: supported as the standard says
      r.be(c->cdb_bytes, 2);
      r.bytes.insert(r.bytes.end(), c->usage.begin(), c->usage.begin() + c->cdb_bytes);
      if (timeouts) timeouts_descriptor(r);
    }
  } else {
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  }
  if (!set_data_in(t, r.bytes, allocation_length)) t.result = status::busy;
  complete_later(t);
}

void logical_unit::report_target_port_groups(task& t) {
  const std::uint8_t format = t.cdb[1] >> 5;  // 000b length only, 001b extended header
  const std::uint32_t allocation_length = get32(t.cdb.data() + 6);
  if (format > 1) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  response r;
  r.zeros(4);
  if (format == 1) {
    r.u8(0x10);  // FORMAT TYPE 001b
    r.u8(0);     // IMPLICIT TRANSITION TIME: none happen
    r.zeros(2);
  }
  // One group, this port, active/optimized: the only state a unit has
  // until controllers fail over between each other.
  r.u8(0x00);  // PREF 0, ASYMMETRIC ACCESS STATE 0h active/optimized
  r.u8(0x01);  // AO_SUP
  r.be(identity_.port_group, 2);
  r.u8(0);
  r.u8(0);  // STATUS CODE: no status available
  r.u8(0);
  r.u8(1);  // TARGET PORT COUNT
  r.zeros(2);
  r.be(identity_.relative_port, 2);
  r.patch(0, r.size() - 4, 4);
  if (!set_data_in(t, r.bytes, allocation_length)) t.result = status::busy;
  complete_later(t);
}

void logical_unit::start_stop_unit(task& t) {
  // A volume has no motor and no medium: START and the power conditions
  // change nothing. LOEJ (looked at only with POWER CONDITION 0h, SBC-3
  // 5.25) loads or ejects a removable medium, which this unit does not have
  // (RMB 0 in INQUIRY): refused, as a conformance suite expects.
  const std::uint8_t power_condition = t.cdb[4] >> 4;
  const bool load_eject = (t.cdb[4] & 0x02) != 0;
  if (power_condition == 0 && load_eject)
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  complete_later(t);
}

void logical_unit::read_defect_data(task& t, bool twelve) {
  // A volume has no defect list: a bad sector is remapped below it (RAID
  // rewrites it from redundancy). The answer is the header of an empty
  // list; PLISTV and GLISTV say that the lists asked for are there (empty).
  const std::uint8_t* cdb = t.cdb.data();
  // REQ_PLIST, REQ_GLIST and DEFECT LIST FORMAT
  const std::uint8_t request = twelve ? cdb[1] : cdb[2];
  const std::uint32_t allocation_length = twelve ? get32(cdb + 6) : get16(cdb + 7);
  const std::uint8_t format = request & 0x07;
  // 000b-101b are SBC-3's address descriptor formats (short and long block,
  // bytes from index, physical sector, and the extended forms of the last
  // two): an empty list is the same in each, so it is returned in the one
  // asked for. 110b (vendor specific) and 111b (reserved) are formats this
  // unit does not have: SBC-3 5.13 has the list returned in a format of the
  // unit's choosing (short block), then RECOVERED ERROR, DEFECT LIST NOT FOUND.
  // The ADDRESS DESCRIPTOR INDEX of the 12-byte form is past the end of an
  // empty list whatever it is.
  const bool known_format = format <= 0x05;
  response r;
  r.u8(0);
  r.u8((request & 0x18) | (known_format ? format : 0x00));
  if (twelve) {
    r.be(0, 2);  // GENERATION CODE: 0, not reported
    r.be(0, 4);  // DEFECT LIST LENGTH
  } else {
    r.be(0, 2);  // DEFECT LIST LENGTH
  }
  if (!set_data_in(t, r.bytes, allocation_length)) {
    t.result = status::busy;
  } else if (!known_format) {
    // The header goes with the CHECK CONDITION, as a read's good prefix does.
    set_check_condition(t, make_sense(sense_key::recovered_error, asc::defect_list_not_found));
  }
  complete_later(t);
}

// ---------------------------------------------------------------------------
// Commands that do device I/O

namespace {

// The alignment buffers given to the volume need: its own, and never less
// than aligned_buffer's default.
std::size_t buffer_alignment(const device::block_device& volume) noexcept {
  return std::max<std::size_t>(4096, volume.geometry().buffer_alignment_bytes);
}

bool aligned(const void* p, std::size_t alignment) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// The first `bytes` of `data_out`, where the volume can write from: in
// place when aligned for it, else copied into `bounce`.
std::byte* writable_source(std::span<std::byte> data_out, std::size_t bytes, const device::block_device& volume,
                           device::aligned_buffer& bounce) {
  std::byte* source = data_out.data();
  if (aligned(source, volume.geometry().buffer_alignment_bytes)) return source;
  bounce = device::aligned_buffer(bytes, buffer_alignment(volume));
  std::memcpy(bounce.data(), source, bytes);
  return bounce.data();
}

bool in_range(std::uint64_t lba, std::uint64_t blocks, std::uint64_t capacity_blocks) noexcept {
  // Written so that a huge lba or count cannot overflow the sum.
  return lba <= capacity_blocks && blocks <= capacity_blocks - lba;
}

}  // namespace

std::uint64_t logical_unit::within_expected_transfer(task& t, std::uint64_t blocks) const noexcept {
  // Both bounded by max_transfer_bytes already, so they fit 32 bits.
  const auto described = static_cast<std::uint32_t>(blocks * block_size_bytes());
  t.data_out_described_bytes = described;
  if (t.expected_transfer_bytes >= described) return blocks;
  return t.expected_transfer_bytes / block_size_bytes();
}

void logical_unit::read_write(task& t, bool write, std::uint64_t lba, std::uint64_t blocks,
                              bool fua) {
  if (!in_range(lba, blocks, block_count()))
    return fail_later(t, illegal_request(asc::lba_out_of_range));
  if (blocks > max_transfer_blocks())
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  if (write) blocks = within_expected_transfer(t, blocks);
  if (blocks == 0) return complete_later(t);  // SBC-3: no blocks, not an error
  const std::size_t bytes = blocks * block_size_bytes();
  const std::size_t alignment = buffer_alignment(volume_);

  std::byte* data = nullptr;
  device::aligned_buffer bounce;
  if (write) {
    if (t.data_out.size() < bytes)
      return fail_later(t, illegal_request(asc::invalid_field_in_command_iu));
    data = writable_source(t.data_out, bytes, volume_, bounce);
  } else {
    // A transport that reuses its tasks keeps their data_in: reuse it.
    if (t.data_in.size() < bytes || !aligned(t.data_in.data(), alignment)) {
      t.data_in = device::aligned_buffer(bytes, alignment);
    }
    data = t.data_in.data();
  }

  command& c = acquire();
  c.t = &t;
  c.lba = lba;
  c.returns_data = !write;
  c.bounce = std::move(bounce);
  c.lock = write ? command::access::write : command::access::read;
  c.locked = command::range{lba, blocks};
  c.add_step(write ? device::op::write : device::op::read, data, lba, blocks, piece_blocks_);
  // FUA: write, then flush, which makes durable every write completed
  // before it (block_device.h). Heavier than a per-request FUA, which the
  // request type does not have; correct.
  if (write && fua) c.add_step(device::op::flush, nullptr, 0, 1, 1);
  start(c);
}

void logical_unit::verify(task& t, bool write, std::uint64_t lba, std::uint64_t blocks,
                          std::uint8_t bytchk) {
  // BYTCHK (SBC-3 5.30): 00b medium verification only, 01b compare with
  // the Data-Out blocks, 11b compare each block with the one Data-Out
  // block (VERIFY only), 10b reserved.
  if (bytchk == 2 || (write && bytchk == 3))
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  if (!in_range(lba, blocks, block_count()))
    return fail_later(t, illegal_request(asc::lba_out_of_range));
  if (blocks > max_transfer_blocks())
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  if (write) blocks = within_expected_transfer(t, blocks);
  if (blocks == 0) return complete_later(t);
  const std::uint32_t bs = block_size_bytes();
  const std::size_t bytes = blocks * bs;
  const std::size_t alignment = buffer_alignment(volume_);
  const std::size_t needed_bytes = write || bytchk == 1 ? bytes : bytchk == 3 ? bs : 0;
  if (t.data_out.size() < needed_bytes)
    return fail_later(t, illegal_request(asc::invalid_field_in_command_iu));

  device::aligned_buffer bounce;
  std::byte* source = write ? writable_source(t.data_out, bytes, volume_, bounce) : t.data_out.data();
  // Medium verification reads the blocks back: that is what finds a latent
  // error, which "check the range" alone would not.
  device::aligned_buffer scratch(bytes, alignment);

  command& c = acquire();
  c.t = &t;
  c.lba = lba;
  c.bounce = std::move(bounce);
  c.scratch = std::move(scratch);
  c.compare = bytchk == 1   ? command::comparison::whole
              : bytchk == 3 ? command::comparison::each_block
                            : command::comparison::none;
  c.expected = std::span<const std::byte>(t.data_out.data(), needed_bytes);
  c.lock = write ? command::access::write : command::access::read;
  c.locked = command::range{lba, blocks};
  if (write) c.add_step(device::op::write, source, lba, blocks, piece_blocks_);
  c.add_step(device::op::read, c.scratch.data(), lba, blocks, piece_blocks_);
  start(c);
}

void logical_unit::synchronize_cache(task& t, std::uint64_t lba, std::uint64_t blocks) {
  // The volume flushes whole; the range only has to be valid (0 blocks:
  // to the end). IMMED is ignored: status after the flush is what IMMED 0
  // asks for, and is no less correct for IMMED 1.
  if (!in_range(lba, blocks, block_count()))
    return fail_later(t, illegal_request(asc::lba_out_of_range));
  command& c = acquire();
  c.t = &t;
  c.add_step(device::op::flush, nullptr, 0, 1, 1);
  start(c);
}

void logical_unit::unmap(task& t) {
  if (!identity_.thin_provisioned)
    return fail_later(t, illegal_request(asc::invalid_command_operation_code));
  if ((t.cdb[1] & 0x01) != 0)
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));  // ANCHOR
  const std::uint32_t list_bytes = get16(t.cdb.data() + 7);
  if (list_bytes == 0) return complete_later(t);  // SBC-3 5.28: not an error
  if (t.data_out.size() < list_bytes)
    return fail_later(t, illegal_request(asc::invalid_field_in_command_iu));
  if (list_bytes < 8) return fail_later(t, illegal_request(asc::parameter_list_length_error));
  const auto* p = reinterpret_cast<const std::uint8_t*>(t.data_out.data());
  // The descriptors the list holds: what the header says, unless the list
  // is shorter (as Linux-IO reads it); a partial descriptor is ignored.
  const std::size_t descriptor_count = std::min<std::size_t>(get16(p + 2), list_bytes - 8) / 16;
  if (descriptor_count > max_unmap_descriptors) {
    return fail_later(t, illegal_request(asc::invalid_field_in_parameter_list));
  }
  std::vector<command::range> ranges;
  ranges.reserve(descriptor_count);
  std::uint64_t total_blocks = 0;
  // Every descriptor is checked before any is acted on: a bad one fails the
  // command with nothing unmapped.
  for (std::size_t i = 0; i < descriptor_count; ++i) {
    const std::uint8_t* d = p + 8 + 16 * i;
    const std::uint64_t lba = get64(d);
    const std::uint32_t blocks = get32(d + 8);
    if (!in_range(lba, blocks, block_count()))
      return fail_later(t, illegal_request(asc::lba_out_of_range));
    total_blocks += blocks;
    if (blocks > 0) ranges.push_back({lba, blocks});
  }
  if (total_blocks > max_unmap_bytes / block_size_bytes()) {
    return fail_later(t, illegal_request(asc::invalid_field_in_parameter_list));
  }
  if (ranges.empty()) return complete_later(t);

  command& c = acquire();
  c.t = &t;
  c.ranges.swap(ranges);
  c.lock = command::access::write;  // the ranges written are c.ranges
  command::step& s =
      c.add_step(device::op::discard, nullptr, 0, 0, std::numeric_limits<std::uint64_t>::max());
  s.ranges = c.ranges.data();
  s.range_count = c.ranges.size();
  start(c);
}

void logical_unit::write_same(task& t, std::uint64_t lba, std::uint64_t blocks, bool unmap_bit,
                              bool ndob) {
  // 0 blocks: from lba to the last LBA (SBC-4 5.49; WSNZ is 0), so lba must
  // exist. The range is then held to MAXIMUM WRITE SAME LENGTH like any
  // other, which is what libiscsi's WriteSame 0blocks tests expect: GOOD
  // up to it from the end, INVALID FIELD IN CDB past it.
  if (blocks == 0) {
    if (lba >= block_count()) return fail_later(t, illegal_request(asc::lba_out_of_range));
    blocks = block_count() - lba;
  }
  if (!in_range(lba, blocks, block_count()))
    return fail_later(t, illegal_request(asc::lba_out_of_range));
  const std::uint32_t bs = block_size_bytes();
  if (blocks > max_write_same_bytes / bs)
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  // Exactly one block of Data-Out (none with NDOB): a longer one means the
  // initiator and this unit disagree about the command, and libiscsi's
  // conformance tests expect it refused.
  if (!ndob && t.data_out.size() != bs)
    return fail_later(t, illegal_request(asc::invalid_field_in_command_iu));
  const std::span<const std::byte> block =
      ndob ? std::span<const std::byte>() : t.data_out.first(bs);
  const bool zeros = ndob || all_zero(block);

  // UNMAP asks to deallocate, and a thin unit does, whatever the block
  // holds: the blocks then read as zeros (LBPRZ), as Linux-IO does and as
  // libiscsi's WriteSame UNMAP tests require (they send a block of FFh and
  // read zeros back). Without UNMAP the block is written (the initiator
  // wants the blocks kept allocated, as for Linux's write-zeroes with
  // REQ_NOUNMAP), and a fully provisioned unit always writes it.
  if (unmap_bit && identity_.thin_provisioned) {
    command& c = acquire();
    c.t = &t;
    c.lock = command::access::write;
    c.locked = command::range{lba, blocks};
    c.add_step(device::op::discard, nullptr, lba, blocks,
               std::numeric_limits<std::uint64_t>::max());
    start(c);
    return;
  }
  // One buffer holds the block repeated for one piece; every piece writes
  // from it.
  const std::uint64_t pattern_blocks = std::min(blocks, piece_blocks_);
  device::aligned_buffer pattern(pattern_blocks * bs, buffer_alignment(volume_));
  if (!zeros) {
    for (std::uint64_t i = 0; i < pattern_blocks; ++i)
      std::memcpy(pattern.data() + i * bs, block.data(), bs);
  }
  command& c = acquire();
  c.t = &t;
  c.lock = command::access::write;
  c.locked = command::range{lba, blocks};
  c.scratch = std::move(pattern);
  command::step& s = c.add_step(device::op::write, c.scratch.data(), lba, blocks, piece_blocks_);
  s.repeat = true;
  start(c);
}

void logical_unit::compare_and_write(task& t) {
  // SBC-3 5.2. Data-Out: N blocks to compare with the medium, then N blocks
  // to write if they all match. The range interlock (start()) keeps every
  // other write off the range from before the read until after the write,
  // which is what makes it atomic (VMware ATS locks VMFS with it).
  const std::uint8_t* cdb = t.cdb.data();
  if ((cdb[1] >> 5) != 0)  // WRPROTECT: no protection information here
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  const std::uint64_t lba = get64(cdb + 2);
  const std::uint32_t blocks = cdb[13];
  const bool fua = (cdb[1] & 0x08) != 0;
  const std::size_t longest_bytes = std::size_t{max_compare_and_write_blocks} * block_size_bytes();
  // More Data-Out than the longest COMPARE AND WRITE carries means more
  // blocks than MAXIMUM COMPARE AND WRITE LENGTH, which the 1-byte field
  // cannot hold (initiators let 256 wrap to 0, libiscsi among them):
  // refused as a NUMBER OF LOGICAL BLOCKS over the limit is.
  if (blocks > max_compare_and_write_blocks || t.data_out.size() > 2 * longest_bytes)
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  if (!in_range(lba, blocks, block_count()))
    return fail_later(t, illegal_request(asc::lba_out_of_range));
  // No blocks: nothing read, compared or written, and not an error (any
  // Data-Out ignored, as other commands ignore extra Data-Out).
  if (blocks == 0) return complete_later(t);
  const std::size_t bytes = std::size_t{blocks} * block_size_bytes();
  // Exactly 2N blocks, where other writes ignore extra Data-Out: an
  // initiator that sent more meant a different N, and taking the second
  // half from the wrong place would write its compare data.
  if (t.data_out.size() != 2 * bytes)
    return fail_later(t, illegal_request(asc::invalid_field_in_command_iu));

  device::aligned_buffer bounce;
  std::byte* source = writable_source(t.data_out.subspan(bytes), bytes, volume_, bounce);
  device::aligned_buffer scratch(bytes, buffer_alignment(volume_));

  command& c = acquire();
  c.t = &t;
  c.lba = lba;
  c.bounce = std::move(bounce);
  c.scratch = std::move(scratch);
  c.lock = command::access::exclusive;
  c.locked = command::range{lba, blocks};
  c.between_steps = command::merge::compare;
  c.expected = std::span<const std::byte>(t.data_out.data(), bytes);
  c.add_step(device::op::read, c.scratch.data(), lba, blocks, piece_blocks_);
  c.add_step(device::op::write, source, lba, blocks, piece_blocks_);
  if (fua) c.add_step(device::op::flush, nullptr, 0, 1, 1);
  start(c);
}

void logical_unit::orwrite(task& t) {
  // ORWRITE(16), SBC-3 5.9: read the blocks, OR the Data-Out into them,
  // write them back; one operation under the range interlock, like COMPARE
  // AND WRITE, or a concurrent write between the read and the write would be
  // undone.
  const std::uint8_t* cdb = t.cdb.data();
  if ((cdb[1] >> 5) != 0)  // ORPROTECT
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  const std::uint64_t lba = get64(cdb + 2);
  const std::uint64_t blocks = get32(cdb + 10);
  const bool fua = (cdb[1] & 0x08) != 0;
  if (!in_range(lba, blocks, block_count()))
    return fail_later(t, illegal_request(asc::lba_out_of_range));
  if (blocks > max_transfer_blocks())
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  if (blocks == 0) return complete_later(t);
  const std::size_t bytes = blocks * block_size_bytes();
  if (t.data_out.size() < bytes)
    return fail_later(t, illegal_request(asc::invalid_field_in_command_iu));
  // The blocks are read into, merged in and written from one buffer.
  device::aligned_buffer scratch(bytes, buffer_alignment(volume_));

  command& c = acquire();
  c.t = &t;
  c.lba = lba;
  c.scratch = std::move(scratch);
  c.lock = command::access::exclusive;
  c.locked = command::range{lba, blocks};
  c.between_steps = command::merge::bitwise_or;
  c.expected = std::span<const std::byte>(t.data_out.data(), bytes);
  c.add_step(device::op::read, c.scratch.data(), lba, blocks, piece_blocks_);
  c.add_step(device::op::write, c.scratch.data(), lba, blocks, piece_blocks_);
  if (fua) c.add_step(device::op::flush, nullptr, 0, 1, 1);
  start(c);
}

void logical_unit::write_atomic(task& t) {
  // WRITE ATOMIC(16), SBC-4 5.48. What "atomic" means here:
  // - against other commands: the range interlock (start()) holds back
  //   every write that overlaps it (WRITE, WRITE SAME, UNMAP, COMPARE AND
  //   WRITE, ORWRITE, another WRITE ATOMIC, an EXTENDED COPY's writes) and
  //   every read that does, and it waits for those already running. So no
  //   command sees or leaves a mix of its blocks and others': a read
  //   returns them all old or all new, and overlapping writes land wholly
  //   before or wholly after it.
  // - against power loss or a device failure: only as much as one device
  //   request is. The blocks go down as ONE request (so its length is
  //   bounded by max_atomic_transfer_blocks()), but block_device.h promises
  //   nothing about a write cut short: which of its blocks reached the
  //   medium is the volume's business (a RAID stripe, a disk sector, the
  //   fault device's torn writes). With FUA, a flush follows, as for WRITE.
  const std::uint8_t* cdb = t.cdb.data();
  if ((cdb[1] >> 5) != 0)  // WRPROTECT: no protection information here
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  const std::uint64_t lba = get64(cdb + 2);
  const std::uint16_t atomic_boundary = get16(cdb + 10);
  const std::uint32_t blocks = get16(cdb + 12);
  const bool fua = (cdb[1] & 0x08) != 0;
  // No atomic boundaries: MAXIMUM ATOMIC BOUNDARY SIZE is 0.
  if (atomic_boundary != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  // The range before the length: libiscsi's BeyondEol test sends up to
  // 512 blocks past the end and expects LBA OUT OF RANGE for each.
  if (!in_range(lba, blocks, block_count()))
    return fail_later(t, illegal_request(asc::lba_out_of_range));
  if (blocks > max_atomic_transfer_blocks())
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  if (blocks == 0) return complete_later(t);  // SBC-4: no blocks, not an error
  const std::size_t bytes = std::size_t{blocks} * block_size_bytes();
  // All of it or nothing: unlike WRITE, no prefix is written when less
  // arrived than the CDB describes.
  if (t.data_out.size() < bytes)
    return fail_later(t, illegal_request(asc::invalid_field_in_command_iu));
  device::aligned_buffer bounce;
  std::byte* source = writable_source(t.data_out, bytes, volume_, bounce);

  command& c = acquire();
  c.t = &t;
  c.lba = lba;
  c.bounce = std::move(bounce);
  c.lock = command::access::atomic;
  c.locked = command::range{lba, blocks};
  c.add_step(device::op::write, source, lba, blocks, blocks);  // one piece: one request
  if (fua) c.add_step(device::op::flush, nullptr, 0, 1, 1);
  start(c);
}

void logical_unit::pre_fetch(task& t, std::uint64_t lba, std::uint64_t blocks) {
  // 0 blocks means from lba to the last LBA (SBC-3 5.11): lba must exist.
  const bool valid = blocks == 0 ? lba < block_count() : in_range(lba, blocks, block_count());
  if (!valid) return fail_later(t, illegal_request(asc::lba_out_of_range));
  // GOOD, not CONDITION MET: SBC-3 answers CONDITION MET when the blocks
  // were (IMMED 0) or will be (IMMED 1) put in a cache with room for them,
  // and nothing is cached for the initiator: the unit keeps no cache, and
  // the volume's (the tiering read cache on SSD) sits below block_device,
  // which cannot be asked to fill it. IMMED changes nothing either way.
  //
  // HOOK for that cache: once block_device can carry a prefetch hint (an
  // io_class::background read the volume may serve into its cache, say),
  // send it here for [lba, lba + blocks or to the end) and answer CONDITION
  // MET when the volume says the whole range fits; with IMMED 0, after the
  // fill.
  complete_later(t);
}

void logical_unit::get_lba_status(task& t) {
  // SBC-3 5.20: descriptors of runs of blocks in one provisioning state,
  // the first starting at STARTING LBA. The volume says what is allocated
  // (block_device::allocation_at); a fully provisioned unit reports
  // everything mapped, whatever the volume does below it.
  const std::uint8_t* cdb = t.cdb.data();
  const std::uint64_t start_lba = get64(cdb + 2);
  const std::uint32_t allocation_length = get32(cdb + 10);
  if (start_lba >= block_count()) return fail_later(t, illegal_request(asc::lba_out_of_range));
  // As many descriptors as the allocation length holds, and at least one:
  // the PARAMETER DATA LENGTH then tells a short buffer how much there is.
  const std::size_t wanted =
      std::clamp<std::size_t>(allocation_length > 8 ? (allocation_length - 8) / 16 : 0, 1,
                              max_lba_status_descriptors);
  // Queries per command, in all: a device that answers in small runs (one
  // extent at a time) gets fewer descriptors back, never a long scan.
  std::size_t queries_left = 32 * max_lba_status_descriptors;
  auto query = [&](std::uint64_t at, std::uint64_t max_blocks) {
    --queries_left;
    if (!identity_.thin_provisioned)
      return device::allocation_run{device::allocation::mapped, max_blocks};
    device::allocation_run run = volume_.allocation_at(at, max_blocks);
    // A device that answers out of bounds must not stall or overrun the scan.
    run.block_count = std::clamp<std::uint64_t>(run.block_count, 1, max_blocks);
    return run;
  };

  response r;
  r.zeros(8);  // PARAMETER DATA LENGTH, patched below; reserved
  std::uint64_t lba = start_lba;
  for (std::size_t n = 0; n < wanted && lba < block_count() && queries_left > 0; ++n) {
    // NUMBER OF LOGICAL BLOCKS is 4 bytes: a longer run takes several descriptors.
    const std::uint64_t limit = std::min<std::uint64_t>(block_count() - lba, 0xffffffffu);
    device::allocation_run run = query(lba, limit);
    // Runs may end before the state changes: join those that follow in the same state.
    while (run.block_count < limit && queries_left > 0) {
      const device::allocation_run next = query(lba + run.block_count, limit - run.block_count);
      if (next.state != run.state) break;
      run.block_count += next.block_count;
    }
    r.be(lba, 8);
    r.be(run.block_count, 4);
    // PROVISIONING STATUS: 0h mapped, 1h deallocated; never 2h anchored,
    // since nothing here anchors (ANC_SUP 0).
    r.u8(run.state == device::allocation::deallocated ? 0x01 : 0x00);
    r.zeros(3);
    lba += run.block_count;
  }
  r.patch(0, r.size() - 4, 4);
  if (!set_data_in(t, r.bytes, allocation_length)) t.result = status::busy;
  complete_later(t);
}

// ---------------------------------------------------------------------------
// The piece engine

logical_unit::command& logical_unit::acquire() {
  command* c = nullptr;
  if (free_commands_.empty()) {
    free_commands_.reserve(commands_.size() + 1);  // so that release() cannot throw
    commands_.push_back(std::make_unique<command>());
    c = commands_.back().get();
    c->owner = this;
    for (command::piece& p : c->pieces) p.req.bind<&command::on_piece_done>(c);
  } else {
    c = free_commands_.back();
    free_commands_.pop_back();
  }
  ++in_flight_;
  return *c;
}

void logical_unit::release(command& c) noexcept {
  c.t = nullptr;
  c.lba = 0;
  c.returns_data = false;
  c.compare = command::comparison::none;
  c.expected = {};
  c.step_count = 0;
  c.step_index = 0;
  c.ranges.clear();
  // Buffers go back at once, so that idle slots pin no memory.
  c.scratch = device::aligned_buffer();
  c.bounce = device::aligned_buffer();
  c.locating = false;
  c.first_failure = {};
  c.piece_failure = {};
  c.between_steps = command::merge::none;
  c.miscompare_offset.reset();
  if (c.lock == command::access::exclusive || c.lock == command::access::atomic)
    --exclusive_commands_;
  if (c.lock == command::access::atomic) --atomic_commands_;
  c.lock = command::access::none;
  c.locked = {};
  c.running = false;
  free_commands_.push_back(&c);
  --in_flight_;
  // Its range is free: commands that waited for it may go.
  if (waiting_head_ != nullptr) admit_waiting();
}

// ---------------------------------------------------------------------------
// The range interlock
//
// COMPARE AND WRITE and ORWRITE (exclusive commands) need their range to
// themselves from their read to their write; every other command that
// writes (WRITE, WRITE AND VERIFY, WRITE SAME, UNMAP) must stay off it
// meanwhile. WRITE ATOMIC (atomic) needs it from reads as well: a read
// overlapping it must see its blocks all old or all new. Two commands
// conflict when their ranges overlap and either is exclusive or atomic
// while the other writes, or either is atomic while the other reads:
// plain writes never conflict with each other, nor reads with anything
// else (they run concurrently, as before). A command waits if it conflicts
// with one that is running or with one that waits ahead of it, so that
// conflicting commands run in arrival order and a stream of writes (or of
// reads) cannot starve a COMPARE AND WRITE (or a WRITE ATOMIC).
//
// Cost: a write checks one counter and goes while no exclusive or atomic
// command is running or waiting; a read checks another and goes while no
// WRITE ATOMIC is. Only then are the running commands scanned (the
// per-command slots: as many as the peak number of commands in flight).
// Waiting commands are linked through their own state, so nothing is
// allocated.

namespace {

bool overlap(std::uint64_t a_lba, std::uint64_t a_blocks, std::uint64_t b_lba,
             std::uint64_t b_blocks) noexcept {
  return a_lba < b_lba + b_blocks && b_lba < a_lba + a_blocks;
}

}  // namespace

void logical_unit::start(command& c) {
  if (c.lock == command::access::exclusive || c.lock == command::access::atomic)
    ++exclusive_commands_;
  if (c.lock == command::access::atomic) ++atomic_commands_;
  // Most commands find nothing that could conflict with them.
  const bool may_conflict = c.lock == command::access::read
                                ? atomic_commands_ != 0
                                : c.lock != command::access::none && exclusive_commands_ != 0;
  if (!may_conflict || !blocked(c)) return run(c);
  c.next_waiting = nullptr;
  (waiting_tail_ != nullptr ? waiting_tail_->next_waiting : waiting_head_) = &c;
  waiting_tail_ = &c;
}

bool logical_unit::blocked(const command& c) const noexcept {
  auto conflict = [&c](const command& other) {
    if (!command::conflicting(c.lock, other.lock)) return false;
    for (const command::range& a : c.locked_ranges()) {
      for (const command::range& b : other.locked_ranges()) {
        if (overlap(a.lba, a.block_count, b.lba, b.block_count)) return true;
      }
    }
    return false;
  };
  for (const auto& other : commands_) {
    if (other->running && other->lock != command::access::none && conflict(*other)) return true;
  }
  // Those waiting ahead of it: all of them for a command not yet queued.
  for (const command* w = waiting_head_; w != nullptr && w != &c; w = w->next_waiting) {
    if (conflict(*w)) return true;
  }
  return false;
}

void logical_unit::admit_waiting() noexcept {
  command* previous = nullptr;
  for (command* w = waiting_head_; w != nullptr;) {
    command* next = w->next_waiting;
    if (blocked(*w)) {
      previous = w;
    } else {
      (previous != nullptr ? previous->next_waiting : waiting_head_) = next;
      if (waiting_tail_ == w) waiting_tail_ = previous;
      w->next_waiting = nullptr;
      run(*w);  // only submits: nothing completes, so the list stays as it is
    }
    w = next;
  }
}

// ---------------------------------------------------------------------------

void logical_unit::run(command& c) {
  assert(c.step_count > 0);
  c.running = true;
  c.step_index = 0;
  c.range_index = 0;
  c.next_lba = c.steps[0].ranges[0].lba;
  c.next_sequence = 0;
  c.in_flight = 0;
  c.stopped = false;
  // Every step has at least one block to move (or is a flush), so this
  // submits at least one request: nothing completes inside execute().
  issue(c);
}

void logical_unit::issue(command& c) {
  const command::step& s = c.steps[c.step_index];
  const std::uint32_t bs = block_size_bytes();
  while (!c.stopped && c.in_flight < max_pieces_in_flight && c.range_index < s.range_count) {
    const command::range& r = s.ranges[c.range_index];
    const std::uint64_t end_lba = r.lba + r.block_count;
    const std::uint64_t n = std::min(s.piece_blocks, end_lba - c.next_lba);
    command::piece* p = nullptr;
    for (command::piece& candidate : c.pieces) {
      if (!candidate.busy) {
        p = &candidate;
        break;
      }
    }
    p->busy = true;
    p->sequence = c.next_sequence++;
    device::request& req = p->req;
    req.operation = s.operation;
    req.priority = device::io_class::foreground;
    req.result = {};
    if (s.operation == device::op::flush) {
      req.lba = 0;
      req.block_count = 0;
      req.buffers = {};
    } else {
      req.lba = c.next_lba;
      req.block_count = n;
      if (s.data != nullptr) {
        const std::uint64_t offset_bytes = s.repeat ? 0 : (c.next_lba - s.ranges[0].lba) * bs;
        p->segment = iovec{s.data + offset_bytes, n * bs};
        req.buffers = {&p->segment, 1};
      } else {
        req.buffers = {};
      }
    }
    c.next_lba += n;
    if (c.next_lba == end_lba && ++c.range_index < s.range_count)
      c.next_lba = s.ranges[c.range_index].lba;
    ++c.in_flight;
    volume_.submit(req);  // never completes inside submit: the loop goes on
  }
  if (c.in_flight == 0) step_done(c);
}

void logical_unit::on_piece_done(device::request& req) noexcept {
  auto& c = *static_cast<command*>(req.context);
  command::piece* p = nullptr;
  for (command::piece& candidate : c.pieces) {
    if (&candidate.req == &req) p = &candidate;
  }
  p->busy = false;
  --c.in_flight;
  if (req.result) {
    c.stopped = true;
    command::failure& f = c.first_failure;
    if (!f.error || p->sequence < f.sequence) {
      f.error = req.result;
      f.operation = req.operation;
      f.lba = req.lba;
      f.block_count = req.block_count;
      f.data = req.buffers.empty() ? nullptr : static_cast<std::byte*>(req.buffers[0].iov_base);
      f.sequence = p->sequence;
    }
  }
  issue(c);
}

void logical_unit::step_done(command& c) {
  command::failure& f = c.first_failure;
  if (f.error) {
    // A read piece failed on the medium: read it again in the smallest
    // pieces the buffer alignment allows, to report the first bad LBA
    // itself (and to fill the good blocks before it), as a disk does.
    if (!c.locating && f.operation == device::op::read && f.error == errc::media_error &&
        f.block_count > align_blocks_) {
      c.locating = true;
      c.piece_failure = f;
      c.steps[c.step_index] = command::step{};
      command::step& s = c.steps[c.step_index];
      s.operation = device::op::read;
      s.data = c.piece_failure.data;
      s.piece_blocks = align_blocks_;
      s.single = command::range{c.piece_failure.lba, c.piece_failure.block_count};
      s.ranges = &s.single;
      s.range_count = 1;
      const std::uint64_t sequence_base = c.piece_failure.sequence;
      f = {};
      c.range_index = 0;
      c.next_lba = s.single.lba;
      c.stopped = false;
      // Keep sequence order meaningful: these pieces all come after the
      // pieces before the failed one, which succeeded.
      c.next_sequence = sequence_base;
      issue(c);
      return;
    }
    return finish(c);  // when locating: the first bad block found
  }
  if (c.locating) {
    // Every block of the failed piece read this time: report the piece.
    f = c.piece_failure;
    return finish(c);
  }
  if (c.step_index == 0 && c.between_steps == command::merge::compare) {
    // COMPARE AND WRITE: the medium, read under the range interlock, against
    // the verify half of the Data-Out. A difference ends the command before
    // anything is written; INFORMATION is its offset into the Data-Out.
    const std::span<const std::byte> medium(c.scratch.data(), c.expected.size());
    const auto [a, b] = std::mismatch(medium.begin(), medium.end(), c.expected.begin());
    if (a != medium.end()) {
      c.miscompare_offset = static_cast<std::uint64_t>(a - medium.begin());
      return finish(c);
    }
  } else if (c.step_index == 0 && c.between_steps == command::merge::bitwise_or) {
    // ORWRITE: the write step writes from the buffer just read into.
    std::byte* medium = c.scratch.data();
    for (std::size_t i = 0; i < c.expected.size(); ++i) medium[i] |= c.expected[i];
  }
  if (++c.step_index < c.step_count) {
    c.range_index = 0;
    c.next_lba = c.steps[c.step_index].ranges[0].lba;
    c.stopped = false;
    issue(c);
    return;
  }
  finish(c);
}

void logical_unit::finish(command& c) noexcept {
  task& t = *c.t;
  const command::failure& f = c.first_failure;
  const std::uint32_t bs = block_size_bytes();
  if (f.error) {
    t.result = status_for(f.error);
    if (t.result == status::check_condition) {
      const bool has_lba = f.operation != device::op::flush;
      t.sense_data = sense_for(f.error, f.operation, has_lba ? std::optional(f.lba) : std::nullopt);
    }
    // Every block before the failed one was read: the transport may send them.
    t.data_in_bytes = c.returns_data && f.operation == device::op::read
                          ? static_cast<std::uint32_t>((f.lba - c.lba) * bs)
                          : 0;
  } else {
    t.result = status::good;
    t.data_in_bytes =
        c.returns_data ? static_cast<std::uint32_t>(c.steps[0].single.block_count * bs) : 0;
    if (c.miscompare_offset) {
      set_check_condition(t, make_sense(sense_key::miscompare, asc::miscompare_during_verify,
                                        c.miscompare_offset));
    }
    if (c.compare != command::comparison::none) {
      // The first byte that differs, as an offset into the verified data
      // (SBC-3: the INFORMATION field of MISCOMPARE DURING VERIFY OPERATION).
      const std::span<const std::byte> medium(c.scratch.data(), c.scratch.size());
      std::optional<std::uint64_t> mismatch_offset;
      if (c.compare == command::comparison::whole) {
        const auto [a, b] = std::mismatch(medium.begin(), medium.end(), c.expected.begin());
        if (a != medium.end()) mismatch_offset = static_cast<std::uint64_t>(a - medium.begin());
      } else {
        for (std::size_t at = 0; at < medium.size() && !mismatch_offset; at += bs) {
          const auto block = medium.subspan(at, bs);
          const auto [a, b] = std::mismatch(block.begin(), block.end(), c.expected.begin());
          if (a != block.end())
            mismatch_offset = at + static_cast<std::uint64_t>(a - block.begin());
        }
      }
      if (mismatch_offset) {
        set_check_condition(
            t, make_sense(sense_key::miscompare, asc::miscompare_during_verify, mismatch_offset));
      }
    }
  }
  release(c);
  t.on_complete(t);  // last: it may destroy this unit
}

}  // namespace strata::scsi
