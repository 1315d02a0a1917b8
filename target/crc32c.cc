#include "target/crc32c.h"

#include <isa-l/crc.h>

namespace strata {

std::uint32_t crc32c(std::span<const std::uint8_t> bytes, std::uint32_t running) noexcept {
  // ISA-L keeps the register un-inverted: invert in and out, so that calls chain.
  return ~crc32_iscsi(const_cast<unsigned char*>(bytes.data()), static_cast<int>(bytes.size()),
                      ~running);
}

}  // namespace strata
