#include "controller/config_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <cctype>
#include <charconv>
#include <fstream>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>

#include "controller/names.h"
#include "target/iscsi/chap.h"
#include "tiering/migrator.h"

namespace strata::controller {

namespace {

constexpr std::uint64_t gib = 1ull << 30;
constexpr std::uint32_t lun_limit = 16384;      // SAM's flat space, as mgmt allows
constexpr std::size_t group_members_max = 255;  // RAID-1's and RAID-6's own limit (raid/)

// The first problem found ends the parse: it is thrown as a bad_config
// within this file, and parse_config returns it as an error value.
// Exceptions never leave this file (toml++'s parse_error included).
struct bad_config {
  toml::source_position at;
  std::string what;
};

std::string in_quotes(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The management API's rule for ids (mgmt/service.cc, valid_id).
bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > 63 || n[0] < 'a' || n[0] > 'z') return false;
  return std::ranges::all_of(
      n, [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

const char* type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a number with a fraction";
    case toml::node_type::boolean:
      return "true or false";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date or time";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// One table of the file ([daemon], a [[group]], …): its keys checked
// against those it may have, its values read with their types. Errors name
// the item (`subject`: "group g1") and the key, at the value's position,
// or at the table's own for a missing key.
class section {
 public:
  section(const toml::table& table, std::string kind, std::size_t index,
          std::initializer_list<std::string_view> known)
      : table_(table), known_(known) {
    subject_ = kind;
    if (index > 0) subject_ += " #" + std::to_string(index);
    // Named as soon as it has a name, for every message after.
    if (const auto* n = table.get("name");
        n != nullptr && n->is_string() && std::ranges::find(known_, "name") != known_.end()) {
      subject_ = kind + " " + n->as_string()->get();
    }
    // The first unknown key in the file (the table iterates in key order).
    const toml::key* unknown = nullptr;
    for (auto&& [key, value] : table) {
      if (std::ranges::find(known_, key.str()) != known_.end()) continue;
      if (unknown == nullptr || key.source().begin < unknown->source().begin) unknown = &key;
    }
    if (unknown != nullptr) {
      const toml::key& key = *unknown;
      std::string_view closest;
      std::size_t distance = 3;
      for (std::string_view k : known_) {
        if (const std::size_t d = edit_distance(key.str(), k); d < distance) {
          closest = k;
          distance = d;
        }
      }
      std::string why = "unknown key " + in_quotes(key.str());
      if (!closest.empty()) {
        why += " (did you mean " + in_quotes(closest) + "?)";
      } else {
        why += " (the keys here: ";
        for (std::size_t i = 0; i < known_.size(); ++i)
          why += (i == 0 ? "" : ", ") + std::string(known_.begin()[i]);
        why += ")";
      }
      throw bad_config{key.source().begin, subject_ + ": " + why};
    }
  }

  const std::string& subject() const noexcept { return subject_; }
  void rename(std::string subject) { subject_ = std::move(subject); }
  const toml::node* get(std::string_view key) const { return table_.get(key); }

  [[noreturn]] void fail(const toml::node& at, std::string_view key, const std::string& why) const {
    throw bad_config{at.source().begin,
                     subject_ + ": " + (key.empty() ? "" : std::string(key) + ": ") + why};
  }
  [[noreturn]] void fail(std::string_view key, const std::string& why) const {
    if (const toml::node* n = get(key)) fail(*n, key, why);
    throw bad_config{table_.source().begin,
                     subject_ + ": " + (key.empty() ? "" : std::string(key) + ": ") + why};
  }
  [[noreturn]] void missing(std::string_view key, const std::string& what) const {
    throw bad_config{table_.source().begin,
                     subject_ + ": " + std::string(key) + " is missing (" + what + ")"};
  }

  template <class T>
  const toml::value<T>* typed(std::string_view key, const char* wanted) const {
    const toml::node* n = get(key);
    if (n == nullptr) return nullptr;
    const auto* v = n->as<T>();
    if (v == nullptr)
      fail(*n, key, std::string("expected ") + wanted + ", found " + type_name(n->type()));
    return v;
  }
  std::optional<std::string> string(std::string_view key) const {
    const auto* v = typed<std::string>(key, "a string");
    if (v == nullptr) return std::nullopt;
    return v->get();
  }
  std::string required_string(std::string_view key, const std::string& what) const {
    auto s = string(key);
    if (!s) missing(key, what);
    return *s;
  }
  std::optional<bool> boolean(std::string_view key) const {
    const auto* v = typed<bool>(key, "true or false");
    if (v == nullptr) return std::nullopt;
    return v->get();
  }
  // An array of strings, each with its node (for errors about one of them).
  std::vector<std::pair<std::string, const toml::node*>> strings(std::string_view key) const {
    std::vector<std::pair<std::string, const toml::node*>> out;
    const toml::node* n = get(key);
    if (n == nullptr) return out;
    const toml::array* a = n->as_array();
    if (a == nullptr)
      fail(*n, key, std::string("expected an array of strings, found ") + type_name(n->type()));
    for (const toml::node& e : *a) {
      if (!e.is_string())
        fail(e, key, std::string("expected a string, found ") + type_name(e.type()));
      out.emplace_back(e.as_string()->get(), &e);
    }
    return out;
  }
  // A name: required, and an id.
  std::string name() const {
    const std::string n = required_string("name", "a short id, e.g. \"g1\"");
    if (!valid_name(n))
      fail("name", in_quotes(n) + " is not [a-z][a-z0-9-]*, at most 63 characters");
    return n;
  }
  // A size: an integer of bytes, or a string with a suffix (parse_size).
  std::optional<std::uint64_t> size(std::string_view key) const {
    const toml::node* n = get(key);
    if (n == nullptr) return std::nullopt;
    if (const auto* i = n->as_integer()) {
      if (i->get() <= 0) fail(*n, key, "a size must be positive, not " + std::to_string(i->get()));
      return static_cast<std::uint64_t>(i->get());
    }
    if (const auto* s = n->as_string()) {
      auto bytes = parse_size(s->get());
      if (!bytes) fail(*n, key, bytes.error());
      return *bytes;
    }
    fail(*n, key,
         std::string("expected a size (bytes, or a string such as \"100G\"), found ") +
             type_name(n->type()));
  }
  std::filesystem::path path(std::string_view key, const std::filesystem::path& base) const {
    const toml::node* n = get(key);
    const std::string p = string(key).value_or("");
    if (n != nullptr && p.empty()) fail(*n, key, "an empty path");
    if (p.empty() || base.empty()) return p;
    return base / p;  // an absolute p stays as it is
  }

 private:
  const toml::table& table_;
  std::vector<std::string_view> known_;
  std::string subject_;
};

// The entries of an array of tables ([[group]]), each a table.
std::vector<const toml::table*> tables_of(const toml::table& root, std::string_view key) {
  std::vector<const toml::table*> out;
  const toml::node* n = root.get(key);
  if (n == nullptr) return out;
  const toml::array* a = n->as_array();
  if (a == nullptr) {
    throw bad_config{n->source().begin, std::string(key) + ": expected [[" + std::string(key) +
                                            "]] tables, found " + type_name(n->type())};
  }
  for (const toml::node& e : *a) {
    if (!e.is_table()) {
      throw bad_config{e.source().begin, std::string(key) + ": expected [[" + std::string(key) +
                                             "]] tables, found " + type_name(e.type())};
    }
    out.push_back(e.as_table());
  }
  return out;
}

}  // namespace

std::optional<std::string> check_portal(std::string_view p) {
  const auto colon = p.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return "expected HOST:PORT";
  const std::string_view host = p.substr(0, colon);
  const std::string_view port = p.substr(colon + 1);
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc{} || end != port.data() + port.size() || value == 0 || value > 65535)
    return in_quotes(port) + " is not a port";
  if (host.starts_with('[')) {
    boost::system::error_code bad;
    if (host.size() < 3 || !host.ends_with(']'))
      return in_quotes(host) + " is not an [IPv6] address";
    (void)boost::asio::ip::make_address_v6(std::string(host.substr(1, host.size() - 2)), bad);
    if (bad) return in_quotes(host) + " is not an [IPv6] address";
    return std::nullopt;
  }
  const bool name_chars = std::ranges::all_of(host, [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-';
  });
  if (!name_chars)
    return in_quotes(host) + " is not a host name or address (an IPv6 address goes in brackets)";
  return std::nullopt;
}

std::expected<nvme_portal, std::string> parse_nvme_portal(std::string_view text) {
  const auto comma = text.find(',');
  const std::string_view at = text.substr(0, comma);
  if (auto bad = check_portal(at)) return std::unexpected(*bad);
  const auto colon = at.rfind(':');
  nvme_portal p;
  p.host = std::string(at.substr(0, colon));
  if (p.host.starts_with('[')) p.host = p.host.substr(1, p.host.size() - 2);
  std::from_chars(at.data() + colon + 1, at.data() + at.size(), p.port);  // checked above
  if (comma != std::string_view::npos) {
    const std::string_view id = text.substr(comma + 1);
    const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), p.port_id);
    if (ec != std::errc{} || end != id.data() + id.size() || p.port_id == 0 || p.port_id > 99) {
      return std::unexpected(in_quotes(id) + " is not a port id (1: controller a's, 2: b's)");
    }
  }
  return p;
}

