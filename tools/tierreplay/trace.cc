#include "tools/tierreplay/trace.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string_view>
#include <unordered_map>

namespace strata::tools {

namespace {

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    fields.push_back(line.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) return fields;
    start = comma + 1;
  }
}

bool number(std::string_view s, std::uint64_t& out) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size();
}

struct raw_record {
  std::uint64_t time_us;
  std::uint32_t volume;
  std::uint64_t offset_bytes;
  std::uint32_t size_bytes;
  bool write;
};

// A page-reference trace (the ARC paper's OLTP trace): big-endian 32-bit
// page ids and nothing else. Each reference becomes a 4 KiB read of page
// id - 1 (the ids are numbered from 1 in order of first reference, so an
// extent holds pages first touched together), the references spread
// evenly over `span_us`.
std::expected<std::vector<raw_record>, std::string> read_page_ids(FILE* file,
                                                                  const std::string& path,
                                                                  std::uint64_t span_us,
                                                                  std::uint64_t limit) {
  std::vector<std::uint32_t> ids;
  unsigned char b[4];
  std::size_t got = 0;  // bytes of the id being read
  while ((limit == 0 || ids.size() < limit) && (got = std::fread(b, 1, 4, file)) == 4) {
    const std::uint32_t id = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                             (std::uint32_t{b[2]} << 8) | b[3];
    if (id == 0) return std::unexpected(path + ": page id 0 (the ids start at 1)");
    ids.push_back(id);
    got = 0;
  }
  if (got != 0) {
    return std::unexpected(path + ": ends in " + std::to_string(got) +
                           " byte(s) of a page id (4 bytes each)");
  }
  constexpr std::uint64_t page_bytes = 4096;
  std::vector<raw_record> raw;
  raw.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    raw.push_back({span_us * i / ids.size(), 0, (ids[i] - 1) * page_bytes, page_bytes, false});
  }
  return raw;
}

}  // namespace

