// NVMe completion status (target/nvme/status.h): the status field's bits,
// the completion queue entry, and Strata's errors mapped to the statuses
// a host acts on.
#include <catch2/catch.hpp>

#include "raid/device/status.h"
#include "target/nvme/status.h"

namespace strata::nvme {

TEST_CASE(
    "nvme status: the field's bits are the spec's (and Linux's NVME_SC_* shifted past the phase "
    "tag)") {
  CHECK(success.field() == 0);
  CHECK(success.ok());
  CHECK(generic(code::invalid_field).field() == 0x8004);  // DNR, generic, 0x02
  CHECK(status{status_type::path, code::ana_transition, false}.field() == (0x303 << 1));
  CHECK(status{status_type::media, code::unrecovered_read_error, true}.field() ==
        ((0x4000 | 0x281) << 1));
  CHECK(status{status_type::command_specific, code::connect_invalid_host, true}.field() ==
        ((0x4000 | 0x184) << 1));
}

TEST_CASE(
    "nvme status: a completion queue entry carries the result, queue head and ID, command ID and "
    "status") {
  const auto e = completion(0xbeef, generic(code::lba_out_of_range), 7, 2, 0x1122334455667788ull);
  CHECK(e[0] == 0x88);
  CHECK(e[7] == 0x11);
  CHECK((e[8] | e[9] << 8) == 7);
  CHECK((e[10] | e[11] << 8) == 2);
  CHECK((e[12] | e[13] << 8) == 0xbeef);
  CHECK((e[14] | e[15] << 8) == (0x8000 | 0x80 << 1));
}

TEST_CASE("nvme status: Strata's errors as the statuses a host acts on") {
  using device::op;
  CHECK(status_for({}, op::read).ok());
  CHECK(status_for(make_error_code(errc::media_error), op::read) ==
        status{status_type::media, code::unrecovered_read_error, true});
  CHECK(status_for(make_error_code(errc::media_error), op::write) ==
        status{status_type::media, code::write_fault, true});
  CHECK(status_for(make_error_code(errc::no_space), op::write) == generic(code::capacity_exceeded));
  CHECK(status_for(make_error_code(errc::out_of_range), op::read) ==
        generic(code::lba_out_of_range));
  CHECK(status_for(make_error_code(errc::invalid_argument), op::write) ==
        generic(code::invalid_field));
  CHECK(status_for(make_error_code(errc::not_supported), op::discard) ==
        generic(code::invalid_opcode));
  // What a host should retry carries no DNR.
  CHECK(status_for(make_error_code(errc::busy), op::write) ==
        generic(code::command_interrupted, false));
  CHECK(status_for(make_error_code(errc::timed_out), op::read) ==
        generic(code::command_interrupted, false));
  CHECK_FALSE(status_for(make_error_code(errc::canceled), op::read).do_not_retry);
  // The volume gone for good: a generic error, never a path error (which
  // would have multipath hold the I/O for ever).
  CHECK(status_for(make_error_code(errc::device_failed), op::read) ==
        generic(code::internal_error));
  CHECK(status_for(std::make_error_code(std::errc::io_error), op::read).type ==
        status_type::generic);
}

}  // namespace strata::nvme
