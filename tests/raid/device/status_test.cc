// errno is interpreted in one place; each code has a message a person can read.
#include "raid/device/status.h"

#include <cerrno>

#include "tests/raid/device/harness.h"

namespace strata {

TEST_CASE("status: errno values map to the Strata codes callers act on", "[device][status]") {
  CHECK(errc_from_errno(EIO) == errc::media_error);
  CHECK(errc_from_errno(ENODEV) == errc::device_failed);
  CHECK(errc_from_errno(ENOSPC) == errc::no_space);
  CHECK(errc_from_errno(ENOENT) == errc::not_found);
  CHECK(errc_from_errno(EACCES) == errc::permission_denied);
  CHECK(errc_from_errno(EOPNOTSUPP) == errc::not_supported);
  CHECK(errc_from_errno(EINVAL) == errc::invalid_argument);
  CHECK(errc_from_errno(EMFILE) == errc::io_error);  // the rest
}

TEST_CASE("status: codes are std::error_codes of the strata category", "[device][status]") {
  const std::error_code ec = errc::out_of_range;
  CHECK(ec.category().name() == std::string("strata"));
  CHECK(ec.message() == "request runs past the end of the device");
  CHECK(ec != std::error_code{});
  for (int value = 1; value <= static_cast<int>(errc::io_error); ++value) {
    CHECK(make_error_code(static_cast<errc>(value)).message().find("unknown") == std::string::npos);
  }
}

}  // namespace strata