std::expected<trace, std::string> load_trace(const std::string& path,
                                             std::uint64_t extent_size_bytes, std::uint64_t limit) {
  const bool gz = path.ends_with(".gz");
  const std::string command = "gzip -dc '" + path + "'";
  using closer = int (*)(FILE*);
  std::unique_ptr<FILE, closer> file(
      gz ? popen(command.c_str(), "r") : std::fopen(path.c_str(), "r"),
      gz ? &pclose : &std::fclose);
  if (!file) return std::unexpected(path + ": cannot open");

  std::vector<raw_record> raw;
  const bool page_trace = path.ends_with(".u32be") || path.ends_with(".u32be.gz");
  if (page_trace) {
    auto pages = read_page_ids(file.get(), path, page_trace_span_us, limit);
    if (!pages) return std::unexpected(pages.error());
    raw = std::move(*pages);
  }
  std::map<std::string, std::uint32_t, std::less<>> volume_ids;  // MSR: hostname,disk
  enum class format { unknown, strata, msr } kind = format::unknown;
  std::uint64_t first_time = 0;
  // getline's buffer, which it grows; freed however the loop ends (error
  // messages quote the line from it).
  struct line_buffer_owner {
    char* data = nullptr;
    std::size_t capacity = 0;
    ~line_buffer_owner() { std::free(data); }
  } buffer;
  std::uint64_t line_number = 0;
  ssize_t length;
  while (!page_trace && (length = getline(&buffer.data, &buffer.capacity, file.get())) > 0) {
    ++line_number;
    std::string_view line(buffer.data, static_cast<std::size_t>(length));
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    if (line.empty()) continue;
    const auto fields = split(line);
    if (kind == format::unknown) {
      if (line.starts_with("ts_us,vol,offset,size,op")) {
        kind = format::strata;
        continue;
      }
      if (fields.size() == 7) {
        kind = format::msr;  // timestamp,hostname,disk,type,offset,size,response: no header
      } else {
        return std::unexpected(
            path + ": neither the ts_us,vol,offset,size,op CSV nor the MSR Cambridge CSV");
      }
    }
    raw_record r{};
    std::uint64_t offset = 0, size = 0, value = 0;
    bool ok = false;
    if (kind == format::strata && fields.size() == 5) {
      ok = number(fields[0], r.time_us) && number(fields[1], value) && number(fields[2], offset) &&
           number(fields[3], size) && (fields[4] == "R" || fields[4] == "W");
      r.volume = static_cast<std::uint32_t>(value);
      r.write = fields[4] == "W";
    } else if (kind == format::msr && fields.size() == 7) {
      // Windows filetime: 100 ns units.
      ok = number(fields[0], value) && number(fields[4], offset) && number(fields[5], size) &&
           (fields[3] == "Read" || fields[3] == "Write");
      if (ok) {
        if (raw.empty()) first_time = value;
        r.time_us = value >= first_time ? (value - first_time) / 10 : 0;
        std::string key(fields[1]);
        key += ',';
        key += fields[2];
        auto [it, inserted] =
            volume_ids.try_emplace(key, static_cast<std::uint32_t>(volume_ids.size()));
        r.volume = it->second;
        r.write = fields[3] == "Write";
      }
    }
    if (!ok) {
      return std::unexpected(path + ":" + std::to_string(line_number) +
                             ": malformed record: " + std::string(line));
    }
    if (offset % 512 != 0 || size % 512 != 0 || size > (64u << 20)) {
      return std::unexpected(
          path + ":" + std::to_string(line_number) +
          ": offset and size must be multiples of 512 bytes, size at most 64 MiB");
    }
    if (size == 0) continue;
    r.offset_bytes = offset;
    r.size_bytes = static_cast<std::uint32_t>(size);
    raw.push_back(r);
    if (limit != 0 && raw.size() >= limit) break;
  }
  if (raw.empty()) return std::unexpected(path + ": no records");
  // Some traces (Tencent's) are not in time order.
  std::stable_sort(raw.begin(), raw.end(),
                   [](const raw_record& a, const raw_record& b) { return a.time_us < b.time_us; });

  // Dense volumes and extents, each in address order.
  std::map<std::uint32_t, std::map<std::uint64_t, std::uint64_t>>
      touched;  // volume -> extent -> dense
  for (const raw_record& r : raw) {
    auto& extents = touched[r.volume];
    const std::uint64_t last = (r.offset_bytes + r.size_bytes - 1) / extent_size_bytes;
    for (std::uint64_t e = r.offset_bytes / extent_size_bytes; e <= last; ++e)
      extents.emplace(e, 0);
  }
  trace t;
  t.name = path.substr(path.find_last_of('/') + 1);
  std::unordered_map<std::uint32_t, std::uint32_t> dense_volume;
  for (auto& [v, extents] : touched) {
    dense_volume[v] = static_cast<std::uint32_t>(t.volume_extents.size());
    std::uint64_t n = 0;
    for (auto& [e, dense] : extents) dense = n++;
    t.volume_extents.push_back(n);
    t.footprint_extents += n;
  }
  std::uint64_t reads = 0;
  t.records.reserve(raw.size());
  for (const raw_record& r : raw) {
    const auto& extents = touched[r.volume];
    const std::uint64_t first = r.offset_bytes / extent_size_bytes;
    const std::uint64_t last = (r.offset_bytes + r.size_bytes - 1) / extent_size_bytes;
    const std::uint64_t dense_first = extents.at(first);
    // A record across extents that are not neighbours in the dense space
    // cannot happen: both were touched, and nothing lies between them.
    if (extents.at(last) != dense_first + (last - first))
      return std::unexpected(path + ": internal: dense gap");
    t.records.push_back({r.time_us, dense_volume[r.volume],
                         dense_first * extent_size_bytes + r.offset_bytes % extent_size_bytes,
                         r.size_bytes, r.write});
    t.host_bytes += r.size_bytes;
    if (!r.write) ++reads;
  }
  t.read_fraction = static_cast<double>(reads) / static_cast<double>(t.records.size());
  return t;
}

}  // namespace strata::tools
