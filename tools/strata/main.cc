// strata: the array's command line, a client of the management API
// (proto/strata/v1/array.proto) that stratad serves.
//
//   strata [--api ADDR:PORT] [--tls-ca FILE] [--token-file FILE] [--json] NOUN VERB [NAME]
//
//   controller list | controller show [NAME]   (the controller answering: controllers/a)
//   disk list | disk show NAME          group list | group show NAME
//   disk add NAME --kind hdd|ssd --size SIZE   (a simulated drive in a new slot)
//   disk fail NAME                      (out of its group, as a dying drive)
//   disk erase NAME                     (a replaced member's superblocks wiped: blank again)
//   disk replace NAME --with DISK [--wait]   (a rebuild onto DISK: an operation)
//   disk spare NAME | disk unspare NAME (a hot spare for every group, or not)
//   group create NAME --raid6|--raid1|--read-cache DISK... [--pool POOL]
//                                       (blank disks; --pool: the pool grows by it)
//   group scrub NAME [--wait]           (RAID-6 parity check: an operation)
//   pool create NAME GROUP... [--cache GROUP]   (over groups no pool has)
//   pool list | pool show NAME          volume list [POOL] | volume show NAME
//   host list | host show NAME          map list | map show NAME
//   volume create NAME --size SIZE [--pool POOL] [--affinity auto|performance|capacity]
//                 [--block-size 512|4096] [--write-cache write-back|write-through]
//                                       (512: 512e, the default; 4096: 4Kn)
//   pool update NAME --write-cache write-back|write-through
//   pool move NAME --to a|b [--wait]   (a planned move: an operation)
//   controller failover|failback NAME [--wait]   (a controller's pools to its partner and back)
//                                       (a pool with a write log; write-through destages first)
//   volume update NAME [--size SIZE] [--affinity …] [--write-cache write-back|write-through]
//                                       (volumes only grow; write-through: past the pool's
//                                        write-back cache, whatever the pool's mode)
//   volume delete NAME [--wait]         (an operation; --wait: until it ends)
//   volume move NAME --to capacity|performance [--wait]
//                                       (its extents moved to one tier: an operation;
//                                        cancelling it puts the affinity back)
//   host add NAME (--iqn IQN)... (--nqn NQN)... [--any] [--chap USER:SECRET [--mutual-chap USER:SECRET]]
//   host update NAME [(--iqn IQN)...] [(--nqn NQN)...] [--chap USER:SECRET | --no-chap] [--mutual-chap …]
//   host delete NAME
//   map VOLUME --lun N [--host HOST] [--name NAME]      unmap NAME
//   op list | op show NAME | op cancel NAME
//   events [--limit N]                  (newest first; default 50)
//   volume stats NAME | pool stats NAME (rates over the last 5 s)
//   heat top VOLUME [--limit N]         (hottest extents first; default 20)
//   heat list VOLUME                    (every extent, in order)
//   version
//
// SIZE: bytes, or with K, M, G, T (powers of 1024; "100G", "512MiB").
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
#include <grpcpp/grpcpp.h>
#include <google/protobuf/util/json_util.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "strata/v1/array.grpc.pb.h"

namespace {

namespace v1 = strata::v1;

constexpr int exit_refused = 1;
constexpr int exit_usage = 2;
constexpr int exit_unreachable = 3;

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "strata: %s\n"
               "usage: strata [--api ADDR:PORT] [--tls-ca FILE] [--token-file FILE] [--json] NOUN VERB [NAME]\n"
               "  controller|disk|group|pool|host|map list, controller|disk|group|pool|volume|host|map show NAME,\n"
               "  disk add NAME --kind hdd|ssd --size SIZE, disk fail|erase NAME, disk replace NAME --with DISK [--wait], disk spare|unspare NAME,\n"
               "  group create NAME --raid6|--raid1|--read-cache DISK... [--pool POOL], group scrub NAME [--wait],\n"
               "  pool create NAME GROUP... [--cache GROUP], pool update NAME --write-cache write-back|write-through, pool move NAME --to a|b [--wait],\n"
               "  controller failover|failback NAME [--wait],\n"
               "  volume list [POOL], volume create NAME --size SIZE [--pool POOL] [--affinity auto|performance|capacity] [--block-size 512|4096]\n"
               "    [--write-cache write-back|write-through],\n"
               "  volume update NAME [--size SIZE] [--affinity A] [--write-cache M], volume delete NAME [--wait],\n"
               "  volume move NAME --to capacity|performance [--wait],\n"
               "  host add NAME (--iqn IQN)... (--nqn NQN)... [--any] [--chap USER:SECRET [--mutual-chap USER:SECRET]],\n"
               "  host update NAME [(--iqn IQN)...] [(--nqn NQN)...] [--chap USER:SECRET | --no-chap] [--mutual-chap USER:SECRET],\n"
               "  host delete NAME, map VOLUME --lun N [--host HOST] [--name NAME], unmap NAME,\n"
               "  op list, op show NAME, op cancel NAME, events [--limit N], version,\n"
               "  volume stats NAME, pool stats NAME, heat top VOLUME [--limit N], heat list VOLUME\n"
               "  --tls-ca FILE: TLS, trusting the PEM certificates in FILE (default $STRATA_TLS_CA);\n"
               "  --token-file FILE: send the bearer token in FILE with each call, over TLS only (default $STRATA_TOKEN_FILE)\n",
               problem.c_str());
  std::exit(exit_usage);
}

