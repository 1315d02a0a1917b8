// The copy manager's parts that need no unit: the EXTENDED COPY(LID1)
// parameter list (SPC-4 6.4) read and checked into a `copy_list`, the
// results a unit holds for RECEIVE COPY RESULTS (SPC-4 6.18), and the data
// of RECEIVE COPY RESULTS OPERATING PARAMETERS and of the Third-party Copy
// VPD page (8Fh). The copy itself runs in the unit that received the
// command (logical_unit::extended_copy, extended_copy.cc), as READ(16) and
// WRITE(16) of at most max_transfer_bytes each, through the source and
// destination units' own machinery (range interlock, pieces, errors).
//
// What is supported: identification CSCD descriptors (E4h) that name a
// logical unit by its NAA designator (VPD 83h), and block to block segment
// descriptors (02h) with equal block sizes. Everything else in the list is
// refused with the sense SPC-4 names for it (see parse_copy_list).
//
// Pure functions and a plain container: callable from any thread; a
// `copy_results` belongs to one unit and is used on its loop.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "target/scsi/sense.h"
#include "target/scsi/task.h"

namespace strata::scsi {

// The copy manager's limits (OPERATING PARAMETERS, VPD 8Fh), enforced.
struct copy_limits {
  // Two are what a copy between units takes; the rest is room for
  // initiators that list more than they use.
  static constexpr std::uint16_t max_cscd_descriptors = 8;
  static constexpr std::uint16_t max_segment_descriptors = 8;
  // CSCD plus segment descriptor lists, in bytes: every descriptor at the
  // counts above fits (8 x 32 + 8 x 28 = 480), as Linux-IO's 1024.
  static constexpr std::uint32_t max_descriptor_list_bytes = 1024;
  // The most one segment may move: with max_segment_descriptors, a command
  // moves at most 128 MiB. 16 MiB is ESXi's largest XCOPY transfer size.
  static constexpr std::uint32_t max_segment_bytes = 16u << 20;
  // No segment type that reads inline data is supported.
  static constexpr std::uint32_t max_inline_data_bytes = 0;
  // Results of completed copies kept for RECEIVE COPY RESULTS, per unit;
  // past that the oldest is forgotten.
  static constexpr std::size_t max_held_results = 64;
};

// The first 16 bytes of the parameter list.
inline constexpr std::size_t copy_list_header_bytes = 16;
inline constexpr std::size_t cscd_descriptor_bytes = 32;
inline constexpr std::size_t block_segment_descriptor_bytes = 28;

// LIST ID USAGE (SPC-4 table 104): 00b the results are held, 10b the list
// id is only kept unique while the copy runs, 11b there is no list id.
enum class list_id_usage : std::uint8_t { hold = 0, discard = 2, none = 3 };

// An identification CSCD descriptor (E4h): a logical unit named by one of
// its VPD 83h designators.
struct cscd_descriptor {
  std::uint8_t peripheral_type = 0;  // 00h: a block device
  std::uint8_t code_set = 0;
  std::uint8_t association = 0;
  std::uint8_t designator_type = 0;
  std::uint8_t designator_bytes = 0;
  std::array<std::uint8_t, 20> designator{};
  // DISK BLOCK LENGTH from the device type specific parameters; 0: not given.
  std::uint32_t disk_block_bytes = 0;

