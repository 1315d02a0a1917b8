// strata: the array's command line, a client of the management API
// (proto/strata/v1/array.proto) that stratad serves. `strata --help` lists
// the commands, `strata NOUN VERB --help` a command's options (CLI11).
//
//   strata [--api ADDR:PORT] [--tls-ca FILE] [--token-file FILE] [--json] NOUN VERB [NAME]
//   [OPTIONS]
//
// The files: main.cc (this: the top-level options, parsing, errors and exit
// statuses), client.cc (the connection and the tables and JSON every
// command prints), resources.cc (controllers, disks, groups, pools,
// volumes, hosts, mappings, operations, events, version, heat top/list),
// heat.cc (heat map and heat report, live or offline on a metadata copy),
// heat_render.cc (the text map, the report, SVG and PNG), system.cc (the
// appliance's boot slots, run on the appliance itself), completion.cc
// (bash completion, derived from the commands defined here).
//
// --api          where stratad serves the API (default 127.0.0.1:50051):
//                plaintext, unless --tls-ca is given
// --tls-ca       a PEM file of the certificates to trust (the CA, or the
//                server's own self-signed certificate): the call goes over
//                TLS, and the certificate must name the host in --api
// --token-file   a file whose one line is the bearer token, sent with each
//                call as "authorization: Bearer TOKEN"; only over TLS, so
//                it needs --tls-ca
// STRATA_TLS_CA and STRATA_TOKEN_FILE, when set, stand for the two options
// (the options win): a shell that talks to one array sets them once.
//
// NAME may be short ("hdd-00", "v1") or a resource name ("disks/hdd-00").
// Output: a table for people, or with --json one JSON object per resource
// (a JSON array for lists), for scripts. Errors go to stderr.
// Exit status: 0 done; 1 the array refused the request (the message says
// which field and why); 2 a usage error; 3 the array cannot be reached.
#include <cstdio>
#include <string>

#include "tools/strata/cli.h"

namespace {

using namespace strata::cli;

// "strata volume create": the command line's words down to `command`.
std::string path_of(const CLI::App* command) {
  std::string path;
  for (; command != nullptr; command = command->get_parent())
    path = command->get_name() + (path.empty() ? "" : " " + path);
  return path;
}

// The deepest subcommand the parser selected (the app itself if none).
const CLI::App* selected(const CLI::App& app) {
  const CLI::App* leaf = &app;
  for (;;) {
    auto subs = leaf->get_subcommands();
    if (subs.empty()) return leaf;
    leaf = subs.front();
  }
}

int usage(const std::string& problem, const CLI::App* command) {
  std::fprintf(stderr, "strata: %s\n(%s --help: what it takes)\n", problem.c_str(),
               path_of(command).c_str());
  return exit_usage;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("strata: the array's command line, a client of stratad's management API", "strata");
  // As before CLI11: an option given twice takes its last value; the
  // top-level options are accepted after the command too (fallthrough).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.fallthrough();
  app.set_version_flag("--version", std::string("strata ") + strata::cli::version,
                       "the CLI's own version (`strata version`: the array's)");
  context ctx;
  app.add_option(
         "--api", ctx.api,
         "where stratad serves the API (default 127.0.0.1:50051); plaintext unless --tls-ca")
      ->type_name("ADDR:PORT");
  CLI::Option* tls_ca =
      app.add_option("--tls-ca", ctx.tls_ca,
                     "TLS, trusting the PEM certificates in FILE (default $STRATA_TLS_CA)")
          ->type_name("FILE");
  CLI::Option* token_file = app.add_option("--token-file", ctx.token_file,
                                           "send the bearer token in FILE with each call, over TLS "
                                           "only (default $STRATA_TOKEN_FILE)")
                                ->type_name("FILE");
  app.add_flag("--json", ctx.as_json,
               "JSON for scripts: one object per resource, an array for lists");

  add_resource_commands(app, ctx);
  add_heat_commands(app, ctx);
  add_system_commands(app, ctx);
  add_completion_command(app, ctx);
  // Set last: a subcommand copies its parent's footer when it is made.
  app.footer(
      "NAME may be short (hdd-00, v1: a volume in p1) or a resource name (disks/hdd-00, "
      "pools/p2/volumes/v1).\n"
      "SIZE: bytes, or with K, M, G, T (powers of 1024: 100G, 512MiB).\n"
      "STRATA_TLS_CA and STRATA_TOKEN_FILE, when set, stand for --tls-ca and --token-file (the "
      "options win).\n"
      "Exit status: 0 done; 1 the array refused the request (the message names the field and says "
      "why);\n"
      "2 a usage error; 3 the array cannot be reached.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11 checks what is required before what is left over: an option
    // misspelt ("--sise 1G") would be reported as "--size is required".
    // The word it did not know is the real problem; name it.
    const std::vector<std::string> left = app.remaining(true);
    if (!left.empty())
      return usage("The following argument was not expected: " + left.front(), selected(app));
    return usage(e.what(), selected(app));
  }
  for (CLI::Option* file : {tls_ca, token_file}) {
    if (file->count() > 0 && file->as<std::string>().empty())
      return usage(file->get_name() + " needs a FILE", &app);
  }
  const CLI::App* leaf = selected(app);
  const std::function<int()>* action = ctx.action(leaf);
  if (action == nullptr) {
    std::string words;
    for (const CLI::App* word : leaf->get_subcommands({})) {
      if (!word->get_group().empty()) words += (words.empty() ? "" : ", ") + word->get_name();
    }
    return usage(leaf == &app ? "what to do? a command: " + words
                              : path_of(leaf).substr(7) + " needs one of: " + words,
                 leaf);
  }
  try {
    return (*action)();
  } catch (const usage_error& e) {
    return usage(e.what(), e.command != nullptr ? e.command : leaf);
  }
}
