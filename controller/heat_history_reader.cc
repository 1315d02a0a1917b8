#include "controller/heat_history_reader.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <vector>

#include "controller/tiers.h"
#include "tiering/heat_history.h"
#include "tiering/metadata_store.h"
#include "tiering/records.h"

namespace strata::controller {

namespace {

constexpr std::string_view token_prefix = "heat-history/";

}  // namespace

std::string heat_history_token(std::uint64_t sequence) {
  return std::string(token_prefix) + std::to_string(sequence);
}

std::optional<std::uint64_t> heat_history_token_start(const std::string& token) {
  if (!token.starts_with(token_prefix)) return std::nullopt;
  const char* first = token.data() + token_prefix.size();
  const char* last = token.data() + token.size();
  std::uint64_t sequence = 0;
  const auto [end, ec] = std::from_chars(first, last, sequence);
  if (ec != std::errc{} || end != last || first == last) return std::nullopt;
  return sequence;
}

std::expected<heat_history_query, query_problem> heat_history_query_of(
    const v1::ListHeatHistoryRequest& request) {
  heat_history_query q;
  const std::string& parent = request.parent();
  const std::size_t volumes = parent.find("/volumes/");
  q.pool = parent.substr(0, volumes);
  if (volumes != std::string::npos) q.volume = parent;
  if (!q.pool.starts_with("pools/") || q.pool.size() == 6 ||
      q.pool.find('/', 6) != std::string::npos ||
      (volumes != std::string::npos &&
       (parent.size() == volumes + 9 || parent.find('/', volumes + 9) != std::string::npos))) {
    return std::unexpected(query_problem{
        "parent",
        "\"" + parent + "\" is not a pools/NAME or pools/POOL/volumes/NAME resource name"});
  }
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return std::unexpected(
        query_problem{"page_size", std::to_string(request.page_size()) + " is outside 0 to 1000"});
  }
  if (request.page_size() > 0) q.max_snapshots = static_cast<std::size_t>(request.page_size());
  if (request.since_unix_seconds() < 0) {
    return std::unexpected(query_problem{
        "since_unix_seconds", std::to_string(request.since_unix_seconds()) + " is before 1970"});
  }
  q.since_unix_seconds = request.since_unix_seconds();
  if (!request.page_token().empty()) {
    const auto first = heat_history_token_start(request.page_token());
    if (!first)
      return std::unexpected(query_problem{
          "page_token", "\"" + request.page_token() + "\" is not a token of this list"});
    q.first_sequence = *first;
  }
  return q;
}

std::expected<v1::ListHeatHistoryResponse, error> read_heat_history(
    const std::filesystem::path& metadata_dir, const heat_history_query& query) {
  auto store = tiering::metadata_store::open_read_only(metadata_dir.string());
  if (!store) return std::unexpected(store.error());
  v1::ListHeatHistoryResponse out;
  if (const auto record = (*store)->get(tiering::column::pool, tiering::keys::pool())) {
    if (const auto pool = tiering::decode_pool(*record))
      out.set_extent_bytes(pool->extent_size_bytes);
  }
  // The volumes' names by id, from their records beside the history.
  std::map<std::uint32_t, std::string> names;
  (void)(*store)->scan(tiering::column::pool, [&](std::string_view key, std::string_view value) {
    if (!key.starts_with(tiering::keys::volume_prefix)) return;
    if (const auto v = tiering::decode_volume(value))
      names[v->id] = query.pool + "/volumes/" + v->name;
  });
  std::optional<std::uint32_t> only;
  if (!query.volume.empty()) {
    for (const auto& [id, name] : names) {
      if (name == query.volume) only = id;
    }
    if (!only)
      return std::unexpected(
          make_error(errc::not_found, query.pool + " has no volume " + query.volume));
  }
  auto snapshots = tiering::heat_history::read(**store);
  if (!snapshots) return std::unexpected(snapshots.error());

  std::vector<std::int64_t> gaps;
  std::size_t widest = 0;
  for (std::size_t i = 0; i < snapshots->size(); ++i) {
    const tiering::heat_snapshot& s = (*snapshots)[i];
    widest = std::max(widest, s.hottest.size());
    if (i > 0) gaps.push_back(s.taken_unix_seconds - (*snapshots)[i - 1].taken_unix_seconds);
  }
  if (!gaps.empty()) {
    std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2),
                     gaps.end());
    out.set_interval_seconds(static_cast<double>(gaps[gaps.size() / 2]));
  }
  out.set_extents_per_snapshot(static_cast<std::uint32_t>(widest));

  std::size_t bytes = 0;
  for (const tiering::heat_snapshot& s : *snapshots) {
    if (s.sequence < query.first_sequence || s.taken_unix_seconds < query.since_unix_seconds)
      continue;
    if (static_cast<std::size_t>(out.snapshots_size()) == query.max_snapshots ||
        bytes >= query.max_page_bytes) {
      out.set_next_page_token(heat_history_token(s.sequence));
      break;
    }
    v1::HeatSnapshot* row = out.add_snapshots();
    row->set_sequence(s.sequence);
    row->set_taken_unix_seconds(s.taken_unix_seconds);
    row->set_extents_tracked(s.extents_tracked);
    row->set_total_reads(s.total.read_ios);
    row->set_total_writes(s.total.write_ios);
    for (const auto& e : s.hottest) {
      if (only && e.volume_id != *only) continue;
      v1::HeatSnapshot::Extent* x = row->add_extents();
      const auto name = names.find(e.volume_id);
      // A volume deleted since the snapshot: its id is all that is left.
      x->set_volume(name != names.end() ? name->second
                                        : query.pool + "/volumes/#" + std::to_string(e.volume_id));
      x->set_extent(e.volume_extent);
      x->set_tier(tier_of(e.where));
      x->set_reads(e.heat.read_ios);
      x->set_writes(e.heat.write_ios);
      x->set_read_bytes(e.heat.read_bytes);
      x->set_write_bytes(e.heat.write_bytes);
      x->set_score(e.score);
    }
    bytes += row->ByteSizeLong();
  }
  return out;
}

}  // namespace strata::controller
