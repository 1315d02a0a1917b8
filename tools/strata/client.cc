// The `strata` command's client side: the connection to the API (TLS and
// the bearer token from options or the environment) and the printing of
// resources as tables (for people) or JSON (for scripts). Every command's
// output goes through these, so the formats the tests parse live here.
#include <google/protobuf/util/json_util.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>

#include "tools/strata/cli.h"

namespace strata::cli {

int fail(const grpc::Status& status) {
  static const char* const names[] = {"OK",
                                      "CANCELLED",
                                      "UNKNOWN",
                                      "INVALID_ARGUMENT",
                                      "DEADLINE_EXCEEDED",
                                      "NOT_FOUND",
                                      "ALREADY_EXISTS",
                                      "PERMISSION_DENIED",
                                      "RESOURCE_EXHAUSTED",
                                      "FAILED_PRECONDITION",
                                      "ABORTED",
                                      "OUT_OF_RANGE",
                                      "UNIMPLEMENTED",
                                      "INTERNAL",
                                      "UNAVAILABLE",
                                      "DATA_LOSS",
                                      "UNAUTHENTICATED"};
  const int code = status.error_code();
  const bool unreachable =
      code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
  std::fprintf(stderr, "strata: %s: %s\n", code >= 0 && code <= 16 ? names[code] : "?",
               status.error_message().c_str());
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
void table(const std::vector<std::string>& header,
           const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  auto print = [&](const std::vector<std::string>& r) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c)
      line += r[c] + (c + 1 < r.size() ? std::string(width[c] - r[c].size() + 2, ' ') : "");
    std::printf("%s\n", line.c_str());
  };
  print(header);
  for (const auto& r : rows) print(r);
}

