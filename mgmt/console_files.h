// The web console's files (mgmt/console/), built into stratad: the array
// serves its console with nothing to install beside it, and fetches
// nothing from outside (arrays sit on isolated networks).
// embed_console.cmake writes the definition at build time.
#pragma once

#include <span>
#include <string_view>

namespace strata::mgmt {

struct console_file {
  std::string_view path;  // relative to mgmt/console/: "index.html", "js/api.js"
  std::string_view bytes;
};

std::span<const console_file> console_files();

}  // namespace strata::mgmt