namespace {

daemon_settings read_daemon(const toml::table& root, const std::filesystem::path& base) {
  daemon_settings d;
  const toml::node* n = root.get("daemon");
  if (n == nullptr) return d;
  if (!n->is_table())
    throw bad_config{n->source().begin, std::string("daemon: expected a [daemon] table, found ") +
                                            type_name(n->type())};
  const section s(
      *n->as_table(), "daemon", 0,
      {"state_dir", "iscsi_listen", "iscsi_portals", "target_name", "grpc_listen", "grpc_tls_cert",
       "grpc_tls_key", "grpc_token_file", "http_listen", "heat_history_interval_s"});
  if (s.get("state_dir")) d.state_dir = s.path("state_dir", base);
  if (auto v = s.string("iscsi_listen")) {
    if (auto bad = parse_listen_address(*v); !bad) s.fail("iscsi_listen", bad.error());
    d.iscsi_listen = *v;
  }
  for (const auto& [portal, at] : s.strings("iscsi_portals")) {
    if (auto bad = check_portal(portal)) s.fail(*at, "iscsi_portals", *bad);
    d.iscsi_portals.push_back(portal);
  }
  if (auto v = s.string("target_name")) {
    if (!valid_iscsi_name(*v))
      s.fail("target_name", in_quotes(*v) + " is not an iSCSI name (iqn.…, eui.… or naa.…)");
    d.target_name = *v;
  }
  if (auto v = s.string("grpc_listen")) {
    if (v->empty()) s.fail("grpc_listen", "an empty address");
    d.grpc_listen = *v;
  }
  if (auto v = s.string("http_listen")) {
    if (*v != "off") {
      if (auto bad = parse_listen_address(*v); !bad)
        s.fail("http_listen", bad.error() + " (or \"off\")");
    }
    d.http_listen = *v;
  }
  if (const toml::node* every = s.get("heat_history_interval_s")) {
    const auto* i = every->as_integer();
    if (i == nullptr)
      s.fail(*every, "heat_history_interval_s",
             std::string("expected an integer of seconds, found ") + type_name(every->type()));
    if (i->get() < 10 || i->get() > 86400)
      s.fail(*every, "heat_history_interval_s",
             std::to_string(i->get()) + " is outside 10 to 86400 seconds");
    d.heat_history_interval = std::chrono::seconds(i->get());
  }
  // "" is none, as with no key (the three go together: mgmt checks that).
  for (auto [key, field] :
       {std::pair{"grpc_tls_cert", &d.grpc_tls_cert}, std::pair{"grpc_tls_key", &d.grpc_tls_key},
        std::pair{"grpc_token_file", &d.grpc_token_file}}) {
    if (!s.string(key).value_or("").empty()) *field = s.path(key, base);
  }
  return d;
}

std::string kind_name(drive_kind k) {
  return k == drive_kind::hdd ? "an HDD" : "an SSD";
}

std::string model_list() {
  std::string out;
  for (const timing_model_info& m : timing_models()) {
    out += (out.empty() ? "" : ", ") + std::string(m.name) +
           (m.kind == drive_kind::hdd ? " (HDD)" : " (SSD)");
  }
  return out;
}

array_plan read_plan(const toml::table& root, const std::filesystem::path& base,
                     const toml::node& first) {
  array_plan plan;
  const auto drives = tables_of(root, "drive");
  const auto groups = tables_of(root, "group");
  const auto volumes = tables_of(root, "volume");
  const auto hosts = tables_of(root, "host");
  const auto mappings = tables_of(root, "mapping");
  const toml::node* pool = root.get("pool");
  auto needs = [&](const char* what) {
    throw bad_config{
        first.source().begin,
        std::string("the array to build needs ") + what +
            " (without the build sections an empty state directory gets the embedded default)"};
  };
  if (drives.empty()) needs("[[drive]] tables");
  if (groups.empty()) needs("[[group]] tables");
  if (pool == nullptr) needs("a [pool]");

  std::map<std::string, std::size_t> drive_index;
  std::set<std::filesystem::path> paths;
  for (std::size_t i = 0; i < drives.size(); ++i) {
    const section s(*drives[i], "drive", i + 1, {"name", "kind", "path", "size", "model"});
    drive_spec d;
    d.name = s.name();
    if (!drive_index.emplace(d.name, i).second) s.fail("name", "a second drive named " + d.name);
    const std::string kind = s.required_string("kind", "\"hdd\" or \"ssd\"");
    if (kind != "hdd" && kind != "ssd")
      s.fail("kind", in_quotes(kind) + " is not \"hdd\" or \"ssd\"");
    d.kind = kind == "hdd" ? drive_kind::hdd : drive_kind::ssd;
    d.path = s.path("path", base);
    if (!d.path.empty() && !paths.insert(d.path.lexically_normal()).second)
      s.fail("path", d.path.string() + " is another drive's path too");
    if (auto model = s.string("model")) {
      const timing_model_info* m = find_timing_model(*model);
      if (m == nullptr)
        s.fail("model", "no timing model " + in_quotes(*model) + "; these exist: " + model_list());
      if (m->kind != d.kind)
        s.fail("model", *model + " models " + kind_name(m->kind) + ", and " + d.name + " is " +
                            kind_name(d.kind));
      d.timing_model = *model;
    } else if (d.path.empty()) {
      d.timing_model = default_timing_model(d.kind).name;  // a simulated drive always has one
    }
    if (auto bytes = s.size("size")) {
      if (*bytes % 4096 != 0)
        s.fail("size", std::to_string(*bytes) + " bytes is not a whole number of 4 KiB blocks");
      d.bytes = *bytes;
    } else if (d.path.empty()) {
      d.bytes = find_timing_model(d.timing_model)->nominal_bytes;  // the model's nominal capacity
    }
    plan.drives.push_back(std::move(d));
  }

  std::map<std::string, group_kind> group_kinds;
  std::map<std::string, std::string> member_of;  // drive -> group
  const std::initializer_list<std::string_view> group_keys{
      "name",    "kind",       "drives", "monitors", "user",
      "keyring", "rados_pool", "image",  "size",     "create"};
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const section s(*groups[i], "group", i + 1, group_keys);
    group_plan g;
    g.name = s.name();
    const std::string kind = s.required_string(
        "kind", "\"raid6\", \"raid1\", \"read_cache\", \"write_log\" or \"ceph\"");
    if (kind == "raid6") {
      g.kind = group_kind::raid6;
    } else if (kind == "raid1") {
      g.kind = group_kind::raid1;
    } else if (kind == "read_cache") {
      g.kind = group_kind::read_cache;
    } else if (kind == "write_log") {
      g.kind = group_kind::write_log;
    } else if (kind == "ceph") {
      g.kind = group_kind::ceph;
    } else {
      s.fail("kind", in_quotes(kind) +
                         " is not \"raid6\", \"raid1\", \"read_cache\", \"write_log\" or \"ceph\"");
    }
    if (!group_kinds.emplace(g.name, g.kind).second)
      s.fail("name", "a second group named " + g.name);
    if (g.kind == group_kind::ceph) {
      // An RBD image in a Ceph cluster: no drives; how to reach it.
      if (s.get("drives") != nullptr)
        s.fail("drives", "a Ceph group has no drives: Ceph keeps its redundancy");
      g.ceph.monitors =
          s.required_string("monitors", "the monitors' addresses, \"127.0.0.1:3300\"");
      g.ceph.user = s.string("user").value_or("admin");
      g.ceph.keyring_path =
          s.required_string("keyring", "the keyring file holding the cephx user's key");
      g.ceph.rados_pool = s.required_string("rados_pool", "the RADOS pool of the image");
      g.ceph.image = s.required_string("image", "the RBD image's name");
      const auto bytes = s.size("size");
      if (!bytes) s.missing("size", "the image's size, a multiple of 4 MiB");
      if (*bytes == 0 || *bytes % (4 << 20) != 0)
        s.fail("size", std::to_string(*bytes) + " bytes is not a positive multiple of 4 MiB");
      g.ceph.size_bytes = *bytes;
      g.ceph.create = s.boolean("create").value_or(false);
      plan.groups.push_back(std::move(g));
      continue;
    }
    for (std::string_view key :
         {"monitors", "user", "keyring", "rados_pool", "image", "size", "create"}) {
      if (s.get(key) != nullptr) s.fail(key, "only a Ceph group (kind = \"ceph\") has it");
    }
    if (s.get("drives") == nullptr) s.missing("drives", "the names of its drives, in member order");
    for (const auto& [drive, at] : s.strings("drives")) {
      const auto d = drive_index.find(drive);
      if (d == drive_index.end()) s.fail(*at, "drives", "no drive is named " + in_quotes(drive));
      if (const auto [other, fresh] = member_of.emplace(drive, g.name); !fresh) {
        s.fail(*at, "drives",
               drive + (other->second == g.name ? " is listed twice"
                                                : " is already in group " + other->second));
      }
      if (g.kind == group_kind::read_cache && plan.drives[d->second].kind != drive_kind::ssd) {
        s.fail(*at, "drives", "the read cache is an SSD; " + drive + " is an HDD");
      }
      if (g.kind == group_kind::write_log && plan.drives[d->second].kind != drive_kind::ssd) {
        s.fail(*at, "drives", "the write log is on SSDs; " + drive + " is an HDD");
      }
      g.drives.push_back(drive);
    }
    const std::size_t n = g.drives.size();
    const std::string has = ", has " + std::to_string(n);
    if (g.kind == group_kind::raid6 && (n < 4 || n > group_members_max))
      s.fail("drives", "RAID-6 needs 4 to 255 drives" + has);
    if (g.kind == group_kind::raid1 && (n < 2 || n > group_members_max))
      s.fail("drives", "RAID-1 needs 2 to 255 drives" + has);
    if (g.kind == group_kind::read_cache && n != 1)
      s.fail("drives", "the read cache is exactly one SSD" + has);
    if (g.kind == group_kind::write_log && (n < 2 || n > group_members_max)) {
      s.fail("drives", "the write log is mirrored: 2 to 255 SSDs" + has);
    }
    plan.groups.push_back(std::move(g));
  }