int fail(const grpc::Status& status) {
  static const char* const names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                                      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                                      "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                                      "UNAUTHENTICATED"};
  const int code = status.error_code();
  const bool unreachable = code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
  std::fprintf(stderr, "strata: %s: %s\n", code >= 0 && code <= 16 ? names[code] : "?", status.error_message().c_str());
  return unreachable ? exit_unreachable : exit_refused;
}

std::string json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;  // lun 0 and false, for scripts
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

std::string size(std::uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string joined(const google::protobuf::RepeatedPtrField<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ",") + i;
  return out.empty() ? "-" : out;
}

// A table: a header row, then rows, columns padded to their widest cell.
void table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  auto print = [&](const std::vector<std::string>& r) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) line += r[c] + (c + 1 < r.size() ? std::string(width[c] - r[c].size() + 2, ' ') : "");
    std::printf("%s\n", line.c_str());
  };
  print(header);
  for (const auto& r : rows) print(r);
}

std::string when(std::int64_t unix_ms);
std::vector<std::string> row(const v1::Controller& c) {
  const std::string state = v1::ControllerState_Name(c.state());
  return {c.name(), state.substr(state.find('_') + 1), c.version().empty() ? "-" : c.version(), c.iscsi_portal().empty() ? "-" : c.iscsi_portal(),
          joined(c.pools()), c.start_time_unix_ms() == 0 ? "-" : when(c.start_time_unix_ms())};
}
// An enum value's name without its prefix: DISK_ONLINE → ONLINE.
std::string state_name(const std::string& full, std::string_view prefix) {
  return full.starts_with(prefix) ? full.substr(prefix.size()) : full;
}
std::vector<std::string> row(const v1::Disk& d) {
  std::string health = std::to_string(d.health().read_errors()) + "/" + std::to_string(d.health().timeouts());
  if (!d.health().failure().empty()) health += " " + d.health().failure();
  std::string group = d.group().empty() ? "-" : d.group() + "#" + std::to_string(d.member());
  return {d.name(),  std::to_string(d.slot()), v1::DiskKind_Name(d.kind()), size(d.size_bytes()),
          state_name(v1::DiskState_Name(d.state()), "DISK_"), group, health, d.model(), d.serial()};
}
std::vector<std::string> row(const v1::DiskGroup& g) {
  std::string work = "-";
  if (g.state() == v1::GROUP_REBUILDING && g.rebuild_bytes_total() > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "rebuild %.0f%%, %.0f s left", 100.0 * static_cast<double>(g.rebuild_bytes_done()) / static_cast<double>(g.rebuild_bytes_total()),
                  g.rebuild_eta_seconds());
    work = buf;
  } else if (g.scrubbing()) {
    work = "scrubbing";
  } else if (g.resyncing()) {
    work = "resync";
  }
  if (g.resync_unverifiable_stripes() > 0) {
    work = (work == "-" ? "" : work + ", ") + std::to_string(g.resync_unverifiable_stripes()) + " stripes unverifiable";
  }
  return {g.name(), v1::GroupKind_Name(g.kind()), state_name(v1::GroupState_Name(g.state()), "GROUP_"), size(g.size_bytes()), work,
          std::to_string(g.repaired_blocks()), joined(g.members())};
}
std::vector<std::string> row(const v1::Pool& p) {
  return {p.name(), joined(p.groups()), p.read_cache_group().empty() ? "-" : p.read_cache_group(),
          p.write_log_group().empty() ? "-" : p.write_log_group(),
          p.write_log_group().empty() ? "-" : p.write_cache() == v1::WRITE_THROUGH ? "write-through" : "write-back",
          p.owner().empty() ? "controllers/a" : p.owner(), p.home().empty() ? "controllers/a" : p.home()};
}
std::vector<std::string> row(const v1::Volume& v) {
  return {v.name(), size(v.size_bytes()), std::to_string(v.block_size_bytes()), v1::Affinity_Name(v.affinity()),
          v.write_cache() == v1::WRITE_THROUGH ? "write-through" : "write-back", v.serial()};
}
std::vector<std::string> row(const v1::Host& h) {
  google::protobuf::RepeatedPtrField<std::string> names = h.iqns();
  names.MergeFrom(h.nqns());
  return {h.name(), h.any_initiator() ? "(every initiator)" : joined(names), h.chap_user().empty() ? "no" : "yes"};
}
std::vector<std::string> row(const v1::Mapping& m) { return {m.name(), m.volume(), m.host(), std::to_string(m.lun())}; }
std::vector<std::string> row(const v1::Operation& o) {
  char progress[16];
  std::snprintf(progress, sizeof progress, "%.0f%%", o.progress_fraction() * 100);
  const std::string state = v1::Operation::State_Name(o.state());
  return {o.name(), o.kind(), o.resource(), state, progress, o.error().message().empty() ? "-" : o.error().message()};
}
std::string when(std::int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm local{};
  localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}
