// The part of a redundant group that hot spares need: which members have
// failed, and putting a spare in a failed member's place. RAID-6 and RAID-1
// groups both offer it, so one set of spares serves both kinds.
#pragma once

#include <functional>
#include <optional>
#include <system_error>

#include "raid/device/block_device.h"
#include "raid/device/status.h"

namespace strata::raid {

class member_replacement {
 public:
  virtual unsigned member_count() const noexcept = 0;
  virtual bool member_failed(unsigned member) const noexcept = 0;
  // Starts rebuilding `member` onto `spare`; `done` gets the outcome, from
  // the loop. Refusals change nothing, and their code says what to do:
  // errc::busy (other background work runs: try again after it),
  // errc::device_failed (too few members left to rebuild from), or
  // errc::invalid_argument (the member is working, or the spare does not fit).
  virtual std::optional<error> replace_member(unsigned member, device::block_device* spare,
                                              std::function<void(std::error_code)> done) = 0;

 protected:
  ~member_replacement() = default;
};

}  // namespace strata::raid