  // One [pool] table, or several [[pool]] tables (the two controllers' default has one each).
  std::vector<const toml::table*> pools;
  if (pool->is_table()) {
    pools.push_back(pool->as_table());
  } else if (pool->is_array()) {
    pools = tables_of(root, "pool");
  } else {
    throw bad_config{pool->source().begin,
                     std::string("pool: expected a [pool] table or [[pool]] tables, found ") +
                         type_name(pool->type())};
  }
  std::map<std::string, std::string> group_pool;  // group -> the pool using it
  for (std::size_t i = 0; i < pools.size(); ++i) {
    section s(*pools[i], "pool", pools.size() == 1 ? 0 : i + 1,
              {"name", "groups", "read_cache", "write_log", "home", "cold_cooling_seconds"});
    pool_plan p;
    if (s.get("name") != nullptr) p.name = s.name();
    s.rename("pool " + p.name);  // named, as the default's is too
    if (std::ranges::any_of(plan.pools, [&](const pool_plan& o) { return o.name == p.name; }))
      s.fail("name", "a second pool named " + p.name);
    auto take = [&](const toml::node& at, const char* key, const std::string& group) {
      if (const auto [user, fresh] = group_pool.emplace(group, p.name); !fresh) {
        s.fail(at, key,
               group + (user->second == p.name ? " is named twice"
                                               : " is pool " + user->second + "'s"));
      }
    };
    if (s.get("groups") == nullptr) s.missing("groups", "its RAID-6 and RAID-1 groups, in order");
    for (const auto& [group, at] : s.strings("groups")) {
      const auto g = group_kinds.find(group);
      if (g == group_kinds.end()) s.fail(*at, "groups", "no group is named " + in_quotes(group));
      if (g->second == group_kind::read_cache)
        s.fail(*at, "groups", group + " is a read cache: name it in read_cache");
      if (g->second == group_kind::write_log)
        s.fail(*at, "groups", group + " is a write log: name it in write_log");
      if (std::ranges::find(p.groups, group) != p.groups.end())
        s.fail(*at, "groups", group + " is listed twice");
      take(*at, "groups", group);
      p.groups.push_back(group);
    }
    if (p.groups.empty()) s.fail("groups", "a pool needs a RAID-6 or RAID-1 group");
    if (auto cache = s.string("read_cache")) {
      const auto g = group_kinds.find(*cache);
      if (g == group_kinds.end()) s.fail("read_cache", "no group is named " + in_quotes(*cache));
      if (g->second != group_kind::read_cache) {
        s.fail("read_cache", *cache + " is a " +
                                 (g->second == group_kind::raid6 ? "raid6" : "raid1") +
                                 " group, not a read_cache one");
      }
      take(*s.get("read_cache"), "read_cache", *cache);
      p.read_cache_group = *cache;
    }
    if (auto log = s.string("write_log")) {
      const auto g = group_kinds.find(*log);
      if (g == group_kinds.end()) s.fail("write_log", "no group is named " + in_quotes(*log));
      if (g->second != group_kind::write_log)
        s.fail("write_log", *log + " is not a write_log group");
      if (std::ranges::none_of(p.groups, [&](const std::string& n) {
            return group_kinds[n] == group_kind::raid6;
          })) {
        s.fail("write_log", "the pool has no RAID-6 group for it to cache");
      }
      take(*s.get("write_log"), "write_log", *log);
      p.write_log_group = *log;
    }
    if (auto home = s.string("home")) {
      if (*home != "a" && *home != "b") s.fail("home", in_quotes(*home) + " is not \"a\" or \"b\"");
      p.home = *home;
    }
    if (const toml::node* cooling = s.get("cold_cooling_seconds")) {
      if (!cooling->is_integer() || cooling->as_integer()->get() < 0 ||
          static_cast<std::uint64_t>(cooling->as_integer()->get()) >
              tiering::max_cold_cooling_seconds) {
        s.fail(*cooling, "cold_cooling_seconds",
               "expected a number of seconds from 0 (nothing moves to Ceph) to " +
                   std::to_string(tiering::max_cold_cooling_seconds) + " (100 years)");
      }
      p.cold_cooling_seconds = static_cast<std::uint64_t>(cooling->as_integer()->get());
    }
    plan.pools.push_back(std::move(p));
  }

