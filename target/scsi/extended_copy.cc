// The copy manager: EXTENDED COPY(LID1) and RECEIVE COPY RESULTS.
//
// The parameter list is checked whole before anything moves (errors then
// are ILLEGAL REQUEST, SPC-4 6.4.3.2). The segments then run one after the
// other, each in pieces of at most max_transfer_bytes: a READ(16) of the
// piece on the source unit into one buffer, then a WRITE(16) of it on the
// destination unit. Both are ordinary commands of those units, issued to
// their dispatch(): they take the pieces, the range interlock and the error
// mapping of every other read and write, and the unit that runs them counts
// them in its commands in flight. An error while the segments run ends the
// copy in COPY ABORTED, pointing at the segment (SPC-4 6.4.3.3).
//
// One piece of one copy is in flight at a time: a copy moves at most
// copy_limits::max_segment_bytes per segment and holds one buffer of at
// most max_transfer_bytes, which are its bounds.
#include "target/scsi/extended_copy.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstring>
#include <new>

#include "target/scsi/big_endian.h"
#include "target/scsi/logical_unit.h"

namespace strata::scsi {

namespace {

std::unexpected<sense> refuse(additional_sense code) noexcept {
  return std::unexpected(illegal_request(code));
}

bool in_range(std::uint64_t lba, std::uint64_t blocks, std::uint64_t capacity_blocks) noexcept {
  return lba <= capacity_blocks && blocks <= capacity_blocks - lba;
}

constexpr std::uint8_t cscd_type_identification = 0xe4;
constexpr std::uint8_t segment_type_block_to_block = 0x02;
// A block to block segment descriptor's DESCRIPTOR LENGTH: what follows
// its first four bytes.
constexpr std::uint16_t block_segment_length_field = block_segment_descriptor_bytes - 4;

// EXTENDED COPY with more copies than this in flight on a unit is answered
// BUSY (back-pressure; each holds a buffer of up to max_transfer_bytes).
constexpr std::size_t max_concurrent_copies = copy_limits::max_held_results;

std::expected<cscd_descriptor, sense> parse_cscd(const std::uint8_t* d) {
  cscd_descriptor c;
  // Byte 1: LU ID TYPE (reserved in SPC-4) and NUL (obsolete) are ignored;
  // libiscsi's ValidTgtDescr test expects exactly that of an SPC-4 unit.
  c.peripheral_type = d[1] & 0x1f;
  c.code_set = d[4] & 0x0f;
  c.association = (d[5] >> 4) & 0x03;
  c.designator_type = d[5] & 0x0f;
  c.designator_bytes = d[7];
  // The DESIGNATOR field is 20 bytes (bytes 8 to 27).
  if (c.designator_bytes > c.designator.size()) return refuse(asc::invalid_field_in_parameter_list);
  std::memcpy(c.designator.data(), d + 8, c.designator_bytes);
  c.disk_block_bytes = static_cast<std::uint32_t>(get_be(d + 29, 3));
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------
// The parameter list

std::expected<copy_list, sense> parse_copy_list(std::span<const std::uint8_t> p) {
  if (p.size() < copy_list_header_bytes) return refuse(asc::parameter_list_length_error);
  copy_list list;
  list.list_id = p[0];
  const std::uint8_t usage = (p[1] >> 3) & 0x03;
  const std::uint64_t cscd_list_bytes = get_be(&p[2], 2);
  const std::uint64_t segment_list_bytes = get_be(&p[8], 4);
  const std::uint64_t inline_bytes = get_be(&p[12], 4);

  // The lengths first, the lists not fitting before their size against the
  // limit: libiscsi's DescrLimits test sends more descriptors than allowed
  // in a list that is too long, and expects PARAMETER LIST LENGTH ERROR.
  if (copy_list_header_bytes + cscd_list_bytes + segment_list_bytes + inline_bytes > p.size())
    return refuse(asc::parameter_list_length_error);
  if (cscd_list_bytes + segment_list_bytes > copy_limits::max_descriptor_list_bytes)
    return refuse(asc::parameter_list_length_error);
  if (inline_bytes > copy_limits::max_inline_data_bytes)
    return refuse(asc::inline_data_length_exceeded);
  // LIST ID USAGE 01b is reserved; 11b (no list id) requires LIST IDENTIFIER 0.
  if (usage == 0x01 || (usage == 0x03 && list.list_id != 0))
    return refuse(asc::invalid_field_in_parameter_list);
  list.usage = static_cast<list_id_usage>(usage);

  // CSCD descriptors: identification descriptors (E4h) only, 32 bytes each.
  const std::uint8_t* cscds = p.data() + copy_list_header_bytes;
  for (std::uint64_t at = 0; at < cscd_list_bytes; at += cscd_descriptor_bytes) {
    if (list.cscds.size() == copy_limits::max_cscd_descriptors)
      return refuse(asc::too_many_target_descriptors);
    if (cscds[at] != cscd_type_identification)
      return refuse(asc::unsupported_target_descriptor_type_code);
    if (at + cscd_descriptor_bytes > cscd_list_bytes)
      return refuse(asc::parameter_list_length_error);
    auto c = parse_cscd(cscds + at);
    if (!c) return std::unexpected(c.error());
    list.cscds.push_back(*c);
  }

  // Segment descriptors: block to block (02h) only. Each says its length,
  // so a list is walked whatever is in it; the type is checked before the
  // length, so an unsupported type is named as such.
  const std::uint8_t* segments = cscds + cscd_list_bytes;
  for (std::uint64_t at = 0; at < segment_list_bytes;) {
    if (list.segments.size() == copy_limits::max_segment_descriptors)
      return refuse(asc::too_many_segment_descriptors);
    if (at + 4 > segment_list_bytes) return refuse(asc::parameter_list_length_error);
    const std::uint8_t* d = segments + at;
    if (d[0] != segment_type_block_to_block)
      return refuse(asc::unsupported_segment_descriptor_type_code);
    const std::uint64_t length_field = get_be(d + 2, 2);
    if (at + 4 + length_field > segment_list_bytes) return refuse(asc::parameter_list_length_error);
    if (length_field != block_segment_length_field)
      return refuse(asc::invalid_field_in_parameter_list);
    block_segment s;
    s.offset_bytes = static_cast<std::uint32_t>(copy_list_header_bytes + cscd_list_bytes + at);
    // Byte 1: DC and CAT change nothing when both units have one block
    // size (enforced per segment), as every segment is then whole blocks.
    s.source_cscd = static_cast<std::uint16_t>(get_be(d + segment_source_id_at, 2));
    s.destination_cscd = static_cast<std::uint16_t>(get_be(d + segment_destination_id_at, 2));
    s.block_count = static_cast<std::uint16_t>(get_be(d + segment_block_count_at, 2));
    s.source_lba = get_be(d + segment_source_lba_at, 8);
    s.destination_lba = get_be(d + segment_destination_lba_at, 8);
    list.segments.push_back(s);
    at += 4 + length_field;
  }
  return list;
}

sense copy_aborted(additional_sense code, std::uint32_t segment_offset_bytes,
                   std::uint16_t field_at, std::optional<std::uint64_t> residual_blocks) noexcept {
  sense s = make_sense(sense_key::copy_aborted, code, residual_blocks);
  // SPC-4 4.5.2.4.5 segment pointer: SKSV, SD (the field pointer is into
  // the segment descriptor whose offset is in COMMAND-SPECIFIC INFORMATION).
  s.key_specific = std::array<std::uint8_t, 3>{
      0x80 | 0x20, static_cast<std::uint8_t>(field_at >> 8), static_cast<std::uint8_t>(field_at)};
  s.command_specific = segment_offset_bytes;
  return s;
}

// ---------------------------------------------------------------------------
// What the copy manager reports

namespace {

std::uint8_t log2_bytes(std::uint32_t bytes) noexcept {
  std::uint8_t n = 0;
  while (bytes > 1) {
    bytes >>= 1;
    ++n;
  }
  return n;
}

}  // namespace

std::vector<std::uint8_t> copy_operating_parameters(std::uint32_t block_size_bytes) {
  be_writer w;
  w.be(0, 4);  // AVAILABLE DATA, patched below
  w.u8(0x01);  // SNLID: LIST ID USAGE 11b is supported
  w.zeros(3);
  w.be(copy_limits::max_cscd_descriptors, 2);
  w.be(copy_limits::max_segment_descriptors, 2);
  w.be(copy_limits::max_descriptor_list_bytes, 4);
  w.be(copy_limits::max_segment_bytes, 4);
  w.be(copy_limits::max_inline_data_bytes, 4);
  w.be(0, 4);  // HELD DATA LIMIT: no segment type that holds data
  w.be(0, 4);  // MAXIMUM STREAM DEVICE TRANSFER SIZE: no stream devices
  w.zeros(2);
  w.be(max_concurrent_copies, 2);  // TOTAL CONCURRENT COPIES
  w.u8(max_concurrent_copies);     // MAXIMUM CONCURRENT COPIES
  // DATA SEGMENT GRANULARITY: a block; INLINE and HELD DATA GRANULARITY: none.
  w.u8(log2_bytes(block_size_bytes));
  w.u8(0);
  w.u8(0);
  w.zeros(3);
  w.u8(2);  // IMPLEMENTED DESCRIPTOR LIST LENGTH
  w.u8(segment_type_block_to_block);
  w.u8(cscd_type_identification);
  w.patch(0, w.bytes.size() - 4, 4);
  return w.bytes;
}

std::vector<std::uint8_t> third_party_copy_descriptors(std::uint32_t block_size_bytes) {
  be_writer w;
  // Each descriptor: 2-byte type, 2-byte length of what follows, padded to
  // a multiple of 4 bytes (SPC-4 7.8.17.1); in ascending type order.
  auto descriptor = [&w](std::uint16_t type, auto&& body) {
    const std::size_t start = w.bytes.size();
    w.be(type, 2);
    w.be(0, 2);
    body();
    while ((w.bytes.size() - start) % 4 != 0) w.u8(0);
    w.patch(start + 2, w.bytes.size() - start - 4, 2);
  };
  descriptor(0x0001, [&] {  // Supported Commands
    const std::uint8_t commands[] = {
        0x83, 1, 0x00,                    // EXTENDED COPY: LID1
        0x84, 4, 0x00, 0x01, 0x03, 0x04,  // RECEIVE COPY RESULTS: the LID1 service actions
    };
    w.u8(sizeof commands);
    for (const std::uint8_t b : commands) w.u8(b);
  });
  descriptor(0x0004, [&] {  // Parameter Data
    w.zeros(4);
    w.be(copy_limits::max_cscd_descriptors, 2);
    w.be(copy_limits::max_segment_descriptors, 2);
    w.be(copy_limits::max_descriptor_list_bytes, 4);
    w.be(copy_limits::max_inline_data_bytes, 4);
    w.zeros(12);
  });
  descriptor(0x0008, [&] {  // Supported Descriptors
    w.u8(2);
    w.u8(segment_type_block_to_block);
    w.u8(cscd_type_identification);
  });
  descriptor(0x000c, [&] {  // Supported CSCD Descriptor IDs
    w.be(2, 2);
    w.be(cscd_id_copy_manager, 2);
  });
  descriptor(0x8001, [&] {           // General Copy Operations
    w.be(max_concurrent_copies, 4);  // TOTAL CONCURRENT COPIES
    w.be(max_concurrent_copies, 4);  // MAXIMUM IDENTIFIED CONCURRENT COPIES
    w.be(copy_limits::max_segment_bytes, 4);
    w.u8(log2_bytes(block_size_bytes));  // DATA SEGMENT GRANULARITY
    w.u8(0);                             // INLINE DATA GRANULARITY
    w.zeros(18);
  });
  return w.bytes;
}

// ---------------------------------------------------------------------------
// Held results

namespace {

bool same_nexus(const copy_result& r, const i_t_nexus& n) noexcept {
  return r.relative_target_port == n.relative_target_port && r.initiator_port == n.initiator_port;
}

}  // namespace

void copy_results::hold(copy_result r) {
  forget(i_t_nexus{r.initiator_port, r.relative_target_port}, r.list_id);
  if (results_.size() == copy_limits::max_held_results) results_.erase(results_.begin());
  results_.push_back(std::move(r));
}

const copy_result* copy_results::find(const i_t_nexus& n, std::uint8_t list_id) const noexcept {
  for (const copy_result& r : results_) {
    if (r.list_id == list_id && same_nexus(r, n)) return &r;
  }
  return nullptr;
}

void copy_results::forget(const i_t_nexus& n, std::uint8_t list_id) noexcept {
  std::erase_if(results_,
                [&](const copy_result& r) { return r.list_id == list_id && same_nexus(r, n); });
}

void copy_results::forget(const i_t_nexus& n) noexcept {
  std::erase_if(results_, [&](const copy_result& r) { return same_nexus(r, n); });
}

// ---------------------------------------------------------------------------
// The copy, in the unit that received it

struct logical_unit::copy_operation {
  logical_unit* owner = nullptr;
  task* t = nullptr;  // the EXTENDED COPY
  copy_list list;
  std::size_t segment = 0;                // the segment being processed; before it, all done
  std::uint64_t segment_done_blocks = 0;  // of it, copied
  std::uint64_t transferred_bytes = 0;
  // The piece in flight: read into read.data_in, then written from there.
  std::uint64_t piece_blocks = 0;
  std::uint64_t piece_source_lba = 0;
  std::uint64_t piece_destination_lba = 0;
  task read;
  task write;
  // LIST ID USAGE 00b asked for the result to be held; cleared if its nexus
  // is lost (or the unit reset) while it runs.
  bool hold_result = false;

  const block_segment& current() const noexcept { return list.segments[segment]; }
  bool from(const i_t_nexus& n) const noexcept { return t->nexus == n; }
  bool identified() const noexcept { return list.usage != list_id_usage::none; }
};

void logical_unit::copy_operation_deleter::operator()(copy_operation* op) const noexcept {
  delete op;
}

namespace {

std::array<std::uint8_t, 16> rw16(std::uint8_t opcode, std::uint64_t lba,
                                  std::uint64_t blocks) noexcept {
  std::array<std::uint8_t, 16> c{};
  c[0] = opcode;
  for (int i = 0; i < 8; ++i) c[2 + i] = static_cast<std::uint8_t>(lba >> (56 - 8 * i));
  for (int i = 0; i < 4; ++i) c[10 + i] = static_cast<std::uint8_t>(blocks >> (24 - 8 * i));
  return c;
}

}  // namespace

void logical_unit::extended_copy(task& t) {
  const std::uint8_t* cdb = t.cdb.data();
  // Service action 00h, EXTENDED COPY(LID1), only: LID4, the ROD token
  // commands and COPY OPERATION ABORT are not supported.
  if ((cdb[1] & 0x1f) != 0x00) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  const std::uint32_t list_bytes = static_cast<std::uint32_t>(get_be(cdb + 10, 4));
  if (list_bytes == 0) return complete_later(t);  // SPC-4: not an error, nothing copied
  if (t.data_out.size() < list_bytes)
    return fail_later(t, illegal_request(asc::invalid_field_in_command_iu));
  auto list = parse_copy_list(
      std::span(reinterpret_cast<const std::uint8_t*>(t.data_out.data()), list_bytes));
  if (!list) return fail_later(t, list.error());

  if (list->usage != list_id_usage::none) {
    // A list id is unique per nexus among the copies running (SPC-4 6.4.3.2).
    const bool running = std::any_of(copies_.begin(), copies_.end(), [&](const auto& op) {
      return op->identified() && op->list.list_id == list->list_id && op->from(t.nexus);
    });
    if (running) return fail_later(t, illegal_request(asc::operation_in_progress));
  }
  if (copies_.size() >= max_concurrent_copies) {
    t.result = status::busy;
    return complete_later(t);
  }
  // A new copy under a list id replaces what was held for it.
  if (list->usage != list_id_usage::none) copy_results_.forget(t.nexus, list->list_id);

  std::unique_ptr<copy_operation, copy_operation_deleter> op(new copy_operation);
  op->owner = this;
  op->t = &t;
  op->list = std::move(*list);
  op->hold_result = op->list.usage == list_id_usage::hold;
  for (task* internal : {&op->read, &op->write}) internal->context = op.get();
  op->read.on_complete = &logical_unit::on_copy_read;
  op->write.on_complete = &logical_unit::on_copy_write;
  copies_.reserve(copies_.size() + 1);  // so that nothing below throws once posted
  copy_operation& started = *op;
  // From the loop, never inside execute(): the copy may end at once.
  boost::asio::post(executor(), [this, &started] { advance(started); });
  copies_.push_back(std::move(op));
  ++in_flight_;
}

void logical_unit::advance(copy_operation& op) noexcept {
  while (op.segment < op.list.segments.size()) {
    if (op.segment_done_blocks < op.current().block_count) {
      try {
        start_piece(op);
      } catch (const std::bad_alloc&) {
        finish_copy(op, status::busy, sense{});
      }
      return;
    }
    // This segment is done (a segment of 0 blocks is done at once: SPC-4
    // makes it no error).
    ++op.segment;
    op.segment_done_blocks = 0;
  }
  finish_copy(op, status::good, sense{});
}

std::expected<logical_unit*, sense> logical_unit::copy_unit(const copy_operation& op,
                                                            std::uint16_t cscd_id,
                                                            std::uint16_t field_at) {
  const block_segment& s = op.current();
  auto aborted = [&](additional_sense code) {
    return std::unexpected(copy_aborted(code, s.offset_bytes, field_at));
  };
  if (cscd_id == cscd_id_copy_manager) return this;
  // Past the CSCD list (or a reserved ID): SPC-4's UNREACHABLE COPY TARGET.
  if (cscd_id >= op.list.cscds.size()) return aborted(asc::unreachable_copy_target);
  const cscd_descriptor& d = op.list.cscds[cscd_id];
  logical_unit* unit = nullptr;
  if (d.names_unit_by_naa()) {
    const auto naa = d.naa();
    if (std::ranges::equal(naa, naa_designator())) {
      unit = this;
    } else if (copy_targets_) {
      unit = copy_targets_(naa);
      // Only a unit on this loop can be called into from here.
      if (unit != nullptr && unit->executor() != executor()) unit = nullptr;
    }
  }
  if (unit == nullptr) return aborted(asc::copy_target_device_not_reachable);
  // A block to block segment needs block devices, of the block length the
  // descriptor says (0: not said).
  if (d.peripheral_type != 0x00 ||
      (d.disk_block_bytes != 0 && d.disk_block_bytes != unit->block_size_bytes()))
    return aborted(asc::incorrect_copy_target_device_type);
  return unit;
}

void logical_unit::start_piece(copy_operation& op) {
  const block_segment& s = op.current();
  auto source = copy_unit(op, s.source_cscd, segment_source_id_at);
  if (!source) return finish_copy(op, status::check_condition, source.error());
  auto destination = copy_unit(op, s.destination_cscd, segment_destination_id_at);
  if (!destination) return finish_copy(op, status::check_condition, destination.error());
  logical_unit& from = **source;
  logical_unit& to = **destination;
  const std::uint32_t bs = from.block_size_bytes();

  if (op.segment_done_blocks == 0) {
    // The segment's checks, before it moves anything.
    if (to.block_size_bytes() != bs) {
      return finish_copy(op, status::check_condition,
                         copy_aborted(asc::invalid_operation_for_copy_source_or_destination,
                                      s.offset_bytes, segment_destination_id_at));
    }
    if (std::uint64_t{s.block_count} * bs > copy_limits::max_segment_bytes) {
      return finish_copy(op, status::check_condition,
                         copy_aborted(asc::invalid_field_in_parameter_list, s.offset_bytes,
                                      segment_block_count_at));
    }
    // Beyond either unit's capacity: COPY ABORTED, NO ADDITIONAL SENSE
    // INFORMATION, the segment pointer naming the LBA. The copy target would
    // say LBA OUT OF RANGE, but SPC-4 reports a copy target's errors
    // through COPY ABORTED, and libiscsi's ValidSegDescr test accepts only
    // 00/00, 08/04 or 0D/02 there.
    if (!in_range(s.source_lba, s.block_count, from.block_count())) {
      return finish_copy(
          op, status::check_condition,
          copy_aborted(asc::no_additional_sense, s.offset_bytes, segment_source_lba_at));
    }
    if (!in_range(s.destination_lba, s.block_count, to.block_count())) {
      return finish_copy(
          op, status::check_condition,
          copy_aborted(asc::no_additional_sense, s.offset_bytes, segment_destination_lba_at));
    }
  }

  const std::uint64_t remaining = s.block_count - op.segment_done_blocks;
  const std::uint64_t n =
      std::min<std::uint64_t>({remaining, from.max_transfer_blocks(), to.max_transfer_blocks()});
  // Within one unit, a destination that starts inside the source is copied
  // from the end, so that no piece reads what an earlier piece wrote (as
  // memmove does).
  const bool backwards = &from == &to && s.destination_lba > s.source_lba &&
                         s.destination_lba < s.source_lba + s.block_count;
  const std::uint64_t offset_blocks = backwards ? remaining - n : op.segment_done_blocks;
  op.piece_blocks = n;
  op.piece_source_lba = s.source_lba + offset_blocks;
  op.piece_destination_lba = s.destination_lba + offset_blocks;

  task& read = op.read;
  read.cdb = rw16(0x88, op.piece_source_lba, n);
  read.nexus = op.t->nexus;
  read.expected_transfer_bytes = static_cast<std::uint32_t>(n * bs);
  read.data_out = {};
  if (!issue_copy_io(from, read)) on_copy_read(read);
}

bool logical_unit::issue_copy_io(logical_unit& unit, task& internal) noexcept {
  internal.result = status::good;
  internal.sense_data = sense{};
  internal.data_in_bytes = 0;
  // The copy reads and writes for the EXTENDED COPY's initiator: another
  // unit's reservations hold for it as for that initiator's own commands.
  // (This unit admitted the EXTENDED COPY itself, as a command that writes.)
  if (!unit.reservations_.quiet() && !unit.reservations_.allows(internal)) return false;
  try {
    unit.dispatch(internal);
  } catch (const std::bad_alloc&) {
    internal.result = status::busy;
    return false;
  }
  return true;
}

void logical_unit::on_copy_read(task& internal) noexcept {
  copy_operation& op = *static_cast<copy_operation*>(internal.context);
  logical_unit& self = *op.owner;
  const block_segment& s = op.current();
  if (internal.result != status::good)
    return self.copy_io_failed(op, internal, segment_source_lba_at);
  // The destination again: it may have gone while the read ran.
  auto destination = self.copy_unit(op, s.destination_cscd, segment_destination_id_at);
  if (!destination) return self.finish_copy(op, status::check_condition, destination.error());
  task& write = op.write;
  const std::size_t bytes = internal.data_in_bytes;
  write.cdb = rw16(0x8a, op.piece_destination_lba, op.piece_blocks);
  write.nexus = op.t->nexus;
  write.expected_transfer_bytes = static_cast<std::uint32_t>(bytes);
  write.data_out = std::span(internal.data_in.data(), bytes);
  if (!self.issue_copy_io(**destination, write)) on_copy_write(write);
}

void logical_unit::on_copy_write(task& internal) noexcept {
  copy_operation& op = *static_cast<copy_operation*>(internal.context);
  logical_unit& self = *op.owner;
  if (internal.result != status::good)
    return self.copy_io_failed(op, internal, segment_destination_lba_at);
  op.segment_done_blocks += op.piece_blocks;
  op.transferred_bytes += internal.data_out.size();
  self.advance(op);
}

void logical_unit::copy_io_failed(copy_operation& op, const task& internal,
                                  std::uint16_t field_at) noexcept {
  // Out of memory on the way (BUSY) is answered as such: the initiator
  // retries. Any other failure of a copy target's READ or WRITE (a medium
  // error, a write-protected or reserved unit) is SPC-4's THIRD PARTY
  // DEVICE FAILURE; INFORMATION holds the blocks of the segment not
  // written when some were.
  if (internal.result == status::busy) return finish_copy(op, status::busy, sense{});
  const block_segment& s = op.current();
  std::optional<std::uint64_t> residual;
  if (op.segment_done_blocks > 0) residual = s.block_count - op.segment_done_blocks;
  finish_copy(op, status::check_condition,
              copy_aborted(asc::third_party_device_failure, s.offset_bytes, field_at, residual));
}

void logical_unit::finish_copy(copy_operation& op, scsi::status result, const sense& s) noexcept {
  task& t = *op.t;
  t.result = result;
  t.sense_data = result == status::check_condition ? s : sense{};
  t.data_in_bytes = 0;
  // Held for RECEIVE COPY RESULTS when the list asked for it; a copy
  // answered BUSY was not done, and is retried.
  if (op.hold_result && result != status::busy) {
    try {
      copy_result r;
      r.initiator_port = std::string(t.nexus.initiator_port);
      r.relative_target_port = t.nexus.relative_target_port;
      r.list_id = op.list.list_id;
      r.good = result == status::good;
      r.segments_processed = static_cast<std::uint16_t>(op.segment);
      r.transferred_bytes = op.transferred_bytes;
      r.command_status = result;
      r.sense_data = t.sense_data;
      copy_results_.hold(std::move(r));
    } catch (const std::bad_alloc&) {
      // Not held: RECEIVE COPY RESULTS will not know the list id, which
      // SPC-4 allows a copy manager short of resources.
    }
  }
  // `op` owns the internal task whose completion may be running this: it
  // goes now, and nothing touches it afterwards.
  std::erase_if(copies_, [&](const auto& p) { return p.get() == &op; });
  --in_flight_;
  t.on_complete(t);  // last: it may destroy this unit
}

void logical_unit::forget_copy_results(const i_t_nexus* n) noexcept {
  if (n == nullptr) {
    copy_results_.forget_all();
  } else {
    copy_results_.forget(*n);
  }
  for (const auto& op : copies_) {
    if (n == nullptr || op->from(*n)) op->hold_result = false;
  }
}

// ---------------------------------------------------------------------------
// RECEIVE COPY RESULTS

void logical_unit::receive_copy_results(task& t) {
  const std::uint8_t* cdb = t.cdb.data();
  const std::uint8_t service_action = cdb[1] & 0x1f;
  const std::uint8_t list_id = cdb[2];
  const auto allocation_length = static_cast<std::uint32_t>(get_be(cdb + 10, 4));

  const copy_operation* running = nullptr;
  for (const auto& op : copies_) {
    if (op->identified() && op->list.list_id == list_id && op->from(t.nexus)) running = op.get();
  }
  const copy_result* held = copy_results_.find(t.nexus, list_id);

  be_writer w;
  bool forget_held = false;
  switch (service_action) {
    case 0x00: {  // COPY STATUS
      if (running == nullptr && held == nullptr)
        return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      // COPY MANAGER STATUS: 00h in progress, 01h completed without error,
      // 02h completed with error (HDD 0: no held data). TRANSFER COUNT in
      // bytes (units 00h): a command moves at most 128 MiB.
      const std::uint8_t state = running != nullptr ? 0x00 : held->good ? 0x01 : 0x02;
      const std::uint16_t segments = running != nullptr
                                         ? static_cast<std::uint16_t>(running->segment)
                                         : held->segments_processed;
      const std::uint64_t transferred =
          running != nullptr ? running->transferred_bytes : held->transferred_bytes;
      w.be(8, 4);
      w.u8(state);
      w.be(segments, 2);
      w.u8(0x00);
      w.be(transferred, 4);
      // A good copy's result is all there is to tell; a failed one's stays
      // for FAILED SEGMENT DETAILS.
      forget_held = running == nullptr && held->good;
      break;
    }
    case 0x01:  // RECEIVE DATA: no supported segment type holds data
      if (running == nullptr && held == nullptr)
        return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      w.be(0, 4);
      break;
    case 0x03:  // OPERATING PARAMETERS
      w.bytes = copy_operating_parameters(block_size_bytes());
      break;
    case 0x04: {  // FAILED SEGMENT DETAILS: of a completed copy only
      if (held == nullptr) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      if (held->good) {
        w.be(0, 4);  // AVAILABLE DATA 0, and nothing after it
        break;
      }
      const auto encoded = fixed_sense(held->sense_data);
      w.be(56 + encoded.size(), 4);
      w.zeros(52);
      w.u8(static_cast<std::uint8_t>(held->command_status));  // COPY COMMAND STATUS
      w.u8(0);
      w.be(encoded.size(), 2);  // SENSE DATA LENGTH
      w.bytes.insert(w.bytes.end(), encoded.begin(), encoded.end());
      // Discarded once transferred whole, or asked to with ALLOCATION LENGTH 0.
      forget_held = allocation_length == 0 || allocation_length >= w.bytes.size();
      break;
    }
    default:  // LID4 service actions, ROD tokens: not supported
      return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  }
  if (!set_data_in(t, w.bytes, allocation_length)) {
    t.result = status::busy;
  } else if (forget_held) {
    copy_results_.forget(t.nexus, list_id);
  }
  complete_later(t);
}

}  // namespace strata::scsi
