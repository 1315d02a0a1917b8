// `strata system`: the appliance's boot slots (docs/appliance.md). Unlike
// every other command these act on the machine strata runs on, not through
// the API: an upgrade writes the boot disk's other root slot, which only
// the appliance itself can do. Each execs strata-system (the
// strata-appliance package's /usr/sbin/strata-system, from
// tools/appliance/), which carries the logic, so that the slot layout lives
// in one place beside the image builder that makes it. $STRATA_SYSTEM
// names another program (tests, a development tree).
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tools/strata/cli.h"

namespace strata::cli {

namespace {

struct system_values {
  std::string image, tries;
  bool no_reboot = false;
};

int exec_system(std::vector<std::string> args) {
  const char* program = std::getenv("STRATA_SYSTEM");
  const std::string path =
      program != nullptr && *program != '\0' ? program : "/usr/sbin/strata-system";
  args.insert(args.begin(), path);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(path.c_str(), argv.data());
  // Only on failure: no appliance here, or the program is broken.
  std::fprintf(stderr, "strata: cannot run %s: %s%s\n", path.c_str(), std::strerror(errno),
               errno == ENOENT ? " (strata system works on a Strata appliance, whose "
                                 "strata-appliance package has it: docs/appliance.md)"
                               : "");
  return exit_refused;
}

}  // namespace

void add_system_commands(CLI::App& app, context& ctx) {
  CLI::App* system = app.add_subcommand(
      "system",
      "this appliance's boot slots: status, upgrade (run on the appliance itself, as root)");
  auto v = std::make_shared<system_values>();
  CLI::App* status = system->add_subcommand(
      "status", "the two root slots: which booted, which boots next, their versions");
  ctx.on(status, [] { return exec_system({"status"}); });
  CLI::App* upgrade = system->add_subcommand(
      "upgrade",
      "write IMAGE (a raw image from tools/build-image.sh) to the other root slot and boot it; "
      "a slot that does not come up falls back to this one");
  upgrade->add_option("IMAGE", v->image, "the new version's raw disk image")
      ->type_name("FILE")
      ->required();
  upgrade
      ->add_option("--tries", v->tries,
                   "boots the new slot gets to come up before the fallback (default 3)")
      ->type_name("N");
  upgrade->add_flag("--no-reboot", v->no_reboot,
                    "write the slot and make it next, but leave the reboot to the admin");
  ctx.on(upgrade, [v] {
    std::vector<std::string> args{"upgrade", v->image};
    if (!v->tries.empty()) args.insert(args.end(), {"--tries", v->tries});
    if (v->no_reboot) args.push_back("--no-reboot");
    return exec_system(std::move(args));
  });
}

}  // namespace strata::cli