  // The designator if it is an NAA designator of a logical unit, binary,
  // 16 bytes: the only kind a unit answers to (naa_designator()).
  bool names_unit_by_naa() const noexcept {
    return code_set == 0x01 && association == 0 && designator_type == 0x03 &&
           designator_bytes == 16;
  }
  std::span<const std::uint8_t, 16> naa() const noexcept {
    return std::span<const std::uint8_t, 16>(designator.data(), 16);
  }
};

// A block to block segment descriptor (02h).
struct block_segment {
  std::uint32_t offset_bytes = 0;  // where it starts in the parameter list, for sense data
  // CSCD descriptor IDs: an index into the CSCD list (0000h-07FFh), or
  // FFFFh, the unit that received the command.
  std::uint16_t source_cscd = 0;
  std::uint16_t destination_cscd = 0;
  std::uint16_t block_count = 0;  // of the source (DC 0) or destination (DC 1): equal sizes here
  std::uint64_t source_lba = 0;
  std::uint64_t destination_lba = 0;
};

// Where a CSCD descriptor ID in a segment points.
inline constexpr std::uint16_t cscd_id_copy_manager = 0xffff;
// Field offsets within a block to block segment descriptor, for the
// segment pointer of COPY ABORTED.
inline constexpr std::uint16_t segment_source_id_at = 4;
inline constexpr std::uint16_t segment_destination_id_at = 6;
inline constexpr std::uint16_t segment_block_count_at = 10;
inline constexpr std::uint16_t segment_source_lba_at = 12;
inline constexpr std::uint16_t segment_destination_lba_at = 20;

// A checked EXTENDED COPY(LID1) parameter list.
struct copy_list {
  std::uint8_t list_id = 0;
  list_id_usage usage = list_id_usage::hold;
  std::vector<cscd_descriptor> cscds;
  std::vector<block_segment> segments;
};

// Reads and checks a whole parameter list (PARAMETER LIST LENGTH bytes,
// at least the header), or says why not, as ILLEGAL REQUEST with:
//   1A/00 PARAMETER LIST LENGTH ERROR: the lists the header declares do not
//         fit the parameter list, are longer than max_descriptor_list_bytes,
//         or end inside a descriptor;
//   26/0B INLINE DATA LENGTH EXCEEDED: inline data (none is supported);
//   26/00 INVALID FIELD IN PARAMETER LIST: LIST ID USAGE 01b, or 11b with a
//         list id; a block to block descriptor whose DESCRIPTOR LENGTH is
//         not 0018h;
//   26/06 TOO MANY TARGET DESCRIPTORS, 26/08 TOO MANY SEGMENT DESCRIPTORS;
//   26/07 UNSUPPORTED TARGET DESCRIPTOR TYPE CODE: not E4h;
//   26/09 UNSUPPORTED SEGMENT DESCRIPTOR TYPE CODE: not 02h.
// Which units the CSCDs name, and whether the segments fit them, is found
// when each segment is processed (COPY ABORTED then; extended_copy.cc).
// LU ID TYPE and NUL in a CSCD descriptor are ignored, as SPC-4 has them
// (reserved and obsolete), and so are STR and PRIORITY.
std::expected<copy_list, sense> parse_copy_list(std::span<const std::uint8_t> parameters);

// COPY ABORTED with `code`, pointing at byte `field_at` of the segment
// descriptor that starts at `segment_offset_bytes` (SPC-4: segment pointer
// sense key specific data, SD 1, and that offset in COMMAND-SPECIFIC
// INFORMATION). `residual_blocks`, when the segment had written some of
// its blocks, goes in INFORMATION.
sense copy_aborted(additional_sense code, std::uint32_t segment_offset_bytes,
                   std::uint16_t field_at,
                   std::optional<std::uint64_t> residual_blocks = std::nullopt) noexcept;

// RECEIVE COPY RESULTS OPERATING PARAMETERS data (SPC-4 6.18.4), for a
// unit of `block_size_bytes` (the DATA SEGMENT GRANULARITY).
std::vector<std::uint8_t> copy_operating_parameters(std::uint32_t block_size_bytes);
// The Third-party Copy VPD page (8Fh) after its 4-byte header: supported
// commands, parameter data, supported descriptors, supported CSCD IDs and
// general copy operations descriptors (SPC-4 7.8.17).
std::vector<std::uint8_t> third_party_copy_descriptors(std::uint32_t block_size_bytes);

// The results of completed EXTENDED COPY commands, held for RECEIVE COPY
// RESULTS per I_T nexus and list id (LIST ID USAGE 00b only). Forgotten when
// reported (COPY STATUS of a good copy, FAILED SEGMENT DETAILS of a failed
// one), when the nexus sends another copy with the same list id, when the
// nexus is lost, at LOGICAL UNIT RESET, and oldest first past
// copy_limits::max_held_results.
struct copy_result {
  std::string initiator_port;
  std::uint16_t relative_target_port = 0;
  std::uint8_t list_id = 0;
  bool good = true;
  std::uint16_t segments_processed = 0;
  std::uint64_t transferred_bytes = 0;
  scsi::status command_status = status::good;
  scsi::sense sense_data;  // when !good
};

class copy_results {
 public:
  void hold(copy_result r);
  // The result held for `list_id` from `n`, or null.
  const copy_result* find(const i_t_nexus& n, std::uint8_t list_id) const noexcept;
  void forget(const i_t_nexus& n, std::uint8_t list_id) noexcept;
  void forget(const i_t_nexus& n) noexcept;
  void forget_all() noexcept { results_.clear(); }
  std::size_t size() const noexcept { return results_.size(); }

 private:
  std::vector<copy_result> results_;  // oldest first
};

}  // namespace strata::scsi
