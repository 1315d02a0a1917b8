#include "raid/device/status.h"

#include <cerrno>

namespace strata {
namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "strata"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::invalid_argument:
        return "invalid argument";
      case errc::out_of_range:
        return "request runs past the end of the device";
      case errc::misaligned:
        return "buffer not aligned or not a whole number of blocks";
      case errc::media_error:
        return "medium error";
      case errc::device_failed:
        return "device failed";
      case errc::no_space:
        return "no space left on the backing store";
      case errc::not_supported:
        return "operation not supported by the device";
      case errc::timed_out:
        return "device timed out";
      case errc::canceled:
        return "canceled";
      case errc::not_found:
        return "not found";
      case errc::permission_denied:
        return "permission denied";
      case errc::too_small:
        return "backing store smaller than the declared geometry";
      case errc::io_error:
        return "I/O error";
      case errc::busy:
        return "busy with other work";
      case errc::reservation_conflict:
        return "reservation conflict: the drive's persistent reservation refused this host";
    }
    return "unknown strata error " + std::to_string(value);
  }
};

}  // namespace

const std::error_category& strata_category() noexcept {
  static const category instance;
  return instance;
}

errc errc_from_errno(int errno_value) noexcept {
  switch (errno_value) {
    case EINVAL:
      return errc::invalid_argument;
    case EIO:
    case EILSEQ:  // some drivers report unrecoverable reads this way
    case ENODATA:
      return errc::media_error;
    case ENODEV:
    case ENXIO:
      return errc::device_failed;
    case ENOSPC:
    case EDQUOT:
      return errc::no_space;
    case EOPNOTSUPP:
      return errc::not_supported;
    case ETIMEDOUT:
      return errc::timed_out;
    case ECANCELED:
      return errc::canceled;
    case ENOENT:
    case ENOTDIR:
      return errc::not_found;
    case EBADE:  // the block layer's answer for RESERVATION CONFLICT
      return errc::reservation_conflict;
    case EACCES:
    case EPERM:
    case EROFS:
      return errc::permission_denied;
    default:
      return errc::io_error;
  }
}

}  // namespace strata
