// strata: the array's command line, a client of the management API
// (proto/strata/v1/array.proto) that stratad serves.
//
//   strata [--api ADDR:PORT] [--json] NOUN VERB [NAME]
//
//   disk list | disk show NAME          group list | group show NAME
//   pool list | pool show NAME          volume list [POOL] | volume show NAME
//   host list | host show NAME          map list | map show NAME
//   volume create NAME --size SIZE [--pool POOL] [--affinity auto|performance|capacity]
//   map VOLUME --lun N [--host HOST] [--name NAME]
//   version
//
// SIZE: bytes, or with K, M, G, T (powers of 1024; "100G", "512MiB").
//
// NAME may be short ("hdd-00", "v1") or a resource name ("disks/hdd-00").
// Output: a table for people, or with --json one JSON object per resource
// (a JSON array for lists), for scripts. Errors go to stderr.
// Exit status: 0 done; 1 the array refused the request (the message says
// which field and why); 2 a usage error; 3 the array cannot be reached.
#include <grpcpp/grpcpp.h>
#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <functional>
#include <map>
#include <string>
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
               "usage: strata [--api ADDR:PORT] [--json] NOUN VERB [NAME]\n"
               "  disk|group|pool|host|map list, disk|group|pool|volume|host|map show NAME,\n"
               "  volume list [POOL], volume create NAME --size SIZE [--pool POOL] [--affinity auto|performance|capacity],\n"
               "  map VOLUME --lun N [--host HOST] [--name NAME], version\n",
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

std::vector<std::string> row(const v1::Disk& d) {
  return {d.name(), v1::DiskKind_Name(d.kind()), size(d.size_bytes()), d.model(), d.serial()};
}
std::vector<std::string> row(const v1::DiskGroup& g) { return {g.name(), v1::GroupKind_Name(g.kind()), joined(g.members())}; }
std::vector<std::string> row(const v1::Pool& p) {
  return {p.name(), joined(p.groups()), p.read_cache_group().empty() ? "-" : p.read_cache_group()};
}
std::vector<std::string> row(const v1::Volume& v) {
  return {v.name(), size(v.size_bytes()), std::to_string(v.block_size_bytes()), v1::Affinity_Name(v.affinity()), v.serial()};
}
std::vector<std::string> row(const v1::Host& h) {
  return {h.name(), h.any_initiator() ? "(every initiator)" : joined(h.iqns()), h.chap_user().empty() ? "no" : "yes"};
}
std::vector<std::string> row(const v1::Mapping& m) { return {m.name(), m.volume(), m.host(), std::to_string(m.lun())}; }

struct client {
  std::unique_ptr<v1::Array::Stub> stub;
  bool as_json = false;

