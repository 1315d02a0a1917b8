// stratad: the array daemon (README.md).
//
//   stratad [--config FILE] [--state-dir DIR] [--shelf DIR] [--controller a|b] [--partner-link
//   ADDR:PORT]
//           [--partner-dial ADDR:PORT]
//           [--iscsi ADDR:PORT] [--nvme ADDR:PORT|off] [--loops N] [--spin-us N] [--portal
//           HOST:PORT]...
//           [--nvme-portal HOST:PORT[,PORTID]]...
//           [--grpc ADDR:PORT] [--grpc-tls-cert FILE --grpc-tls-key FILE --grpc-token-file FILE]
//           [--small-shelf] [--volatile-drive-caches]
//
// --config      a configuration file (TOML: controller/strata.example.toml,
//               README.md): how the daemon runs ([daemon]), and what array
//               to build on an empty state directory (the build sections;
//               without them, the embedded default). Read only when given:
//               there is no default path. The flags below override its
//               [daemon] settings.
// --state-dir   where the array keeps everything (default /var/lib/strata);
//               an empty one gets the file's array or the embedded default
// --shelf       where the simulated drives' files are (default STATE/shelf):
//               the drives two controllers share. An empty state directory
//               is never built over a shelf that holds an array, and a
//               state directory never starts on another array's shelf
//               (the array's id on the drives' controller areas)
// --controller  which of the array's two controllers this is (default a).
//               Controller a builds an array on an empty state directory;
//               controller b, on an empty state directory, joins the array
//               on its shelf (--shelf), copying the configuration from
//               controller a over the partner link
// --partner-link
//               the partner link's address: controller b listens there,
//               controller a dials it (loopback; docs/partner-link.md).
//               Controller a then builds the two controllers' embedded
//               default on an empty state directory (dual_plan(): a pool
//               for each; b gets its own once it has joined)
// --partner-dial
//               controller a dials the link here instead of at
//               --partner-link: a relay's address (tests cut the link
//               with one while both controllers run)
// --iscsi       the iSCSI portal (default 127.0.0.1:3260). Any address:
//               an array serves its hosts over their network. Who may log
//               in is the hosts' business (initiator names, CHAP), as on
//               every iSCSI array; off loopback, stratad says which hosts
//               admit an initiator without CHAP
// --nvme        the NVMe/TCP port, or off. Default: where the iSCSI portal
//               is at the standard port 3260, the standard 4420 on its
//               address; a portal elsewhere (tests, several arrays on one
//               machine) serves NVMe/TCP only where --nvme says
// --nvme-portal an NVMe/TCP port the discovery log names (repeated for
//               several): HOST:PORT is this controller's, as hosts reach
//               it; HOST:PORT,PORTID another's (1: controller a's, 2: b's).
//               Default: this port, at the address discovery came in on
// --loops       how many loops (threads) run (default: the machine's
//               cores): the array, its pools and the listeners on the
//               first; iSCSI and NVMe/TCP connections spread over all
//               (ARCHITECTURE.md, "Threads today")
// --spin-us     how long a loop polls for more work before it sleeps
//               (default 100; 0: it sleeps at once). It spins only while
//               spinning pays (raid/device/run_loop.h): at a low rate of
//               requests it sleeps
// --portal      a portal SendTargets names to initiators (repeated for
//               several; default: the address each discovery came in on).
//               Given on the command line, replaces the file's list
// --grpc        the management API, with server reflection (default
//               127.0.0.1:50051). Off loopback it takes the three below.
// --grpc-tls-cert, --grpc-tls-key, --grpc-token-file
//               all three or none: the API's PEM certificate chain and its
//               unencrypted key, and a file whose one line (at least 32
//               characters) is the bearer token every call must carry. With
//               them the API is TLS only, on any address (mgmt/README.md)
// --http        the HTTP side: the JSON API, Prometheus /metrics and the web
//               console (mgmt/http_server.h), ADDR:PORT or off (default:
//               port 8080 at the iSCSI portal's address when that is port
//               3260, as NVMe/TCP's 4420 -- but 127.0.0.1:8080 when that
//               address is off loopback and the API has no TLS files --
//               else off). It takes the API's TLS options: off loopback
//               it needs them, and with them it is HTTPS only
// --console-dir serve the console's files from DIR instead of the copy
//               built into stratad (developing the console)
// --heat-history-interval-s
//               seconds between the pools' heat snapshots, the heat map's
//               history (default 600)
// --small-shelf build the embedded default on 10 HDDs and 5 SSDs of a few
//               GiB (sparse), with a 1 GiB volume: for tests (with
//               --partner-link, the two controllers' default on 10 HDDs
//               and 10 SSDs, a 1 GiB volume in each pool). Not with a file
//               that has build sections
// --volatile-drive-caches
//               a test and torture mode: each drive keeps the writes it has
//               not flushed yet in stratad's memory, as a drive's volatile
//               write cache does, so that a kill -9 loses exactly what a
//               power cut would (tools/torture/). Never for real data
//
// Exit status: 0 after a clean shutdown; 1 if the array cannot start (or
// another daemon holds the state directory); 2 for a wrong command line or
// configuration file (the message names FILE:LINE:COLUMN).
//
// This file is the composition root: the only one in controller/ that
// reaches up to mgmt/ (the management plane drives the controller).
//
// Logs go to stderr as "stratad: LEVEL: message" (journald takes them from
// there under systemd). Once it serves, it tells systemd (READY=1, through
// libsystemd's sd_notify, when NOTIFY_SOCKET is set), pings its watchdog
// from the array's loop when WatchdogSec= is set, and prints how to
// connect. --help lists the flags; --version prints the version. SIGTERM or SIGINT: a
// clean shutdown, exit 0. A second daemon on the same state directory
// exits at once (status 1), naming the pid that holds it.
#include <fcntl.h>
#include <sys/file.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "controller/array.h"
#include "controller/ceph_group.h"
#include "controller/config_file.h"
#include "controller/remote_management.h"
#include "mgmt/http_server.h"
#include "mgmt/server.h"
#include "mgmt/service.h"
#include "raid/device/loop_threads.h"
#include "raid/device/run_loop.h"