std::string fixed(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}
std::vector<std::string> row(const v1::VolumeStatistics& s) {
  return {s.volume(), fixed(s.read_iops(), 0), fixed(s.write_iops(), 0), fixed(s.read_mb_per_second(), 1),
          fixed(s.write_mb_per_second(), 1), fixed(s.read_latency_ms(), 2), fixed(s.write_latency_ms(), 2),
          fixed(s.cache_hit_fraction() * 100, 0) + "%", fixed(s.performance_tier_fraction() * 100, 0) + "%",
          size(s.allocated_bytes()), size(s.performance_bytes()), size(s.capacity_bytes()),
          s.write_cache().empty() ? "-" : s.write_cache(), size(s.dirty_bytes()), size(s.lost_bytes())};
}
std::vector<std::string> row(const v1::PoolStatistics& s) {
  return {s.pool(), size(s.performance_bytes() - s.performance_free_bytes()) + " / " + size(s.performance_bytes()),
          size(s.capacity_bytes() - s.capacity_free_bytes()) + " / " + size(s.capacity_bytes()), size(s.committed_bytes()),
          size(s.read_cache_bytes()), fixed(s.read_iops(), 0), fixed(s.write_iops(), 0), fixed(s.read_mb_per_second(), 1),
          fixed(s.write_mb_per_second(), 1), s.writes_stopped().empty() ? "yes" : "STOPPED: " + s.writes_stopped(),
          s.write_cache().empty() ? "-" : s.write_cache() + (s.write_through_reason().empty() ? "" : " (" + s.write_through_reason() + ")"),
          size(s.dirty_bytes()), size(s.write_log_used_bytes()) + " / " + size(s.write_log_bytes()),
          fixed(s.destage_mb_per_second(), 1), std::to_string(s.writes_logged()), std::to_string(s.writes_through()),
          std::to_string(s.dirty_bytes_lost())};
}
std::vector<std::string> row(const v1::ExtentHeat& h) {
  return {std::to_string(h.extent()), size(h.offset_bytes()), fixed(h.reads(), 2), fixed(h.writes(), 2),
          size(static_cast<std::uint64_t>(h.read_bytes() + h.write_bytes())),
          v1::Tier_Name(h.tier()).substr(h.tier() == v1::TIER_UNSPECIFIED ? 0 : 5), h.group().empty() ? "-" : h.group()};
}
std::vector<std::string> row(const v1::Event& e) {
  std::string level = v1::Severity_Name(e.severity());
  return {when(e.time_unix_ms()), level, e.resource().empty() ? "-" : e.resource(), e.message()};
}

struct client {
  std::unique_ptr<v1::Array::Stub> stub;
  bool as_json = false;
  std::string authorization;  // "Bearer TOKEN", or empty: no token

  template <class Request, class Response, class Method>
  grpc::Status call(Method method, const Request& in, Response& out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    return ((*stub).*method)(&context, in, &out);
  }

  // Every page of a list, printed as one table or one JSON array.
  template <class Response, class Method, class Items>
  int list(Method method, Items items, const std::vector<std::string>& header, const std::string& parent = {}) {
    v1::ListRequest in;
    in.set_page_size(1000);
    in.set_parent(parent);
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> objects;
    for (;;) {
      Response out;
      if (auto s = call(method, in, out); !s.ok()) return fail(s);
      for (const auto& item : items(out)) {
        rows.push_back(row(item));
        objects.push_back(json(item));
      }
      if (out.next_page_token().empty()) break;
      in.set_page_token(out.next_page_token());
    }
    if (as_json) {
      std::string out = "[";
      for (std::size_t i = 0; i < objects.size(); ++i) out += (i ? "," : "") + objects[i];
      std::printf("%s]\n", out.c_str());
    } else {
      table(header, rows);
    }
    return 0;
  }

  template <class Response, class Method>
  int show(Method method, const std::string& name, const std::vector<std::string>& header) {
    v1::GetRequest in;
    in.set_name(name);
    Response out;
    if (auto s = call(method, in, out); !s.ok()) return fail(s);
    return print(out, header);
  }

  // The result of a change, as show prints it.
  template <class Request, class Response, class Method>
  int change(Method method, const Request& in, const std::vector<std::string>& header) {
    Response out;
    if (auto s = call(method, in, out); !s.ok()) return fail(s);
    return print(out, header);
  }

  template <class Message>
  int print(const Message& m, const std::vector<std::string>& header) {
    if (as_json) {
      std::printf("%s\n", json(m).c_str());
    } else {
      table(header, {row(m)});
    }
    return 0;
  }
};

// "100G", "512MiB", "4096": bytes; 0 if it is not a size.
std::uint64_t parse_size(const std::string& text) {
  std::size_t used = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(text, &used);
  } catch (...) {
    return 0;
  }
  std::string unit = text.substr(used);
  if (unit.ends_with("iB")) unit.resize(unit.size() - 2);
  if (unit.ends_with("B") && unit.size() > 1) unit.pop_back();
  const std::string units = "KMGT";
  if (unit.empty()) return n;
  if (unit.size() != 1 || units.find(unit[0]) == std::string::npos) return 0;
  return n << (10 * (units.find(unit[0]) + 1));
}

