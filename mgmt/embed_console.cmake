# Writes OUTPUT: a C++ file defining strata::mgmt::console_files() with
# every file under SOURCE_DIR (mgmt/console/) but its README, its tests,
# dot files and node_modules (console_files.h).
# Run by mgmt/CMakeLists.txt at build time: cmake -DSOURCE_DIR=... -DOUTPUT=... -P embed_console.cmake
file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/*")
list(SORT files)
set(arrays "")
set(table "")
set(index 0)
foreach(f IN LISTS files)
  if(f MATCHES "(^|/)\\." OR f MATCHES "(^|/)node_modules/" OR f MATCHES "^tests/" OR f STREQUAL "README.md")
    continue()
  endif()
  file(READ "${SOURCE_DIR}/${f}" hex HEX)
  string(LENGTH "${hex}" hex_chars)
  math(EXPR size "${hex_chars} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
  string(APPEND arrays "const char file_${index}[] = {${bytes}};\n")
  string(APPEND table "    {\"${f}\", {file_${index}, ${size}}},\n")
  math(EXPR index "${index} + 1")
endforeach()
file(WRITE "${OUTPUT}.new" "// Written by mgmt/embed_console.cmake from mgmt/console/: do not edit.
#include \"mgmt/console_files.h\"

namespace strata::mgmt {
namespace {
${arrays}const console_file all[] = {
${table}    {\"\", {}},
};
}  // namespace

std::span<const console_file> console_files() { return {all, ${index}}; }

}  // namespace strata::mgmt
")
# Only a changed console rebuilds what includes it.
file(COPY_FILE "${OUTPUT}.new" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.new")