namespace {

// A log line on stderr. Under systemd (JOURNAL_STREAM set) each line
// starts with its syslog priority, "<3>" to "<6>", which journald reads as
// the entry's level (sd-daemon(3)).
void say(const char* level, const std::string& what) {
  static const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
  const std::string_view l = level;
  const char* priority = l == "critical"  ? "<2>"
                         : l == "error"   ? "<3>"
                         : l == "warning" ? "<4>"
                                          : "<6>";
  std::fprintf(stderr, "%sstratad: %s: %s\n", journal ? priority : "", level, what.c_str());
}

[[noreturn]] void usage(const std::string& problem) {
  say("error", problem);
  std::fprintf(
      stderr,
      "usage: stratad [--config FILE] [--state-dir DIR] [--shelf DIR] [--controller a|b] "
      "[--partner-link ADDR:PORT]\n"
      "               [--partner-dial ADDR:PORT]\n"
      "               [--iscsi ADDR:PORT] [--nvme ADDR:PORT|off] [--loops N] [--spin-us N] "
      "[--portal HOST:PORT]...\n"
      "               [--nvme-portal HOST:PORT[,PORTID]]...\n"
      "               [--grpc ADDR:PORT] [--grpc-tls-cert FILE --grpc-tls-key FILE "
      "--grpc-token-file FILE]\n"
      "               [--http ADDR:PORT|off] [--console-dir DIR] [--heat-history-interval-s N]\n"
      "               [--small-shelf] [--volatile-drive-caches] [--help] [--version]\n");
  std::exit(2);
}

// Holds STATE/stratad.lock while the daemon runs: one daemon per state.
int take_lock(const std::filesystem::path& state) {
  std::error_code ec;
  std::filesystem::create_directories(state, ec);
  const std::string path = (state / "stratad.lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    say("error", "cannot open " + path + ": " + std::strerror(errno));
    std::exit(1);
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    say("error", "another stratad (pid " +
                     std::string(pid, n > 0 ? static_cast<std::size_t>(n) : 0) + ") runs on " +
                     state.string());
    std::exit(1);
  }
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) < 0)
    say("warning", "cannot write the pid to " + path);
  return fd;
}

