// A fabrics controller's properties (NVM Express Base 2.0, "Controller
// Registers"; NVMe over Fabrics 1.1, 3.4 and 3.5): what Property Get reads
// and Property Set writes on the admin queue. CAP, VS, CC and CSTS are the
// ones a fabrics host uses: it reads CAP and VS, enables the controller
// through CC.EN and waits for CSTS.RDY, and shuts it down through CC.SHN
// and waits for CSTS.SHST. A CC a controller cannot honour (entry sizes,
// page size, command set, arbitration) sets CSTS.CFS, as Linux's nvmet does.
//
// Threads: the admin queue's connection.
#pragma once

#include <cstdint>
#include <expected>

#include "target/nvme/status.h"

namespace strata::nvme {

namespace property {
constexpr std::uint32_t cap = 0x00;   // 8 bytes, read only
constexpr std::uint32_t vs = 0x08;    // 4 bytes, read only
constexpr std::uint32_t cc = 0x14;    // 4 bytes
constexpr std::uint32_t csts = 0x1c;  // 4 bytes, read only
}  // namespace property

class controller_registers {
 public:
  // `max_queue_entries`: the deepest queue a host may create (CAP.MQES + 1);
  // `ready_timeout_ms`: how long a host waits for CSTS.RDY (CAP.TO, in
  // 500 ms units, rounded up).
  controller_registers(std::uint32_t max_queue_entries, std::uint32_t ready_timeout_ms) noexcept;

  // What a CC write did: the controller enabled, reset (EN 1 to 0, every
  // I/O queue of it torn down), or shut down.
  enum class change { none, enabled, reset, shut_down };

  // Property Get: the value, or invalid field (an unknown offset, or a size
  // the register does not have).
  std::expected<std::uint64_t, status> get(std::uint32_t offset,
                                           unsigned size_bytes) const noexcept;
  // Property Set: only CC is writable, four bytes.
  std::expected<change, status> set(std::uint32_t offset, unsigned size_bytes,
                                    std::uint64_t value) noexcept;

  bool ready() const noexcept { return (csts_ & csts_ready) != 0; }
  std::uint64_t cap() const noexcept { return cap_; }

  static constexpr std::uint32_t version = 0x00020000;  // NVMe 2.0
  static constexpr std::uint32_t csts_ready = 0x1;
  static constexpr std::uint32_t csts_fatal = 0x2;
  static constexpr std::uint32_t csts_shutdown_complete = 0x2 << 2;

 private:
  std::uint64_t cap_;
  std::uint32_t cc_ = 0;
  std::uint32_t csts_ = 0;
};

}  // namespace strata::nvme
