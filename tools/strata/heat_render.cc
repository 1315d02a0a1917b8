// The heat diagnostic's outputs (heat_render.h): the grid, the text map,
// the report, SVG written by hand, and PNG through our own small encoder
// over zlib (the same cell grid rasterised, labels in a 3x5 bitmap font).
#include "tools/strata/heat_render.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace strata::cli::heat {

namespace {

std::string printf_string(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

std::string short_volume(const std::string& volume) {
  return volume.substr(volume.rfind('/') + 1);
}

std::string tier_word(v1::Tier t) {
  return t == v1::TIER_PERFORMANCE ? "SSD"
         : t == v1::TIER_CAPACITY  ? "HDD"
         : t == v1::TIER_COLD      ? "Ceph"
         : t == v1::TIER_UNMAPPED  ? "unmapped"
                                   : "?";
}

std::string clock_of(std::int64_t unix_seconds) {  // "03:40:10"
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

// A score for people: 3 significant digits.
std::string score_text(double s) {
  if (s >= 100) return printf_string("%.0f", s);
  if (s >= 10) return printf_string("%.1f", s);
  return printf_string("%.2f", s);
}

struct rgb {
  std::uint8_t r, g, b;
};

// ColorBrewer's YlOrRd: light for cool, dark red for hot, ordered in
// lightness (so it reads in grey too); white is left for "not listed".
constexpr std::array<rgb, 9> ramp{{{255, 255, 204},
                                   {255, 237, 160},
                                   {254, 217, 118},
                                   {254, 178, 76},
                                   {253, 141, 60},
                                   {252, 78, 42},
                                   {227, 26, 28},
                                   {189, 0, 38},
                                   {128, 0, 38}}};
constexpr rgb absent_colour{246, 246, 246}, ssd_colour{31, 120, 180}, hdd_colour{150, 150, 150},
    promoted_colour{26, 152, 80}, demoted_colour{106, 61, 154}, ink{40, 40, 40},
    paper{255, 255, 255};

rgb ramp_at(double x) {
  x = std::clamp(x, 0.0, 1.0) * static_cast<double>(ramp.size() - 1);
  const std::size_t i = std::min(static_cast<std::size_t>(x), ramp.size() - 2);
  const double f = x - static_cast<double>(i);
  auto mix = [f](std::uint8_t a, std::uint8_t b) {
    return static_cast<std::uint8_t>(std::lround(a + (b - a) * f));
  };
  return {mix(ramp[i].r, ramp[i + 1].r), mix(ramp[i].g, ramp[i + 1].g),
          mix(ramp[i].b, ramp[i + 1].b)};
}

std::string hex(rgb c) {
  return printf_string("#%02x%02x%02x", c.r, c.g, c.b);
}

std::string xml_escaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

double snapshot_heat(const v1::HeatSnapshot& s) {
  return s.total_reads() + s.total_writes();
}

// Every column gets a label if there is room, else every k-th.
std::size_t label_every(std::size_t columns, std::size_t cell_width, std::size_t label_width) {
  const std::size_t per = std::max<std::size_t>(
      1, (label_width + cell_width - 1) / std::max<std::size_t>(1, cell_width));
  return columns == 0 ? 1 : per;
}

}  // namespace

std::string utc(std::int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

std::string span(double seconds) {
  if (seconds < 120) return printf_string("%.0f s", seconds);
  if (seconds < 7200) return printf_string("%.0f min", seconds / 60);
  if (seconds < 172800) return printf_string("%.1f h", seconds / 3600);
  return printf_string("%.1f days", seconds / 86400);
}

grid grid_of(const history& h) {
  grid g;
  std::map<std::pair<std::string, std::uint64_t>, std::size_t>
      index;  // (volume, extent) → row, in order
  for (const v1::HeatSnapshot& s : h.response.snapshots()) {
    for (const auto& e : s.extents()) index.emplace(std::make_pair(e.volume(), e.extent()), 0);
  }
  const std::size_t columns = static_cast<std::size_t>(h.response.snapshots_size());
  for (auto& [key, i] : index) {
    i = g.rows.size();
    g.rows.push_back(row{key.first, key.second, 0, std::vector<cell>(columns)});
  }
  std::vector<v1::Tier> last_tier(g.rows.size(), v1::TIER_UNSPECIFIED);
  g.min_score = 0;
  for (std::size_t c = 0; c < columns; ++c) {
    const v1::HeatSnapshot& s = h.response.snapshots(static_cast<int>(c));
    g.times.push_back(s.taken_unix_seconds());
    for (const auto& e : s.extents()) {
      const std::size_t r = index[{e.volume(), e.extent()}];
      cell& x = g.rows[r].cells[c];
      x.present = true;
      x.score = e.score();
      x.tier = e.tier();
      const v1::Tier before = last_tier[r];
      if (before != v1::TIER_UNSPECIFIED && before != e.tier()) {
        if (e.tier() == v1::TIER_PERFORMANCE && before == v1::TIER_CAPACITY)
          x.moved = move::promoted;
        if (e.tier() == v1::TIER_CAPACITY && before == v1::TIER_PERFORMANCE)
          x.moved = move::demoted;
      }
      last_tier[r] = e.tier();
      g.rows[r].peak = std::max(g.rows[r].peak, e.score());
      if (e.score() > 0) {
        g.min_score = g.min_score == 0 ? e.score() : std::min(g.min_score, e.score());
        g.max_score = std::max(g.max_score, e.score());
      }
    }
  }
  return g;
}

grid reduced(const grid& g, std::size_t columns, std::size_t rows) {
  grid out;
  out.min_score = g.min_score;
  out.max_score = g.max_score;
  const std::size_t n = g.times.size();
  const std::size_t per = columns == 0 || n <= columns ? 1 : (n + columns - 1) / columns;
  for (std::size_t c = 0; c < n; c += per) out.times.push_back(g.times[std::min(n, c + per) - 1]);
  std::vector<std::size_t> keep(g.rows.size());
  for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = i;
  if (rows != 0 && keep.size() > rows) {
    std::stable_sort(keep.begin(), keep.end(),
                     [&](std::size_t a, std::size_t b) { return g.rows[a].peak > g.rows[b].peak; });
    keep.resize(rows);
    std::sort(keep.begin(), keep.end());
  }
  for (std::size_t i : keep) {
    const row& from = g.rows[i];
    row to{from.volume, from.extent, from.peak, {}};
    for (std::size_t c = 0; c < n; c += per) {
      cell merged;
      for (std::size_t k = c; k < std::min(n, c + per); ++k) {
        const cell& x = from.cells[k];
        if (!x.present) continue;
        merged.present = true;
        merged.score = std::max(merged.score, x.score);
        merged.tier = x.tier;
        if (x.moved != move::none) merged.moved = x.moved;
      }
      to.cells.push_back(merged);
    }
    out.rows.push_back(std::move(to));
  }
  return out;
}

double level(const grid& g, double score) {
  if (score <= 0 || g.max_score <= 0) return 0;
  if (g.max_score <= g.min_score) return 1;
  return std::clamp(
      (std::log(score) - std::log(g.min_score)) / (std::log(g.max_score) - std::log(g.min_score)),
      0.0, 1.0);
}

// ---------------------------------------------------------------- text map

namespace {

constexpr std::string_view heat_chars = ".:-=+*#%@";  // cool to hot, log scale

std::string header(const history& h, const char* what) {
  const auto& r = h.response;
  std::string out = printf_string("%s of %s (%s)\n", what, h.subject.c_str(), h.source.c_str());
  if (r.snapshots_size() == 0) {
    out += "no heat snapshots" +
           (h.since_unix_seconds > 0 ? " since " + utc(h.since_unix_seconds) : std::string()) +
           ": the pool takes one every interval (stratad's heat_history_interval_s)\n";
    return out;
  }
  const std::int64_t first = r.snapshots(0).taken_unix_seconds(),
                     last = r.snapshots(r.snapshots_size() - 1).taken_unix_seconds();
  out += printf_string(
      "%d snapshots from %s to %s, one every %s; each lists the pool's %u hottest extents at most "
      "(extent: %s)\n",
      r.snapshots_size(), utc(first).c_str(), utc(last).c_str(), span(r.interval_seconds()).c_str(),
      r.extents_per_snapshot(), (std::to_string(r.extent_bytes() >> 20) + " MiB").c_str());
  return out;
}

}  // namespace

std::string text_map(const history& h, std::size_t columns, std::size_t rows) {
  std::string out = header(h, "heat map");
  const grid full = grid_of(h);
  if (full.times.empty()) return out;
  const grid g = reduced(full, columns, rows);
  const std::size_t per = (full.times.size() + g.times.size() - 1) / g.times.size();
  out += printf_string(
      "each cell: heat (log scale, score %s to %s: ' ' not listed %s) then tier (S SSD, H HDD; ^ "
      "promoted to SSD, v demoted to HDD)\n",
      score_text(g.min_score).c_str(), score_text(g.max_score).c_str(),
      (std::string(heat_chars.substr(0, 1)) + " cool .. " +
       std::string(heat_chars.substr(heat_chars.size() - 1)) + " hot")
          .c_str());
  if (per > 1)
    out += printf_string("each column: %zu snapshots (the highest score, the last tier)\n", per);
  if (g.rows.size() < full.rows.size()) {
    out +=
        printf_string("%zu of %zu extents shown: those with the highest peak (--rows to change)\n",
                      g.rows.size(), full.rows.size());
  }
  // Labels: "v1 " then the extent, right-aligned.
  std::size_t volume_width = 6, extent_width = 6;
  for (const row& r : g.rows) {
    volume_width = std::max(volume_width, short_volume(r.volume).size());
    extent_width = std::max(extent_width, std::to_string(r.extent).size());
  }
  const std::string pad(volume_width + 1 + extent_width + 1, ' ');
  // The time axis: a label every few columns (8 characters = 4 cells).
  std::string axis = pad, ticks = pad;
  const std::size_t every = label_every(g.times.size(), 2, 10);
  for (std::size_t c = 0; c < g.times.size(); ++c) {
    if (c % every == 0 && axis.size() <= pad.size() + 2 * c) {
      axis.resize(pad.size() + 2 * c, ' ');
      axis += clock_of(g.times[c]);
      ticks.resize(pad.size() + 2 * c, ' ');
      ticks += '|';
    }
  }
  out += printf_string("%-*s %*s %s\n", static_cast<int>(volume_width), "VOLUME",
                       static_cast<int>(extent_width), "EXTENT", "time (UTC) ->");
  out += axis + "\n" + ticks + "\n";
  std::string volume;
  for (const row& r : g.rows) {
    const std::string name = short_volume(r.volume);
    std::string line = printf_string(
        "%-*s %*llu ", static_cast<int>(volume_width), r.volume == volume ? "" : name.c_str(),
        static_cast<int>(extent_width), static_cast<unsigned long long>(r.extent));
    volume = r.volume;
    for (const cell& x : r.cells) {
      if (!x.present) {
        line += "  ";
        continue;
      }
      const std::size_t i = std::min(
          heat_chars.size() - 1,
          static_cast<std::size_t>(level(g, x.score) * static_cast<double>(heat_chars.size())));
      line += heat_chars[i];
      line += x.moved == move::promoted        ? '^'
              : x.moved == move::demoted       ? 'v'
              : x.tier == v1::TIER_PERFORMANCE ? 'S'
              : x.tier == v1::TIER_CAPACITY    ? 'H'
              : x.tier == v1::TIER_COLD        ? 'C'
                                               : '?';
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

// ---------------------------------------------------------------- report

std::string report(const history& h, std::size_t hottest) {
  const auto& r = h.response;
  std::string out = header(h, "heat report");
  out +=
      "What this can show: each snapshot lists only the pool's hottest extents then (by score: "
      "random reads and writes per\n"
      "half-life, decayed, as the migrator ranks them), with the tier each lived on. An extent "
      "missing from a snapshot was\n"
      "cooler than every extent listed; its heat then is unknown. Moves are seen as a tier that "
      "differs from the one the\n"
      "extent had in the last snapshot listing it, so a move and its undoing between two snapshots "
      "is not seen, and every\n"
      "time (waits, moves) is known to within one interval. A move may also be an administrator's "
      "(volume move, affinity).\n";
  if (r.snapshots_size() == 0) return out;
  const grid g = grid_of(h);
  std::ostringstream o;

  // The hottest extents now: live from ListHeat, offline the last snapshot.
  {
    o << "\nHOTTEST EXTENTS NOW";
    std::vector<
        std::tuple<std::string, std::uint64_t, double, double, double, v1::Tier, std::string>>
        items;
    if (!h.now.empty()) {
      o << " (the array's current heat)\n";
      for (std::size_t i = 0; i < h.now.size() && items.size() < hottest; ++i) {
        const auto& e = h.now[i];
        items.emplace_back(e.volume(), e.extent(), e.score(), e.reads(), e.writes(), e.tier(),
                           i < h.now_groups.size() ? h.now_groups[i] : "-");
      }
    } else {
      const v1::HeatSnapshot& last = r.snapshots(r.snapshots_size() - 1);
      o << " (offline: the last snapshot, " << utc(last.taken_unix_seconds()) << ")\n";
      for (const auto& e : last.extents()) {
        if (items.size() == hottest) break;
        items.emplace_back(e.volume(), e.extent(), e.score(), e.reads(), e.writes(), e.tier(), "-");
      }
    }
    o << printf_string("%-24s %8s %10s %10s %10s %10s  %s\n", "VOLUME", "EXTENT", "OFFSET", "SCORE",
                       "READS", "WRITES", "TIER");
    for (const auto& [volume, extent, score, reads, writes, tier, group] : items) {
      o << printf_string("%-24s %8llu %10s %10s %10s %10s  %s%s\n", short_volume(volume).c_str(),
                         static_cast<unsigned long long>(extent),
                         (std::to_string(extent * r.extent_bytes() >> 20) + " MiB").c_str(),
                         score_text(score).c_str(), score_text(reads).c_str(),
                         score_text(writes).c_str(), tier_word(tier).c_str(),
                         group == "-" ? "" : (" (" + group + ")").c_str());
    }
    if (items.empty()) o << "(none)\n";
  }

  // Moves, with why; and for each promotion, how long it waited.
  struct move_seen {
    std::size_t column, row;
    move kind;
  };
  std::vector<move_seen> moves;
  for (std::size_t c = 0; c < g.times.size(); ++c) {
    for (std::size_t i = 0; i < g.rows.size(); ++i) {
      if (g.rows[i].cells[c].moved != move::none) moves.push_back({c, i, g.rows[i].cells[c].moved});
    }
  }
  // Per snapshot: the coolest SSD resident listed, how many it lists on
  // SSD, and every listed score, hottest first.
  std::vector<double> coolest_ssd(g.times.size(), -1);
  std::vector<std::size_t> on_ssd(g.times.size(), 0);
  std::vector<std::vector<double>> ranked(g.times.size());
  for (std::size_t c = 0; c < g.times.size(); ++c) {
    for (const row& w : g.rows) {
      const cell& x = w.cells[c];
      if (!x.present) continue;
      ranked[c].push_back(x.score);
      if (x.tier == v1::TIER_PERFORMANCE) {
        coolest_ssd[c] = coolest_ssd[c] < 0 ? x.score : std::min(coolest_ssd[c], x.score);
        ++on_ssd[c];
      }
    }
    std::sort(ranked[c].begin(), ranked[c].end(), std::greater<>());
  }
  std::vector<double> waits;
  o << "\nMOVES (tier changes between snapshots)\n";
  if (moves.empty()) o << "(none seen)\n";
  if (!moves.empty())
    o << printf_string("%-21s %-16s %8s  %-26s %s\n", "SNAPSHOT", "VOLUME", "EXTENT", "MOVE",
                       "WHY");
  for (const move_seen& m : moves) {
    const row& w = g.rows[m.row];
    const cell& x = w.cells[m.column];
    // The snapshot before that listed it.
    std::size_t before = m.column;
    while (before > 0 && !w.cells[before - 1].present) --before;
    const bool listed_before = before > 0;
    const double then = listed_before ? w.cells[before - 1].score : 0;
    std::string why;
    std::string what;
    if (m.kind == move::promoted) {
      // It waited from the first snapshot of its last run on HDD where it
      // ranked in the hottest set: among the K hottest listed, K being how
      // many extents the SSD tier held once it was promoted.
      const std::size_t k = on_ssd[m.column];
      std::size_t from = m.column;
      for (std::size_t c = m.column; c-- > 0;) {
        const cell& y = w.cells[c];
        if (!y.present) continue;
        if (y.tier != v1::TIER_CAPACITY) break;
        const auto hotter =
            static_cast<std::size_t>(
                std::upper_bound(ranked[c].begin(), ranked[c].end(), y.score, std::greater<>()) -
                ranked[c].begin()) -
            1;  // those listed above it
        if (hotter < k) from = c;
      }
      const double waited = static_cast<double>(g.times[m.column] - g.times[from]);
      waits.push_back(waited);
      what = "promoted HDD->SSD";
      const double coolest = listed_before ? coolest_ssd[before - 1] : -1;
      why = "score " + (listed_before ? score_text(then) + " -> " : std::string()) +
            score_text(x.score) +
            (coolest < 0 ? ": the SSD tier listed no resident (it had room)"
             : x.score > coolest
                 ? " ranked above the SSD tier's coolest resident (" + score_text(coolest) + ")"
                 : ": the SSD tier had room (its coolest resident, " + score_text(coolest) +
                       ", stayed)") +
            "; waited " +
            (from == m.column
                 ? "under one interval"
                 : span(waited) + " (in the hottest set since " + clock_of(g.times[from]) + ")");
    } else {
      what = "demoted SSD->HDD";
      // An extent that did not cool was moved for another reason: to make
      // room for a hotter one promoted at the same time, or not for heat
      // at all (the tier keeping room for new writes, which land on SSD; an
      // administrator's volume move or affinity).
      const bool cooled = listed_before && x.score < then * 0.9;
      double promoted_then = -1;
      for (const move_seen& other : moves) {
        if (other.column == m.column && other.kind == move::promoted)
          promoted_then = std::max(promoted_then, g.rows[other.row].cells[m.column].score);
      }
      why = cooled ? "cooled: score " + score_text(then) + " -> " + score_text(x.score)
            : promoted_then > x.score
                ? "made room for hotter extents (score " + score_text(x.score) +
                      "; promoted then: up to " + score_text(promoted_then) + ")"
            : !listed_before
                ? "score " + score_text(x.score) + " (not listed before: its heat then unknown)"
                : "not for heat (score " + score_text(then) + " -> " + score_text(x.score) +
                      ", none hotter promoted then): room kept free for new writes, or an "
                      "administrator's move or affinity";
    }
    o << printf_string("%-21s %-16s %8llu  %-26s %s\n", utc(g.times[m.column]).c_str(),
                       short_volume(w.volume).c_str(), static_cast<unsigned long long>(w.extent),
                       what.c_str(), why.c_str());
  }

  // The SSD tier's share of the heat, per snapshot (merged to 48 rows).
  o << "\nSSD TIER HIT RATIO OVER TIME (the share of the heat on the SSD tier)\n"
       "  of listed: the listed extents' scores on SSD over all listed; of pool: over the pool's "
       "whole heat then\n"
       "  (reads+writes of every mapped extent; a lower bound, since unlisted extents on SSD are "
       "not counted)\n";
  o << printf_string("%-21s %7s %7s %10s %10s\n", "SNAPSHOT", "LISTED", "ON SSD", "OF LISTED",
                     "OF POOL");
  const std::size_t n = static_cast<std::size_t>(r.snapshots_size());
  const std::size_t per = n <= 48 ? 1 : (n + 47) / 48;
  if (per > 1) o << printf_string("  (each row: %zu snapshots summed)\n", per);
  double all_ssd = 0, all_listed = 0;
  for (std::size_t c = 0; c < n; c += per) {
    double ssd = 0, listed = 0, pool = 0;
    std::size_t count = 0, ssd_count = 0;
    for (std::size_t k = c; k < std::min(n, c + per); ++k) {
      const v1::HeatSnapshot& s = r.snapshots(static_cast<int>(k));
      pool += snapshot_heat(s);
      for (const auto& e : s.extents()) {
        listed += e.score();
        ++count;
        if (e.tier() == v1::TIER_PERFORMANCE) {
          ssd += e.score();
          ++ssd_count;
        }
      }
    }
    all_ssd += ssd;
    all_listed += listed;
    const std::string of_listed = listed > 0 ? printf_string("%.1f%%", 100 * ssd / listed) : "-";
    const std::string of_pool =
        pool > 0 ? printf_string("%.1f%%", 100 * std::min(1.0, ssd / pool)) : "-";
    o << printf_string(
        "%-21s %7zu %7zu %10s %10s\n",
        utc(r.snapshots(static_cast<int>(std::min(n, c + per) - 1)).taken_unix_seconds()).c_str(),
        count / per, ssd_count / per, of_listed.c_str(), of_pool.c_str());
  }

  // Totals.
  std::size_t promoted = 0, demoted = 0;
  for (const move_seen& m : moves) (m.kind == move::promoted ? promoted : demoted)++;
  std::sort(waits.begin(), waits.end());
  o << "\nTOTALS\n";
  o << printf_string(
      "  snapshots %d over %s; %zu extents listed at least once\n", r.snapshots_size(),
      span(static_cast<double>(g.times.back() - g.times.front())).c_str(), g.rows.size());
  o << printf_string(
      "  promotions %zu, demotions %zu: %s moved\n", promoted, demoted,
      (std::to_string(((promoted + demoted) * r.extent_bytes()) >> 20) + " MiB").c_str());
  if (!waits.empty()) {
    auto wait_text = [](double w) { return w == 0 ? std::string("under one interval") : span(w); };
    o << printf_string("  wait for promotion: median %s, longest %s\n",
                       wait_text(waits[waits.size() / 2]).c_str(), wait_text(waits.back()).c_str());
  }
  if (all_listed > 0)
    o << printf_string("  SSD share of the listed heat, over every snapshot: %.1f%%\n",
                       100 * all_ssd / all_listed);
  return out + o.str();
}

// ---------------------------------------------------------------- layout

namespace {

// Where everything goes, shared by SVG and PNG so that they draw alike.
struct layout {
  std::size_t cell_w, cell_h, left, top, width, height, legend_x;
};

layout layout_of(const grid& g) {
  layout l{};
  const std::size_t columns = std::max<std::size_t>(1, g.times.size()),
                    rows = std::max<std::size_t>(1, g.rows.size());
  l.cell_w = std::clamp<std::size_t>(960 / columns, 2, 24);
  l.cell_h = std::clamp<std::size_t>(720 / rows, 3, 16);
  l.left = 150;
  l.top = 56;
  l.legend_x = l.left + columns * l.cell_w + 24;
  l.width = l.legend_x + 210;
  l.height = std::max<std::size_t>(l.top + rows * l.cell_h + 60, 330);
  return l;
}

std::string title_of(const history& h) {
  const auto& r = h.response;
  std::string t = "heat map of " + h.subject;
  if (r.snapshots_size() > 0) {
    t += ", " + utc(r.snapshots(0).taken_unix_seconds()) + " to " +
         utc(r.snapshots(r.snapshots_size() - 1).taken_unix_seconds()) + ", every " +
         span(r.interval_seconds());
  }
  return t;
}

// The grid a picture draws: at most 720 columns and 2000 rows (a week of
// ten-minute snapshots of 1024 extents would be millions of cells: an SVG
// no browser opens); `note` says what was merged or left out.
grid picture_grid(const history& h, std::string& note) {
  const grid full = grid_of(h);
  grid g = reduced(full, 720, 2000);
  if (g.times.size() < full.times.size()) {
    note += "; each column " +
            std::to_string((full.times.size() + g.times.size() - 1) / g.times.size()) +
            " snapshots (their highest score)";
  }
  if (g.rows.size() < full.rows.size()) {
    note += "; " + std::to_string(g.rows.size()) + " of " + std::to_string(full.rows.size()) +
            " extents, the hottest at their peak";
  }
  return g;
}

// The rows where a volume's group starts (for labels and separators).
bool starts_volume(const grid& g, std::size_t i) {
  return i == 0 || g.rows[i].volume != g.rows[i - 1].volume;
}

}  // namespace

// ---------------------------------------------------------------- SVG

std::string svg(const history& h) {
  std::string note;
  const grid g = picture_grid(h, note);
  const layout l = layout_of(g);
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << l.width << "\" height=\"" << l.height
    << "\" viewBox=\"0 0 " << l.width << " " << l.height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<title>" << xml_escaped(title_of(h)) << "</title>\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  o << "<text x=\"" << l.left << "\" y=\"18\" font-size=\"14\" font-weight=\"bold\">"
    << xml_escaped(title_of(h)) << "</text>\n";
  o << "<text x=\"" << l.left << "\" y=\"34\" fill=\"#555\">" << xml_escaped(h.source)
    << "; y: extents by volume, x: snapshots (UTC)" << xml_escaped(note) << "</text>\n";
  const std::size_t grid_w = g.times.size() * l.cell_w, grid_h = g.rows.size() * l.cell_h;
  o << "<rect x=\"" << l.left << "\" y=\"" << l.top << "\" width=\"" << grid_w << "\" height=\""
    << grid_h << "\" fill=\"" << hex(absent_colour) << "\"/>\n";
  const std::size_t stripe = std::max<std::size_t>(1, l.cell_h / 3);
  o << "<g id=\"cells\">\n";
  for (std::size_t i = 0; i < g.rows.size(); ++i) {
    const row& w = g.rows[i];
    for (std::size_t c = 0; c < w.cells.size(); ++c) {
      const cell& x = w.cells[c];
      if (!x.present) continue;
      const std::size_t px = l.left + c * l.cell_w, py = l.top + i * l.cell_h;
      o << "<rect class=\"cell\" x=\"" << px << "\" y=\"" << py << "\" width=\"" << l.cell_w
        << "\" height=\"" << l.cell_h << "\" fill=\"" << hex(ramp_at(level(g, x.score)))
        << "\"><title>" << xml_escaped(short_volume(w.volume)) << " extent " << w.extent << " at "
        << utc(g.times[c]) << ": score " << score_text(x.score) << ", " << tier_word(x.tier)
        << (x.moved == move::promoted  ? ", promoted"
            : x.moved == move::demoted ? ", demoted"
                                       : "")
        << "</title></rect>";
      o << "<rect class=\"tier\" x=\"" << px << "\" y=\"" << py + l.cell_h - stripe << "\" width=\""
        << l.cell_w << "\" height=\"" << stripe << "\" fill=\""
        << hex(x.tier == v1::TIER_PERFORMANCE ? ssd_colour : hdd_colour) << "\"/>";
      if (x.moved != move::none) {
        o << "<rect class=\"" << (x.moved == move::promoted ? "promoted" : "demoted") << "\" x=\""
          << px + 0.5 << "\" y=\"" << py + 0.5 << "\" width=\"" << l.cell_w - 1 << "\" height=\""
          << l.cell_h - 1 << "\" fill=\"none\" stroke=\""
          << hex(x.moved == move::promoted ? promoted_colour : demoted_colour)
          << "\" stroke-width=\"1.5\"/>";
      }
      o << "\n";
    }
  }
  o << "</g>\n";
  // The y axis: a separator and the volume's name where its extents start,
  // the extent's number where there is room.
  const std::size_t label_rows = std::max<std::size_t>(1, (12 + l.cell_h - 1) / l.cell_h);
  std::size_t last_label = 0;
  for (std::size_t i = 0; i < g.rows.size(); ++i) {
    const std::size_t py = l.top + i * l.cell_h;
    if (starts_volume(g, i)) {
      o << "<line x1=\"" << l.left - 146 << "\" x2=\"" << l.left + grid_w << "\" y1=\"" << py
        << "\" y2=\"" << py << "\" stroke=\"#333\" stroke-width=\"1\"/>\n";
      o << "<text x=\"" << l.left - 146 << "\" y=\"" << py + 11 << "\" font-weight=\"bold\">"
        << xml_escaped(short_volume(g.rows[i].volume)) << "</text>\n";
    }
    if (i == 0 || starts_volume(g, i) || i >= last_label + label_rows) {
      o << "<text x=\"" << l.left - 4 << "\" y=\"" << py + std::min<std::size_t>(l.cell_h, 10)
        << "\" text-anchor=\"end\" font-size=\"9\">" << g.rows[i].extent << "</text>\n";
      last_label = i;
    }
  }
  o << "<text x=\"" << l.left - 4 << "\" y=\"" << l.top - 4
    << "\" text-anchor=\"end\" font-size=\"9\">extent</text>\n";
  // The x axis: times.
  const std::size_t every = label_every(g.times.size(), l.cell_w, 56);
  for (std::size_t c = 0; c < g.times.size(); c += every) {
    const std::size_t px = l.left + c * l.cell_w;
    o << "<line x1=\"" << px << "\" x2=\"" << px << "\" y1=\"" << l.top + grid_h << "\" y2=\""
      << l.top + grid_h + 4 << "\" stroke=\"#333\"/>";
    o << "<text x=\"" << px << "\" y=\"" << l.top + grid_h + 16 << "\" font-size=\"9\">"
      << clock_of(g.times[c]) << "</text>\n";
  }
  o << "<text x=\"" << l.left << "\" y=\"" << l.top + grid_h + 32
    << "\">time (UTC), one column per snapshot</text>\n";
  // The legend.
  std::size_t y = l.top;
  o << "<g id=\"legend\">\n<text x=\"" << l.legend_x << "\" y=\"" << y + 10
    << "\" font-weight=\"bold\">heat score (log scale)</text>\n";
  y += 18;
  for (int k = 0; k < 9; ++k) {
    o << "<rect x=\"" << l.legend_x + static_cast<std::size_t>(k) * 20 << "\" y=\"" << y
      << "\" width=\"20\" height=\"12\" fill=\"" << hex(ramp_at(k / 8.0)) << "\"/>";
  }
  o << "\n<text x=\"" << l.legend_x << "\" y=\"" << y + 26 << "\" font-size=\"9\">"
    << score_text(g.min_score) << "</text>";
  o << "<text x=\"" << l.legend_x + 180 << "\" y=\"" << y + 26
    << "\" font-size=\"9\" text-anchor=\"end\">" << score_text(g.max_score) << "</text>\n";
  y += 44;
  auto swatch = [&](rgb fill, rgb stroke, bool outline, const std::string& label) {
    o << "<rect x=\"" << l.legend_x << "\" y=\"" << y << "\" width=\"14\" height=\"12\" fill=\""
      << hex(fill) << "\""
      << (outline ? " stroke=\"" + hex(stroke) + "\" stroke-width=\"2\"" : std::string())
      << "/><text x=\"" << l.legend_x + 20 << "\" y=\"" << y + 10 << "\">" << xml_escaped(label)
      << "</text>\n";
    y += 18;
  };
  swatch(absent_colour, ink, false, "not among the hottest listed");
  swatch(ssd_colour, ink, false, "bottom stripe: on the SSD tier");
  swatch(hdd_colour, ink, false, "bottom stripe: on the HDD tier");
  swatch(paper, promoted_colour, true, "promoted to SSD since before");
  swatch(paper, demoted_colour, true, "demoted to HDD since before");
  o << "<text x=\"" << l.legend_x << "\" y=\"" << y + 10
    << "\" font-size=\"9\">score: random I/Os per half-life</text>\n";
  o << "</g>\n</svg>\n";
  return o.str();
}

// ---------------------------------------------------------------- PNG

namespace {

// A 3x5 bitmap font: digits, capitals and a few signs; each glyph is five
// rows of three bits, the top row first. Lower case is drawn as capitals.
std::uint16_t glyph(char ch) {
  static const std::map<char, std::array<std::uint8_t, 5>> font{
      {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}},
      {'3', {7, 1, 3, 1, 7}}, {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}},
      {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 2, 2}}, {'8', {7, 5, 7, 5, 7}},
      {'9', {7, 5, 7, 1, 7}}, {'A', {2, 5, 7, 5, 5}}, {'B', {6, 5, 6, 5, 6}},
      {'C', {3, 4, 4, 4, 3}}, {'D', {6, 5, 5, 5, 6}}, {'E', {7, 4, 6, 4, 7}},
      {'F', {7, 4, 6, 4, 4}}, {'G', {3, 4, 5, 5, 3}}, {'H', {5, 5, 7, 5, 5}},
      {'I', {7, 2, 2, 2, 7}}, {'J', {1, 1, 1, 5, 2}}, {'K', {5, 5, 6, 5, 5}},
      {'L', {4, 4, 4, 4, 7}}, {'M', {5, 7, 7, 5, 5}}, {'N', {6, 5, 5, 5, 5}},
      {'O', {2, 5, 5, 5, 2}}, {'P', {6, 5, 6, 4, 4}}, {'Q', {2, 5, 5, 6, 3}},
      {'R', {6, 5, 6, 5, 5}}, {'S', {3, 4, 2, 1, 6}}, {'T', {7, 2, 2, 2, 2}},
      {'U', {5, 5, 5, 5, 7}}, {'V', {5, 5, 5, 5, 2}}, {'W', {5, 5, 7, 7, 5}},
      {'X', {5, 5, 2, 5, 5}}, {'Y', {5, 5, 2, 2, 2}}, {'Z', {7, 1, 2, 4, 7}},
      {':', {0, 2, 0, 2, 0}}, {'-', {0, 0, 7, 0, 0}}, {'.', {0, 0, 0, 0, 2}},
      {'/', {1, 1, 2, 4, 4}}, {'_', {0, 0, 0, 0, 7}}, {',', {0, 0, 0, 2, 4}},
      {'(', {1, 2, 2, 2, 1}}, {')', {4, 2, 2, 2, 4}}, {'>', {4, 2, 1, 2, 4}},
      {'#', {5, 7, 5, 7, 5}}};
  if (ch >= 'a' && ch <= 'z') ch = static_cast<char>(ch - 'a' + 'A');
  const auto it = font.find(ch);
  if (it == font.end()) return 0;
  std::uint16_t bits = 0;
  for (std::uint8_t row_bits : it->second)
    bits = static_cast<std::uint16_t>((bits << 3) | row_bits);
  return bits;
}

struct canvas {
  std::size_t w, h;
  std::vector<std::uint8_t> pixels;  // RGB
  canvas(std::size_t width, std::size_t height)
      : w(width), h(height), pixels(width * height * 3, 255) {}
  void fill(std::size_t x, std::size_t y, std::size_t fw, std::size_t fh, rgb c) {
    for (std::size_t j = y; j < std::min(h, y + fh); ++j) {
      for (std::size_t i = x; i < std::min(w, x + fw); ++i) {
        std::uint8_t* p = &pixels[(j * w + i) * 3];
        p[0] = c.r;
        p[1] = c.g;
        p[2] = c.b;
      }
    }
  }
  void frame(std::size_t x, std::size_t y, std::size_t fw, std::size_t fh, rgb c,
             std::size_t t = 1) {
    fill(x, y, fw, t, c);
    fill(x, y + fh - t, fw, t, c);
    fill(x, y, t, fh, c);
    fill(x + fw - t, y, t, fh, c);
  }
  // Text at scale `s` (each font pixel s x s); returns the width drawn.
  std::size_t text(std::size_t x, std::size_t y, const std::string& s, rgb c,
                   std::size_t scale = 1) {
    std::size_t cx = x;
    for (char ch : s) {
      const std::uint16_t bits = glyph(ch);
      for (int j = 0; j < 5; ++j) {
        for (int i = 0; i < 3; ++i) {
          if (bits & (1u << (14 - (j * 3 + i))))
            fill(cx + static_cast<std::size_t>(i) * scale, y + static_cast<std::size_t>(j) * scale,
                 scale, scale, c);
        }
      }
      cx += 4 * scale;
    }
    return cx - x;
  }
};

void chunk(std::string& out, const char* type, const std::string& data) {
  auto be32 = [&out](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
  };
  be32(static_cast<std::uint32_t>(data.size()));
  const std::string typed = std::string(type, 4) + data;
  out += typed;
  be32(static_cast<std::uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(typed.data()), static_cast<uInt>(typed.size()))));
}

std::string encode_png(const canvas& c) {
  std::string raw;
  raw.reserve(c.h * (c.w * 3 + 1));
  for (std::size_t y = 0; y < c.h; ++y) {
    raw += '\0';  // filter: none
    raw.append(reinterpret_cast<const char*>(&c.pixels[y * c.w * 3]), c.w * 3);
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(packed.data()), &size,
                reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()),
                9) != Z_OK) {
    return {};
  }
  packed.resize(size);
  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  for (std::uint32_t v : {static_cast<std::uint32_t>(c.w), static_cast<std::uint32_t>(c.h)}) {
    for (int shift = 24; shift >= 0; shift -= 8) ihdr += static_cast<char>((v >> shift) & 0xff);
  }
  ihdr += std::string("\x08\x02\x00\x00\x00",
                      5);  // 8 bits, RGB, deflate, no filter method, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", packed);
  chunk(out, "IEND", "");
  return out;
}

}  // namespace

