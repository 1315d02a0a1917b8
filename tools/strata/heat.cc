// The `strata heat` commands: top and list (the current heat, resources.cc)
// and the diagnostic for support engineers, heat map and heat report, over
// a pool's or a volume's heat history. The history comes live from the API
// (ListHeatHistory, paged; ListHeat for the current heat), or offline with
// --metadata DIR from a copy of the pool's metadata directory (stratad
// keeps it at STATE/pools/<pool>), opened read-only with no daemon through
// controller/heat_history_reader.h, which answers the same message. Every
// line after the fetch (heat_render.cc) is shared by the two.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>

#include "controller/heat_history_reader.h"
#include "tools/strata/cli.h"
#include "tools/strata/heat_render.h"

namespace strata::cli {

namespace {

using S = v1::Array::Stub;

struct heat_values {
  std::string subject, since = "24h", png, svg, metadata, limit, columns, rows;
};

// --since: 30m, 24h, 7d (also s and w), or an ISO date in UTC (2026-11-28,
// 2026-11-28T03:00, 2026-11-28T03:00:00Z): the Unix seconds it means.
std::int64_t since_of(const std::string& text, std::int64_t now_unix_seconds) {
  const std::string problem =
      "--since " + text +
      ": not a duration (30m, 24h, 7d) or an ISO date (2026-11-28, 2026-11-28T03:00:00Z)";
  if (text.empty()) throw usage_error(problem);
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits > 0 && digits + 1 == text.size() && digits <= 9) {
    const std::int64_t n = std::stoll(text.substr(0, digits));
    std::int64_t unit = 0;
    switch (text.back()) {
      case 's':
        unit = 1;
        break;
      case 'm':
        unit = 60;
        break;
      case 'h':
        unit = 3600;
        break;
      case 'd':
        unit = 86400;
        break;
      case 'w':
        unit = 7 * 86400;
        break;
      default:
        throw usage_error(problem);
    }
    return std::max<std::int64_t>(0, now_unix_seconds - n * unit);
  }
  std::tm tm{};
  int used = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &used) !=
          3 ||
      used != 10)
    throw usage_error(problem);
  std::string rest = text.substr(10);
  if (!rest.empty()) {
    if (rest[0] != 'T' && rest[0] != ' ') throw usage_error(problem);
    int end = 0;
    if (std::sscanf(rest.c_str() + 1, "%2d:%2d%n", &tm.tm_hour, &tm.tm_min, &end) != 2 || end != 5)
      throw usage_error(problem);
    rest = rest.substr(6);
    if (rest.size() >= 3 && rest[0] == ':') {
      if (std::sscanf(rest.c_str() + 1, "%2d%n", &tm.tm_sec, &end) != 1 || end != 2)
        throw usage_error(problem);
      rest = rest.substr(3);
    }
    if (rest != "" && rest != "Z") throw usage_error(problem);
  }
  if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
      tm.tm_min > 59 || tm.tm_sec > 60) {
    throw usage_error(problem);
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<std::int64_t>(timegm(&tm));
}

std::size_t count_of(const std::string& option, const std::string& text, std::size_t otherwise,
                     std::size_t most) {
  if (text.empty()) return otherwise;
  try {
    std::size_t used = 0;
    const unsigned long n = std::stoul(text, &used);
    if (used == text.size() && n >= 1 && n <= most) return n;
  } catch (...) {
  }
  throw usage_error(option + " " + text + ": takes a number from 1 to " + std::to_string(most));
}

// VOLUME|POOL: "pools/p1" is a pool; "v1" a volume of p1, as elsewhere.
std::string subject_of(const std::string& name) {
  return name.starts_with("pools/") ? name : volume_name(name);
}