std::vector<std::string> row(const v1::Controller& c) {
  const std::string state = v1::ControllerState_Name(c.state());
  return {c.name(),
          state.substr(state.find('_') + 1),
          c.version().empty() ? "-" : c.version(),
          c.iscsi_portal().empty() ? "-" : c.iscsi_portal(),
          joined(c.pools()),
          c.start_time_unix_ms() == 0 ? "-" : when(c.start_time_unix_ms())};
}
// An enum value's name without its prefix: DISK_ONLINE → ONLINE.
std::string state_name(const std::string& full, std::string_view prefix) {
  return full.starts_with(prefix) ? full.substr(prefix.size()) : full;
}
std::vector<std::string> row(const v1::Disk& d) {
  std::string health =
      std::to_string(d.health().read_errors()) + "/" + std::to_string(d.health().timeouts());
  if (!d.health().failure().empty()) health += " " + d.health().failure();
  std::string group = d.group().empty() ? "-" : d.group() + "#" + std::to_string(d.member());
  return {d.name(),
          std::to_string(d.slot()),
          v1::DiskKind_Name(d.kind()),
          size(d.size_bytes()),
          state_name(v1::DiskState_Name(d.state()), "DISK_"),
          group,
          health,
          d.model(),
          d.serial()};
}
std::vector<std::string> row(const v1::DiskGroup& g) {
  std::string work = "-";
  if (g.state() == v1::GROUP_REBUILDING && g.rebuild_bytes_total() > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "rebuild %.0f%%, %.0f s left",
                  100.0 * static_cast<double>(g.rebuild_bytes_done()) /
                      static_cast<double>(g.rebuild_bytes_total()),
                  g.rebuild_eta_seconds());
    work = buf;
  } else if (g.scrubbing()) {
    work = "scrubbing";
  } else if (g.resyncing()) {
    work = "resync";
  }
  if (g.resync_unverifiable_stripes() > 0) {
    work = (work == "-" ? "" : work + ", ") + std::to_string(g.resync_unverifiable_stripes()) +
           " stripes unverifiable";
  }
  std::string members = joined(g.members());
  if (g.kind() == v1::CEPH) {
    // Where its image is, and what its cluster says.
    const v1::CephImage& c = g.ceph();
    members = c.rados_pool() + "/" + c.image() + " at " + c.monitors();
    work = !c.status().empty() ? c.status() : c.health().empty() ? "-" : c.health();
    for (const std::string& check : c.health_checks()) work += "; " + check;
    if (c.cluster_size_bytes() > 0)
      work += "; cluster " + size(c.cluster_used_bytes()) + " / " + size(c.cluster_size_bytes()) +
              " used";
    if (c.rados_pool_available_bytes() > 0)
      work += "; " + size(c.rados_pool_available_bytes()) + " left in " + c.rados_pool();
  }
  return {g.name(),
          v1::GroupKind_Name(g.kind()),
          state_name(v1::GroupState_Name(g.state()), "GROUP_"),
          size(g.size_bytes()),
          work,
          std::to_string(g.repaired_blocks()),
          members};
}
// "31d", "12h", "90s": the largest whole unit.
static std::string seconds_text(std::uint64_t s) {
  if (s % 86400 == 0) return std::to_string(s / 86400) + "d";
  if (s % 3600 == 0) return std::to_string(s / 3600) + "h";
  if (s % 60 == 0) return std::to_string(s / 60) + "m";
  return std::to_string(s) + "s";
}
std::vector<std::string> row(const v1::Pool& p) {
  return {p.name(),
          joined(p.groups()),
          p.read_cache_group().empty() ? "-" : p.read_cache_group(),
          p.write_log_group().empty() ? "-" : p.write_log_group(),
          p.write_log_group().empty()            ? "-"
          : p.write_cache() == v1::WRITE_THROUGH ? "write-through"
                                                 : "write-back",
          p.owner().empty() ? "controllers/a" : p.owner(),
          p.home().empty() ? "controllers/a" : p.home(),
          !p.has_cold_cooling_seconds()   ? "31d (default)"
          : p.cold_cooling_seconds() == 0 ? "off"
                                          : seconds_text(p.cold_cooling_seconds())};
}
std::vector<std::string> row(const v1::Volume& v) {
  return {v.name(),
          size(v.size_bytes()),
          std::to_string(v.block_size_bytes()),
          v1::Affinity_Name(v.affinity()),
          v.write_cache() == v1::WRITE_THROUGH ? "write-through" : "write-back",
          v.serial()};
}
std::vector<std::string> row(const v1::Host& h) {
  google::protobuf::RepeatedPtrField<std::string> names = h.iqns();
  names.MergeFrom(h.nqns());
  return {h.name(), h.any_initiator() ? "(every initiator)" : joined(names),
          h.chap_user().empty() ? "no" : "yes"};
}
std::vector<std::string> row(const v1::Mapping& m) {
  return {m.name(), m.volume(), m.host(), std::to_string(m.lun())};
}
std::vector<std::string> row(const v1::Operation& o) {
  char progress[16];
  std::snprintf(progress, sizeof progress, "%.0f%%", o.progress_fraction() * 100);
  const std::string state = v1::Operation::State_Name(o.state());
  return {o.name(), o.kind(), o.resource(),
          state,    progress, o.error().message().empty() ? "-" : o.error().message()};
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
// "hdd 4.10/9.5 ceph 11.20/25" (mean/p99 ms) for the tiers that served
// reads in the interval.
static std::string tier_latencies(const v1::VolumeStatistics& s) {
  static const std::map<std::string, std::string> short_name{
      {"performance", "ssd"}, {"capacity", "hdd"}, {"cold", "ceph"}, {"cache", "cache"}};
  std::string out;
  for (const v1::TierReads& t : s.tier_reads()) {
    if (t.latency_ms() == 0) continue;
    const auto name = short_name.find(t.tier());
    out += (out.empty() ? "" : " ") + (name == short_name.end() ? t.tier() : name->second) + " " +
           fixed(t.latency_ms(), 2) + "/" + fixed(t.p99_latency_ms(), 1);
  }
  return out.empty() ? "-" : out;
}
std::vector<std::string> row(const v1::VolumeStatistics& s) {
  return {s.volume(),
          fixed(s.read_iops(), 0),
          fixed(s.write_iops(), 0),
          fixed(s.read_mb_per_second(), 1),
          fixed(s.write_mb_per_second(), 1),
          fixed(s.read_latency_ms(), 2),
          fixed(s.write_latency_ms(), 2),
          tier_latencies(s),
          fixed(s.cache_hit_fraction() * 100, 0) + "%",
          fixed(s.performance_tier_fraction() * 100, 0) + "%",
          fixed(s.cold_tier_fraction() * 100, 0) + "%",
          size(s.allocated_bytes()),
          size(s.performance_bytes()),
          size(s.capacity_bytes()),
          size(s.cold_bytes()),
          s.write_cache().empty() ? "-" : s.write_cache(),
          size(s.dirty_bytes()),
          size(s.lost_bytes())};
}
std::vector<std::string> row(const v1::PoolStatistics& s) {
  return {s.pool(),
          size(s.performance_bytes() - s.performance_free_bytes()) + " / " +
              size(s.performance_bytes()),
          size(s.capacity_bytes() - s.capacity_free_bytes()) + " / " + size(s.capacity_bytes()),
          s.cold_bytes() == 0
              ? "-"
              : size(s.cold_bytes() - s.cold_free_bytes()) + " / " + size(s.cold_bytes()),
          size(s.committed_bytes()),
          size(s.read_cache_bytes()),
          fixed(s.read_iops(), 0),
          fixed(s.write_iops(), 0),
          fixed(s.read_mb_per_second(), 1),
          fixed(s.write_mb_per_second(), 1),
          s.writes_stopped().empty() ? "yes" : "STOPPED: " + s.writes_stopped(),
          s.write_cache().empty()
              ? "-"
              : s.write_cache() +
                    (s.write_through_reason().empty() ? "" : " (" + s.write_through_reason() + ")"),
          size(s.dirty_bytes()),
          size(s.write_log_used_bytes()) + " / " + size(s.write_log_bytes()),
          fixed(s.destage_mb_per_second(), 1),
          std::to_string(s.writes_logged()),
          std::to_string(s.writes_through()),
          std::to_string(s.dirty_bytes_lost()),
          std::to_string(s.promotions()),
          std::to_string(s.demotions()),
          std::to_string(s.cold_demotions()),
          std::to_string(s.cold_promotions()),
          size(s.migrated_bytes()),
          std::to_string(s.failed_moves())};
}
std::vector<std::string> row(const v1::ExtentHeat& h) {
  return {std::to_string(h.extent()),
          size(h.offset_bytes()),
          fixed(h.reads(), 2),
          fixed(h.writes(), 2),
          size(static_cast<std::uint64_t>(h.read_bytes() + h.write_bytes())),
          v1::Tier_Name(h.tier()).substr(h.tier() == v1::TIER_UNSPECIFIED ? 0 : 5),
          h.group().empty() ? "-" : h.group()};
}
std::vector<std::string> row(const v1::Event& e) {
  std::string level = v1::Severity_Name(e.severity());
  return {when(e.time_unix_ms()), level, e.resource().empty() ? "-" : e.resource(), e.message()};
}

std::string volume_name(const std::string& n) {
  return n.find('/') == std::string::npos ? "pools/p1/volumes/" + n : n;
}

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

namespace {

// A file the user named (`source`: the option or variable that named it),
// or a usage error saying why it cannot be read.
std::string read_named_file(const std::string& source, const std::string& path) {
  errno = 0;
  std::ifstream file(path, std::ios::binary);
  if (!file)
    throw usage_error("cannot read " + path + " (" + source +
                      "): " + (errno != 0 ? std::strerror(errno) : "cannot open"));
  std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  if (file.bad()) throw usage_error("cannot read " + path + " (" + source + ")");
  return text;
}

// The option's value, else the environment variable's (set and not
// empty), else empty; `source` says which it was, for messages.
std::string option_or_env(const std::string& option, const std::string& value, const char* variable,
                          std::string& source) {
  if (!value.empty()) {
    source = option;
    return value;
  }
  const char* from_env = std::getenv(variable);
  source = variable;
  return from_env != nullptr ? from_env : "";
}

}  // namespace

client& context::connect() {
  if (client_) return *client_;
  std::string ca_source, token_source;
  const std::string ca = option_or_env("--tls-ca", tls_ca, "STRATA_TLS_CA", ca_source);
  const std::string token_path =
      option_or_env("--token-file", token_file, "STRATA_TOKEN_FILE", token_source);
  // Whoever can read the network could otherwise read the token, and call
  // with it.
  if (!token_path.empty() && ca.empty()) {
    throw usage_error(token_source +
                      " sends a token, which needs TLS: give --tls-ca FILE (or STRATA_TLS_CA)");
  }
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials =
      grpc::InsecureChannelCredentials();
  if (!ca.empty()) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = read_named_file(ca_source, ca);
    if (tls.pem_root_certs.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      throw usage_error(ca + " (" + ca_source +
                        ") holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
    channel_credentials = grpc::SslCredentials(tls);
  }
  std::string authorization;
  if (!token_path.empty()) {
    std::string token = read_named_file(token_source, token_path);
    // One line; its newline is not part of the token.
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
    if (token.empty())
      throw usage_error(token_path + " (" + token_source + ") is empty: it should hold the token");
    if (token.find_first_of("\r\n") != std::string::npos) {
      throw usage_error(token_path + " (" + token_source +
                        ") has more than one line: the token is one");
    }
    authorization = "Bearer " + token;
  }
  client_ = std::make_unique<client>(client{
      v1::Array::NewStub(grpc::CreateChannel(api, channel_credentials)), as_json, authorization});
  return *client_;
}

}  // namespace strata::cli