std::string png(const history& h, std::uint32_t* width, std::uint32_t* height) {
  std::string note;
  const grid g = picture_grid(h, note);
  const layout l = layout_of(g);
  canvas c(l.width, l.height);
  const std::string title = title_of(h);
  c.text(l.left, 8, title, ink, l.left + 8 * title.size() <= c.w ? 2 : 1);  // large if it fits
  c.text(l.left, 32, "Y: EXTENTS BY VOLUME, X: SNAPSHOTS (UTC)" + note, ink);
  const std::size_t grid_w = g.times.size() * l.cell_w, grid_h = g.rows.size() * l.cell_h;
  c.fill(l.left, l.top, grid_w, grid_h, absent_colour);
  const std::size_t stripe = std::max<std::size_t>(1, l.cell_h / 3);
  for (std::size_t i = 0; i < g.rows.size(); ++i) {
    for (std::size_t k = 0; k < g.rows[i].cells.size(); ++k) {
      const cell& x = g.rows[i].cells[k];
      if (!x.present) continue;
      const std::size_t px = l.left + k * l.cell_w, py = l.top + i * l.cell_h;
      c.fill(px, py, l.cell_w, l.cell_h, ramp_at(level(g, x.score)));
      c.fill(px, py + l.cell_h - stripe, l.cell_w, stripe,
             x.tier == v1::TIER_PERFORMANCE ? ssd_colour : hdd_colour);
      if (x.moved != move::none) {
        const std::size_t thick =
            std::max<std::size_t>(1, std::min(l.cell_w, l.cell_h) / 6);  // visible on dark cells
        c.frame(px, py, l.cell_w, l.cell_h,
                x.moved == move::promoted ? promoted_colour : demoted_colour, thick);
      }
    }
  }
  const std::size_t label_rows = std::max<std::size_t>(1, (7 + l.cell_h - 1) / l.cell_h);
  std::size_t last_label = 0;
  for (std::size_t i = 0; i < g.rows.size(); ++i) {
    const std::size_t py = l.top + i * l.cell_h;
    if (starts_volume(g, i)) {
      c.fill(4, py, l.left - 4 + grid_w, 1, ink);
      c.text(4, py + 2, short_volume(g.rows[i].volume), ink);
    }
    if (i == 0 || starts_volume(g, i) || i >= last_label + label_rows) {
      const std::string n = std::to_string(g.rows[i].extent);
      c.text(l.left - 4 - 4 * n.size(), py + (l.cell_h > 5 ? (l.cell_h - 5) / 2 : 0), n, ink);
      last_label = i;
    }
  }
  const std::size_t every = label_every(g.times.size(), l.cell_w, 40);
  for (std::size_t k = 0; k < g.times.size(); k += every) {
    const std::size_t px = l.left + k * l.cell_w;
    c.fill(px, l.top + grid_h, 1, 4, ink);
    c.text(px, l.top + grid_h + 7, clock_of(g.times[k]), ink);
  }
  // The legend: the ramp with its ends, the tier stripes, the moves.
  std::size_t y = l.top;
  c.text(l.legend_x, y, "HEAT SCORE (LOG)", ink);
  y += 10;
  for (std::size_t k = 0; k < 9; ++k)
    c.fill(l.legend_x + k * 20, y, 20, 12, ramp_at(static_cast<double>(k) / 8.0));
  c.text(l.legend_x, y + 16, score_text(g.min_score), ink);
  const std::string top_score = score_text(g.max_score);
  c.text(l.legend_x + 180 - 4 * top_score.size(), y + 16, top_score, ink);
  y += 34;
  auto swatch = [&](rgb fill, rgb outline, bool framed, const std::string& label) {
    c.fill(l.legend_x, y, 14, 12, fill);
    if (framed) c.frame(l.legend_x, y, 14, 12, outline);
    c.text(l.legend_x + 20, y + 4, label, ink);
    y += 18;
  };
  swatch(absent_colour, ink, false, "NOT LISTED");
  swatch(ssd_colour, ink, false, "STRIPE: SSD TIER");
  swatch(hdd_colour, ink, false, "STRIPE: HDD TIER");
  swatch(paper, promoted_colour, true, "PROMOTED");
  swatch(paper, demoted_colour, true, "DEMOTED");
  if (width != nullptr) *width = static_cast<std::uint32_t>(c.w);
  if (height != nullptr) *height = static_cast<std::uint32_t>(c.h);
  return encode_png(c);
}

}  // namespace strata::cli::heat