  // A group outside the pools would be formatted and never used: a slip.
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const group_plan& g = plan.groups[i];
    if (group_pool.contains(g.name)) continue;
    const section s(*groups[i], "group", i + 1, group_keys);
    s.fail("name", "no pool uses it (name it in a [pool]'s " +
                       std::string(g.kind == group_kind::read_cache  ? "read_cache"
                                   : g.kind == group_kind::write_log ? "write_log"
                                                                     : "groups") +
                       ")");
  }

  std::set<std::string> volume_names;
  for (std::size_t i = 0; i < volumes.size(); ++i) {
    const section s(*volumes[i], "volume", i + 1,
                    {"name", "size", "placement", "block_size", "pool"});
    volume_plan v;
    v.name = s.name();
    v.pool = s.string("pool").value_or(plan.pools.front().name);
    if (std::ranges::none_of(plan.pools, [&](const pool_plan& p) { return p.name == v.pool; }))
      s.fail("pool", "no pool is named " + in_quotes(v.pool));
    if (!volume_names.insert(v.name).second) s.fail("name", "a second volume named " + v.name);
    const auto bytes = s.size("size");
    if (!bytes) s.missing("size", "e.g. \"100G\"");
    if (*bytes % 4096 != 0)
      s.fail("size", std::to_string(*bytes) + " bytes is not a multiple of 4096");
    v.bytes = *bytes;
    const std::string placement = s.string("placement").value_or("auto");
    if (placement == "auto") {
      v.placement = tiering::affinity::automatic;
    } else if (placement == "performance") {
      v.placement = tiering::affinity::performance;
    } else if (placement == "capacity") {
      v.placement = tiering::affinity::archive;
    } else if (placement == "local") {
      v.placement = tiering::affinity::local;
    } else {
      s.fail("placement",
             in_quotes(placement) + " is not \"auto\", \"performance\", \"capacity\" or \"local\"");
    }
    if (const toml::node* block = s.get("block_size")) {
      if (!block->is_integer())
        s.fail(*block, "block_size",
               std::string("expected 512 or 4096, found ") + type_name(block->type()));
      const std::int64_t value = block->as_integer()->get();
      if (value != 512 && value != 4096)
        s.fail(*block, "block_size", std::to_string(value) + " is not 512 or 4096");
      v.block_size_bytes = static_cast<std::uint32_t>(value);
    }
    plan.volumes.push_back(std::move(v));
  }

  std::map<std::string, std::string> iqn_owner;  // folded IQN -> host
  std::map<std::string, std::string> nqn_owner;  // NQN -> host
  std::string anyone;                            // the any_initiator host
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const section s(*hosts[i], "host", i + 1,
                    {"name", "iqns", "nqns", "any_initiator", "chap_user", "chap_secret",
                     "mutual_chap_user", "mutual_chap_secret"});
    host_plan h;
    h.name = s.name();
    if (std::ranges::any_of(plan.hosts, [&](const host_plan& o) { return o.name == h.name; }))
      s.fail("name", "a second host named " + h.name);
    for (const auto& [iqn, at] : s.strings("iqns")) {
      if (!valid_iscsi_name(iqn))
        s.fail(*at, "iqns", in_quotes(iqn) + " is not an iSCSI name (iqn.…, eui.… or naa.…)");
      if (const auto [owner, fresh] = iqn_owner.emplace(lower(iqn), h.name); !fresh) {
        s.fail(*at, "iqns",
               iqn + (owner->second == h.name ? " is listed twice"
                                              : " belongs to host " + owner->second));
      }
      h.iqns.push_back(iqn);
    }
    for (const auto& [nqn, at] : s.strings("nqns")) {
      if (!valid_nvme_name(nqn))
        s.fail(*at, "nqns", in_quotes(nqn) + " is not an NVMe qualified name (nqn.…)");
      if (const auto [owner, fresh] = nqn_owner.emplace(nqn, h.name); !fresh) {
        s.fail(*at, "nqns",
               nqn + (owner->second == h.name ? " is listed twice"
                                              : " belongs to host " + owner->second));
      }
      h.nqns.push_back(nqn);
    }
    h.any_initiator = s.boolean("any_initiator").value_or(false);
    if (h.any_initiator && !anyone.empty())
      s.fail("any_initiator", "host " + anyone + " already stands for every initiator");
    if (h.any_initiator) anyone = h.name;
    if (h.iqns.empty() && h.nqns.empty() && !h.any_initiator)
      s.fail("iqns", "a host needs an initiator name (iqns or nqns), or any_initiator = true");
    h.chap_user = s.string("chap_user").value_or("");
    h.chap_secret = s.string("chap_secret").value_or("");
    h.mutual_chap_user = s.string("mutual_chap_user").value_or("");
    h.mutual_chap_secret = s.string("mutual_chap_secret").value_or("");
    if (h.chap_user.empty() != h.chap_secret.empty()) {
      s.fail(h.chap_user.empty() ? "chap_secret" : "chap_user",
             "CHAP needs both chap_user and chap_secret");
    }
    if (h.mutual_chap_user.empty() != h.mutual_chap_secret.empty()) {
      s.fail(h.mutual_chap_user.empty() ? "mutual_chap_secret" : "mutual_chap_user",
             "mutual CHAP needs both mutual_chap_user and mutual_chap_secret");
    }
    if (!h.mutual_chap_user.empty() && h.chap_user.empty())
      s.fail("mutual_chap_user", "mutual CHAP needs CHAP (chap_user, chap_secret)");
    if (!h.chap_user.empty()) {
      const iscsi::chap_credentials chap{h.chap_user, h.chap_secret};
      if (auto bad = iscsi::check_chap_secrets(chap, std::nullopt)) s.fail("chap_secret", *bad);
      if (!h.mutual_chap_user.empty()) {
        if (auto bad = iscsi::check_chap_secrets(
                chap, iscsi::chap_credentials{h.mutual_chap_user, h.mutual_chap_secret})) {
          s.fail("mutual_chap_secret", *bad);
        }
      }
    }
    plan.hosts.push_back(std::move(h));
  }

  std::set<std::pair<std::string, std::uint32_t>> luns;  // (host, LUN)
  std::set<std::pair<std::string, std::string>> served;  // (host, volume)
  for (std::size_t i = 0; i < mappings.size(); ++i) {
    const section s(*mappings[i], "mapping", i + 1, {"volume", "host", "lun"});
    mapping_plan m;
    m.volume = s.required_string("volume", "the name of a [[volume]]");
    if (!volume_names.contains(m.volume))
      s.fail("volume", "no volume is named " + in_quotes(m.volume));
    m.host = s.required_string("host", "the name of a [[host]]");
    if (std::ranges::none_of(plan.hosts, [&](const host_plan& h) { return h.name == m.host; }))
      s.fail("host", "no host is named " + in_quotes(m.host));
    const toml::node* lun = s.get("lun");
    if (lun == nullptr) s.missing("lun", "the LUN the host sees the volume as, 0 to 16383");
    if (!lun->is_integer())
      s.fail(*lun, "lun", std::string("expected an integer, found ") + type_name(lun->type()));
    const std::int64_t value = lun->as_integer()->get();
    if (value < 0 || value >= lun_limit)
      s.fail(*lun, "lun", std::to_string(value) + " is not in 0 to 16383");
    m.lun = static_cast<std::uint32_t>(value);
    if (!luns.emplace(m.host, m.lun).second)
      s.fail(*lun, "lun", "host " + m.host + " has LUN " + std::to_string(m.lun) + " twice");
    if (!served.emplace(m.host, m.volume).second)
      s.fail("volume", m.volume + " is mapped to host " + m.host + " twice");
    plan.mappings.push_back(std::move(m));
  }
  return plan;
}