// systemd's readiness protocol: one datagram to $NOTIFY_SOCKET.
void notify_systemd(const char* state) {
  // Nothing without NOTIFY_SOCKET (not under systemd, or Type=simple).
  if (const int r = sd_notify(0, state); r < 0)
    say("warning", std::string("cannot notify systemd: ") + std::strerror(-r));
}

// --small-shelf: the embedded default's layout over small drives (the two
// controllers' default, with five more SSDs, when `dual`).
strata::controller::array_plan small_plan(bool dual) {
  using strata::controller::drive_kind;
  std::vector<strata::controller::drive_spec> d;
  for (int i = 0; i < 10; ++i)
    d.push_back({"hdd-0" + std::to_string(i), drive_kind::hdd, 4ull << 30, {}, "nl_sas_7k2"});
  for (int i = 0; i < (dual ? 10 : 5); ++i)
    d.push_back({"ssd-0" + std::to_string(i), drive_kind::ssd, 2ull << 30, {}, "sas_12g"});
  return dual ? strata::controller::dual_plan(std::move(d), 1ull << 30)
              : strata::controller::default_plan(std::move(d), 1ull << 30);
}

// A portal on the network admits whoever its hosts admit: said once at
// the start for each host that takes any initiator without CHAP, so an
// admin who opened the portal knows who can log in (changing a host is
// the API's: `strata host update`).
void warn_open_hosts(const strata::controller::config_store& config, const std::string& portal) {
  for (const auto& [key, bytes] : config.list("hosts/")) {
    strata::v1::Host host;
    if (!host.ParseFromString(bytes))
      continue;  // the array refused to open on such a record already
    const auto access = strata::controller::host_access_of(host);
    if (access.any_initiator && !access.chap) {
      say("warning",
          "the iSCSI portal " + portal + " is off loopback and " + key +
              " admits any initiator without CHAP: anyone who reaches the portal can use its LUNs");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  namespace controller = strata::controller;
  // The command line, which overrides the file's [daemon] settings.
  std::optional<std::filesystem::path> config_path, state_dir, shelf_dir, tls_cert, tls_key,
      token_file, console_dir;
  std::optional<std::string> iscsi, nvme, grpc, http, partner_link, partner_dial, loops_text,
      spin_text;
  std::optional<int> heat_history_interval_s;
  std::vector<std::string> nvme_portal_texts;
  std::string controller_name = "a";
  std::optional<std::vector<std::string>> portals;
  bool small_shelf = false;
  bool volatile_drive_caches = false;
  CLI::App app{
      "stratad: the Strata array's daemon. With no configuration it serves the embedded default on "
      "this machine's\n"
      "loopback (docs and flags: controller/stratad.cc, controller/strata.example.toml).",
      "stratad"};
  app.set_version_flag("--version", strata::mgmt::array_service::version);
  app.add_option("--config", config_path,
                 "a configuration file (TOML: controller/strata.example.toml)");
  app.add_option("--state-dir", state_dir,
                 "where the array keeps everything (default /var/lib/strata)");
  app.add_option("--shelf", shelf_dir,
                 "where the simulated drives' files are (default STATE/shelf)");
  app.add_option("--controller", controller_name, "which of the array's two controllers this is")
      ->check(CLI::IsMember({"a", "b"}));
  app.add_option("--partner-link", partner_link,
                 "the partner link's ADDR:PORT (b listens, a dials)");
  app.add_option(
      "--partner-dial", partner_dial,
      "controller a dials the partner link here instead (a relay; tests cut the link with it)");
  app.add_option("--iscsi", iscsi, "the iSCSI portal, ADDR:PORT (default 127.0.0.1:3260)");
  app.add_option("--nvme", nvme,
                 "the NVMe/TCP port, ADDR:PORT or off (default: the iSCSI portal's address, port "
                 "4420, when that is 3260)");
  app.add_option("--loops", loops_text,
                 "how many loops (threads) run, 1 to 256 (default: the machine's cores)");
  app.add_option(
      "--spin-us", spin_text,
      "how long a loop polls for more work before it sleeps, in microseconds (default 100)");
  app.add_option("--portal", portals,
                 "a portal SendTargets names to initiators, HOST:PORT (repeat for several)");
  app.add_option(
      "--nvme-portal", nvme_portal_texts,
      "an NVMe/TCP port the discovery log names, HOST:PORT[,PORTID] (repeat for several)");
  app.add_option("--grpc", grpc, "the management API's ADDR:PORT (default 127.0.0.1:50051)");
  app.add_option("--grpc-tls-cert", tls_cert,
                 "the API's PEM certificate chain (all three TLS options or none)");
  app.add_option("--grpc-tls-key", tls_key, "the API's unencrypted PEM key");
  app.add_option("--grpc-token-file", token_file,
                 "a file whose one line is the bearer token every call must carry");
  app.add_option("--http", http,
                 "the HTTP side (JSON API, /metrics, the web console): ADDR:PORT or off (default: "
                 "port 8080 at the iSCSI portal's address when that is port 3260, else off)");
  app.add_option(
         "--console-dir", console_dir,
         "serve the web console from this directory instead of the copy built in (development)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--heat-history-interval-s", heat_history_interval_s,
                 "seconds between heat snapshots for the heat map (10 to 86400, default 600)")
      ->check(CLI::Range(10, 86400));
  app.add_flag("--small-shelf", small_shelf,
               "build the embedded default on small sparse drives (tests)");
  app.add_flag("--volatile-drive-caches", volatile_drive_caches,
               "drives keep unflushed writes in memory, lost on kill -9 (tests, torture)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    usage(e.what());
  }
  if (partner_link) {
    if (auto bad = controller::parse_listen_address(*partner_link); !bad)
      usage("--partner-link takes ADDR:PORT: " + bad.error());
  }
  if (partner_dial) {
    if (auto bad = controller::parse_listen_address(*partner_dial); !bad)
      usage("--partner-dial takes ADDR:PORT: " + bad.error());
  }
  std::vector<controller::nvme_portal> nvme_portals;
  for (const std::string& text : nvme_portal_texts) {
    auto portal = controller::parse_nvme_portal(text);
    if (!portal) usage("--nvme-portal takes HOST:PORT or HOST:PORT,PORTID: " + portal.error());
    nvme_portals.push_back(std::move(*portal));
  }
  unsigned long loops = std::max(1u, std::thread::hardware_concurrency());
  if (loops_text) {
    const std::string& n = *loops_text;
    loops = n.find_first_not_of("0123456789") == std::string::npos && !n.empty() && n.size() < 4
                ? std::stoul(n)
                : 0;
    if (loops == 0 || loops > 256) usage("--loops takes a number from 1 to 256");
  }
  std::chrono::microseconds spin{100};
  if (spin_text) {
    const std::string& n = *spin_text;
    if (n.empty() || n.size() > 5 || n.find_first_not_of("0123456789") != std::string::npos)
      usage("--spin-us takes a number of microseconds up to 99999");
    spin = std::chrono::microseconds(std::stoul(n));
  }
  if (nvme && *nvme != "off") {
    if (auto bad = controller::parse_listen_address(*nvme); !bad)
      usage("--nvme takes ADDR:PORT or off: " + bad.error());
  }
  if (iscsi) {
    if (auto bad = controller::parse_listen_address(*iscsi); !bad)
      usage("--iscsi takes ADDR:PORT: " + bad.error());
  }
  if (http && *http != "off") {
    if (auto bad = controller::parse_listen_address(*http); !bad)
      usage("--http takes ADDR:PORT or off: " + bad.error());
  }
  controller::strata_config config;
  if (config_path) {
    auto loaded = controller::load_config(*config_path);
    if (!loaded) {
      say("error", loaded.error().message);
      return 2;
    }
    config = std::move(*loaded);
  }
  controller::daemon_settings& settings = config.daemon;
  if (state_dir) settings.state_dir = *state_dir;
  if (iscsi) settings.iscsi_listen = *iscsi;
  if (portals) settings.iscsi_portals = *portals;
  if (grpc) settings.grpc_listen = *grpc;
  if (tls_cert) settings.grpc_tls_cert = *tls_cert;
  if (tls_key) settings.grpc_tls_key = *tls_key;
  if (token_file) settings.grpc_token_file = *token_file;
  if (http) settings.http_listen = *http;
  if (heat_history_interval_s)
    settings.heat_history_interval = std::chrono::seconds(*heat_history_interval_s);
  for (const std::string& p : settings.iscsi_portals) {
    if (auto bad = controller::check_portal(p)) usage("--portal takes HOST:PORT: " + *bad);
  }
  const bool file_builds = config.plan.has_value();
  if (small_shelf && config.plan)
    usage("--small-shelf and the build sections of " + config_path->string() +
          " both say what to build");

  controller::array_options options;
  options.state_dir = settings.state_dir;
  if (shelf_dir) options.shelf_dir = *shelf_dir;
  options.controller = controller_name;
  if (partner_link) {
    const auto at = controller::parse_listen_address(*partner_link);
    options.partner_link =
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address(at->address), at->port);
    if (!options.partner_link->address().is_loopback())
      usage("the partner link runs on loopback only (127.0.0.0/8)");
    if (partner_dial) {
      const auto dial = controller::parse_listen_address(*partner_dial);
      options.partner_dial =
          boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address(dial->address), dial->port);
      if (!options.partner_dial->address().is_loopback())
        usage("the partner link runs on loopback only (127.0.0.0/8)");
    }
  }
  const auto listen = controller::parse_listen_address(
      settings.iscsi_listen);  // checked by the file's parser or above
  if (!listen) usage("the iSCSI portal: " + listen.error());
  options.iscsi = {boost::asio::ip::make_address(listen->address), listen->port};
  if (nvme && *nvme != "off") {
    const auto at = controller::parse_listen_address(*nvme);
    options.nvme =
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address(at->address), at->port);
  } else if (!nvme && listen->port == 3260) {
    options.nvme = boost::asio::ip::tcp::endpoint(options.iscsi.address(), 4420);
  }
  options.iscsi_portals = settings.iscsi_portals;
  options.nvme_portals = nvme_portals;
  options.target_name = settings.target_name;
  options.volatile_drive_caches = volatile_drive_caches;
  if (const char* hooks = std::getenv("STRATA_TEST_HOOKS"); hooks && *hooks) {
    const std::string list = std::string(",") + hooks + ",";
    options.test_stamps_after_partner_beats =
        list.find(",stamps-after-partner-beats,") != std::string::npos;
    say("warning", std::string("test hooks on (STRATA_TEST_HOOKS=") + hooks + "): not for service");
  }
  options.heat_history_interval = settings.heat_history_interval;
  if (config.plan) {
    options.plan = std::move(*config.plan);
    options.plan_origin = "the array of " + config_path->string();
  } else {
    // With a partner, the embedded default is the two controllers' one:
    // a pool each (controller a builds both; b joins).
    const bool dual = options.partner_link.has_value();
    if (small_shelf) {
      options.plan = small_plan(dual);
    } else if (dual) {
      options.plan = controller::dual_plan();
      options.plan_origin = "the two controllers' embedded default";
    }
  }
  const std::string grpc_address = settings.grpc_listen;
  strata::mgmt::security_options grpc_security{settings.grpc_tls_cert, settings.grpc_tls_key,
                                               settings.grpc_token_file};
  if (config_path) {
    say("info", "configuration: " + config_path->string());
    // The build sections are for an empty state directory: once the
    // config store exists, the array is what it and the superblocks say.
    std::error_code ec;
    if (file_builds && std::filesystem::exists(options.state_dir / "config", ec)) {
      say("info",
          options.state_dir.string() +
              " holds an array already: it is assembled from its own records, and the build "
              "sections of " +
              config_path->string() + " are not read (they are for an empty state directory)");
    }
  }
  // The API's TLS files and token, for both faces, checked before the
  // array opens (which takes a while): a mistake there is told at once.
  if (settings.http_listen.empty()) {
    settings.http_listen =
        listen->port == 3260
            ? (options.iscsi.address().is_v6() ? "[" + listen->address + "]" : listen->address) +
                  ":8080"
            : "off";
    // A portal on the network with no TLS files for the API: the default
    // HTTP side stays on this machine rather than stopping stratad (off
    // loopback it would need them); an address given is held to the rule.
    if (listen->port == 3260 && !options.iscsi.address().is_loopback() &&
        grpc_security.tls_cert.empty()) {
      settings.http_listen = "127.0.0.1:8080";
      say("info",
          "the HTTP side (console, JSON API, /metrics) listens on 127.0.0.1:8080 only: off "
          "loopback it needs the API's TLS files");
    }
  }
  for (const auto& [what, address] :
       {std::pair<std::string, std::string>{"the management API", grpc_address},
        {"the HTTP server", settings.http_listen}}) {
    if (address == "off") continue;
    if (auto checked = strata::mgmt::load_security(what, address, grpc_security); !checked) {
      say("error", checked.error().message);
      return 1;
    }
  }
  const int lock = take_lock(options.state_dir);
  if (volatile_drive_caches)
    say("warning",
        "--volatile-drive-caches: unflushed writes live in this process's memory (a test mode)");
  options.log = [](std::string_view what) { say("info", std::string(what)); };
  options.event = [](strata::controller::severity level, std::string_view what) {
    say(strata::controller::to_string(level), "event: " + std::string(what));
  };

  boost::asio::io_context loop;
  // The loops beyond this one, for iSCSI and NVMe/TCP connections: they run until
  // the array has closed (its connections end on them).
  std::optional<strata::device::loop_threads> connection_loops;
  if (loops > 1) {
    connection_loops.emplace(static_cast<unsigned>(loops - 1), spin);
    options.connection_loops = connection_loops->executors();
    options.connection_loops.insert(options.connection_loops.begin(), loop.get_executor());
  }
  auto array = strata::controller::array::open(loop, options);
  if (!array) {
    say("error", array.error().message);
    return 1;
  }
  // The server checks the three go together and reads the files: its
  // message names the one at fault.
  strata::controller::management manage((*array)->config(), array->get());
  manage.set_version(strata::mgmt::array_service::version);
  // Controller b's API hands its changes to this one over the partner link.
  (*array)->answer_partner_calls([&manage](strata::controller::link_bytes call, bool delegated) {
    return strata::controller::answer_call(manage, call, delegated);
  });
  auto api = strata::mgmt::management_server::start(manage, grpc_address, grpc_security);
  if (!api) {
    say("error", api.error().message);
    (*array)->close();
    return 1;
  }
  std::unique_ptr<strata::mgmt::http_server> web;
  if (settings.http_listen != "off") {
    strata::mgmt::http_options http_options;
    http_options.address = settings.http_listen;
    http_options.security = grpc_security;  // one rule for both faces of the API
    if (console_dir) http_options.console_dir = *console_dir;
    auto started = strata::mgmt::http_server::start((*api)->in_process_channel(), http_options);
    if (!started) {
      say("error", started.error().message);
      api->reset();
      (*array)->close();
      return 1;
    }
    web = std::move(*started);
  }
  const auto at = (*array)->iscsi_endpoint();
  const std::string portal = at.address().to_string() + ":" + std::to_string(at.port());
  const std::string http_address =
      settings.http_listen.substr(0, settings.http_listen.rfind(':') + 1) +
      (web ? std::to_string(web->port()) : "");
  say("info", "ready: iSCSI on " + portal + ", management API on " +
                  grpc_address.substr(0, grpc_address.rfind(':') + 1) +
                  std::to_string((*api)->port()) +
                  (grpc_security.token_file.empty() ? "" : " (TLS, bearer token)") +
                  (web ? ", console and JSON API on " +
                             std::string(web->tls() ? "https://" : "http://") + http_address
                       : "") +
                  ", state in " + options.state_dir.string());
  std::printf(
      "stratad is ready. Connect with:\n  iscsi-ls iscsi://%s\n  iscsi-inq iscsi://%s/%s/0\n",
      portal.c_str(), portal.c_str(), (*array)->target_name().c_str());
  if (const auto nvme_at = (*array)->nvme_endpoint()) {
    std::printf("  nvme connect -t tcp -a %s -s %u -n %s\n", nvme_at->address().to_string().c_str(),
                nvme_at->port(), (*array)->nvme_subsystem_nqn().c_str());
  }
  if (web)
    std::printf("  the console: %s://%s/\n", web->tls() ? "https" : "http", http_address.c_str());
  std::fflush(stdout);
  if (!at.address().is_loopback()) warn_open_hosts((*array)->config(), portal);
  notify_systemd("READY=1");
  // The watchdog (WatchdogSec= in the unit): each ping is sent from the
  // array's loop, so a loop that hangs stops the pings and systemd restarts
  // the daemon.
  std::uint64_t watchdog_us = 0;
  boost::asio::steady_timer watchdog(loop);
  std::function<void()> ping;
  if (sd_watchdog_enabled(0, &watchdog_us) > 0) {
    ping = [&] {
      notify_systemd("WATCHDOG=1");
      watchdog.expires_after(std::chrono::microseconds(watchdog_us / 2));
      watchdog.async_wait([&](const boost::system::error_code& ec) {
        if (!ec) ping();
      });
    };
    ping();
    say("info", "the systemd watchdog is on: a ping every " + std::to_string(watchdog_us / 2000) +
                    " ms from the array's loop");
  }

  boost::asio::signal_set signals(loop, SIGTERM, SIGINT);
  std::thread api_stopper;
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    say("info", std::string(signal == SIGTERM ? "SIGTERM" : "SIGINT") + ": shutting down");
    notify_systemd("STOPPING=1");
    // The API first, while the loop still runs: a call in flight waits for
    // the loop, and the server's shutdown waits for the calls. Then the loop.
    watchdog.cancel();
    api_stopper = std::thread([&] {
      web.reset();   // its calls go through the API's server
      api->reset();  // before the config store it reads goes
      boost::asio::post(loop, [&] { loop.stop(); });
    });
  });
  strata::device::run_loop(loop, spin);
  if (api_stopper.joinable()) api_stopper.join();
  (*array)->close();
  connection_loops.reset();  // joined before the array (and its NVMe/TCP port) goes
  array->reset();
  // Ceph images close off the loop, and a status query may hold its thread
  // up to op_timeout: waited for here, while the loop they post to stands.
  if (!strata::controller::ceph_image::wait_for_threads(std::chrono::seconds(60))) {
    say("warning", "a Ceph cluster did not answer within 60 s: its images' threads are left");
    ::close(lock);
    std::_Exit(0);
  }
  say("info", "stopped cleanly");
  ::close(lock);
  return 0;
}
