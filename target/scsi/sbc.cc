// The block commands (SBC-3/SBC-4) of a logical unit: READ CAPACITY, the
// reads and writes, VERIFY, WRITE SAME, UNMAP, COMPARE AND WRITE, ORWRITE,
// WRITE ATOMIC, PRE-FETCH, GET LBA STATUS, ... Each builds a command
// (unit_internal.h) and hands it to the engine (command_engine.cc).
#include <algorithm>
#include <boost/asio/post.hpp>
#include <cassert>
#include <cstring>
#include <limits>
#include <new>

#include "raid/device/aligned_buffer.h"
#include "raid/device/status.h"
#include "target/scsi/big_endian.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/unit_internal.h"

namespace strata::scsi {

using namespace detail;

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
  for (std::uint32_t per = identity_.physical_block_bytes / block_size_bytes();
       per > 1 && data[13] < 15; per >>= 1)
    ++data[13];
  if (identity_.thin_provisioned) data[14] = 0x80 | 0x40;  // LBPME, LBPRZ
  if (!set_data_in(t, data, get32(t.cdb.data() + 10))) t.result = status::busy;
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
std::byte* writable_source(std::span<std::byte> data_out, std::size_t bytes,
                           const device::block_device& volume, device::aligned_buffer& bounce) {
  std::byte* source = data_out.data();
  if (aligned(source, volume.geometry().buffer_alignment_bytes)) return source;
  bounce = device::aligned_buffer(bytes, buffer_alignment(volume));
  std::memcpy(bounce.data(), source, bytes);
  return bounce.data();
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
  std::byte* source =
      write ? writable_source(t.data_out, bytes, volume_, bounce) : t.data_out.data();
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
  // - against power loss: block_device.h promises nothing about a write
  //   cut short, and a long one does tear (across RAID stripes, across
  //   extents, inside a member's write). What does survive a power cut
  //   whole is one aligned unit of unit_identity::atomic_write_bytes (one
  //   4 KiB block of a Strata volume: docs/atomic-writes.md), so that is
  //   the whole of what WRITE ATOMIC accepts: a TRANSFER LENGTH that is
  //   not exactly one such unit (0 aside), or an LBA not aligned to one,
  //   ends in ILLEGAL REQUEST, INVALID FIELD IN CDB (SBC-4 5.48, against
  //   MAXIMUM ATOMIC TRANSFER LENGTH, ATOMIC ALIGNMENT and ATOMIC TRANSFER
  //   LENGTH GRANULARITY). A database relies on this to skip its
  //   torn-page protection; promising more would lose its data. The
  //   blocks go down as ONE request. With FUA, a flush follows, as for
  //   WRITE. (libiscsi 1.19's WriteAtomic16.Simple sends up to 256
  //   granules whatever the maximum, and so fails here as against any
  //   target that promises less: tests/target/iscsi_clients_test.sh.)
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
  if (blocks == 0) return complete_later(t);  // SBC-4: no blocks, not an error
  const std::uint32_t unit_blocks = max_atomic_transfer_blocks();
  if (unit_blocks == 0 || blocks > unit_blocks || blocks % unit_blocks != 0 ||
      lba % unit_blocks != 0)
    return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
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
  // SBC-3 5.20: descriptors of runs of blocks in one provisioning state.
  // The first starts at STARTING LBA itself, aligned to a physical block or
  // an extent or not, and runs to the end of that state; each next one
  // starts where the one before ends (SBC-4, LBA status descriptor
  // relationships). libiscsi 1.19's GetLBAStatus.UnmapSingle wants another
  // start on 512e (tests/target/iscsi_clients_test.sh). The volume says
  // what is allocated (block_device::allocation_at); a fully provisioned
  // unit reports everything mapped, whatever the volume does below it.
  const std::uint8_t* cdb = t.cdb.data();
  const std::uint64_t start_lba = get64(cdb + 2);
  const std::uint32_t allocation_length = get32(cdb + 10);
  if (start_lba >= block_count()) return fail_later(t, illegal_request(asc::lba_out_of_range));
  // As many descriptors as the allocation length holds, and at least one:
  // the PARAMETER DATA LENGTH then tells a short buffer how much there is.
  const std::size_t wanted = std::clamp<std::size_t>(
      allocation_length > 8 ? (allocation_length - 8) / 16 : 0, 1, max_lba_status_descriptors);
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

}  // namespace strata::scsi
