#include "mgmt/metrics.h"

#include <grpcpp/client_context.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace strata::mgmt {

namespace {

constexpr int page_size = 1000;

// Every page of a List method.
template <class Response, class Item>
std::expected<std::vector<Item>, grpc::Status> list_all(
    const std::function<grpc::Status(grpc::ClientContext*, const v1::ListRequest&, Response*)>&
        call,
    const std::function<const google::protobuf::RepeatedPtrField<Item>&(const Response&)>& items) {
  std::vector<Item> out;
  v1::ListRequest request;
  request.set_page_size(page_size);
  for (;;) {
    grpc::ClientContext context;
    Response page;
    if (grpc::Status s = call(&context, request, &page); !s.ok()) return std::unexpected(s);
    out.insert(out.end(), items(page).begin(), items(page).end());
    if (page.next_page_token().empty()) return out;
    request.set_page_token(page.next_page_token());
  }
}

// "DISK_ONLINE" less "DISK_": "online", as Prometheus's label values go.
std::string label_of(const std::string& enum_name, std::string_view prefix) {
  std::string out = enum_name.starts_with(prefix) ? enum_name.substr(prefix.size()) : enum_name;
  std::ranges::transform(out, out.begin(),
                         [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// A label value, escaped as the format wants (backslash, quote, newline).
std::string escaped(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest text that reads back as the same double: "0.00025", not
  // "0.00025000000000000001".
  char text[64];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, v);
  return ec == std::errc{} ? std::string(text, end) : "NaN";
}

using labels = std::vector<std::pair<std::string, std::string>>;

// Writes families: HELP and TYPE once per name, then its samples.
class exposition {
 public:
  void family(const std::string& name, const char* type, const std::string& help) {
    if (!declared_.insert(name).second) return;
    text_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, const labels& l, double value) {
    text_ += name;
    if (!l.empty()) {
      text_ += "{";
      for (std::size_t i = 0; i < l.size(); ++i)
        text_ += (i ? "," : "") + l[i].first + "=\"" + escaped(l[i].second) + "\"";
      text_ += "}";
    }
    text_ += " " + number(value) + "\n";
  }
  void gauge(const std::string& name, const std::string& help, const labels& l, double value) {
    family(name, "gauge", help);
    sample(name, l, value);
  }
  void counter(const std::string& name, const std::string& help, const labels& l, double value) {
    family(name, "counter", help);
    sample(name, l, value);
  }
  // One series per state, 1 for the one it is in (Prometheus's way with
  // enumerations: alerts can match state="failed" and sum).
  template <class Enum>
  void state_set(const std::string& name, const std::string& help, labels l, Enum now,
                 const google::protobuf::EnumDescriptor* type, std::string_view prefix) {
    family(name, "gauge", help);
    for (int i = 0; i < type->value_count(); ++i) {
      const auto* v = type->value(i);
      if (v->number() == 0) continue;  // UNSPECIFIED
      labels with = l;
      with.emplace_back("state", label_of(v->name(), prefix));
      sample(name, with, v->number() == static_cast<int>(now) ? 1 : 0);
    }
  }
  // A histogram from the API's per-bucket counts (each bucket its own
  // range) as Prometheus's cumulative `le` buckets.
  void histogram(const std::string& name, const std::string& help, const labels& l,
                 const google::protobuf::RepeatedField<double>& bounds,
                 const google::protobuf::RepeatedField<std::uint64_t>& counts, double sum_seconds) {
    if (counts.size() != bounds.size() + 1) return;  // an older daemon's answer: no histogram
    family(name, "histogram", help);
    std::uint64_t running = 0;
    for (int i = 0; i <= bounds.size(); ++i) {
      running += counts[i];
      labels with = l;
      with.emplace_back("le", i < bounds.size() ? number(bounds[i]) : "+Inf");
      sample(name + "_bucket", with, static_cast<double>(running));
    }
    sample(name + "_sum", l, sum_seconds);
    sample(name + "_count", l, static_cast<double>(running));
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
  std::set<std::string> declared_;
};

}  // namespace

std::expected<array_scrape, grpc::Status> collect(v1::Array::StubInterface& api) {
  const auto started = std::chrono::steady_clock::now();
  array_scrape out;
  using namespace std::placeholders;
  auto controllers = list_all<v1::ListControllersResponse, v1::Controller>(
      [&](auto* c, const auto& r, auto* p) { return api.ListControllers(c, r, p); },
      [](const auto& p) -> const auto& { return p.controllers(); });
  if (!controllers) return std::unexpected(controllers.error());
  out.controllers = std::move(*controllers);
  auto pools = list_all<v1::ListPoolsResponse, v1::Pool>(
      [&](auto* c, const auto& r, auto* p) { return api.ListPools(c, r, p); },
      [](const auto& p) -> const auto& { return p.pools(); });
  if (!pools) return std::unexpected(pools.error());
  for (v1::Pool& p : *pools) {
    // Each pool's volumes (a list of volumes is a pool's).
    auto volumes = list_all<v1::ListVolumesResponse, v1::Volume>(
        [&](auto* c, v1::ListRequest r, auto* page) {
          r.set_parent(p.name());
          return api.ListVolumes(c, r, page);
        },
        [](const auto& page) -> const auto& { return page.volumes(); });
    if (!volumes) return std::unexpected(volumes.error());
    for (v1::Volume& v : *volumes) {
      grpc::ClientContext context;
      v1::GetRequest request;
      request.set_name(v.name());
      v1::VolumeStatistics stats;
      if (api.GetVolumeStatistics(&context, request, &stats).ok())
        out.volumes.emplace_back(std::move(v), std::move(stats));
    }
    grpc::ClientContext context;
    v1::GetRequest request;
    request.set_name(p.name());
    v1::PoolStatistics stats;
    if (api.GetPoolStatistics(&context, request, &stats).ok())
      out.pools.emplace_back(std::move(p), std::move(stats));
  }
  auto disks = list_all<v1::ListDisksResponse, v1::Disk>(
      [&](auto* c, const auto& r, auto* p) { return api.ListDisks(c, r, p); },
      [](const auto& p) -> const auto& { return p.disks(); });
  if (!disks) return std::unexpected(disks.error());
  out.disks = std::move(*disks);
  auto groups = list_all<v1::ListDiskGroupsResponse, v1::DiskGroup>(
      [&](auto* c, const auto& r, auto* p) { return api.ListDiskGroups(c, r, p); },
      [](const auto& p) -> const auto& { return p.groups(); });
  if (!groups) return std::unexpected(groups.error());
  out.groups = std::move(*groups);
  auto operations = list_all<v1::ListOperationsResponse, v1::Operation>(
      [&](auto* c, const auto& r, auto* p) { return api.ListOperations(c, r, p); },
      [](const auto& p) -> const auto& { return p.operations(); });
  if (!operations) return std::unexpected(operations.error());
  for (v1::Operation& o : *operations) {
    if (o.state() == v1::Operation::RUNNING) out.running.push_back(std::move(o));
  }
  {
    // Newest first: the first event's number is how many were logged.
    grpc::ClientContext context;
    v1::ListRequest request;
    request.set_page_size(1);
    v1::ListEventsResponse newest;
    if (api.ListEvents(&context, request, &newest).ok() && newest.events_size() > 0) {
      const std::string& name = newest.events(0).name();
      out.events = std::strtoull(name.c_str() + name.rfind('/') + 1, nullptr, 10);
    }
  }
  out.collect_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

std::string render(const array_scrape& scrape) {
  exposition m;
  for (const v1::Controller& c : scrape.controllers) {
    const labels l{{"controller", c.name()}};
    m.gauge("strata_controller_info", "The controller's firmware version and array id (always 1).",
            {{"controller", c.name()}, {"version", c.version()}, {"array_id", c.array_id()}}, 1);
    m.state_set("strata_controller_state", "The controller's state: 1 for the one it is in.", l,
                c.state(), v1::ControllerState_descriptor(), "CONTROLLER_");
    if (c.start_time_unix_ms() > 0) {
      m.gauge("strata_controller_start_time_seconds",
              "When the controller's daemon started (Unix time).", l,
              static_cast<double>(c.start_time_unix_ms()) / 1000);
    }
    m.gauge("strata_controller_pools", "Pools the controller owns.", l, c.pools_size());
    for (const auto& port : c.ports()) {
      m.gauge(
          "strata_port_connections", "Connections open on the port now.",
          {{"controller", c.name()}, {"protocol", port.protocol()}, {"address", port.address()}},
          port.connections());
    }
  }
  for (const auto& [p, s] : scrape.pools) {
    const labels l{{"pool", p.name()}};
    for (const auto& [tier, size, free] :
         {std::tuple{"performance", s.performance_bytes(), s.performance_free_bytes()},
          std::tuple{"capacity", s.capacity_bytes(), s.capacity_free_bytes()},
          std::tuple{"cold", s.cold_bytes(), s.cold_free_bytes()}}) {
      if (std::string_view(tier) == "cold" && size == 0) continue;  // no Ceph tier
      m.gauge("strata_pool_size_bytes",
              "The pool's space per tier (performance: the SSD tier, capacity: the HDD tier, cold: "
              "the Ceph tier).",
              {{"pool", p.name()}, {"tier", tier}}, static_cast<double>(size));
      m.gauge("strata_pool_free_bytes", "The pool's free space per tier.",
              {{"pool", p.name()}, {"tier", tier}}, static_cast<double>(free));
    }
    m.gauge("strata_pool_committed_bytes",
            "The sum of the pool's volumes' sizes (thin: may pass its space).", l,
            static_cast<double>(s.committed_bytes()));
    m.gauge("strata_pool_read_cache_bytes", "The pool's SSD read cache's size.", l,
            static_cast<double>(s.read_cache_bytes()));
    m.gauge("strata_pool_writes_stopped", "1 while the pool refuses writes (a full backing store).",
            l, s.writes_stopped().empty() ? 0 : 1);
    m.counter("strata_pool_promotions_total",
              "Extents the migrator moved to the SSD tier since the pool opened here.", l,
              static_cast<double>(s.promotions()));
    m.counter("strata_pool_demotions_total",
              "Extents the migrator moved to the HDD tier since the pool opened here.", l,
              static_cast<double>(s.demotions()));
    if (s.cold_bytes() > 0) {
      m.counter("strata_pool_cold_demotions_total",
                "Extents the migrator moved to the Ceph (cold) tier since the pool opened here.", l,
                static_cast<double>(s.cold_demotions()));
      m.counter("strata_pool_cold_promotions_total",
                "Extents the migrator moved back from the Ceph tier since the pool opened here.", l,
                static_cast<double>(s.cold_promotions()));
    }
    m.counter("strata_pool_migrated_bytes_total",
              "Bytes of extents the migrator moved since the pool opened here.", l,
              static_cast<double>(s.migrated_bytes()));
    m.counter("strata_pool_failed_moves_total",
              "Extent moves that failed or were refused as stale.", l,
              static_cast<double>(s.failed_moves()));
    m.gauge("strata_pool_moves_in_flight", "Extent moves running now.", l, s.moves_in_flight());
    if (!s.write_cache().empty()) {
      m.gauge("strata_pool_write_back",
              "1 while the pool's writes are acknowledged from its write log (write-back), 0 "
              "write-through.",
              l, s.write_cache() == "write-back" ? 1 : 0);
      m.gauge("strata_pool_dirty_bytes", "Acknowledged data in the write log not yet destaged.", l,
              static_cast<double>(s.dirty_bytes()));
      m.gauge("strata_pool_write_log_size_bytes", "The write log's capacity.", l,
              static_cast<double>(s.write_log_bytes()));
      m.gauge("strata_pool_write_log_used_bytes", "The write log's space in use.", l,
              static_cast<double>(s.write_log_used_bytes()));
      m.counter("strata_pool_writes_logged_total", "Writes acknowledged from the write log.", l,
                static_cast<double>(s.writes_logged()));
      m.counter("strata_pool_writes_through_total", "Writes written to the groups directly.", l,
                static_cast<double>(s.writes_through()));
      m.counter("strata_pool_dirty_lost_bytes_total",
                "Dirty data a failed write log could not give back.", l,
                static_cast<double>(s.dirty_bytes_lost()));
    }
  }
  for (const auto& [v, s] : scrape.volumes) {
    const labels l{{"volume", v.name()}};
    m.gauge("strata_volume_size_bytes", "The volume's size as hosts see it.", l,
            static_cast<double>(v.size_bytes()));
    m.gauge("strata_volume_allocated_bytes",
            "The volume's written extents per tier (thin provisioning).",
            {{"volume", v.name()}, {"tier", "performance"}},
            static_cast<double>(s.performance_bytes()));
    m.sample("strata_volume_allocated_bytes", {{"volume", v.name()}, {"tier", "capacity"}},
             static_cast<double>(s.capacity_bytes()));
    m.sample("strata_volume_allocated_bytes", {{"volume", v.name()}, {"tier", "cold"}},
             static_cast<double>(s.cold_bytes()));
    m.counter("strata_volume_reads_total", "Read commands the volume completed.", l,
              static_cast<double>(s.reads()));
    m.counter("strata_volume_writes_total", "Write commands the volume completed.", l,
              static_cast<double>(s.writes()));
    m.counter("strata_volume_flushes_total",
              "Flushes (SYNCHRONIZE CACHE, NVMe Flush) the volume completed.", l,
              static_cast<double>(s.flushes()));
    m.counter("strata_volume_read_bytes_total", "Bytes read from the volume.", l,
              static_cast<double>(s.read_bytes()));
    m.counter("strata_volume_written_bytes_total", "Bytes written to the volume.", l,
              static_cast<double>(s.write_bytes()));
    m.histogram(
        "strata_volume_read_latency_seconds", "Read latency, the volume's submit to completion.", l,
        s.latency_bucket_bounds_seconds(), s.read_latency_buckets(), s.read_latency_seconds_sum());
    m.histogram("strata_volume_write_latency_seconds",
                "Write latency, the volume's submit to completion.", l,
                s.latency_bucket_bounds_seconds(), s.write_latency_buckets(),
                s.write_latency_seconds_sum());
    m.histogram("strata_volume_flush_latency_seconds",
                "Flush latency, the volume's submit to completion.", l,
                s.latency_bucket_bounds_seconds(), s.flush_latency_buckets(),
                s.flush_latency_seconds_sum());
    for (const v1::TierReads& t : s.tier_reads()) {
      m.histogram("strata_volume_tier_read_latency_seconds",
                  "Read latency per tier (performance, capacity, cold: Ceph, cache: the read "
                  "cache), extent piece by piece, from its "
                  "dispatch there to its completion.",
                  {{"volume", v.name()}, {"tier", t.tier()}}, s.latency_bucket_bounds_seconds(),
                  t.latency_buckets(), t.latency_seconds_sum());
    }
    m.counter("strata_volume_read_pieces_total",
              "Extent pieces of reads that touched data (a read crossing an extent boundary counts "
              "once per extent).",
              l, static_cast<double>(s.read_pieces()));
    m.counter("strata_volume_read_cache_hits_total",
              "Extent pieces of reads the SSD read cache served.", l,
              static_cast<double>(s.read_cache_hits()));
    m.counter("strata_volume_performance_tier_reads_total",
              "Extent pieces of reads the SSD tier served.", l,
              static_cast<double>(s.performance_tier_reads()));
    m.gauge("strata_volume_performance_tier_fraction",
            "The fraction of the volume's written data on the SSD tier.", l,
            s.allocated_bytes() == 0 ? 0.0
                                     : static_cast<double>(s.performance_bytes()) /
                                           static_cast<double>(s.allocated_bytes()));
    if (!s.write_cache().empty()) {
      m.gauge("strata_volume_dirty_bytes", "The volume's acknowledged data not yet destaged.", l,
              static_cast<double>(s.dirty_bytes()));
      m.gauge("strata_volume_lost_bytes",
              "The volume's data a failed write log could not give back (reads of it fail).", l,
              static_cast<double>(s.lost_bytes()));
    }
  }
  for (const v1::Disk& d : scrape.disks) {
    const labels l{{"disk", d.name()}};
    m.gauge("strata_disk_info", "A disk's kind, model, serial and group (always 1).",
            {{"disk", d.name()},
             {"kind", label_of(v1::DiskKind_Name(d.kind()), "")},
             {"model", d.model()},
             {"serial", d.serial()},
             {"group", d.group()}},
            1);
    m.state_set("strata_disk_state", "The disk's state: 1 for the one it is in.", l, d.state(),
                v1::DiskState_descriptor(), "DISK_");
    m.gauge("strata_disk_size_bytes", "The disk's size.", l, static_cast<double>(d.size_bytes()));
    m.counter("strata_disk_read_errors_total",
              "Reads the disk failed, each repaired from the others.", l,
              static_cast<double>(d.health().read_errors()));
    m.counter("strata_disk_timeouts_total",
              "I/Os the disk left unanswered past the member timeout.", l,
              static_cast<double>(d.health().timeouts()));
  }
  for (const v1::DiskGroup& g : scrape.groups) {
    const labels l{{"group", g.name()}};
    m.gauge("strata_group_info", "A disk group's kind (always 1).",
            {{"group", g.name()}, {"kind", label_of(v1::GroupKind_Name(g.kind()), "")}}, 1);
    m.state_set("strata_group_state", "The group's state: 1 for the one it is in.", l, g.state(),
                v1::GroupState_descriptor(), "GROUP_");
    m.gauge("strata_group_size_bytes", "What the group holds.", l,
            static_cast<double>(g.size_bytes()));
    m.gauge("strata_group_failed_members", "The group's failed members.", l, g.failed_members());
    m.gauge("strata_group_rebuild_done_bytes", "The running rebuild's bytes done (0: none runs).",
            l, static_cast<double>(g.rebuild_bytes_done()));
    m.gauge("strata_group_rebuild_bytes", "The running rebuild's bytes in all (0: none runs).", l,
            static_cast<double>(g.rebuild_bytes_total()));
    m.gauge("strata_group_rebuild_eta_seconds", "The running rebuild's estimated time left.", l,
            g.rebuild_eta_seconds());
    m.gauge("strata_group_scrubbing", "1 while a scrub runs on the group.", l,
            g.scrubbing() ? 1 : 0);
    m.counter("strata_group_repaired_blocks_total", "Unreadable blocks rebuilt and rewritten.", l,
              static_cast<double>(g.repaired_blocks()));
  }
  for (const v1::Operation& o : scrape.running) {
    m.gauge("strata_operation_progress_ratio",
            "A running operation's progress, 0 to 1 (rebuilds, scrubs, moves, deletes).",
            {{"operation", o.name()}, {"kind", o.kind()}, {"resource", o.resource()}},
            o.progress_fraction());
  }
  m.counter("strata_events_total", "Events the array has logged.", {},
            static_cast<double>(scrape.events));
  m.gauge("strata_scrape_duration_seconds", "How long this scrape's API calls took.", {},
          scrape.collect_seconds);
  return m.take();
}

}  // namespace strata::mgmt