// The default layouts' start: the drives, the HDDs' two RAID-6 halves (g1,
// g2), ssd 0 and 1 as RAID-1 (g3), ssd 2 the read cache (g4); the SSDs'
// names, for the rest.
std::vector<std::string> start_default(array_plan& plan, std::vector<drive_spec> drives) {
  std::vector<std::string> hdds, ssds;
  for (const drive_spec& d : drives) (d.kind == drive_kind::hdd ? hdds : ssds).push_back(d.name);
  const auto half = static_cast<std::ptrdiff_t>(hdds.size() / 2);
  plan.drives = std::move(drives);
  plan.groups = {{"g1", group_kind::raid6, {hdds.begin(), hdds.begin() + half}, {}},
                 {"g2", group_kind::raid6, {hdds.begin() + half, hdds.end()}, {}},
                 {"g3", group_kind::raid1, {ssds.at(0), ssds.at(1)}, {}},
                 {"g4", group_kind::read_cache, {ssds.at(2)}, {}}};
  plan.hosts = {{"all", {}, true, {}, {}, {}, {}, {}}};
  return ssds;
}

}  // namespace

array_plan default_plan(std::vector<drive_spec> drives, std::uint64_t volume_bytes) {
  array_plan plan;
  const std::vector<std::string> ssds = start_default(plan, std::move(drives));
  pool_plan pool{"p1", {"g1", "g2", "g3"}, "g4", "", "a", std::nullopt};
  if (ssds.size() >= 5) {  // a shelf of 3 SSDs (before the write log) has none
    plan.groups.push_back({"g5", group_kind::write_log, {ssds.at(3), ssds.at(4)}, {}});
    pool.write_log_group = "g5";
  }
  plan.pools = {pool};
  plan.volumes = {{"v1", volume_bytes, tiering::affinity::automatic, 512, "p1"}};
  plan.mappings = {{"v1", "all", 0}};
  return plan;
}

