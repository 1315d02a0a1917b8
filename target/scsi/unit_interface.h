// What a transport and the LUN map see of a logical unit: it runs tasks
// and hears of nexuses and resets. logical_unit (logical_unit.h) is one,
// over a volume on this controller; a unit whose volume another
// controller serves is another (controller/forwarded_unit.h: it sends each
// task to that controller's logical_unit and brings the outcome back), so
// that every LUN can be reached through every controller's ports.
//
// The contract is logical_unit's (its header says it in full): execute()
// on executor()'s thread; each task completes once, later, on executor();
// the task stays alive until then; there is no abort, so a transport
// handling ABORT TASK or LUN RESET waits for completions; a unit is not
// destroyed while commands_in_flight() > 0.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>

#include "target/scsi/sense.h"
#include "target/scsi/task.h"

namespace strata::scsi {

class unit_interface {
 public:
  virtual ~unit_interface() = default;

  virtual void execute(task& t) noexcept = 0;
  virtual boost::asio::any_io_executor executor() const noexcept = 0;
  virtual std::size_t commands_in_flight() const noexcept = 0;

  // The transport announces each I_T nexus at login (and to each unit
  // mapped into a live session) and says when it ends.
  virtual void nexus_created(const i_t_nexus& n) = 0;
  virtual void nexus_lost(const i_t_nexus& n) = 0;
  // LOGICAL UNIT RESET received on nexus `by`.
  virtual void reset(const i_t_nexus& by) = 0;
  // A condition the transport reports for `n` (3F/0E when its LUN map
  // changed), and its clearing (REPORT LUNS clears 3F/0E).
  virtual void establish_unit_attention(const i_t_nexus& n, additional_sense code) = 0;
  virtual void clear_unit_attention(const i_t_nexus& n, additional_sense code) = 0;
};

}  // namespace strata::scsi