std::string resource(const std::string& collection, const std::string& name) {
  return name.find('/') == std::string::npos ? collection + name : name;
}

// A file the user named (`source`: the option or variable that named it),
// or a usage error saying why it cannot be read.
std::string read_named_file(const std::string& source, const std::string& path) {
  errno = 0;
  std::ifstream file(path, std::ios::binary);
  if (!file) usage("cannot read " + path + " (" + source + "): " + (errno != 0 ? std::strerror(errno) : "cannot open"));
  std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  if (file.bad()) usage("cannot read " + path + " (" + source + ")");
  return text;
}

// The option's value, else the environment variable's (set and not
// empty), else empty; `source` says which it was, for messages.
std::string option_or_env(const std::string& option, const std::string& value, const char* variable, std::string& source) {
  if (!value.empty()) {
    source = option;
    return value;
  }
  const char* from_env = std::getenv(variable);
  source = variable;
  return from_env != nullptr ? from_env : "";
}

}  // namespace

// "USER:SECRET", or a usage error naming the flag.
std::pair<std::string, std::string> credentials(const std::string& flag, const std::string& value) {
  const auto colon = value.find(':');
  if (colon == std::string::npos || colon == 0) usage(flag + " takes USER:SECRET");
  return {value.substr(0, colon), value.substr(colon + 1)};
}

v1::WriteCache write_cache_of(const std::string& text) {
  if (text == "write-back") return v1::WRITE_BACK;
  if (text == "write-through") return v1::WRITE_THROUGH;
  usage("--write-cache " + text + " is not write-back or write-through");
}
v1::Affinity affinity_of(const std::string& text) {
  if (text == "auto") return v1::AUTO;
  if (text == "performance") return v1::PERFORMANCE;
  if (text == "capacity") return v1::CAPACITY;
  usage("--affinity is auto, performance or capacity");
}

