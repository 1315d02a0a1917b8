// tools/cli.h: the command-line conventions the tools share (CLI11).
//
// Every tool builds its own CLI::App (its options, described with their
// units), then calls use_conventions() before adding options and
// parse_or_exit() after. That gives each the same behaviour:
// - --help (-h) and --version, on stdout, exit status 0;
// - an option given twice keeps its last value, as the hand-written parsers
//   did (a script may append an override to a default command line);
// - a bad command line is reported on stderr as "TOOL: --option: what is
//   wrong", and the tool exits with the status its callers expect for a
//   usage error (2 for most tools, 1 where the tool always used 1).
// Header-only, like CLI11: each tool is one translation unit of main code.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/version.h"

namespace strata::tools {

// --version and the defaults of the options added after this call: the
// last value wins, and --help shows each option's default.
inline void use_conventions(CLI::App& app) {
  app.set_version_flag("--version", app.get_name() + " " + strata_version,
                       "Print the version and exit");
  app.option_defaults()->always_capture_default()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(34);
}

// A usage error found after parsing (one that involves several options,
// or that only setting up what they ask for finds), in the parser's words.
[[noreturn]] inline void usage_error(const std::string& tool, const std::string& problem,
                                     int status = 2) {
  std::fprintf(stderr, "%s: %s\nRun with --help for more information.\n", tool.c_str(),
               problem.c_str());
  std::exit(status);
}

// Parses the command line; returns only if it is good. --help and
// --version print and exit 0; a bad command line exits `usage_status`.
inline void parse_or_exit(CLI::App& app, int argc, char** argv, int usage_status = 2) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) std::exit(app.exit(e));
    usage_error(app.get_name(), e.what(), usage_status);
  }
}

// A number above zero: durations and counts for which zero means nothing.
// No description: "S:> 0" in --help's option column reads worse than the
// error message, which says it.
inline const CLI::Validator positive(
    [](std::string& text) -> std::string {
      double value = 0;
      if (!CLI::detail::lexical_cast(text, value)) return text + " is not a number";
      if (!(value > 0)) return "must be above zero, not " + text;
      return {};
    },
    "");

}  // namespace strata::tools
