// strata-iscsi-target: Strata's iSCSI target over memory-backed LUNs, for
// the tests with real initiators and for the benchmark against tgtd, and
// with --nvme-listen its NVMe/TCP target over the same units (unit N is
// namespace N + 1 of subsystem --nqn): one unit, two protocols, one
// reservation state and one range interlock. The daemon (stratad) serves
// volumes through the same servers; this tool exists so that the targets
// can be tested and measured on their own.
//
//   strata-iscsi-target [--listen ADDR:PORT] [--target IQN] [--luns N]
//                       [--lun-mib M] [--block-size 512|4096]
//                       [--chap USER:SECRET [--mutual-chap USER:SECRET]]
//                       [--discovery-chap USER:SECRET] [--acl IQN[=LUN:UNIT,...]]...
//                       [--ping-seconds S] [--login-timeout-seconds S]
//                       [--immediate-data yes|no] [--physical-block-bytes N]
//                       [--max-held-write-mib M] [--read-only] [--poll-microseconds U]
//                       [--nvme-listen ADDR:PORT [--nqn NQN] [--nvme-host HOSTNQN]...] [--loops N]
//                       [--nvme-write-buffer-bytes-per-queue BYTES]
//                       [--nvme-write-buffer-bytes-per-host BYTES] [--nvme-h2c-data-timeout-ms MS]
//
// Without --acl any initiator may log in and sees unit N as LUN N. With
// --acl only the initiators named may, each seeing the units listed under
// the LUN numbers given (all units, as LUN N, if none are listed). --chap
// makes every initiator prove USER:SECRET; --mutual-chap makes the target
// prove its own to initiators that ask. --ping-seconds sets both how long
// an initiator may be silent before a NOP-In and how long it has to answer.
// Login failures and dropped connections are printed on stderr. SIGUSR1
// asks every initiator to log out within 10 s (an Asynchronous Message).
// --poll-microseconds (default 100; 0: none) is how long the loop spins
// for more work before it sleeps (raid/device/run_loop.h).
//
// --nvme-host limits the NVMe hosts to those named (default: any). The
// --nvme-write-buffer-* options bound the write data waiting for its
// command (R2T buffers) per queue and per host, and --nvme-h2c-data-timeout-ms
// is how long an R2T may go unanswered (target/nvme/server.h's defaults).
// --loops N (default 1) runs N loops: the units and both listeners on the
// first, and the iSCSI and NVMe/TCP connections spread over all N
// (raid/device/loop_threads.h).
//
// It prints "listening on ADDR:PORT" once it accepts connections (port 0
// picks a free one), and "nvme listening on ADDR:PORT subsystem NQN" with
// --nvme-listen, and runs until SIGINT or SIGTERM.
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "raid/device/loop_threads.h"
#include "raid/device/memory_device.h"
#include "raid/device/run_loop.h"
#include "target/iscsi/server.h"
#include "target/nvme/server.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/lun_map.h"
#include "tools/cli.h"

