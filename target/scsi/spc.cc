// The primary commands (SPC-4) of a logical unit: INQUIRY and its VPD
// pages, REQUEST SENSE, MODE SENSE/SELECT, REPORT SUPPORTED OPERATION
// CODES, REPORT TARGET PORT GROUPS. Answered at once, from what the unit is.
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

namespace {

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
    {0x83,
     0x00,
     true,
     16,
     {0x83, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // RECEIVE COPY RESULTS: COPY STATUS, RECEIVE DATA, OPERATING PARAMETERS,
    // FAILED SEGMENT DETAILS (the LIST IDENTIFIER means nothing to the third)
    {0x84,
     0x00,
     true,
     16,
     {0x84, 0x00, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    {0x84,
     0x01,
     true,
     16,
     {0x84, 0x01, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    {0x84,
     0x03,
     true,
     16,
     {0x84, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    {0x84,
     0x04,
     true,
     16,
     {0x84, 0x04, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // READ(16)
    {0x88,
     0x00,
     false,
     16,
     {0x88, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // COMPARE AND WRITE
    {0x89,
     0x00,
     false,
     16,
     {0x89, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0x00,
      0x00}},
    // WRITE(16)
    {0x8a,
     0x00,
     false,
     16,
     {0x8a, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // ORWRITE(16)
    {0x8b,
     0x00,
     false,
     16,
     {0x8b, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // WRITE AND VERIFY(16)
    {0x8e,
     0x00,
     false,
     16,
     {0x8e, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // VERIFY(16)
    {0x8f,
     0x00,
     false,
     16,
     {0x8f, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // PRE-FETCH(16)
    {0x90,
     0x00,
     false,
     16,
     {0x90, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // SYNCHRONIZE CACHE(16)
    {0x91,
     0x00,
     false,
     16,
     {0x91, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // WRITE SAME(16)
    {0x93,
     0x00,
     false,
     16,
     {0x93, 0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // WRITE ATOMIC(16): WRPROTECT (refused), DPO, FUA, ATOMIC BOUNDARY
    // (refused unless 0), TRANSFER LENGTH
    {0x9c,
     0x00,
     false,
     16,
     {0x9c, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // READ CAPACITY(16)
    {0x9e,
     0x10,
     true,
     16,
     {0x9e, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // GET LBA STATUS
    {0x9e,
     0x12,
     true,
     16,
     {0x9e, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00}},
    // REPORT LUNS: answered by the LUN map (lun_map.h), listed because it
    // is part of the command set an initiator reaches through this unit.
    {0xa0,
     0x00,
     false,
     12,
     {0xa0, 0x00, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // REPORT TARGET PORT GROUPS
    {0xa3,
     0x0a,
     true,
     12,
     {0xa3, 0xea, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // REPORT SUPPORTED OPERATION CODES
    {0xa3,
     0x0c,
     true,
     12,
     {0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // READ(12)
    {0xa8,
     0x00,
     false,
     12,
     {0xa8, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // WRITE(12)
    {0xaa,
     0x00,
     false,
     12,
     {0xaa, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // WRITE AND VERIFY(12)
    {0xae,
     0x00,
     false,
     12,
     {0xae, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // VERIFY(12)
    {0xaf,
     0x00,
     false,
     12,
     {0xaf, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
    // READ DEFECT DATA(12)
    {0xb7,
     0x00,
     false,
     12,
     {0xb7, 0x1f, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}},
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
}  // namespace

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
        // The port is the one the command came through, when the unit is
        // reached through several (port_groups).
        const auto [port, group] = port_and_group(t.nexus.relative_target_port);
        r.u8(0x01);
        r.u8(0x14);
        r.u8(0x00);
        r.u8(4);
        r.be(port, 4);
        r.u8(0x01);
        r.u8(0x15);
        r.u8(0x00);
        r.u8(4);
        r.be(group, 4);
        break;
      }
      case 0x86:  // Extended INQUIRY data
        r.zeros(60);
        // UASK_SUP: unit attentions carry sense key specific data (the
        // queue's OVERFLOW bit, unit_attentions.h). HEADSUP, ORDSUP, SIMPSUP:
        // the task set honours all three (task_set.h).
        r.bytes[5] = 0x20 | 0x07;
        // V_SUP: a volatile cache (drive caches: writes are durable after a
        // flush). NV_SUP: and a non-volatile one (a write-back cache's log),
        // which SYNCHRONIZE CACHE does not empty (SBC-3: data in a
        // non-volatile cache is durable).
        r.bytes[6] = 0x01 | (identity_.non_volatile_cache ? 0x02 : 0x00);
        break;
      case 0x8f: {  // Third-party copy (extended_copy.h)
        const auto descriptors = third_party_copy_descriptors(bs);
        r.bytes.insert(r.bytes.end(), descriptors.begin(), descriptors.end());
        break;
      }
      case 0xb0:  // Block limits
        r.zeros(60);
        // WSNZ 0: WRITE SAME with 0 blocks writes to the last LBA.
        r.bytes[5] = max_compare_and_write_blocks;      // MAXIMUM COMPARE AND WRITE LENGTH
        put_be(&r.bytes[6], granularity_blocks, 2);     // OPTIMAL TRANSFER LENGTH GRANULARITY
        put_be(&r.bytes[8], max_transfer_blocks(), 4);  // MAXIMUM TRANSFER LENGTH
        put_be(&r.bytes[12], piece_blocks_, 4);         // OPTIMAL TRANSFER LENGTH
        if (identity_.thin_provisioned) {
          put_be(&r.bytes[20], max_unmap_bytes / bs, 4);  // MAXIMUM UNMAP LBA COUNT
          put_be(&r.bytes[24], max_unmap_descriptors, 4);
          put_be(&r.bytes[28], granularity_blocks, 4);  // OPTIMAL UNMAP GRANULARITY
        }
        put_be(&r.bytes[36], max_write_same_bytes / bs, 8);  // MAXIMUM WRITE SAME LENGTH
        // MAXIMUM ATOMIC TRANSFER LENGTH, ATOMIC ALIGNMENT, ATOMIC TRANSFER
        // LENGTH GRANULARITY: one aligned unit of what survives a power
        // cut (max_atomic_transfer_blocks()). The two atomic boundary
        // fields stay 0 (boundaries not supported).
        put_be(&r.bytes[44], max_atomic_transfer_blocks(), 4);
        put_be(&r.bytes[48], max_atomic_transfer_blocks(), 4);
        put_be(&r.bytes[52], max_atomic_transfer_blocks(), 4);
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

std::pair<std::uint16_t, std::uint16_t> logical_unit::port_and_group(
    std::uint16_t relative_port) const noexcept {
  for (const target_port_group& g : identity_.port_groups) {
    if (std::ranges::find(g.relative_ports, relative_port) != g.relative_ports.end())
      return {relative_port, g.id};
  }
  return {identity_.relative_port, identity_.port_group};
}

std::vector<std::uint8_t> report_target_port_groups_data(std::span<const target_port_group> groups,
                                                         std::uint8_t format,
                                                         std::uint8_t implicit_transition_seconds) {
  if (format > 1) return {};  // 000b length only, 001b extended header
  response r;
  r.zeros(4);
  if (format == 1) {
    r.u8(0x10);  // FORMAT TYPE 001b
    r.u8(implicit_transition_seconds);
    r.zeros(2);
  }
  for (const target_port_group& g : groups) {
    r.u8(static_cast<std::uint8_t>(g.state));  // PREF 0
    // The states a group of this unit can be in: T_SUP, U_SUP, AN_SUP,
    // AO_SUP (a single-group unit only ever active/optimized).
    r.u8(groups.size() == 1 ? 0x01 : 0x8b);
    r.be(g.id, 2);
    r.u8(0);
    r.u8(0);  // STATUS CODE: no status available
    r.u8(0);
    r.u8(static_cast<std::uint8_t>(g.relative_ports.size()));
    for (const std::uint16_t port : g.relative_ports) {
      r.zeros(2);
      r.be(port, 2);
    }
  }
  r.patch(0, r.size() - 4, 4);
  return std::move(r.bytes);
}

void logical_unit::report_target_port_groups(task& t) {
  const std::uint32_t allocation_length = get32(t.cdb.data() + 6);
  const std::vector<target_port_group> one{
      {identity_.port_group, alua_state::active_optimized, {identity_.relative_port}}};
  // A unit with one group never changes state: no transition time.
  const bool one_group = identity_.port_groups.empty();
  const auto data =
      report_target_port_groups_data(one_group ? std::span(one) : std::span(identity_.port_groups),
                                     t.cdb[1] >> 5, one_group ? 0 : implicit_transition_seconds);
  if (data.empty()) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
  if (!set_data_in(t, data, allocation_length)) t.result = status::busy;
  complete_later(t);
}

}  // namespace strata::scsi
