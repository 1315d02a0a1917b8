// The one object that holds the source tree's absolute path (harness.h).
#include <filesystem>

#include "tests/raid/device/harness.h"

namespace strata::device::testing {

std::filesystem::path source_dir() {
  return STRATA_SOURCE_DIR;
}

}  // namespace strata::device::testing
