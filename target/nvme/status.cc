#include "target/nvme/status.h"

#include "raid/device/status.h"
#include "target/nvme/little_endian.h"

namespace strata::nvme {

status status_for(std::error_code ec, device::op operation) noexcept {
  if (!ec) return success;
  if (ec.category() != strata_category()) return generic(code::internal_error, false);
  switch (static_cast<errc>(ec.value())) {
    case errc::media_error:
      // Retrying reads the same bad blocks again.
      return {status_type::media,
              operation == device::op::read ? code::unrecovered_read_error : code::write_fault,
              true};
    case errc::device_failed:
      // A generic error, not a path error: the volume is gone for good and
      // no other path reaches it (target/scsi/sense.cc says why: a path
      // error would have multipath hold the I/O for ever).
      return generic(code::internal_error);
    case errc::no_space:
      return generic(code::capacity_exceeded);  // Linux: ENOSPC
    case errc::out_of_range:
      return generic(code::lba_out_of_range);
    case errc::invalid_argument:
      return generic(code::invalid_field);
    case errc::not_supported:
      // A volume that cannot deallocate, say: the host stops asking.
      return generic(code::invalid_opcode);
    case errc::timed_out:
    case errc::busy:
    // A drive fenced this controller (its partner took the pool over): the
    // host retries, and finds the pool on the other path.
    case errc::reservation_conflict:
      return generic(code::command_interrupted, false);  // the host retries it
    case errc::canceled:
      return generic(code::aborted_by_request, false);
    case errc::io_error:
      return generic(code::internal_error, false);
    case errc::misaligned:  // our buffers are aligned: a bug here, not the host's fault
    case errc::not_found:   // set-up errors; not expected per I/O
    case errc::permission_denied:
    case errc::too_small:
      break;
  }
  return generic(code::internal_error);
}

std::array<std::uint8_t, 16> completion(std::uint16_t command_id, status s, std::uint16_t sq_head,
                                        std::uint16_t sq_id, std::uint64_t result) noexcept {
  std::array<std::uint8_t, 16> e{};
  put64(e.data(), result);
  put16(e.data() + 8, sq_head);
  put16(e.data() + 10, sq_id);
  put16(e.data() + 12, command_id);
  put16(e.data() + 14, s.field());
  return e;
}

}  // namespace strata::nvme
