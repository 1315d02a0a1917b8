// Strata's error values: one error category shared by every layer.
//
// Errors cross layers as values: `std::error_code` holding a `strata::errc`,
// or `std::expected<T, ...>`. Exceptions never cross a layer boundary. errno is
// interpreted in exactly one place (errc_from_errno); each protocol maps these
// codes to its own sense data or status codes in exactly one place (target/).
//
// This header lives in the device layer because it is the lowest layer: every
// other part of Strata may include it; it includes nothing of Strata.
#pragma once

#include <string>
#include <system_error>

namespace strata {

enum class errc : int {
  // 0 is success, as std::error_code requires.
  invalid_argument = 1,  // a malformed request or option: zero length, unknown op, bad size
  out_of_range,          // lba + block_count runs past the end of the device
  misaligned,            // a buffer not aligned as the device needs, or not whole blocks
  media_error,           // the medium could not read or write these blocks
  device_failed,         // the device is gone; nothing on it can be reached
  no_space,              // the backing store is full
  not_supported,         // the device cannot do this operation
  timed_out,             // the device did not answer in time
  canceled,              // dropped before it ran: shutdown, power loss
  not_found,             // a path or named thing does not exist
  permission_denied,     // the OS refused access
  too_small,             // a backing store smaller than the geometry declared for it
  io_error,              // any other failure the OS reported
  busy,                  // other work on the object runs; try again after it
  reservation_conflict,  // a persistent reservation refused it: another host fenced this one
};

const std::error_category& strata_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), strata_category()};
}

// Maps a positive errno value to the Strata code that means the same thing to
// a caller. The only place in Strata that interprets errno.
errc errc_from_errno(int errno_value) noexcept;

// An error with what a person needs to act on it: which thing failed and why
// ("cannot open /dev/sdq: No such file or directory"). For set-up and
// configuration paths, where a message is worth a string; the per-I/O path
// uses a bare std::error_code.
struct error {
  std::error_code code;
  std::string message;
};

inline error make_error(errc e, std::string message) {
  return error{make_error_code(e), std::move(message)};
}

}  // namespace strata

template <>
struct std::is_error_code_enum<strata::errc> : std::true_type {};
