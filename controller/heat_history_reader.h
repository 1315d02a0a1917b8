// A pool's heat history as the API gives it (ListHeatHistory), read from
// the pool's metadata directory opened read-only: by the running array's
// management, beside the pool's own open store, and by `strata heat`
// offline, on a copy of the directory a customer sent in, with no daemon.
//
// Threads: blocking (it opens RocksDB and reads the history column); any
// thread but a loop's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <optional>
#include <string>

#include "raid/device/status.h"
#include "strata/v1/array.pb.h"

namespace strata::controller {

struct heat_history_query {
  std::string pool;    // "pools/p1": names the volumes in the answer
  std::string volume;  // "": every volume's extents; else only "pools/p1/volumes/v1"'s
  std::int64_t since_unix_seconds = 0;  // snapshots taken at or after this; 0: all kept
  std::uint64_t first_sequence = 0;     // from a page token: the first snapshot of this page
  std::size_t max_snapshots = 100;
  std::size_t max_page_bytes = 2 << 20;  // a page ends before this, under gRPC's 4 MB message limit
};

// Snapshots oldest first, at most a page, with next_page_token set when
// more follow. extent_bytes from the pool's record; interval_seconds is the
// median gap between the snapshots read (0 with fewer than two), and
// extents_per_snapshot the most any of them holds: the reader has no
// daemon's options to ask. NOT_FOUND for a volume the pool does not hold;
// an I/O error for a directory that is not a pool's metadata.
std::expected<v1::ListHeatHistoryResponse, error> read_heat_history(
    const std::filesystem::path& metadata_dir, const heat_history_query& query);

// The query `request` asks for: its parent split into pool and volume, its
// page size and token checked. A malformed one: the field at fault and why.
struct query_problem {
  std::string field, message;
};
std::expected<heat_history_query, query_problem> heat_history_query_of(
    const v1::ListHeatHistoryRequest& request);

// Page tokens of ListHeatHistory: the next snapshot's sequence number.
std::string heat_history_token(std::uint64_t sequence);
std::optional<std::uint64_t> heat_history_token_start(const std::string& token);

}  // namespace strata::controller