  template <class Request, class Response, class Method>
  grpc::Status call(Method method, const Request& in, Response& out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
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
    if (as_json) {
      std::printf("%s\n", json(out).c_str());
    } else {
      table(header, {row(out)});
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

}  // namespace

int main(int argc, char** argv) {
  std::string api = "127.0.0.1:50051";
  bool as_json = false;
  std::vector<std::string> words;
  std::map<std::string, std::string> flags;  // --size, --pool, --affinity, --lun, --host, --name
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--api") {
      if (i + 1 >= argc) usage("--api needs ADDR:PORT");
      api = argv[++i];
    } else if (arg == "--json") {
      as_json = true;
    } else if (arg == "--size" || arg == "--pool" || arg == "--affinity" || arg == "--lun" || arg == "--host" || arg == "--name") {
      if (i + 1 >= argc) usage(arg + " needs a value");
      flags[arg] = argv[++i];
    } else if (arg.starts_with("--")) {
      usage("unknown option " + arg);
    } else {
      words.push_back(arg);
    }
  }
  auto flag = [&](const std::string& f, const std::string& otherwise) { return flags.contains(f) ? flags[f] : otherwise; };
  if (words.empty()) usage("what to do?");
  client c{v1::Array::NewStub(grpc::CreateChannel(api, grpc::InsecureChannelCredentials())), as_json};
  const std::string noun = words[0];
  const std::string verb = words.size() > 1 ? words[1] : "";
  const std::string name = words.size() > 2 ? words[2] : "";
  auto need_name = [&] {
    if (name.empty()) usage(noun + " show needs a NAME");
  };
  using S = v1::Array::Stub;
  if (noun == "version") {
    v1::GetVersionResponse out;
    if (auto s = c.call(&S::GetVersion, v1::GetVersionRequest{}, out); !s.ok()) return fail(s);
    std::printf(as_json ? "%s\n" : "%s", as_json ? json(out).c_str() : ("strata " + out.version() + ", controller " + out.controller() + "\n").c_str());
    return 0;
  }
  const std::vector<std::string> disk_h{"NAME", "KIND", "SIZE", "MODEL", "SERIAL"}, group_h{"NAME", "KIND", "MEMBERS"},
      pool_h{"NAME", "GROUPS", "READ CACHE"}, volume_h{"NAME", "SIZE", "BLOCK", "AFFINITY", "SERIAL"},
      host_h{"NAME", "INITIATORS", "CHAP"}, map_h{"NAME", "VOLUME", "HOST", "LUN"};
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
  if (noun == "volume" && verb == "create") {
    if (name.empty()) usage("volume create needs a NAME");
    if (!flags.contains("--size")) usage("volume create needs --size");
    const std::uint64_t bytes = parse_size(flags["--size"]);
    if (bytes == 0) usage("--size " + flags["--size"] + " is not a size (e.g. 100G)");
    const std::string affinity = flag("--affinity", "auto");
    v1::CreateVolumeRequest in;
    in.set_parent(resource("pools/", flag("--pool", "p1")));
    in.set_volume_id(name);
    in.mutable_volume()->set_size_bytes(bytes);
    if (affinity == "auto") {
      in.mutable_volume()->set_affinity(v1::AUTO);
    } else if (affinity == "performance") {
      in.mutable_volume()->set_affinity(v1::PERFORMANCE);
    } else if (affinity == "capacity") {
      in.mutable_volume()->set_affinity(v1::CAPACITY);
    } else {
      usage("--affinity is auto, performance or capacity");
    }
    v1::Volume out;
    if (auto st = c.call(&S::CreateVolume, in, out); !st.ok()) return fail(st);
    if (as_json) {
      std::printf("%s\n", json(out).c_str());
    } else {
      table(volume_h, {row(out)});
    }
    return 0;
  }
  if (noun == "map" && verb != "list" && verb != "show") {
    // strata map VOLUME --lun N: words[1] is the volume.
    if (verb.empty()) usage("map needs a VOLUME");
    if (!flags.contains("--lun")) usage("map needs --lun");
    v1::CreateMappingRequest in;
    const std::string volume = verb.find('/') == std::string::npos ? "pools/p1/volumes/" + verb : verb;
    in.set_mapping_id(flag("--name", "m-" + volume.substr(volume.rfind('/') + 1)));
    in.mutable_mapping()->set_volume(volume);
    in.mutable_mapping()->set_host(resource("hosts/", flag("--host", "all")));
    try {
      in.mutable_mapping()->set_lun(static_cast<std::uint32_t>(std::stoul(flags["--lun"])));
    } catch (...) {
      usage("--lun takes a number");
    }
    v1::Mapping out;
    if (auto st = c.call(&S::CreateMapping, in, out); !st.ok()) return fail(st);
    if (as_json) {
      std::printf("%s\n", json(out).c_str());
    } else {
      table(map_h, {row(out)});
    }
    return 0;
  }
  if (noun == "volume" && verb == "show") {
    need_name();
    return c.show<v1::Volume>(&S::GetVolume, name.find('/') == std::string::npos ? "pools/p1/volumes/" + name : name, volume_h);
  }
  if (noun == "host" && verb == "list") return c.list<v1::ListHostsResponse>(&S::ListHosts, [](auto& r) { return r.hosts(); }, host_h);
  if (noun == "host" && verb == "show") return need_name(), c.show<v1::Host>(&S::GetHost, resource("hosts/", name), host_h);
  if (noun == "map" && verb == "list") return c.list<v1::ListMappingsResponse>(&S::ListMappings, [](auto& r) { return r.mappings(); }, map_h);
  if (noun == "map" && verb == "show") return need_name(), c.show<v1::Mapping>(&S::GetMapping, resource("mappings/", name), map_h);
  usage("unknown command: " + noun + (verb.empty() ? "" : " " + verb));
}
