#include "target/scsi/logical_unit.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cassert>
#include <cstring>
#include <limits>
#include <new>

#include "raid/device/aligned_buffer.h"
#include "raid/device/status.h"
#include "target/scsi/big_endian.h"
#include "target/scsi/unit_internal.h"

namespace strata::scsi {

using namespace detail;

// ---------------------------------------------------------------------------

logical_unit::logical_unit(device::block_device& volume, unit_identity identity,
                           unit_state_store* state_store)
    : volume_(volume),
      identity_(std::move(identity)),
      reservations_(attentions_, state_store, identity_.relative_port,
                    [this](task& t) { complete_later(t); }) {
  assert(identity_.relative_port != 0 && identity_.port_group != 0);
  const device::block_geometry& g = volume_.geometry();
  // Pieces start at multiples of the piece size within an aligned buffer,
  // so the piece size must keep them aligned.
  const std::uint64_t align_blocks =
      std::max<std::uint64_t>(1, g.buffer_alignment_bytes / g.logical_block_size_bytes);
  align_blocks_ = align_blocks;
  piece_blocks_ = std::max<std::uint64_t>(1, piece_bytes / g.logical_block_size_bytes);
  piece_blocks_ = (piece_blocks_ + align_blocks - 1) / align_blocks * align_blocks;
}

logical_unit::~logical_unit() {
  assert(commands_in_flight() == 0 && "logical_unit destroyed with commands in flight");
}

// ---------------------------------------------------------------------------
// Dispatch

void logical_unit::execute(task& t) noexcept {
  t.result = status::good;
  t.sense_data = sense{};
  t.data_in_bytes = 0;
  // The task set (task attributes) must see the task complete: the unit's
  // completion stands in for the transport's until then.
  t.task_set_state.on_complete = t.on_complete;
  t.task_set_state.context = t.context;
  t.on_complete = &logical_unit::task_done;
  t.context = this;
  if (tasks_.enter(t)) run_task(t);  // else held: task_done() of an older one runs it
}

void logical_unit::task_done(task& t) noexcept {
  auto& unit = *static_cast<logical_unit*>(t.context);
  t.on_complete = t.task_set_state.on_complete;
  t.context = t.task_set_state.context;
  unit.tasks_.leave(t);
  // Tasks whose turn came only start: none completes in here.
  while (task* next = unit.tasks_.next_enabled()) unit.run_task(*next);
  t.on_complete(t);  // last: it may destroy the unit
}

void logical_unit::run_task(task& t) noexcept {
  try {
    // The common case, a unit with no reservation and no unit attention
    // pending, looks at nothing more than these two flags.
    if ((!attentions_.quiet() || !reservations_.quiet()) && !admitted(t)) return complete_later(t);
    dispatch(t);
  } catch (const std::bad_alloc&) {
    // Every allocation happens before a command starts any I/O or posts its
    // completion, so nothing of this task is in flight: answer BUSY, which
    // initiators retry.
    t.result = status::busy;
    t.data_in_bytes = 0;
    complete_later(t);
  }
}

namespace {

// The commands that change the medium, which a write-protected unit
// refuses (SBC-3 4.11): the writes, WRITE SAME, UNMAP, COMPARE AND WRITE,
// ORWRITE, WRITE ATOMIC and WRITE AND VERIFY. Not EXTENDED COPY, which may
// only read this unit: the copy's WRITE(16) to it is refused instead.
bool modifies_medium(std::uint8_t opcode) noexcept {
  switch (opcode) {
    case 0x0a:
    case 0x2a:
    case 0xaa:
    case 0x8a:  // WRITE(6/10/12/16)
    case 0x2e:
    case 0xae:
    case 0x8e:  // WRITE AND VERIFY(10/12/16)
    case 0x41:
    case 0x93:  // WRITE SAME(10/16)
    case 0x42:  // UNMAP
    case 0x89:
    case 0x8b:  // COMPARE AND WRITE, ORWRITE
    case 0x9c:  // WRITE ATOMIC(16)
      return true;
    default:
      return false;
  }
}

}  // namespace

void logical_unit::dispatch(task& t) {
  const std::uint8_t* cdb = t.cdb.data();
  if (identity_.write_protected && modifies_medium(cdb[0])) {
    return fail_later(t, make_sense(sense_key::data_protect, asc::write_protected));
  }
  const std::uint8_t protect =
      cdb[1] >> 5;  // RDPROTECT, WRPROTECT, VRPROTECT: no protection information here
  switch (cdb[0]) {
    case 0x00:  // TEST UNIT READY
      return complete_later(t);
    case 0x1b:
      return start_stop_unit(t);
    case 0x03:
      return request_sense(t);
    case 0x12:
      return inquiry(t);
    case 0x25:
      return read_capacity_10(t);
    case 0x9e:  // SERVICE ACTION IN(16)
      if ((cdb[1] & 0x1f) == 0x10) return read_capacity_16(t);
      if ((cdb[1] & 0x1f) == 0x12) return get_lba_status(t);
      return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
    case 0xa3:  // MAINTENANCE IN
      if ((cdb[1] & 0x1f) == 0x0a) return report_target_port_groups(t);
      if ((cdb[1] & 0x1f) == 0x0c) return report_supported_operation_codes(t);
      return fail_later(t, illegal_request(asc::invalid_field_in_cdb));

    case 0x08:    // READ(6)
    case 0x0a: {  // WRITE(6)
      const std::uint64_t lba = get_be(cdb + 1, 3) & 0x1fffff;
      const std::uint64_t blocks = cdb[4] == 0 ? 256 : cdb[4];  // SBC-3 5.15: 0 means 256
      return read_write(t, cdb[0] == 0x0a, lba, blocks, false);
    }
    case 0x28:  // READ(10)
    case 0x2a:  // WRITE(10)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return read_write(t, cdb[0] == 0x2a, get32(cdb + 2), get16(cdb + 7), (cdb[1] & 0x08) != 0);
    case 0xa8:  // READ(12)
    case 0xaa:  // WRITE(12)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return read_write(t, cdb[0] == 0xaa, get32(cdb + 2), get32(cdb + 6), (cdb[1] & 0x08) != 0);
    case 0x88:  // READ(16)
    case 0x8a:  // WRITE(16)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return read_write(t, cdb[0] == 0x8a, get64(cdb + 2), get32(cdb + 10), (cdb[1] & 0x08) != 0);

    case 0x2e:  // WRITE AND VERIFY(10)
    case 0x2f:  // VERIFY(10)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return verify(t, cdb[0] == 0x2e, get32(cdb + 2), get16(cdb + 7), (cdb[1] >> 1) & 0x03);
    case 0xae:  // WRITE AND VERIFY(12)
    case 0xaf:  // VERIFY(12)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return verify(t, cdb[0] == 0xae, get32(cdb + 2), get32(cdb + 6), (cdb[1] >> 1) & 0x03);
    case 0x8e:  // WRITE AND VERIFY(16)
    case 0x8f:  // VERIFY(16)
      if (protect != 0) return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      return verify(t, cdb[0] == 0x8e, get64(cdb + 2), get32(cdb + 10), (cdb[1] >> 1) & 0x03);

    case 0x89:
      return compare_and_write(t);
    case 0x8b:
      return orwrite(t);
    case 0x9c:
      return write_atomic(t);
    case 0x83:
      return extended_copy(t);
    case 0x84:
      return receive_copy_results(t);
    case 0x34:  // PRE-FETCH(10)
      return pre_fetch(t, get32(cdb + 2), get16(cdb + 7));
    case 0x90:  // PRE-FETCH(16)
      return pre_fetch(t, get64(cdb + 2), get32(cdb + 10));
    case 0x37:  // READ DEFECT DATA(10)
    case 0xb7:  // READ DEFECT DATA(12)
      return read_defect_data(t, cdb[0] == 0xb7);

    case 0x35:  // SYNCHRONIZE CACHE(10)
      return synchronize_cache(t, get32(cdb + 2), get16(cdb + 7));
    case 0x91:  // SYNCHRONIZE CACHE(16)
      return synchronize_cache(t, get64(cdb + 2), get32(cdb + 10));
    case 0x42:
      return unmap(t);
    case 0x41:  // WRITE SAME(10)
    case 0x93:  // WRITE SAME(16)
      // No protection information; ANCHOR needs ANC_SUP, which is 0.
      if (protect != 0 || (cdb[1] & 0x10) != 0)
        return fail_later(t, illegal_request(asc::invalid_field_in_cdb));
      if (cdb[0] == 0x41)
        return write_same(t, get32(cdb + 2), get16(cdb + 7), (cdb[1] & 0x08) != 0, false);
      return write_same(t, get64(cdb + 2), get32(cdb + 10), (cdb[1] & 0x08) != 0,
                        (cdb[1] & 0x01) != 0);

    case 0x1a:
      return mode_sense(t, false);
    case 0x5a:
      return mode_sense(t, true);
    case 0x15:
      return mode_select(t, false);
    case 0x55:
      return mode_select(t, true);

    case 0x5e:
      reservations_.persistent_reserve_in(t);
      return complete_later(t);
    case 0x5f:
      return reservations_.persistent_reserve_out(t);  // completes after saving
    case 0x16:                                         // RESERVE(6)
    case 0x56:                                         // RESERVE(10)
      reservations_.reserve(t);
      return complete_later(t);
    case 0x17:  // RELEASE(6)
    case 0x57:  // RELEASE(10)
      reservations_.release(t);
      return complete_later(t);
    default:
      // REPORT LUNS (A0h) lands here too: the LUN map answers it before
      // any unit sees it.
      return fail_later(t, illegal_request(asc::invalid_command_operation_code));
  }
}

bool logical_unit::admitted(task& t) {
  // A unit attention is reported before a reservation conflict, as Linux-IO does.
  return !attentions_.report(t) && reservations_.allows(t);
}

void logical_unit::complete_later(task& t) {
  ++in_flight_;
  boost::asio::post(volume_.executor(), [this, &t] {
    --in_flight_;  // first: the completion may destroy this unit
    t.on_complete(t);
  });
}

void logical_unit::fail_later(task& t, const sense& s) {
  set_check_condition(t, s);
  t.data_in_bytes = 0;
  complete_later(t);
}

}  // namespace strata::scsi
