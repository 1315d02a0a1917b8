// The extent-heat diagnostic's pictures and report, from a pool's or a
// volume's heat history however it was fetched (live through the API, or
// offline from a copy of the pool's metadata directory): every line after
// the fetch is shared, so the two give the same map.
//
// The grid: x = snapshots (time), y = the extents any snapshot lists,
// grouped per volume in extent order; a cell = the extent's score then
// (absent: it was not among that snapshot's hottest) and its tier; a
// migration = the tier differs from the one the extent had in the last
// snapshot that listed it. Pure functions of their input; no I/O but the
// stream or file they are given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/v1/array.pb.h"

namespace strata::cli::heat {

namespace v1 = strata::v1;

// What was fetched, and from where (for the headers).
struct history {
  std::string subject;  // "pools/p1" or "pools/p1/volumes/v1"
  std::string source;   // "live, through 127.0.0.1:50051" / "offline, from DIR (read-only)"
  std::int64_t since_unix_seconds = 0;   // what --since asked for
  v1::ListHeatHistoryResponse response;  // every page's snapshots, oldest first
  std::vector<v1::HeatSnapshot::Extent>
      now;  // the current heat, hottest first (live: ListHeat); empty offline
  std::vector<std::string> now_groups;  // beside `now`: each extent's disk group
};

enum class move { none, promoted, demoted };

struct cell {
  bool present = false;  // among the snapshot's hottest
  double score = 0;
  v1::Tier tier = v1::TIER_UNSPECIFIED;
  move moved = move::none;
};

struct row {
  std::string volume;  // "pools/p1/volumes/v1"
  std::uint64_t extent = 0;
  double peak = 0;  // its highest score
  std::vector<cell> cells;
};

struct grid {
  std::vector<std::int64_t> times;      // each column's snapshot, unix seconds
  std::vector<row> rows;                // by volume, then extent
  double min_score = 0, max_score = 0;  // over present cells with a score > 0
};

grid grid_of(const history& h);
// The same grid in at most `columns` columns (consecutive snapshots merged:
// the highest score, the last tier, any move) and `rows` rows (the extents
// with the highest peaks, still in order). 0: no limit.
grid reduced(const grid& g, std::size_t columns, std::size_t rows);

// 0..1 along the log-scale ramp.
double level(const grid& g, double score);

std::string text_map(const history& h, std::size_t columns, std::size_t rows);
std::string report(const history& h, std::size_t hottest);
std::string svg(const history& h);
// The PNG file's bytes (RGB, zlib-compressed); width and height in pixels
// are returned through the optionals for the caller's message.
std::string png(const history& h, std::uint32_t* width = nullptr, std::uint32_t* height = nullptr);

// "2026-11-28 03:40:10Z"
std::string utc(std::int64_t unix_seconds);
// "1h 20m", "45 s"
std::string span(double seconds);

}  // namespace strata::cli::heat
