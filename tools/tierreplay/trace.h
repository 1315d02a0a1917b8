// Block traces for the replayer: the project's CSV (../shared/traces/), the
// SNIA / MSR Cambridge CSV, and page-reference traces (the ARC paper's
// OLTP trace), read into memory and sorted by time.
//
// Extents that a volume never touches are squeezed out of its address
// space ("dense" extents, in the order of their addresses), so that a trace
// of 2,000 cloud volumes with terabytes of address space replays on a pool
// sized to what it touches. Within an extent, offsets are kept.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <vector>

namespace strata::tools {

struct trace_record {
  std::uint64_t time_us;       // since the first record
  std::uint32_t volume;        // dense volume index
  std::uint64_t offset_bytes;  // in the dense address space
  std::uint32_t size_bytes;
  bool write;
};

struct trace {
  std::string name;
  std::vector<trace_record> records;
  std::vector<std::uint64_t> volume_extents;  // dense extents per volume
  std::uint64_t footprint_extents = 0;        // sum of volume_extents
  std::uint64_t host_bytes = 0;               // read + written by the host
  double read_fraction = 0;                   // of I/Os
};

// A page-reference trace has no times: its references are spread evenly
// over this span (the ARC OLTP trace's hour).
constexpr std::uint64_t page_trace_span_us = 3'600'000'000;

// Reads `path` (gzip-compressed if it ends in .gz): a page-reference trace
// if its name ends in .u32be (big-endian 32-bit page ids, each a 4 KiB
// read), else either CSV format, found from its first line. Offsets and sizes must be multiples of
// 512 bytes; records of size 0 are dropped. At most `limit` records (0: all).
std::expected<trace, std::string> load_trace(const std::string& path,
                                             std::uint64_t extent_size_bytes, std::uint64_t limit);

}  // namespace strata::tools
