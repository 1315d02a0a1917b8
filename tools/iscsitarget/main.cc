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
// --nvme-host limits the NVMe hosts to those named (default: any).
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
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "raid/device/memory_device.h"
#include "raid/device/loop_threads.h"
#include "raid/device/run_loop.h"
#include "target/iscsi/server.h"
#include "target/nvme/server.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/lun_map.h"

namespace {

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "strata-iscsi-target: %s\n"
               "usage: strata-iscsi-target [--listen ADDR:PORT] [--target IQN] [--luns N] [--lun-mib M]"
               " [--block-size 512|4096] [--chap USER:SECRET [--mutual-chap USER:SECRET]]"
               " [--discovery-chap USER:SECRET] [--acl IQN[=LUN:UNIT,...]]... [--ping-seconds S]"
               " [--login-timeout-seconds S] [--immediate-data yes|no] [--physical-block-bytes N]"
               " [--max-held-write-mib M] [--read-only] [--poll-microseconds U]"
               " [--nvme-listen ADDR:PORT [--nqn NQN] [--nvme-host HOSTNQN]...] [--loops N]\n",
               problem.c_str());
  std::exit(2);
}

strata::iscsi::chap_credentials credentials(const std::string& arg, const std::string& flag) {
  const auto colon = arg.find(':');
  if (colon == std::string::npos) usage(flag + " needs USER:SECRET");
  return {arg.substr(0, colon), arg.substr(colon + 1)};
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
  if (e.initiator.empty()) usage("--acl needs an initiator name");
  if (eq == std::string::npos) return e;
  std::string rest = arg.substr(eq + 1);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string pair = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const auto colon = pair.find(':');
    if (colon == std::string::npos) usage("--acl pairs are LUN:UNIT, not '" + pair + "'");
    e.luns.emplace_back(static_cast<std::uint16_t>(std::stoul(pair.substr(0, colon))),
                        static_cast<unsigned>(std::stoul(pair.substr(colon + 1))));
  }
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  std::string listen = "127.0.0.1:3260";
  std::string name = "iqn.2026-11.io.strata:target";
  unsigned luns = 1;
  std::uint64_t lun_mib = 64;
  std::uint32_t block_size = 512;
  std::uint32_t physical_block = 0;
  bool read_only = false;
  std::chrono::microseconds poll{100};
  std::optional<iscsi::chap_credentials> chap;
  std::optional<iscsi::chap_credentials> mutual_chap;
  std::optional<iscsi::chap_credentials> discovery_chap;
  std::vector<acl_entry> acls;
  iscsi::server_options options;
  std::string nvme_listen;
  unsigned loops = 1;
  nvme::subsystem nvme_subsystem{"nqn.2026-11.io.strata:target", {}, {}};
  std::vector<std::string> nvme_hosts;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    try {
      if (arg == "--listen") {
        listen = value();
      } else if (arg == "--target") {
        name = value();
      } else if (arg == "--luns") {
        luns = static_cast<unsigned>(std::stoul(value()));
      } else if (arg == "--lun-mib") {
        lun_mib = std::stoull(value());
      } else if (arg == "--block-size") {
        block_size = static_cast<std::uint32_t>(std::stoul(value()));
      } else if (arg == "--chap") {
        chap = credentials(value(), arg);
      } else if (arg == "--mutual-chap") {
        mutual_chap = credentials(value(), arg);
      } else if (arg == "--discovery-chap") {
        discovery_chap = credentials(value(), arg);
      } else if (arg == "--acl") {
        acls.push_back(parse_acl(value()));
      } else if (arg == "--ping-seconds") {
        options.ping_interval = options.ping_timeout = std::chrono::seconds(std::stoul(value()));
      } else if (arg == "--poll-microseconds") {
        poll = std::chrono::microseconds(std::stoul(value()));
      } else if (arg == "--read-only") {
        read_only = true;
      } else if (arg == "--max-held-write-mib") {
        options.max_held_write_bytes = std::size_t{std::stoul(value())} << 20;
      } else if (arg == "--physical-block-bytes") {
        physical_block = static_cast<std::uint32_t>(std::stoul(value()));
      } else if (arg == "--immediate-data") {
        const std::string v = value();
        if (v != "yes" && v != "no") usage("--immediate-data is yes or no");
        options.offer.immediate_data = v == "yes";
      } else if (arg == "--loops") {
        loops = static_cast<unsigned>(std::stoul(value()));
      } else if (arg == "--nvme-listen") {
        nvme_listen = value();
      } else if (arg == "--nqn") {
        nvme_subsystem.nqn = value();
      } else if (arg == "--nvme-host") {
        nvme_hosts.push_back(value());
      } else if (arg == "--login-timeout-seconds") {
        options.login_timeout = std::chrono::seconds(std::stoul(value()));
      } else {
        usage("unknown option " + arg);
      }
    } catch (const std::exception&) {
      usage("bad value for " + arg);
    }
  }
  if (block_size != 512 && block_size != 4096) usage("--block-size must be 512 or 4096");
  if (physical_block != 0 && (physical_block & (physical_block - 1)) != 0) usage("--physical-block-bytes must be a power of two");
  if (luns == 0 || luns > 256 || lun_mib == 0) usage("--luns must be 1 to 256 and --lun-mib positive");
  const auto endpoint_of = [](const std::string& flag, const std::string& at) {
    const auto colon = at.rfind(':');
    if (colon == std::string::npos) usage(flag + " needs ADDR:PORT");
    boost::system::error_code ec;
    const auto address = boost::asio::ip::make_address(at.substr(0, colon), ec);
    if (ec) usage("bad address in " + flag + ": " + at);
    return boost::asio::ip::tcp::endpoint(address, static_cast<unsigned short>(std::stoul(at.substr(colon + 1))));
  };
  const auto iscsi_at = endpoint_of("--listen", listen);

  boost::asio::io_context loop;
  std::vector<std::unique_ptr<device::memory_device>> disks;
  std::vector<std::unique_ptr<scsi::logical_unit>> units;
  scsi::lun_map all(loop.get_executor());
  for (unsigned l = 0; l < luns; ++l) {
    auto d = device::memory_device::create(loop.get_executor(), {block_size, (lun_mib << 20) / block_size});
    if (!d) usage(d.error().message);
    disks.push_back(std::move(*d));
    scsi::unit_identity id;
    id.serial = "STRATA" + std::to_string(1000 + l);
    id.physical_block_bytes = physical_block;
    id.write_protected = read_only;
    units.push_back(std::make_unique<scsi::logical_unit>(*disks.back(), id));
    if (auto e = all.add(static_cast<std::uint16_t>(l), *units.back())) usage("lun " + std::to_string(l) + ": " + e.message());
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
  iscsi::target_node target{name, {}, std::nullopt};
  const iscsi::initiator_access everything{&all, chap, mutual_chap};
  std::vector<std::unique_ptr<scsi::lun_map>> views;  // one per --acl that lists its LUNs
  for (const acl_entry& e : acls) {
    iscsi::initiator_access access = everything;
    if (!e.luns.empty()) {
      views.push_back(std::make_unique<scsi::lun_map>(loop.get_executor()));
      for (const auto& [lun, unit] : e.luns) {
        if (unit >= units.size()) usage("--acl " + e.initiator + ": no unit " + std::to_string(unit));
        if (auto err = views.back()->add(lun, *units[unit])) usage("--acl " + e.initiator + ": lun " + std::to_string(lun) + ": " + err.message());
      }
      access.luns = views.back().get();
    }
    target.initiators[e.initiator] = access;
  }
  if (acls.empty()) target.anyone = everything;
  if (auto bad = iscsi::check_target(target)) usage(*bad);
  if (discovery_chap) {
    if (auto bad = iscsi::check_chap_secrets(*discovery_chap, std::nullopt)) usage("--discovery-chap: " + *bad);
    options.discovery.chap = discovery_chap;
  }
  options.log = [](std::string_view why) {
    std::fprintf(stderr, "strata-iscsi-target: %.*s\n", static_cast<int>(why.size()), why.data());
  };
  // The loops beyond this one, for connections of both protocols. Reset
  // (joined) at the end, once their connections have ended, before the
  // servers go.
  std::optional<device::loop_threads> extra_loops;
  if (loops > 1) {
    extra_loops.emplace(loops - 1, poll);
    options.connection_loops = extra_loops->executors();
    options.connection_loops.push_back(loop.get_executor());
  }
  iscsi::server server(loop.get_executor(), {std::move(target)}, options);
  if (auto ok = server.listen(iscsi_at); !ok) {
    std::fprintf(stderr, "strata-iscsi-target: %s\n", ok.error().message.c_str());
    return 1;
  }
  const auto here = server.local_endpoint();
  std::printf("listening on %s:%u target %s\n", here.address().to_string().c_str(), here.port(), name.c_str());
  std::fflush(stdout);
  std::optional<nvme::server> nvme_server;
  if (!nvme_listen.empty()) {
    std::vector<nvme::namespace_config> namespaces;
    for (unsigned l = 0; l < luns; ++l) {
      namespaces.push_back({l + 1, units[l].get(), block_size, units[l]->identity().serial, 1});
    }
    // Every host allowed sees every unit.
    for (const std::string& h : nvme_hosts) nvme_subsystem.hosts[h] = namespaces;
    if (nvme_hosts.empty()) nvme_subsystem.anyone = namespaces;
    nvme::server_options nvme_options;
    nvme_options.ana_groups = 1;
    nvme_options.connection_loops = options.connection_loops;
    nvme_options.log = [](std::string_view why) {
      std::fprintf(stderr, "strata-iscsi-target: %.*s\n", static_cast<int>(why.size()), why.data());
    };
    const std::string nqn = nvme_subsystem.nqn;
    nvme_server.emplace(loop.get_executor(), std::vector{std::move(nvme_subsystem)}, nvme_options);
    if (auto ok = nvme_server->listen(endpoint_of("--nvme-listen", nvme_listen)); !ok) {
      std::fprintf(stderr, "strata-iscsi-target: %s\n", ok.error().message.c_str());
      return 1;
    }
    const auto there = nvme_server->local_endpoint();
    std::printf("nvme listening on %s:%u subsystem %s\n", there.address().to_string().c_str(), there.port(), nqn.c_str());
    std::fflush(stdout);
  }
  boost::asio::signal_set signals(loop, SIGINT, SIGTERM);
  // On SIGINT or SIGTERM: stop accepting and close every connection, then
  // let the connections on the other loops end (they tell this loop when
  // they have), for at most 5 s, before the loops stop.
  boost::asio::steady_timer draining(loop);
  int drain_rounds = 0;
  std::function<void()> drain = [&] {
    const bool drained = server.connections() == 0 && (!nvme_server || nvme_server->connections() == 0);
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
  strata::device::run_loop(loop, poll);
  extra_loops.reset();
  return 0;
}