// The history live: every page of ListHeatHistory, then the current heat.
int fetch_live(context& ctx, heat::history& h, std::size_t hottest) {
  client& c = ctx.connect();
  v1::ListHeatHistoryRequest in;
  in.set_parent(h.subject);
  in.set_since_unix_seconds(h.since_unix_seconds);
  in.set_page_size(1000);
  for (;;) {
    v1::ListHeatHistoryResponse page;
    if (auto s = c.call(&S::ListHeatHistory, in, page); !s.ok()) return fail(s);
    for (v1::HeatSnapshot& snap : *page.mutable_snapshots())
      h.response.add_snapshots()->Swap(&snap);
    h.response.set_extent_bytes(page.extent_bytes());
    h.response.set_interval_seconds(page.interval_seconds());
    h.response.set_extents_per_snapshot(page.extents_per_snapshot());
    if (page.next_page_token().empty()) break;
    in.set_page_token(page.next_page_token());
  }
  // The current heat (ListHeat), hottest first across the volumes.
  std::vector<std::string> volumes;
  if (h.subject.find("/volumes/") != std::string::npos) {
    volumes.push_back(h.subject);
  } else {
    v1::ListRequest list;
    list.set_parent(h.subject);
    list.set_page_size(1000);
    for (;;) {
      v1::ListVolumesResponse out;
      if (auto s = c.call(&S::ListVolumes, list, out); !s.ok()) return fail(s);
      for (const v1::Volume& v : out.volumes()) volumes.push_back(v.name());
      if (out.next_page_token().empty()) break;
      list.set_page_token(out.next_page_token());
    }
  }
  std::vector<std::pair<v1::HeatSnapshot::Extent, std::string>> now;
  for (const std::string& volume : volumes) {
    v1::ListHeatRequest heat_in;
    heat_in.set_volume(volume);
    heat_in.set_hottest_first(true);
    heat_in.set_page_size(static_cast<std::int32_t>(hottest));
    v1::ListHeatResponse out;
    if (auto s = c.call(&S::ListHeat, heat_in, out); !s.ok()) return fail(s);
    for (const v1::ExtentHeat& e : out.extents()) {
      v1::HeatSnapshot::Extent x;
      x.set_volume(volume);
      x.set_extent(e.extent());
      x.set_tier(e.tier());
      x.set_reads(e.reads());
      x.set_writes(e.writes());
      x.set_read_bytes(e.read_bytes());
      x.set_write_bytes(e.write_bytes());
      x.set_score(e.reads() +
                  e.writes());  // tiering::heat_map::score: random I/Os, reads and writes alike
      if (x.score() > 0) now.emplace_back(x, e.group().empty() ? "-" : e.group());
    }
  }
  std::stable_sort(now.begin(), now.end(),
                   [](const auto& a, const auto& b) { return a.first.score() > b.first.score(); });
  for (std::size_t i = 0; i < now.size() && i < hottest; ++i) {
    h.now.push_back(now[i].first);
    h.now_groups.push_back(now[i].second);
  }
  return 0;
}

// The history offline, from a copy of the pool's metadata directory.
int fetch_offline(const std::string& dir, heat::history& h) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw usage_error("--metadata " + dir + ": not a directory (a copy of STATE/pools/<pool>)");
  v1::ListHeatHistoryRequest request;
  request.set_parent(h.subject);
  request.set_since_unix_seconds(h.since_unix_seconds);
  request.set_page_size(1000);
  auto query = controller::heat_history_query_of(request);
  if (!query)
    throw usage_error(query.error().field == "parent" ? "VOLUME|POOL " + query.error().message
                                                      : query.error().message);
  for (;;) {
    auto page = controller::read_heat_history(dir, *query);
    if (!page) {
      std::fprintf(stderr, "strata: %s: %s\n", dir.c_str(), page.error().message.c_str());
      return exit_refused;
    }
    for (v1::HeatSnapshot& snap : *page->mutable_snapshots())
      h.response.add_snapshots()->Swap(&snap);
    h.response.set_extent_bytes(page->extent_bytes());
    h.response.set_interval_seconds(page->interval_seconds());
    h.response.set_extents_per_snapshot(page->extents_per_snapshot());
    if (page->next_page_token().empty()) break;
    const auto next = controller::heat_history_token_start(page->next_page_token());
    if (!next) break;
    query->first_sequence = *next;
  }
  return 0;
}

int write_file(const std::string& option, const std::string& path, const std::string& bytes) {
  errno = 0;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (file) file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (file) file.close();
  if (!file) {
    std::fprintf(stderr, "strata: cannot write %s (%s): %s\n", path.c_str(), option.c_str(),
                 errno != 0 ? std::strerror(errno) : "write failed");
    return exit_refused;
  }
  return 0;
}

}  // namespace