array_plan dual_plan(std::vector<drive_spec> drives, std::uint64_t volume_bytes) {
  array_plan plan;
  const std::vector<std::string> ssds = start_default(plan, std::move(drives));
  plan.groups.insert(plan.groups.end(),
                     {{"g5", group_kind::write_log, {ssds.at(3), ssds.at(4)}, {}},
                      {"g6", group_kind::raid1, {ssds.at(5), ssds.at(6)}, {}},
                      {"g7", group_kind::read_cache, {ssds.at(7)}, {}},
                      {"g8", group_kind::write_log, {ssds.at(8), ssds.at(9)}, {}}});
  plan.pools = {{"p1", {"g1", "g3"}, "g4", "g5", "a", std::nullopt},
                {"p2", {"g2", "g6"}, "g7", "g8", "b", std::nullopt}};
  plan.volumes = {{"v1", volume_bytes, tiering::affinity::automatic, 512, "p1"},
                  {"v2", volume_bytes, tiering::affinity::automatic, 512, "p2"}};
  plan.mappings = {{"v1", "all", 0}, {"v2", "all", 1}};
  return plan;
}

array_plan dual_plan() {
  return dual_plan(dual_shelf(), 100 * gib);
}

array_plan default_plan() {
  return default_plan(default_shelf(), 100 * gib);
}

