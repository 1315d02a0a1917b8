// The version every Strata tool prints for --version: one string for the
// whole tree, so that a report names the build its numbers came from.
#pragma once

namespace strata {

constexpr const char* strata_version = "0.1.0";

}  // namespace strata
