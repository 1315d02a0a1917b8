// What strata-bdevperf's parts share to run a peer (fio, rbd bench) beside
// Strata and to compare them: the peer's whole output, and medians.
#pragma once

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace strata::tools {

struct command_output {
  int status = 0;      // pclose's: 0 when the command exited 0
  std::string output;  // its stdout (and stderr, when the command says 2>&1)
};

// Runs `command` under /bin/sh and reads all it writes. Nothing when it
// could not be started.
inline std::optional<command_output> run_command(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  command_output result;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe))
    result.output.append(buffer, n);
  result.status = ::pclose(pipe);
  return result;
}

inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace strata::tools