void add_heat_commands(CLI::App& app, context& ctx) {
  CLI::App* heat_noun = app.add_subcommand(
      "heat", "extent heat: now (top, list) and over time, for support (map, report)");
  add_heat_table_commands(heat_noun, ctx);
  auto v = std::make_shared<heat_values>();

  for (const char* verb_name : {"map", "report"}) {
    const bool map = std::string(verb_name) == "map";
    CLI::App* verb = heat_noun->add_subcommand(
        verb_name, map ? "a heat map over time: extents by volume down, snapshots across, coloured "
                         "by heat, with tiers and moves "
                         "(text; --png or --svg: a picture)"
                       : "a text report: the hottest extents and where they live, promotions and "
                         "how long they waited, "
                         "what was moved and why, the SSD tier's hit ratio over time");
    verb->add_option("SUBJECT", v->subject, "VOLUME (v1, pools/p2/volumes/v1) or POOL (pools/p1)")
        ->type_name("")
        ->required();
    verb->add_option("--since", v->since,
                     "from when: 30m, 24h, 7d or an ISO date (2026-11-28T03:00:00Z); default 24h")
        ->type_name("WHEN");
    verb->add_option("--metadata", v->metadata,
                     "offline: a copy of the pool's metadata directory (STATE/pools/<pool>), "
                     "read-only, no daemon; "
                     "SUBJECT names the pool (pools/p1)")
        ->type_name("DIR");
    if (map) {
      CLI::Option* png = verb->add_option("--png", v->png, "write the map as a PNG picture to FILE")
                             ->type_name("FILE");
      CLI::Option* svg =
          verb->add_option("--svg", v->svg, "write the map as an SVG picture to FILE")
              ->type_name("FILE");
      png->excludes(svg);
      svg->excludes(png);
      verb->add_option("--columns", v->columns,
                       "text: at most N columns of snapshots (default 60; merged beyond)")
          ->type_name("N");
      verb->add_option("--rows", v->rows,
                       "text: at most N extents, the hottest at their peak (default 64)")
          ->type_name("N");
    } else {
      verb->add_option("--limit", v->limit,
                       "how many of the hottest extents to list (1 to 1000; default 20)")
          ->type_name("N");
    }
    ctx.on(verb, [&ctx, v, verb, map] {
      heat::history h;
      h.subject = subject_of(v->subject);
      const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
      h.since_unix_seconds = since_of(v->since, now);
      const std::size_t hottest = count_of("--limit", v->limit, 20, 1000);
      const std::size_t columns = count_of("--columns", v->columns, 60, 10000),
                        rows = count_of("--rows", v->rows, 64, 100000);
      if (verb->count("--metadata") > 0) {
        h.source = "offline, from the metadata copy " + v->metadata + ", read-only";
        if (const int rc = fetch_offline(v->metadata, h); rc != 0) return rc;
      } else {
        h.source = "live, through " + ctx.api;
        if (const int rc = fetch_live(ctx, h, hottest); rc != 0) return rc;
      }
      if (ctx.as_json) {
        std::printf("%s\n", json(h.response).c_str());
        return 0;
      }
      if (!map) {
        std::fputs(heat::report(h, hottest).c_str(), stdout);
        return 0;
      }
      if (!v->png.empty()) {
        std::uint32_t width = 0, height = 0;
        const std::string bytes = heat::png(h, &width, &height);
        if (const int rc = write_file("--png", v->png, bytes); rc != 0) return rc;
        std::printf("wrote %s: %u x %u pixels, %d snapshots\n", v->png.c_str(), width, height,
                    h.response.snapshots_size());
        return 0;
      }
      if (!v->svg.empty()) {
        if (const int rc = write_file("--svg", v->svg, heat::svg(h)); rc != 0) return rc;
        std::printf("wrote %s: %d snapshots\n", v->svg.c_str(), h.response.snapshots_size());
        return 0;
      }
      std::fputs(heat::text_map(h, columns, rows).c_str(), stdout);
      return 0;
    });
  }
}

}  // namespace strata::cli
