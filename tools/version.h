// The version every Strata tool prints for --version and the API reports:
// one string for the whole tree, so that a report names the build its
// numbers came from. It comes from CMake (STRATA_VERSION, by default the
// project's version in CMakeLists.txt; debian/rules passes the package's
// upstream version), through the header CMake generates in the build tree.
#pragma once

#include "strata_version.h"

namespace strata {

constexpr const char* strata_version = STRATA_VERSION;

}  // namespace strata