std::expected<std::uint64_t, std::string> parse_size(std::string_view text) {
  const std::string_view original = text;
  auto refuse = [&] {
    return std::unexpected(
        in_quotes(original) +
        " is not a size (bytes, or a whole number with K, M, G or T: \"512M\", \"100G\", \"2T\")");
  };
  std::uint64_t number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec == std::errc::result_out_of_range)
    return std::unexpected(in_quotes(original) + " is too large");
  if (ec != std::errc{} || end == text.data()) return refuse();
  std::string_view suffix = text.substr(static_cast<std::size_t>(end - text.data()));
  while (suffix.starts_with(' ')) suffix.remove_prefix(1);
  unsigned shift = 0;
  if (!suffix.empty()) {
    const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])));
    shift = unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : unit == 'T' ? 40 : 0;
    suffix.remove_prefix(1);
    if (shift == 0 || (!suffix.empty() && suffix != "iB")) return refuse();
  }
  if (number == 0) return std::unexpected(in_quotes(original) + ": a size must be positive");
  if (number > (UINT64_MAX >> shift)) return std::unexpected(in_quotes(original) + " is too large");
  return number << shift;
}

std::expected<listen_address, std::string> parse_listen_address(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos)
    return std::unexpected(in_quotes(text) + " is not ADDR:PORT");
  std::string address(text.substr(0, colon));
  if (address.starts_with('[') && address.ends_with(']'))
    address = address.substr(1, address.size() - 2);
  boost::system::error_code ec;
  (void)boost::asio::ip::make_address(address, ec);
  if (ec) return std::unexpected(in_quotes(address) + " is not an IP address");
  const std::string_view port = text.substr(colon + 1);
  unsigned value = 0;
  const auto [end, bad] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (bad != std::errc{} || end != port.data() + port.size() || port.empty() || value > 65535) {
    return std::unexpected(in_quotes(port) + " is not a port");
  }
  return listen_address{address, static_cast<std::uint16_t>(value)};
}

