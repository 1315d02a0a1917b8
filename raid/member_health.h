// What a group knows of each member's health, and the events it reports
// when it fails one out: the management plane lists them per disk, and the
// daemon's event log records them.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace strata::raid {

enum class member_failure : std::uint8_t {
  none,           // working
  administrator,  // failed by command
  device_failed,  // the device reported itself gone
  write_error,    // a write failed: the member no longer holds what the group holds
  flush_error,    // a flush failed: it may have lost what it acknowledged
  timed_out,      // an I/O went unanswered for longer than the timeout
  read_errors,    // more read errors than the group tolerates from one member
  metadata,       // its superblock or write-intent bitmap could not be written
  rebuild,        // its rebuild did not complete
  absent,         // not found when the group was assembled
  recorded,       // failed before the group was assembled (its superblocks say so)
};

constexpr std::string_view to_string(member_failure f) noexcept {
  switch (f) {
    case member_failure::none:
      return "working";
    case member_failure::administrator:
      return "failed by the administrator";
    case member_failure::device_failed:
      return "device failed";
    case member_failure::write_error:
      return "write error";
    case member_failure::flush_error:
      return "flush error";
    case member_failure::timed_out:
      return "I/O timed out";
    case member_failure::read_errors:
      return "too many read errors";
    case member_failure::metadata:
      return "metadata write failed";
    case member_failure::rebuild:
      return "rebuild failed";
    case member_failure::absent:
      return "missing at assembly";
    case member_failure::recorded:
      return "failed before assembly";
  }
  return "unknown";
}

struct member_health {
  std::uint64_t read_errors = 0;  // reads the member failed (each repaired from the others)
  std::uint64_t timeouts = 0;     // I/Os it left unanswered past the timeout
  // Writes and flushes its backing store had no room for (a file-backed
  // drive on a full filesystem): the member stays, the I/O fails.
  std::uint64_t no_space_errors = 0;
  member_failure failure = member_failure::none;
};

struct member_event {
  unsigned member = 0;
  member_failure reason = member_failure::none;
  std::uint64_t events = 0;  // the group's event count that records it (0: not formatted)
};

using member_event_fn = std::function<void(const member_event&)>;

}  // namespace strata::raid