namespace {

using strata::iscsi::chap_credentials;

constexpr const char* tool = "strata-iscsi-target";

[[noreturn]] void usage(const std::string& problem) {
  strata::tools::usage_error(tool, problem);
}

// A check for CLI11 from a parser that throws std::invalid_argument saying
// what is wrong: the value is checked as it is parsed, and parsed again
// (without fail) once the command line is whole.
template <class Parse>
std::function<std::string(const std::string&)> check_with(Parse parse) {
  return [parse](const std::string& text) -> std::string {
    try {
      parse(text);
      return {};
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
  };
}

unsigned long number(const std::string& text) {
  std::size_t used = 0;
  try {
    const unsigned long n = std::stoul(text, &used);
    if (used == text.size()) return n;
  } catch (const std::logic_error&) {
  }
  throw std::invalid_argument("'" + text + "' is not a number");
}

chap_credentials credentials(const std::string& arg) {
  const auto colon = arg.find(':');
  if (colon == std::string::npos) throw std::invalid_argument("needs USER:SECRET");
  return {arg.substr(0, colon), arg.substr(colon + 1)};
}

boost::asio::ip::tcp::endpoint endpoint(const std::string& at) {
  const auto colon = at.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("needs ADDR:PORT");
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(at.substr(0, colon), ec);
  if (ec) throw std::invalid_argument("bad address: " + at);
  return {address, static_cast<unsigned short>(number(at.substr(colon + 1)))};
}

// One --acl: the initiator, and its LUN -> unit pairs (empty: all units as themselves).
struct acl_entry {
  std::string initiator;
  std::vector<std::pair<std::uint16_t, unsigned>> luns;
};

acl_entry parse_acl(const std::string& arg) {
  acl_entry e;
  const auto eq = arg.find('=');
  e.initiator = arg.substr(0, eq);
  if (e.initiator.empty()) throw std::invalid_argument("needs an initiator name");
  if (eq == std::string::npos) return e;
  std::string rest = arg.substr(eq + 1);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string pair = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const auto colon = pair.find(':');
    if (colon == std::string::npos)
      throw std::invalid_argument("pairs are LUN:UNIT, not '" + pair + "'");
    e.luns.emplace_back(static_cast<std::uint16_t>(number(pair.substr(0, colon))),
                        static_cast<unsigned>(number(pair.substr(colon + 1))));
  }
  return e;
}

// What the command line asks for.
struct settings {
  std::string listen = "127.0.0.1:3260";
  std::string name = "iqn.2026-11.io.strata:target";
  unsigned luns = 1;
  std::uint64_t lun_mib = 64;
  std::uint32_t block_size = 512;
  std::uint32_t physical_block = 0;
  bool read_only = false;
  std::chrono::microseconds poll{100};
  std::optional<chap_credentials> chap;
  std::optional<chap_credentials> mutual_chap;
  std::optional<chap_credentials> discovery_chap;
  std::vector<acl_entry> acls;
  strata::iscsi::server_options options;
  std::string nvme_listen;
  std::string nqn = "nqn.2026-11.io.strata:target";
  std::vector<std::string> nvme_hosts;
  strata::nvme::server_options nvme_options;
  std::uint64_t nvme_h2c_data_timeout_ms = 30000;
  unsigned loops = 1;
};

settings parse(int argc, char** argv) {
  settings s;
  CLI::App app{
      "Strata's iSCSI target over memory-backed LUNs, and with --nvme-listen its NVMe/TCP target "
      "over "
      "the same units (unit N is namespace N + 1). Prints \"listening on ADDR:PORT\" once it "
      "accepts "
      "connections; runs until SIGINT or SIGTERM; SIGUSR1 asks every initiator to log out.",
      tool};
  strata::tools::use_conventions(app);
  app.add_option("--listen", s.listen, "iSCSI portal to listen on (port 0 picks a free one)")
      ->type_name("ADDR:PORT")
      ->check(check_with(endpoint));
  app.add_option("--target", s.name, "The target's name")->type_name("IQN");
  app.add_option("--luns", s.luns, "Memory-backed units to serve (LUN N is unit N)")
      ->type_name("N")
      ->check(CLI::Range(1u, 256u));
  app.add_option("--lun-mib", s.lun_mib, "Size of each unit, in MiB")
      ->type_name("M")
      ->check(strata::tools::positive);
  app.add_option("--block-size", s.block_size,
                 "Logical block size of each unit, in bytes: 512 or 4096")
      ->type_name("BYTES")
      ->check(CLI::IsMember({512u, 4096u}));
  std::string chap, mutual_chap, discovery_chap;
  app.add_option("--chap", chap, "Every initiator must prove this CHAP secret")
      ->type_name("USER:SECRET")
      ->check(check_with(credentials));
  app.add_option("--mutual-chap", mutual_chap,
                 "The target proves this to initiators that ask (with --chap)")
      ->type_name("USER:SECRET")
      ->check(check_with(credentials));
  app.add_option("--discovery-chap", discovery_chap, "CHAP secret for discovery sessions")
      ->type_name("USER:SECRET")
      ->check(check_with(credentials));
  std::vector<std::string> acls;
  app.add_option(
         "--acl", acls,
         "Only the initiators named may log in (repeat for each), each seeing the units listed "
         "under the "
         "LUN numbers given, or all units as LUN N if none are listed (default: anyone sees all)")
      ->type_name("IQN[=LUN:UNIT,...]")
      ->default_str("")
      ->allow_extra_args(false)
      ->check(check_with(parse_acl));
  unsigned long ping_seconds = static_cast<unsigned long>(s.options.ping_interval.count());
  app.add_option("--ping-seconds", ping_seconds,
                 "How long an initiator may be silent before a NOP-In, and how long it has to "
                 "answer, in seconds "
                 "(0: no pings)")
      ->type_name("S");
  unsigned long login_timeout_seconds = static_cast<unsigned long>(s.options.login_timeout.count());
  app.add_option("--login-timeout-seconds", login_timeout_seconds,
                 "How long a login may take, in seconds")
      ->type_name("S");
  std::string immediate_data = s.options.offer.immediate_data ? "yes" : "no";
  app.add_option("--immediate-data", immediate_data, "Offer ImmediateData")
      ->check(CLI::IsMember({"yes", "no"}));
  app.add_option("--physical-block-bytes", s.physical_block,
                 "Physical block size the units report, in bytes: a power of two (0: the logical "
                 "block size)")
      ->type_name("N")
      ->check(check_with([](const std::string& text) {
        const unsigned long n = number(text);
        if ((n & (n - 1)) != 0) throw std::invalid_argument("must be a power of two");
      }));
  std::size_t max_held_write_mib = s.options.max_held_write_bytes >> 20;
  app.add_option("--max-held-write-mib", max_held_write_mib,
                 "Write data one connection may hold for commands not yet answered, in MiB at most")
      ->type_name("M");
  app.add_flag("--read-only", s.read_only, "Serve the units write-protected");
  unsigned long poll_us = static_cast<unsigned long>(s.poll.count());
  app.add_option(
         "--poll-microseconds", poll_us,
         "How long the loop spins for more work before it sleeps, in microseconds (0: none)")
      ->type_name("U");
  app.add_option("--nvme-listen", s.nvme_listen, "Also serve the units over NVMe/TCP here")
      ->type_name("ADDR:PORT")
      ->check(check_with(endpoint));
  app.add_option("--nqn", s.nqn, "The NVMe subsystem's name (with --nvme-listen)")
      ->type_name("NQN");
  app.add_option("--nvme-host", s.nvme_hosts,
                 "Only the NVMe hosts named may connect (repeat for each; default: any)")
      ->type_name("HOSTNQN")
      ->default_str("")
      ->allow_extra_args(false);
  app.add_option("--nvme-write-buffer-bytes-per-queue", s.nvme_options.write_buffer_bytes_per_queue,
                 "Write data (R2T buffers) one NVMe/TCP queue may hold")
      ->type_name("BYTES");
  app.add_option("--nvme-write-buffer-bytes-per-host", s.nvme_options.write_buffer_bytes_per_host,
                 "Write data (R2T buffers) one NVMe host may hold across its queues")
      ->type_name("BYTES");
  app.add_option("--nvme-h2c-data-timeout-ms", s.nvme_h2c_data_timeout_ms,
                 "How long an R2T may go unanswered before its connection ends (0: never)")
      ->type_name("MS")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{86'400'000}));
  app.add_option("--loops", s.loops,
                 "Event loops: the units and both listeners on the first, connections of both "
                 "protocols spread "
                 "over all")
      ->type_name("N");
  strata::tools::parse_or_exit(app, argc, argv);
  if (!chap.empty()) s.chap = credentials(chap);
  if (!mutual_chap.empty()) s.mutual_chap = credentials(mutual_chap);
  if (!discovery_chap.empty()) s.discovery_chap = credentials(discovery_chap);
  for (const std::string& acl : acls) s.acls.push_back(parse_acl(acl));
  s.options.ping_interval = s.options.ping_timeout = std::chrono::seconds(ping_seconds);
  s.options.login_timeout = std::chrono::seconds(login_timeout_seconds);
  s.options.offer.immediate_data = immediate_data == "yes";
  s.options.max_held_write_bytes = max_held_write_mib << 20;
  s.poll = std::chrono::microseconds(poll_us);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  settings s = parse(argc, argv);
  const unsigned luns = s.luns;
  const std::uint32_t block_size = s.block_size;
  iscsi::server_options& options = s.options;
  const auto iscsi_at = endpoint(s.listen);

  boost::asio::io_context loop;
  std::vector<std::unique_ptr<device::memory_device>> disks;
  std::vector<std::unique_ptr<scsi::logical_unit>> units;
  scsi::lun_map all(loop.get_executor());
  for (unsigned l = 0; l < luns; ++l) {
    auto d = device::memory_device::create(loop.get_executor(),
                                           {block_size, (s.lun_mib << 20) / block_size});
    if (!d) usage(d.error().message);
    disks.push_back(std::move(*d));
    scsi::unit_identity id;
    id.serial = "STRATA" + std::to_string(1000 + l);
    id.physical_block_bytes = s.physical_block;
    id.write_protected = s.read_only;
    units.push_back(std::make_unique<scsi::logical_unit>(*disks.back(), id));
    if (auto e = all.add(static_cast<std::uint16_t>(l), *units.back()))
      usage("lun " + std::to_string(l) + ": " + e.message());
  }
  // EXTENDED COPY between any two of the units (all on this loop).
  for (const auto& u : units) {
    u->set_copy_targets([&units](std::span<const std::uint8_t, 16> naa) -> scsi::logical_unit* {
      for (const auto& candidate : units) {
        if (std::ranges::equal(candidate->naa_designator(), naa)) return candidate.get();
      }
      return nullptr;
    });
  }
  iscsi::target_node target{s.name, {}, std::nullopt};
  const iscsi::initiator_access everything{&all, s.chap, s.mutual_chap};
  std::vector<std::unique_ptr<scsi::lun_map>> views;  // one per --acl that lists its LUNs
  for (const acl_entry& e : s.acls) {
    iscsi::initiator_access access = everything;
    if (!e.luns.empty()) {
      views.push_back(std::make_unique<scsi::lun_map>(loop.get_executor()));
      for (const auto& [lun, unit] : e.luns) {
        if (unit >= units.size())
          usage("--acl " + e.initiator + ": no unit " + std::to_string(unit));
        if (auto err = views.back()->add(lun, *units[unit]))
          usage("--acl " + e.initiator + ": lun " + std::to_string(lun) + ": " + err.message());
      }
      access.luns = views.back().get();
    }
    target.initiators[e.initiator] = access;
  }
  if (s.acls.empty()) target.anyone = everything;
  if (auto bad = iscsi::check_target(target)) usage(*bad);
  if (s.discovery_chap) {
    if (auto bad = iscsi::check_chap_secrets(*s.discovery_chap, std::nullopt))
      usage("--discovery-chap: " + *bad);
    options.discovery.chap = s.discovery_chap;
  }
  options.log = [](std::string_view why) {
    std::fprintf(stderr, "strata-iscsi-target: %.*s\n", static_cast<int>(why.size()), why.data());
  };
  // The loops beyond this one, for connections of both protocols. Reset
  // (joined) at the end, once their connections have ended, before the
  // servers go.
  std::optional<device::loop_threads> extra_loops;
  if (s.loops > 1) {
    extra_loops.emplace(s.loops - 1, s.poll);
    options.connection_loops = extra_loops->executors();
    options.connection_loops.push_back(loop.get_executor());
  }
  iscsi::server server(loop.get_executor(), {std::move(target)}, options);
  if (auto ok = server.listen(iscsi_at); !ok) {
    std::fprintf(stderr, "strata-iscsi-target: %s\n", ok.error().message.c_str());
    return 1;
  }
  const auto here = server.local_endpoint();
  std::printf("listening on %s:%u target %s\n", here.address().to_string().c_str(), here.port(),
              s.name.c_str());
  std::fflush(stdout);
  std::optional<nvme::server> nvme_server;
  if (!s.nvme_listen.empty()) {
    std::vector<nvme::namespace_config> namespaces;
    for (unsigned l = 0; l < luns; ++l) {
      namespaces.push_back({l + 1, units[l].get(), block_size, units[l]->identity().serial, 1});
    }
    // Every host allowed sees every unit.
    nvme::subsystem nvme_subsystem{s.nqn, {}, {}};
    for (const std::string& h : s.nvme_hosts) nvme_subsystem.hosts[h] = namespaces;
    if (s.nvme_hosts.empty()) nvme_subsystem.anyone = namespaces;
    nvme::server_options nvme_options = s.nvme_options;
    nvme_options.h2c_data_timeout = std::chrono::milliseconds(s.nvme_h2c_data_timeout_ms);
    nvme_options.ana_groups = 1;
    nvme_options.connection_loops = options.connection_loops;
    nvme_options.log = [](std::string_view why) {
      std::fprintf(stderr, "strata-iscsi-target: %.*s\n", static_cast<int>(why.size()), why.data());
    };
    const std::string nqn = nvme_subsystem.nqn;
    nvme_server.emplace(loop.get_executor(), std::vector{std::move(nvme_subsystem)}, nvme_options);
    if (auto ok = nvme_server->listen(endpoint(s.nvme_listen)); !ok) {
      std::fprintf(stderr, "strata-iscsi-target: %s\n", ok.error().message.c_str());
      return 1;
    }
    const auto there = nvme_server->local_endpoint();
    std::printf("nvme listening on %s:%u subsystem %s\n", there.address().to_string().c_str(),
                there.port(), nqn.c_str());
    std::fflush(stdout);
  }
  boost::asio::signal_set signals(loop, SIGINT, SIGTERM);
  // On SIGINT or SIGTERM: stop accepting and close every connection, then
  // let the connections on the other loops end (they tell this loop when
  // they have), for at most 5 s, before the loops stop.
  boost::asio::steady_timer draining(loop);
  int drain_rounds = 0;
  std::function<void()> drain = [&] {
    const bool drained =
        server.connections() == 0 && (!nvme_server || nvme_server->connections() == 0);
    if (drained || ++drain_rounds > 500) return loop.stop();
    draining.expires_after(std::chrono::milliseconds(10));
    draining.async_wait([&](const boost::system::error_code&) { drain(); });
  };
  signals.async_wait([&](const boost::system::error_code&, int) {
    if (nvme_server) nvme_server->stop();
    server.stop();
    drain();
  });
  boost::asio::signal_set logout(loop, SIGUSR1);
  std::function<void()> on_usr1 = [&]() {
    logout.async_wait([&](const boost::system::error_code& failed, int) {
      if (failed) return;
      server.request_logout(std::chrono::seconds(10));
      on_usr1();
    });
  };
  on_usr1();
  strata::device::run_loop(loop, s.poll);
  extra_loops.reset();
  return 0;
}