std::expected<strata_config, error> parse_config(std::string_view text, std::string_view origin,
                                                 const std::filesystem::path& base) {
  auto at = [&](toml::source_position p, const std::string& what) {
    return std::unexpected(
        make_error(errc::invalid_argument, std::string(origin) + ":" + std::to_string(p.line) +
                                               ":" + std::to_string(p.column) + ": " + what));
  };
  try {
    const toml::table root = toml::parse(text, origin);
    static constexpr std::string_view sections[] = {"daemon", "drive", "group",  "pool",
                                                    "volume", "host",  "mapping"};
    for (auto&& [key, value] : root) {
      if (std::ranges::find(sections, key.str()) != std::end(sections)) continue;
      static constexpr std::string_view daemon_keys[] = {
          "state_dir",   "iscsi_listen",           "iscsi_portals", "target_name",
          "grpc_listen", "grpc_tls_cert",          "grpc_tls_key",  "grpc_token_file",
          "http_listen", "heat_history_interval_s"};
      if (std::ranges::find(daemon_keys, key.str()) != std::end(daemon_keys)) {
        return at(key.source().begin,
                  "key " + in_quotes(key.str()) + " outside any table: it goes under [daemon]");
      }
      return at(key.source().begin, "unknown section or key " + in_quotes(key.str()) +
                                        " (the file has [daemon], [[drive]], [[group]], [pool], "
                                        "[[volume]], [[host]] and [[mapping]])");
    }
    strata_config config;
    config.daemon = read_daemon(root, base);
    // The build sections, if any: the first one seen is where a missing one is reported.
    const toml::node* first = nullptr;
    for (auto&& [key, value] : root) {
      if (key.str() == "daemon") continue;
      if (first == nullptr || value.source().begin.line < first->source().begin.line)
        first = &value;
    }
    if (first != nullptr) config.plan = read_plan(root, base, *first);
    return config;
  } catch (const toml::parse_error& e) {
    return at(e.source().begin, std::string(e.description()));
  } catch (const bad_config& e) {
    return at(e.at, e.what);
  }
}

std::expected<strata_config, error> load_config(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    const bool exists = std::filesystem::exists(path, ec);
    return std::unexpected(
        make_error(exists ? errc::permission_denied : errc::not_found,
                   path.string() + ": " + (exists ? "cannot be read" : "no such file")));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return std::unexpected(make_error(errc::io_error, path.string() + ": a read failed"));
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return parse_config(text.str(), path.string(), ec ? path.parent_path() : absolute.parent_path());
}

}  // namespace strata::controller