int main(int argc, char** argv) {
  std::string api = "127.0.0.1:50051";
  std::string tls_ca, token_file;
  bool as_json = false;
  std::vector<std::string> words;
  // Options with a value (--iqn and --nqn may repeat), and those without.
  static const std::set<std::string> valued{"--size", "--pool", "--affinity", "--lun", "--host", "--name",
                                            "--iqn", "--nqn", "--chap", "--mutual-chap", "--limit", "--with", "--kind", "--to", "--cache", "--block-size",
                                            "--write-cache"};
  static const std::set<std::string> switches{"--wait", "--any", "--no-chap", "--raid6", "--raid1", "--read-cache"};
  std::map<std::string, std::vector<std::string>> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--api") {
      if (i + 1 >= argc) usage("--api needs ADDR:PORT");
      api = argv[++i];
    } else if (arg == "--tls-ca" || arg == "--token-file") {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') usage(arg + " needs a FILE");
      (arg == "--tls-ca" ? tls_ca : token_file) = argv[++i];
    } else if (arg == "--json") {
      as_json = true;
    } else if (valued.contains(arg)) {
      if (i + 1 >= argc) usage(arg + " needs a value");
      flags[arg].push_back(argv[++i]);
    } else if (switches.contains(arg)) {
      flags[arg].push_back("");
    } else if (arg.starts_with("--")) {
      usage("unknown option " + arg);
    } else {
      words.push_back(arg);
    }
  }
  auto flag = [&](const std::string& f, const std::string& otherwise) { return flags.contains(f) ? flags[f].back() : otherwise; };
  if (words.empty()) usage("what to do?");
  std::string ca_source, token_source;
  tls_ca = option_or_env("--tls-ca", tls_ca, "STRATA_TLS_CA", ca_source);
  token_file = option_or_env("--token-file", token_file, "STRATA_TOKEN_FILE", token_source);
  // Whoever can read the network could otherwise read the token, and call
  // with it.
  if (!token_file.empty() && tls_ca.empty()) usage(token_source + " sends a token, which needs TLS: give --tls-ca FILE (or STRATA_TLS_CA)");
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials = grpc::InsecureChannelCredentials();
  if (!tls_ca.empty()) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = read_named_file(ca_source, tls_ca);
    if (tls.pem_root_certs.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      usage(tls_ca + " (" + ca_source + ") holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
    channel_credentials = grpc::SslCredentials(tls);
  }
  std::string authorization;
  if (!token_file.empty()) {
    std::string token = read_named_file(token_source, token_file);
    // One line; its newline is not part of the token.
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
    if (token.empty()) usage(token_file + " (" + token_source + ") is empty: it should hold the token");
    if (token.find_first_of("\r\n") != std::string::npos) usage(token_file + " (" + token_source + ") has more than one line: the token is one");
    authorization = "Bearer " + token;
  }
  client c{v1::Array::NewStub(grpc::CreateChannel(api, channel_credentials)), as_json, authorization};
  const std::string noun = words[0];
  const std::string verb = words.size() > 1 ? words[1] : "";
  const std::string name = words.size() > 2 ? words[2] : "";
  auto need_name = [&] {
    if (name.empty()) usage(noun + " " + verb + " needs a NAME");
  };
  auto volume_name = [&](const std::string& n) { return n.find('/') == std::string::npos ? "pools/p1/volumes/" + n : n; };
  using S = v1::Array::Stub;
  if (noun == "version") {
    v1::GetVersionResponse out;
    if (auto s = c.call(&S::GetVersion, v1::GetVersionRequest{}, out); !s.ok()) return fail(s);
    std::printf(as_json ? "%s\n" : "%s", as_json ? json(out).c_str() : ("strata " + out.version() + ", controller " + out.controller() + "\n").c_str());
    return 0;
  }
  const std::vector<std::string> disk_h{"NAME", "SLOT", "KIND", "SIZE", "STATE", "GROUP#MEMBER", "READ ERRORS/TIMEOUTS", "MODEL", "SERIAL"},
      group_h{"NAME", "KIND", "STATE", "SIZE", "BACKGROUND", "REPAIRED BLOCKS", "MEMBERS"},
      pool_h{"NAME", "GROUPS", "READ CACHE", "WRITE LOG", "WRITE CACHE", "OWNER", "HOME"}, volume_h{"NAME", "SIZE", "BLOCK", "AFFINITY", "WRITE CACHE", "SERIAL"},
      host_h{"NAME", "INITIATORS", "CHAP"}, map_h{"NAME", "VOLUME", "HOST", "LUN"},
      op_h{"NAME", "KIND", "RESOURCE", "STATE", "PROGRESS", "ERROR"}, event_h{"TIME", "SEVERITY", "RESOURCE", "MESSAGE"};
  const std::vector<std::string> controller_h{"NAME", "STATE", "VERSION", "ISCSI PORTAL", "POOLS", "STARTED"};
  if (noun == "controller" && verb == "list") {
    return c.list<v1::ListControllersResponse>(&S::ListControllers, [](auto& r) { return r.controllers(); }, controller_h);
  }
  if (noun == "controller" && verb == "show") {
    return c.show<v1::Controller>(&S::GetController, resource("controllers/", name.empty() ? "a" : name), controller_h);
  }
  if (noun == "disk" && verb == "list") return c.list<v1::ListDisksResponse>(&S::ListDisks, [](auto& r) { return r.disks(); }, disk_h);
  if (noun == "disk" && verb == "show") return need_name(), c.show<v1::Disk>(&S::GetDisk, resource("disks/", name), disk_h);
  if (noun == "group" && verb == "list")
    return c.list<v1::ListDiskGroupsResponse>(&S::ListDiskGroups, [](auto& r) { return r.groups(); }, group_h);
  if (noun == "group" && verb == "show") return need_name(), c.show<v1::DiskGroup>(&S::GetDiskGroup, resource("groups/", name), group_h);
  if (noun == "pool" && verb == "list") return c.list<v1::ListPoolsResponse>(&S::ListPools, [](auto& r) { return r.pools(); }, pool_h);
  if (noun == "pool" && verb == "show") return need_name(), c.show<v1::Pool>(&S::GetPool, resource("pools/", name), pool_h);
  if (noun == "volume" && verb == "list") {
    return c.list<v1::ListVolumesResponse>(&S::ListVolumes, [](auto& r) { return r.volumes(); }, volume_h,
                                           resource("pools/", name.empty() ? "p1" : name));
  }
  if (noun == "volume" && verb == "show") return need_name(), c.show<v1::Volume>(&S::GetVolume, volume_name(name), volume_h);
  if (noun == "volume" && verb == "create") {
    need_name();
    if (!flags.contains("--size")) usage("volume create needs --size");
    const std::uint64_t bytes = parse_size(flag("--size", ""));
    if (bytes == 0) usage("--size " + flag("--size", "") + " is not a size (e.g. 100G)");
    v1::CreateVolumeRequest in;
    in.set_parent(resource("pools/", flag("--pool", "p1")));
    in.set_volume_id(name);
    in.mutable_volume()->set_size_bytes(bytes);
    in.mutable_volume()->set_affinity(affinity_of(flag("--affinity", "auto")));
    if (flags.contains("--write-cache")) in.mutable_volume()->set_write_cache(write_cache_of(flag("--write-cache", "")));
    if (flags.contains("--block-size")) {
      const std::string block = flag("--block-size", "");
      if (block != "512" && block != "4096") usage("--block-size " + block + " is not 512 or 4096");
      in.mutable_volume()->set_block_size_bytes(static_cast<std::uint32_t>(std::stoul(block)));
    }
    return c.change<v1::CreateVolumeRequest, v1::Volume>(&S::CreateVolume, in, volume_h);
  }
  if (noun == "volume" && verb == "update") {
    need_name();
    v1::UpdateVolumeRequest in;
    in.mutable_volume()->set_name(volume_name(name));
    if (flags.contains("--size")) {
      const std::uint64_t bytes = parse_size(flag("--size", ""));
      if (bytes == 0) usage("--size " + flag("--size", "") + " is not a size (e.g. 200G)");
      in.mutable_volume()->set_size_bytes(bytes);
      in.mutable_update_mask()->add_paths("size_bytes");
    }
    if (flags.contains("--affinity")) {
      in.mutable_volume()->set_affinity(affinity_of(flag("--affinity", "")));
      in.mutable_update_mask()->add_paths("affinity");
    }
    if (flags.contains("--write-cache")) {
      in.mutable_volume()->set_write_cache(write_cache_of(flag("--write-cache", "")));
      in.mutable_update_mask()->add_paths("write_cache");
    }
    if (in.update_mask().paths().empty()) usage("volume update needs --size, --affinity or --write-cache");
    return c.change<v1::UpdateVolumeRequest, v1::Volume>(&S::UpdateVolume, in, volume_h);
  }
  // An operation just started: printed at once, or with --wait when it
  // has ended (exit 1 unless it SUCCEEDED).
  auto started = [&](v1::Operation op) {
    while (flags.contains("--wait") && op.state() == v1::Operation::RUNNING) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      v1::GetRequest get;
      get.set_name(op.name());
      if (auto s = c.call(&S::GetOperation, get, op); !s.ok()) return fail(s);
    }
    c.print(op, op_h);
    return op.state() == v1::Operation::FAILED || op.state() == v1::Operation::CANCELLED ? exit_refused : 0;
  };
  if (noun == "volume" && verb == "delete") {
    need_name();
    v1::DeleteRequest in;
    in.set_name(volume_name(name));
    v1::Operation op;
    if (auto s = c.call(&S::DeleteVolume, in, op); !s.ok()) return fail(s);
    return started(op);
  }
  if (noun == "volume" && verb == "move") {
    need_name();
    const std::string to = flag("--to", "");
    if (to != "capacity" && to != "performance") usage("volume move needs --to capacity or --to performance");
    v1::MoveVolumeRequest in;
    in.set_name(volume_name(name));
    in.set_affinity(to == "capacity" ? v1::CAPACITY : v1::PERFORMANCE);
    v1::Operation op;
    if (auto s = c.call(&S::MoveVolume, in, op); !s.ok()) return fail(s);
    return started(op);
  }
  if (noun == "disk" && verb == "add") {
    need_name();
    const std::string kind = flag("--kind", "");
    if (kind != "hdd" && kind != "ssd") usage("disk add needs --kind hdd or ssd");
    const std::uint64_t bytes = parse_size(flag("--size", ""));
    if (bytes == 0) usage("disk add needs --size SIZE (e.g. 4G)");
    v1::CreateDiskRequest in;
    in.set_disk_id(name);
    in.mutable_disk()->set_kind(kind == "hdd" ? v1::HDD : v1::SSD);
    in.mutable_disk()->set_size_bytes(bytes);
    return c.change<v1::CreateDiskRequest, v1::Disk>(&S::CreateDisk, in, disk_h);
  }
  if (noun == "disk" && (verb == "fail" || verb == "erase")) {
    need_name();
    v1::GetRequest in;
    in.set_name(resource("disks/", name));
    return c.change<v1::GetRequest, v1::Disk>(verb == "fail" ? &S::FailDisk : &S::EraseDisk, in, disk_h);
  }
  if (noun == "disk" && verb == "replace") {
    need_name();
    if (!flags.contains("--with")) usage("disk replace needs --with DISK (a blank disk, or the same disk to rebuild it in place)");
    v1::ReplaceDiskRequest in;
    in.set_name(resource("disks/", name));
    in.set_replacement(resource("disks/", flag("--with", "")));
    v1::Operation op;
    if (auto s = c.call(&S::ReplaceDisk, in, op); !s.ok()) return fail(s);
    return started(op);
  }
  if (noun == "disk" && (verb == "spare" || verb == "unspare")) {
    need_name();
    v1::UpdateDiskRequest in;
    in.mutable_disk()->set_name(resource("disks/", name));
    in.mutable_disk()->set_spare(verb == "spare");
    in.mutable_update_mask()->add_paths("spare");
    return c.change<v1::UpdateDiskRequest, v1::Disk>(&S::UpdateDisk, in, disk_h);
  }
  if (noun == "group" && verb == "create") {
    need_name();
    const int kinds = flags.contains("--raid6") + flags.contains("--raid1") + flags.contains("--read-cache");
    if (kinds != 1) usage("group create needs one of --raid6, --raid1, --read-cache");
    if (words.size() < 4) usage("group create needs its DISKs");
    v1::CreateDiskGroupRequest in;
    in.set_group_id(name);
    in.mutable_group()->set_kind(flags.contains("--raid6") ? v1::RAID6 : flags.contains("--raid1") ? v1::RAID1 : v1::READ_CACHE);
    for (std::size_t i = 3; i < words.size(); ++i) in.mutable_group()->add_members(resource("disks/", words[i]));
    if (flags.contains("--pool")) in.set_pool(resource("pools/", flag("--pool", "")));
    return c.change<v1::CreateDiskGroupRequest, v1::DiskGroup>(&S::CreateDiskGroup, in, group_h);
  }
  if (noun == "pool" && verb == "update") {
    need_name();
    v1::UpdatePoolRequest in;
    in.mutable_pool()->set_name(resource("pools/", name));
    if (!flags.contains("--write-cache")) usage("pool update needs --write-cache write-back|write-through");
    in.mutable_pool()->set_write_cache(write_cache_of(flag("--write-cache", "")));
    in.mutable_update_mask()->add_paths("write_cache");
    return c.change<v1::UpdatePoolRequest, v1::Pool>(&S::UpdatePool, in, pool_h);
  }
  if (noun == "pool" && verb == "move") {
    // A planned move: the pool's home becomes the controller named, which
    // serves it once the operation has ended.
    need_name();
    if (!flags.contains("--to")) usage("pool move needs --to a|b");
    v1::MovePoolRequest in;
    in.set_name(resource("pools/", name));
    in.set_to(resource("controllers/", flag("--to", "")));
    v1::Operation op;
    if (auto s = c.call(&S::MovePool, in, op); !s.ok()) return fail(s);
    return started(op);
  }
  if (noun == "controller" && (verb == "failover" || verb == "failback")) {
    // Failover: the controller's pools move to its partner, and stay
    // there; failback: the pools whose home it is come back.
    need_name();
    v1::GetRequest in;
    in.set_name(resource("controllers/", name));
    v1::Operation op;
    if (auto s = c.call(verb == "failover" ? &S::FailoverController : &S::FailbackController, in, op); !s.ok()) return fail(s);
    return started(op);
  }
  if (noun == "pool" && verb == "create") {
    need_name();
    if (words.size() < 4) usage("pool create needs its GROUPs");
    v1::CreatePoolRequest in;
    in.set_pool_id(name);
    for (std::size_t i = 3; i < words.size(); ++i) in.mutable_pool()->add_groups(resource("groups/", words[i]));
    if (flags.contains("--cache")) in.mutable_pool()->set_read_cache_group(resource("groups/", flag("--cache", "")));
    return c.change<v1::CreatePoolRequest, v1::Pool>(&S::CreatePool, in, pool_h);
  }
  if (noun == "group" && verb == "scrub") {
    need_name();
    v1::GetRequest in;
    in.set_name(resource("groups/", name));
    v1::Operation op;
    if (auto s = c.call(&S::ScrubDiskGroup, in, op); !s.ok()) return fail(s);
    return started(op);
  }
  if (noun == "host" && (verb == "add" || verb == "update")) {
    need_name();
    v1::Host host;
    google::protobuf::FieldMask mask;
    if (flags.contains("--iqn")) {
      for (const std::string& iqn : flags["--iqn"]) host.add_iqns(iqn);
      mask.add_paths("iqns");
    }
    if (flags.contains("--nqn")) {
      for (const std::string& nqn : flags["--nqn"]) host.add_nqns(nqn);
      mask.add_paths("nqns");
    }
    if (flags.contains("--any")) {
      host.set_any_initiator(true);
      mask.add_paths("any_initiator");
    }
    if (flags.contains("--chap") && flags.contains("--no-chap")) usage("--chap or --no-chap, not both");
    if (flags.contains("--chap") || flags.contains("--no-chap")) {
      if (flags.contains("--chap")) {
        const auto [user, secret] = credentials("--chap", flag("--chap", ""));
        host.set_chap_user(user);
        host.set_chap_secret(secret);
      }
      for (const char* p : {"chap_user", "chap_secret", "mutual_chap_user", "mutual_chap_secret"}) mask.add_paths(p);
    }
    if (flags.contains("--mutual-chap")) {
      const auto [user, secret] = credentials("--mutual-chap", flag("--mutual-chap", ""));
      host.set_mutual_chap_user(user);
      host.set_mutual_chap_secret(secret);
      if (!flags.contains("--chap")) {
        mask.add_paths("mutual_chap_user");
        mask.add_paths("mutual_chap_secret");
      }
    }
    if (verb == "add") {
      v1::CreateHostRequest in;
      in.set_host_id(name);
      *in.mutable_host() = host;
      return c.change<v1::CreateHostRequest, v1::Host>(&S::CreateHost, in, host_h);
    }
    if (mask.paths().empty()) usage("host update needs --iqn, --nqn, --any, --chap, --no-chap or --mutual-chap");
    v1::UpdateHostRequest in;
    host.set_name(resource("hosts/", name));
    *in.mutable_host() = host;
    *in.mutable_update_mask() = mask;
    return c.change<v1::UpdateHostRequest, v1::Host>(&S::UpdateHost, in, host_h);
  }
  if ((noun == "host" && verb == "delete") || noun == "unmap") {
    const bool host = noun == "host";
    if (host) need_name();
    if (!host && verb.empty()) usage("unmap needs the mapping's NAME");
    v1::DeleteRequest in;
    in.set_name(host ? resource("hosts/", name) : resource("mappings/", verb));
    google::protobuf::Empty out;
    if (auto s = host ? c.call(&S::DeleteHost, in, out) : c.call(&S::DeleteMapping, in, out); !s.ok()) return fail(s);
    if (!as_json) std::printf("%s deleted\n", in.name().c_str());
    if (as_json) std::printf("{}\n");
    return 0;
  }
  if (noun == "map" && verb != "list" && verb != "show") {
    // strata map VOLUME --lun N: words[1] is the volume.
    if (verb.empty()) usage("map needs a VOLUME");
    if (!flags.contains("--lun")) usage("map needs --lun");
    v1::CreateMappingRequest in;
    const std::string volume = volume_name(verb);
    const std::string host = resource("hosts/", flag("--host", "all"));
    // By default a mapping is named for its volume and host: "v2-h1".
    in.set_mapping_id(flag("--name", volume.substr(volume.rfind('/') + 1) + "-" + host.substr(host.rfind('/') + 1)));
    in.mutable_mapping()->set_volume(volume);
    in.mutable_mapping()->set_host(host);
    try {
      in.mutable_mapping()->set_lun(static_cast<std::uint32_t>(std::stoul(flag("--lun", ""))));
    } catch (...) {
      usage("--lun takes a number");
    }
    return c.change<v1::CreateMappingRequest, v1::Mapping>(&S::CreateMapping, in, map_h);
  }
  if (noun == "host" && verb == "list") return c.list<v1::ListHostsResponse>(&S::ListHosts, [](auto& r) { return r.hosts(); }, host_h);
  if (noun == "host" && verb == "show") return need_name(), c.show<v1::Host>(&S::GetHost, resource("hosts/", name), host_h);
  if (noun == "map" && verb == "list") return c.list<v1::ListMappingsResponse>(&S::ListMappings, [](auto& r) { return r.mappings(); }, map_h);
  if (noun == "map" && verb == "show") return need_name(), c.show<v1::Mapping>(&S::GetMapping, resource("mappings/", name), map_h);
  if (noun == "op" && verb == "list") {
    return c.list<v1::ListOperationsResponse>(&S::ListOperations, [](auto& r) { return r.operations(); }, op_h);
  }
  if (noun == "op" && verb == "show") return need_name(), c.show<v1::Operation>(&S::GetOperation, resource("operations/", name), op_h);
  if (noun == "op" && verb == "cancel") {
    need_name();
    v1::GetRequest in;
    in.set_name(resource("operations/", name));
    return c.change<v1::GetRequest, v1::Operation>(&S::CancelOperation, in, op_h);
  }
  if ((noun == "volume" || noun == "pool") && verb == "stats") {
    need_name();
    if (noun == "volume") {
      return c.show<v1::VolumeStatistics>(&S::GetVolumeStatistics, volume_name(name),
                                          {"VOLUME", "READ IOPS", "WRITE IOPS", "READ MB/S", "WRITE MB/S", "READ MS", "WRITE MS",
                                           "CACHE HITS", "SSD READS", "ALLOCATED", "ON SSD", "ON HDD", "WRITE CACHE", "DIRTY",
                                           "LOST"});
    }
    return c.show<v1::PoolStatistics>(&S::GetPoolStatistics, resource("pools/", name),
                                      {"POOL", "SSD USED", "HDD USED", "COMMITTED", "READ CACHE", "READ IOPS", "WRITE IOPS",
                                       "READ MB/S", "WRITE MB/S", "WRITES", "WRITE CACHE", "DIRTY", "LOG USED", "DESTAGE MB/S",
                                       "WRITES LOGGED", "WRITES THROUGH", "DIRTY LOST"});
  }
  if (noun == "heat" && (verb == "top" || verb == "list")) {
    need_name();
    const bool top = verb == "top";
    int limit = 20;
    try {
      limit = std::stoi(flag("--limit", "20"));
    } catch (...) {
      usage("--limit takes a number");
    }
    if (limit < 1 || limit > 1000) usage("--limit is 1 to 1000");
    v1::ListHeatRequest in;
    in.set_volume(volume_name(name));
    in.set_hottest_first(top);
    in.set_page_size(top ? limit : 1000);
    std::vector<std::vector<std::string>> rows;
    std::string objects;
    for (;;) {
      v1::ListHeatResponse out;
      if (auto s = c.call(&S::ListHeat, in, out); !s.ok()) return fail(s);
      for (const v1::ExtentHeat& h : out.extents()) {
        rows.push_back(row(h));
        objects += (objects.empty() ? "" : ",") + json(h);
      }
      if (top || out.next_page_token().empty()) break;
      in.set_page_token(out.next_page_token());
    }
    if (as_json) {
      std::printf("[%s]\n", objects.c_str());
    } else {
      table({"EXTENT", "OFFSET", "READS", "WRITES", "BYTES", "TIER", "GROUP"}, rows);  // decayed counts
    }
    return 0;
  }
  if (noun == "events") {
    int limit = 50;
    try {
      limit = std::stoi(flag("--limit", "50"));
    } catch (...) {
      usage("--limit takes a number");
    }
    if (limit < 1 || limit > 1000) usage("--limit is 1 to 1000");
    v1::ListRequest in;
    in.set_page_size(limit);
    v1::ListEventsResponse out;
    if (auto s = c.call(&S::ListEvents, in, out); !s.ok()) return fail(s);
    std::vector<std::vector<std::string>> rows;
    std::string objects;
    for (const v1::Event& e : out.events()) {
      rows.push_back(row(e));
      objects += (objects.empty() ? "" : ",") + json(e);
    }
    if (as_json) {
      std::printf("[%s]\n", objects.c_str());
    } else {
      table(event_h, rows);
    }
    return 0;
  }
  usage("unknown command: " + noun + (verb.empty() ? "" : " " + verb));
}
