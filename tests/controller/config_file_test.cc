#include "controller/config_file.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/raid/device/harness.h"

using namespace strata;
using namespace strata::controller;

namespace {

// The example as shipped, from the source tree (__FILE__ is relative under
// ccache's base_dir).
std::string example_text() {
  const auto path = strata::device::testing::source_dir() / "controller" / "strata.example.toml";
  std::ifstream in(path);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The example with its commented-out examples taken in: "#key = …" and
// "#[section]" lines lose their "#" (prose comments are "# …").
std::string uncommented(const std::string& text) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > 1 && line[0] == '#' && ((line[1] >= 'a' && line[1] <= 'z') || line[1] == '['))
      line.erase(0, 1);
    out += line + "\n";
  }
  return out;
}

std::string error_of(std::string_view text, const std::filesystem::path& base = {}) {
  auto parsed = parse_config(text, "t.toml", base);
  if (parsed) return "(no error)";
  CHECK(parsed.error().code == make_error_code(errc::invalid_argument));
  return parsed.error().message;
}

// "t.toml:LINE:COLUMN" of the first `needle` in `text` (or the nth), plus
// `offset` characters: where an error about it points.
std::string where(std::string_view text, std::string_view needle, std::size_t offset = 0,
                  int nth = 1) {
  std::size_t at = text.find(needle);
  for (int i = 1; i < nth && at != std::string_view::npos; ++i) at = text.find(needle, at + 1);
  REQUIRE(at != std::string_view::npos);
  const std::size_t position = at + offset;
  const std::size_t line_start = text.rfind('\n', position == 0 ? 0 : position - 1);
  const std::size_t column =
      line_start == std::string_view::npos ? position + 1 : position - line_start;
  const auto line =
      1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(position), '\n');
  return "t.toml:" + std::to_string(line) + ":" + std::to_string(column);
}

// `text` with its one `from` replaced by `to`.
std::string with(std::string text, std::string_view from, std::string_view to) {
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// A small valid array: one drive per line, so that each error's place is easy to see.
const std::string base = R"(drive = [
  {name = "h0", kind = "hdd", size = "1G"},
  {name = "h1", kind = "hdd", size = "1G"},
  {name = "h2", kind = "hdd", size = "1G"},
  {name = "h3", kind = "hdd", size = "1G"},
  {name = "s0", kind = "ssd", size = "1G"},
  {name = "s1", kind = "ssd", size = "1G"},
  {name = "s2", kind = "ssd", size = "1G"},
]
group = [
  {name = "g1", kind = "raid6", drives = ["h0", "h1", "h2", "h3"]},
  {name = "g2", kind = "raid1", drives = ["s0", "s1"]},
  {name = "g3", kind = "read_cache", drives = ["s2"]},
]
pool = {groups = ["g1", "g2"], read_cache = "g3"}
volume = [{name = "v1", size = "1G"}]
host = [{name = "all", any_initiator = true}, {name = "db", iqns = ["iqn.2000-01.x:db"]}]
mapping = [{volume = "v1", host = "all", lun = 0}]
)";

}  // namespace

TEST_CASE("config file: the example, as shipped, builds the embedded default",
          "[controller][config]") {
  auto config = parse_config(example_text(), "strata.example.toml");
  REQUIRE(config);
  CHECK(config->daemon == daemon_settings{});
  REQUIRE(config->plan);
  const array_plan& plan = *config->plan;
  const array_plan embedded = default_plan();
  REQUIRE(plan.drives.size() == embedded.drives.size());
  for (std::size_t i = 0; i < plan.drives.size(); ++i) {
    INFO("drive " << embedded.drives[i].name);
    CHECK(plan.drives[i] == embedded.drives[i]);
  }
  CHECK(plan.groups == embedded.groups);
  CHECK(plan.pools == embedded.pools);
  CHECK(plan.volumes == embedded.volumes);
  CHECK(plan.hosts == embedded.hosts);
  CHECK(plan.mappings == embedded.mappings);
  CHECK(plan == embedded);
}

TEST_CASE("config file: the example's commented-out settings parse too, each as documented",
          "[controller][config]") {
  auto config = parse_config(uncommented(example_text()), "strata.example.toml");
  INFO((config ? "" : config.error().message));
  REQUIRE(config);
  const daemon_settings& d = config->daemon;
  CHECK(d.iscsi_portals ==
        std::vector<std::string>{"array1.example.com:3260", "[2001:db8::10]:3260"});
  CHECK(d.grpc_tls_cert == "/etc/strata/api.crt");
  CHECK(d.grpc_tls_key == "/etc/strata/api.key");
  CHECK(d.grpc_token_file == "/etc/strata/api.token");
  const array_plan& plan = *config->plan;
  REQUIRE(plan.drives.size() == 27);
  const drive_spec& disk = plan.drives[25];
  CHECK(disk.name == "hdd-20");
  CHECK(disk.path == "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4");
  CHECK(disk.bytes == 0);            // all of it
  CHECK(disk.timing_model.empty());  // used as it is
  const drive_spec& file = plan.drives[26];
  CHECK(file.path == "/srv/strata/ssd-05.img");
  CHECK(file.bytes == 64ull << 30);
  CHECK(file.timing_model == "sas_12g");
  REQUIRE(plan.volumes.size() == 2);
  CHECK(plan.volumes[1] == volume_plan{"db", 2ull << 40, tiering::affinity::performance});
  REQUIRE(plan.hosts.size() == 2);
  CHECK(plan.hosts[1] == host_plan{"db1",
                                   {"iqn.1994-05.com.redhat:db1"},
                                   false,
                                   "db1",
                                   "a-secret-of-12-or-more",
                                   "array1",
                                   "another-secret-for-the-array",
                                   {"nqn.2014-08.com.example:nvme:db1"}});
  REQUIRE(plan.mappings.size() == 2);
  CHECK(plan.mappings[1] == mapping_plan{"db", "db1", 0});
}

TEST_CASE("config file: the embedded default's shape", "[controller][config]") {
  const array_plan plan = default_plan();
  REQUIRE(plan.drives.size() == 25);
  CHECK(std::ranges::count(plan.drives, drive_kind::hdd, &drive_spec::kind) == 20);
  for (const drive_spec& d : plan.drives) {
    CHECK(d.path.empty());  // simulated, under STATE/shelf
    CHECK(d.timing_model == (d.kind == drive_kind::hdd ? "nl_sas_7k2" : "sas_12g"));
    CHECK(d.bytes % 4096 == 0);
  }
  REQUIRE(plan.groups.size() == 5);
  CHECK(plan.groups[0].name == "g1");
  CHECK(plan.groups[0].kind == group_kind::raid6);
  CHECK(plan.groups[0].drives.size() == 10);
  CHECK(plan.groups[0].drives.front() == "hdd-00");
  CHECK(plan.groups[1].kind == group_kind::raid6);
  CHECK(plan.groups[1].drives.front() == "hdd-10");
  CHECK(plan.groups[1].drives.back() == "hdd-19");
  CHECK(plan.groups[2] == group_plan{"g3", group_kind::raid1, {"ssd-00", "ssd-01"}, {}});
  CHECK(plan.groups[3] == group_plan{"g4", group_kind::read_cache, {"ssd-02"}, {}});
  CHECK(plan.groups[4] == group_plan{"g5", group_kind::write_log, {"ssd-03", "ssd-04"}, {}});
  CHECK(plan.pools ==
        std::vector<pool_plan>{{"p1", {"g1", "g2", "g3"}, "g4", "g5", "a", std::nullopt}});
  CHECK(plan.volumes ==
        std::vector<volume_plan>{{"v1", 100ull << 30, tiering::affinity::automatic, 512, "p1"}});
  REQUIRE(plan.hosts.size() == 1);
  CHECK(plan.hosts[0].name == "all");
  CHECK(plan.hosts[0].any_initiator);
  CHECK(plan.hosts[0].iqns.empty());
  CHECK(plan.mappings == std::vector<mapping_plan>{{"v1", "all", 0}});

  // Over other drives (stratad --small-shelf): the HDDs in two halves.
  std::vector<drive_spec> small;
  for (int i = 0; i < 10; ++i)
    small.push_back({"h" + std::to_string(i), drive_kind::hdd, 1ull << 30, {}, "nl_sas_7k2"});
  for (int i = 0; i < 3; ++i)
    small.push_back({"s" + std::to_string(i), drive_kind::ssd, 1ull << 30, {}, "sas_12g"});
  const array_plan p = default_plan(small, 1ull << 30);
  CHECK(p.groups[0].drives == std::vector<std::string>{"h0", "h1", "h2", "h3", "h4"});
  CHECK(p.groups[1].drives == std::vector<std::string>{"h5", "h6", "h7", "h8", "h9"});
  CHECK(p.groups[3].drives == std::vector<std::string>{"s2"});
  CHECK(p.volumes[0].bytes == 1ull << 30);
}

TEST_CASE("config file: without build sections there is no plan; [daemon] alone, or nothing",
          "[controller][config]") {
  auto empty = parse_config("", "t.toml");
  REQUIRE(empty);
  CHECK_FALSE(empty->plan);
  CHECK(empty->daemon == daemon_settings{});
  auto daemon = parse_config(
      "[daemon]\nstate_dir = \"/srv/strata\"\niscsi_listen = \"[::1]:3261\"\n", "t.toml");
  REQUIRE(daemon);
  CHECK_FALSE(daemon->plan);
  CHECK(daemon->daemon.state_dir == "/srv/strata");
  CHECK(daemon->daemon.iscsi_listen == "[::1]:3261");
  CHECK(daemon->daemon.grpc_listen == "127.0.0.1:50051");
  CHECK(daemon->daemon.target_name == "iqn.2026-11.io.strata:array");
}

TEST_CASE("config file: the HTTP side's address and the heat history's interval",
          "[controller][config]") {
  auto set = parse_config(
      "[daemon]\nhttp_listen = \"127.0.0.1:9090\"\nheat_history_interval_s = 30\n", "t.toml");
  REQUIRE(set);
  CHECK(set->daemon.http_listen == "127.0.0.1:9090");
  CHECK(set->daemon.heat_history_interval == std::chrono::seconds(30));
  auto off = parse_config("[daemon]\nhttp_listen = \"off\"\n", "t.toml");
  REQUIRE(off);
  CHECK(off->daemon.http_listen == "off");
  CHECK(parse_config("", "t.toml")
            ->daemon.http_listen.empty());  // stratad's default: port 8080 beside iSCSI's 3260
  const std::string bad_address = "[daemon]\nhttp_listen = \"localhost\"\n";
  CHECK(error_of(bad_address).find("http_listen") != std::string::npos);
  const std::string too_often = "[daemon]\nheat_history_interval_s = 5\n";
  CHECK(error_of(too_often) ==
        where(too_often, "5") +
            ": daemon: heat_history_interval_s: 5 is outside 10 to 86400 seconds");
  const std::string words = "[daemon]\nheat_history_interval_s = \"1h\"\n";
  CHECK(error_of(words).find("expected an integer of seconds, found a string") !=
        std::string::npos);
}

TEST_CASE("config file: relative paths are taken from the file's directory",
          "[controller][config]") {
  auto config =
      parse_config(with(base, R"({name = "h0", kind = "hdd", size = "1G"})",
                        R"({name = "h0", kind = "hdd", path = "disks/h0.img"})") +
                       "[daemon]\nstate_dir = \"state\"\ngrpc_tls_cert = \"/abs/api.crt\"\n",
                   "t.toml", "/etc/strata");
  REQUIRE(config);
  CHECK(config->daemon.state_dir == "/etc/strata/state");
  CHECK(config->daemon.grpc_tls_cert == "/abs/api.crt");
  CHECK(config->plan->drives[0].path == "/etc/strata/disks/h0.img");
  CHECK(config->plan->drives[0].bytes == 0);
  CHECK(config->plan->drives[0].timing_model.empty());

  strata::device::testing::temp_dir dir;
  {
    std::ofstream out(dir.path() / "strata.toml");
    out << "[daemon]\nstate_dir = \"here\"\n";
  }
  auto loaded = load_config(dir.path() / "strata.toml");
  REQUIRE(loaded);
  CHECK(loaded->daemon.state_dir == dir.path() / "here");
  auto missing = load_config(dir.path() / "absent.toml");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == make_error_code(errc::not_found));
  CHECK(missing.error().message.find("absent.toml") != std::string::npos);
}

TEST_CASE("config file: sizes take K, M, G and T (binary), or bytes", "[controller][config]") {
  CHECK(parse_size("4096") == 4096u);
  CHECK(parse_size("4K") == 4096u);
  CHECK(parse_size("512M") == 512ull << 20);
  CHECK(parse_size("100G") == 100ull << 30);
  CHECK(parse_size("100g") == 100ull << 30);
  CHECK(parse_size("100GiB") == 100ull << 30);
  CHECK(parse_size("100 G") == 100ull << 30);
  CHECK(parse_size("2T") == 2ull << 40);
  CHECK_FALSE(parse_size("1.5T"));
  CHECK_FALSE(parse_size("100GB"));  // decimal or binary? Refused, not guessed
  CHECK_FALSE(parse_size("100X"));
  CHECK_FALSE(parse_size("G"));
  CHECK_FALSE(parse_size("-1G"));
  CHECK_FALSE(parse_size("0"));
  CHECK_FALSE(parse_size("16777216T"));  // 2^64: too large
  CHECK(parse_size("1.5T").error() ==
        "\"1.5T\" is not a size (bytes, or a whole number with K, M, G or T: \"512M\", \"100G\", "
        "\"2T\")");
  // In the file: an integer is bytes (with TOML's "_"), a string takes a suffix.
  auto config = parse_config(
      with(base, R"({name = "v1", size = "1G"})", R"({name = "v1", size = 1_073_741_824})"),
      "t.toml");
  REQUIRE(config);
  CHECK(config->plan->volumes[0].bytes == 1ull << 30);
}

TEST_CASE("config file: the base of the error tests is valid", "[controller][config]") {
  auto config = parse_config(base, "t.toml");
  INFO((config ? "" : config.error().message));
  REQUIRE(config);
  CHECK(config->plan->drives.size() == 7);
  CHECK(config->plan->drives[0].timing_model == "nl_sas_7k2");  // a simulated drive's default model
  REQUIRE(config->plan->pools.size() == 1);
  CHECK(config->plan->pools[0].name == "p1");
}

TEST_CASE("config file: unknown keys are errors, with a suggestion", "[controller][config]") {
  const std::string daemon = "[daemon]\nstate_dri = \"/srv\"\n";
  CHECK(error_of(daemon) ==
        where(daemon, "state_dri") +
            ": daemon: unknown key \"state_dri\" (did you mean \"state_dir\"?)");
  const std::string far = "[daemon]\ncolour = \"blue\"\n";
  CHECK(error_of(far) == where(far, "colour") +
                             ": daemon: unknown key \"colour\" (the keys here: state_dir, "
                             "iscsi_listen, iscsi_portals, target_name, "
                             "grpc_listen, grpc_tls_cert, grpc_tls_key, grpc_token_file, "
                             "http_listen, heat_history_interval_s)");
  const std::string drive = with(base, R"({name = "h1", kind = "hdd", size = "1G"})",
                                 R"({name = "h1", kind = "hdd", sise = "1G"})");
  CHECK(error_of(drive) ==
        where(drive, "sise") + ": drive h1: unknown key \"sise\" (did you mean \"size\"?)");
  const std::string top = "[deamon]\n";
  CHECK(error_of(top) == where(top, "deamon") +
                             ": unknown section or key \"deamon\" (the file has [daemon], "
                             "[[drive]], [[group]], [pool], [[volume]], [[host]] "
                             "and [[mapping]])");
  const std::string outside = "state_dir = \"/srv\"\n";
  CHECK(error_of(outside) ==
        "t.toml:1:1: key \"state_dir\" outside any table: it goes under [daemon]");
}

TEST_CASE("config file: TOML syntax and type errors name the place", "[controller][config]") {
  CHECK(error_of("[daemon]\nstate_dir = /srv\n").starts_with("t.toml:2:"));
  const std::string lun = with(base, "lun = 0", "lun = \"0\"");
  CHECK(error_of(lun) ==
        where(lun, "\"0\"") + ": mapping #1: lun: expected an integer, found a string");
  const std::string any = with(base, "any_initiator = true", "any_initiator = \"yes\"");
  CHECK(error_of(any) == where(any, "\"yes\"") +
                             ": host all: any_initiator: expected true or false, found a string");
  const std::string groups = with(base, R"(drives = ["s2"])", R"(drives = "s2")");
  CHECK(error_of(groups) == where(groups, "\"s2\"}") +
                                ": group g3: drives: expected an array of strings, found a string");
}

TEST_CASE("config file: drives are checked", "[controller][config]") {
  const std::string kind =
      with(base, R"(kind = "hdd", size = "1G"})", R"(kind = "tape", size = "1G"})");
  CHECK(error_of(kind) ==
        where(kind, "\"tape\"") + ": drive h0: kind: \"tape\" is not \"hdd\" or \"ssd\"");
  const std::string model = with(base, R"({name = "h0", kind = "hdd", size = "1G"})",
                                 R"({name = "h0", kind = "hdd", model = "sas_12g"})");
  CHECK(error_of(model) ==
        where(model, "\"sas_12g\"") + ": drive h0: model: sas_12g models an SSD, and h0 is an HDD");
  const std::string unknown = with(base, R"({name = "h0", kind = "hdd", size = "1G"})",
                                   R"({name = "h0", kind = "hdd", model = "fast"})");
  CHECK(error_of(unknown) == where(unknown, "\"fast\"") +
                                 ": drive h0: model: no timing model \"fast\"; these exist: "
                                 "nl_sas_7k2 (HDD), sas_10k (HDD), sas_12g (SSD)");
  const std::string twice =
      with(base, R"({name = "h1", kind = "hdd")", R"({name = "h0", kind = "hdd")");
  CHECK(error_of(twice) ==
        where(twice, "\"h0\"", 0, 2) + ": drive h0: name: a second drive named h0");
  const std::string odd = with(base, R"({name = "h0", kind = "hdd", size = "1G"})",
                               R"({name = "h0", kind = "hdd", size = 5000})");
  CHECK(error_of(odd) ==
        where(odd, "5000") + ": drive h0: size: 5000 bytes is not a whole number of 4 KiB blocks");
  const std::string bad_name = with(base, R"({name = "h0")", R"({name = "H/0")");
  CHECK(error_of(bad_name) ==
        where(bad_name, "\"H/0\"") +
            ": drive H/0: name: \"H/0\" is not [a-z][a-z0-9-]*, at most 63 characters");
  const std::string paths = with(with(base, R"({name = "h0", kind = "hdd", size = "1G"})",
                                      R"({name = "h0", kind = "hdd", path = "/dev/sdb"})"),
                                 R"({name = "h1", kind = "hdd", size = "1G"})",
                                 R"({name = "h1", kind = "hdd", path = "/dev/sdb"})");
  CHECK(error_of(paths) == where(paths, "\"/dev/sdb\"", 0, 2) +
                               ": drive h1: path: /dev/sdb is another drive's path too");
}

TEST_CASE("config file: groups are checked", "[controller][config]") {
  const std::string three = with(base, R"(["h0", "h1", "h2", "h3"])", R"(["h0", "h1", "h2"])");
  CHECK(error_of(three) ==
        where(three, "[\"h0\"") + ": group g1: drives: RAID-6 needs 4 to 255 drives, has 3");
  const std::string one = with(base, R"(["s0", "s1"])", R"(["s0"])");
  CHECK(error_of(one) ==
        where(one, "[\"s0\"]") + ": group g2: drives: RAID-1 needs 2 to 255 drives, has 1");
  const std::string taken = with(base, R"(["s0", "s1"])", R"(["s0", "h0"])");
  CHECK(error_of(taken) ==
        where(taken, "\"h0\"]") + ": group g2: drives: h0 is already in group g1");
  const std::string missing = with(base, R"(["s0", "s1"])", R"(["s0", "s9"])");
  CHECK(error_of(missing) ==
        where(missing, "\"s9\"") + ": group g2: drives: no drive is named \"s9\"");
  const std::string listed_twice = with(base, R"(["s0", "s1"])", R"(["s0", "s0"])");
  CHECK(error_of(listed_twice) ==
        where(listed_twice, "\"s0\"]") + ": group g2: drives: s0 is listed twice");
  const std::string hdd_cache = with(with(base, R"(drives = ["s2"])", R"(drives = ["h3"])"),
                                     R"(["h0", "h1", "h2", "h3"])", R"(["h0", "h1", "h2", "s2"])");
  CHECK(error_of(hdd_cache) ==
        where(hdd_cache, "\"h3\"]") + ": group g3: drives: the read cache is an SSD; h3 is an HDD");
  const std::string kind = with(base, R"(kind = "raid1")", R"(kind = "raid5")");
  CHECK(error_of(kind) == where(kind, "\"raid5\"") +
                              ": group g2: kind: \"raid5\" is not \"raid6\", \"raid1\", "
                              "\"read_cache\", \"write_log\" or \"ceph\"");
  const std::string unused = with(base, R"(groups = ["g1", "g2"])", R"(groups = ["g1"])");
  CHECK(error_of(unused) == where(unused, "\"g2\"") +
                                ": group g2: name: no pool uses it (name it in a [pool]'s groups)");
}

TEST_CASE("config file: the pool is checked", "[controller][config]") {
  const std::string missing =
      with(base, R"(groups = ["g1", "g2"])", R"(groups = ["g1", "g2", "g7"])");
  CHECK(error_of(missing) ==
        where(missing, "\"g7\"") + ": pool p1: groups: no group is named \"g7\"");
  const std::string cache =
      with(base, R"(groups = ["g1", "g2"], read_cache = "g3")", R"(groups = ["g1", "g2", "g3"])");
  CHECK(error_of(cache) ==
        where(cache, "\"g3\"]") + ": pool p1: groups: g3 is a read cache: name it in read_cache");
  const std::string not_cache = with(base, R"(read_cache = "g3")", R"(read_cache = "g2")");
  CHECK(error_of(not_cache) ==
        where(not_cache, "\"g2\"}") +
            ": pool p1: read_cache: g2 is a raid1 group, not a read_cache one");
  const std::string none =
      with(base, "pool = {groups = [\"g1\", \"g2\"], read_cache = \"g3\"}\n", "");
  CHECK(error_of(none).find(": the array to build needs a [pool]") != std::string::npos);
}

TEST_CASE(
    "config file: several [[pool]] tables, each with its home and its volumes; a group in two "
    "pools is refused",
    "[controller][config]") {
  const std::string two =
      with(with(base, "pool = {groups = [\"g1\", \"g2\"], read_cache = \"g3\"}\n",
                "pool = [{name = \"p1\", groups = [\"g1\"], read_cache = \"g3\"},\n"
                "        {name = \"p2\", groups = [\"g2\"], home = \"b\"}]\n"),
           R"(volume = [{name = "v1", size = "1G"}])",
           R"(volume = [{name = "v1", size = "1G"}, {name = "v2", size = "1G", pool = "p2"}])");
  auto parsed = parse_config(two, "t.toml", "");
  REQUIRE(parsed);
  REQUIRE(parsed->plan);
  CHECK(parsed->plan->pools == std::vector<pool_plan>{{"p1", {"g1"}, "g3", "", "a", std::nullopt},
                                                      {"p2", {"g2"}, "", "", "b", std::nullopt}});
  REQUIRE(parsed->plan->volumes.size() == 2);
  CHECK(parsed->plan->volumes[0].pool == "p1");  // the first pool's, unless said
  CHECK(parsed->plan->volumes[1].pool == "p2");

  const std::string shared =
      with(two, R"(groups = ["g2"], home)", R"(groups = ["g2", "g1"], home)");
  CHECK(error_of(shared) == where(shared, "\"g1\"], home") + ": pool p2: groups: g1 is pool p1's");
  const std::string home = with(two, R"(home = "b")", R"(home = "c")");
  CHECK(error_of(home) == where(home, "\"c\"") + ": pool p2: home: \"c\" is not \"a\" or \"b\"");
  const std::string nowhere = with(two, R"(pool = "p2")", R"(pool = "p9")");
  CHECK(error_of(nowhere) ==
        where(nowhere, "\"p9\"") + ": volume v2: pool: no pool is named \"p9\"");
  const std::string twice = with(two, R"(name = "p2")", R"(name = "p1")");
  CHECK(error_of(twice).find(": a second pool named p1") != std::string::npos);
}

TEST_CASE("config file: volumes are checked", "[controller][config]") {
  const std::string odd = with(base, R"(size = "1G"}])", R"(size = 5000}])");
  CHECK(error_of(odd) ==
        where(odd, "5000") + ": volume v1: size: 5000 bytes is not a multiple of 4096");
  const std::string bad = with(base, R"(size = "1G"}])", R"(size = "1.5G"}])");
  CHECK(error_of(bad) == where(bad, "\"1.5G\"") +
                             ": volume v1: size: \"1.5G\" is not a size (bytes, or a whole number "
                             "with K, M, G or T: \"512M\", \"100G\", \"2T\")");
  const std::string placement =
      with(base, R"(size = "1G"}])", R"(size = "1G", placement = "fast"}])");
  CHECK(error_of(placement) == where(placement, "\"fast\"") +
                                   ": volume v1: placement: \"fast\" is not \"auto\", "
                                   "\"performance\", \"capacity\" or \"local\"");
  const std::string no_size = with(base, R"({name = "v1", size = "1G"})", R"({name = "v1"})");
  CHECK(error_of(no_size) ==
        where(no_size, "{name = \"v1\"") + ": volume v1: size is missing (e.g. \"100G\")");
  auto capacity = parse_config(
      with(base, R"(size = "1G"}])", R"(size = "1G", placement = "capacity"}])"), "t.toml");
  REQUIRE(capacity);
  CHECK(capacity->plan->volumes[0].placement == tiering::affinity::archive);
  // block_size: 512 (512e) unless it says 4096 (4Kn); nothing else.
  CHECK(capacity->plan->volumes[0].block_size_bytes == 512);
  auto four_k =
      parse_config(with(base, R"(size = "1G"}])", R"(size = "1G", block_size = 4096}])"), "t.toml");
  REQUIRE(four_k);
  CHECK(four_k->plan->volumes[0].block_size_bytes == 4096);
  const std::string odd_block =
      with(base, R"(size = "1G"}])", R"(size = "1G", block_size = 1024}])");
  CHECK(error_of(odd_block) ==
        where(odd_block, "1024") + ": volume v1: block_size: 1024 is not 512 or 4096");
  const std::string text_block =
      with(base, R"(size = "1G"}])", R"(size = "1G", block_size = "4K"}])");
  CHECK(error_of(text_block) ==
        where(text_block, "\"4K\"") +
            ": volume v1: block_size: expected 512 or 4096, found a string");
}

TEST_CASE("config file: hosts are checked", "[controller][config]") {
  const std::string two_any =
      with(base, R"(iqns = ["iqn.2000-01.x:db"])", R"(any_initiator = true)");
  CHECK(error_of(two_any) ==
        where(two_any, "true}]") +
            ": host db: any_initiator: host all already stands for every initiator");
  const std::string iqn = with(base, "iqn.2000-01.x:db", "db.example.com");
  CHECK(error_of(iqn) ==
        where(iqn, "\"db.example.com\"") +
            ": host db: iqns: \"db.example.com\" is not an iSCSI name (iqn.…, eui.… or naa.…)");
  const std::string nobody = with(base, R"(iqns = ["iqn.2000-01.x:db"])", R"(iqns = [])");
  CHECK(error_of(nobody) == where(nobody, "[]") +
                                ": host db: iqns: a host needs an initiator name (iqns or nqns), "
                                "or any_initiator = true");
  const std::string shared = with(base, R"({name = "all", any_initiator = true})",
                                  R"({name = "all", iqns = ["IQN.2000-01.x:DB"]})");
  CHECK(error_of(shared) == where(shared, "\"iqn.2000-01.x:db\"") +
                                ": host db: iqns: iqn.2000-01.x:db belongs to host all");
  const std::string short_secret =
      with(base, R"(iqns = ["iqn.2000-01.x:db"])",
           R"(iqns = ["iqn.2000-01.x:db"], chap_user = "db", chap_secret = "short")");
  CHECK(error_of(short_secret)
            .starts_with(where(short_secret, "\"short\"") + ": host db: chap_secret: "));
  const std::string half = with(base, R"(iqns = ["iqn.2000-01.x:db"])",
                                R"(iqns = ["iqn.2000-01.x:db"], chap_user = "db")");
  CHECK(error_of(half) ==
        where(half, "\"db\"}") + ": host db: chap_user: CHAP needs both chap_user and chap_secret");
  const std::string mutual = with(
      base, R"(iqns = ["iqn.2000-01.x:db"])",
      R"(iqns = ["iqn.2000-01.x:db"], mutual_chap_user = "a", mutual_chap_secret = "0123456789abcdef")");
  CHECK(error_of(mutual) ==
        where(mutual, "\"a\"") +
            ": host db: mutual_chap_user: mutual CHAP needs CHAP (chap_user, chap_secret)");
  const std::string same =
      with(base, R"(iqns = ["iqn.2000-01.x:db"])",
           R"(iqns = ["iqn.2000-01.x:db"], chap_user = "db", chap_secret = "0123456789abcdef", )"
           R"(mutual_chap_user = "a", mutual_chap_secret = "0123456789abcdef")");
  CHECK(error_of(same).starts_with(where(same, "\"0123456789abcdef\"}") +
                                   ": host db: mutual_chap_secret: "));
  auto chap = parse_config(
      with(base, R"(iqns = ["iqn.2000-01.x:db"])",
           R"(iqns = ["iqn.2000-01.x:db"], chap_user = "db", chap_secret = "0123456789abcdef")"),
      "t.toml");
  REQUIRE(chap);
  CHECK(chap->plan->hosts[1].chap_secret == "0123456789abcdef");
}

TEST_CASE("config file: mappings are checked", "[controller][config]") {
  const std::string volume = with(base, R"(volume = "v1", host)", R"(volume = "v2", host)");
  CHECK(error_of(volume) ==
        where(volume, "\"v2\"") + ": mapping #1: volume: no volume is named \"v2\"");
  const std::string host = with(base, R"(host = "all", lun)", R"(host = "nobody", lun)");
  CHECK(error_of(host) ==
        where(host, "\"nobody\"") + ": mapping #1: host: no host is named \"nobody\"");
  const std::string large = with(base, "lun = 0", "lun = 16384");
  CHECK(error_of(large) == where(large, "16384") + ": mapping #1: lun: 16384 is not in 0 to 16383");
  const std::string lun_twice =
      with(with(base, R"(lun = 0}])", R"(lun = 0}, {volume = "v2", host = "all", lun = 0}])"),
           R"([{name = "v1", size = "1G"}])",
           R"([{name = "v1", size = "1G"}, {name = "v2", size = "1G"}])");
  CHECK(error_of(lun_twice) ==
        where(lun_twice, "lun = 0}]", 6) + ": mapping #2: lun: host all has LUN 0 twice");
  const std::string volume_twice =
      with(base, R"(lun = 0}])", R"(lun = 0}, {volume = "v1", host = "all", lun = 1}])");
  CHECK(error_of(volume_twice) == where(volume_twice, "\"v1\", host = \"all\", lun = 1") +
                                      ": mapping #2: volume: v1 is mapped to host all twice");
  auto fine = parse_config(
      with(base, R"(lun = 0}])", R"(lun = 0}, {volume = "v1", host = "db", lun = 16383}])"),
      "t.toml");
  REQUIRE(fine);
  CHECK(fine->plan->mappings[1] == mapping_plan{"v1", "db", 16383});
}

TEST_CASE("config file: [daemon] is checked", "[controller][config]") {
  const std::string listen = "[daemon]\niscsi_listen = \"localhost:3260\"\n";
  CHECK(error_of(listen) == where(listen, "\"localhost") +
                                ": daemon: iscsi_listen: \"localhost\" is not an IP address");
  const std::string portal = "[daemon]\niscsi_portals = [\"array1:3260\", \"array2\"]\n";
  CHECK(error_of(portal) ==
        where(portal, "\"array2\"") + ": daemon: iscsi_portals: expected HOST:PORT");
  const std::string port = "[daemon]\niscsi_portals = [\"array1:70000\"]\n";
  CHECK(error_of(port) ==
        where(port, "\"array1") + ": daemon: iscsi_portals: \"70000\" is not a port");
  const std::string v6 = "[daemon]\niscsi_portals = [\"[2001:db8::zz]:3260\"]\n";
  CHECK(error_of(v6) == where(v6, "\"[2001") +
                            ": daemon: iscsi_portals: \"[2001:db8::zz]\" is not an [IPv6] address");
  const std::string name = "[daemon]\ntarget_name = \"array\"\n";
  CHECK(error_of(name) ==
        where(name, "\"array\"") +
            ": daemon: target_name: \"array\" is not an iSCSI name (iqn.…, eui.… or naa.…)");
  auto none = parse_config("[daemon]\ngrpc_tls_cert = \"\"\n", "t.toml");
  REQUIRE(none);
  CHECK(none->daemon.grpc_tls_cert.empty());
  CHECK(check_portal("192.0.2.1:3260") == std::nullopt);
  CHECK(check_portal("[::1]:3260") == std::nullopt);
  CHECK(check_portal("array-1.example.com:860") == std::nullopt);
  CHECK(parse_listen_address("[::1]:3260")->address == "::1");
  CHECK(parse_listen_address("0.0.0.0:0")->port == 0);
  CHECK_FALSE(parse_listen_address("127.0.0.1"));
  CHECK_FALSE(parse_listen_address("127.0.0.1:99999"));
  // --nvme-portal: this controller's port, or another's with its id.
  const auto own = parse_nvme_portal("10.0.2.2:4420");
  REQUIRE(own);
  CHECK((own->host == "10.0.2.2" && own->port == 4420 && own->port_id == 0));
  const auto other = parse_nvme_portal("[fd00::2]:4421,2");
  REQUIRE(other);
  CHECK((other->host == "fd00::2" && other->port == 4421 && other->port_id == 2));
  CHECK(parse_nvme_portal("10.0.2.2").error() == "expected HOST:PORT");
  CHECK(parse_nvme_portal("10.0.2.2:4420,0").error() ==
        "\"0\" is not a port id (1: controller a's, 2: b's)");
  CHECK(parse_nvme_portal("10.0.2.2:4420,b").error() ==
        "\"b\" is not a port id (1: controller a's, 2: b's)");
  CHECK(parse_nvme_portal("10.0.2.2:4420,").error() ==
        "\"\" is not a port id (1: controller a's, 2: b's)");
}

TEST_CASE("config file: build sections without drives, groups or a pool are refused",
          "[controller][config]") {
  const std::string only_volume = "[[volume]]\nname = \"v1\"\nsize = \"1G\"\n";
  CHECK(error_of(only_volume) ==
        "t.toml:1:1: the array to build needs [[drive]] tables (without the build sections an "
        "empty state directory gets the "
        "embedded default)");
}

TEST_CASE("config file: a drive at a path is opened as it is; a simulated one is created",
          "[controller][config]") {
  using namespace strata::device::testing;
  temp_dir dir;
  const auto disk = dir.path() / "disk.img";
  {
    std::ofstream out(disk);
    std::filesystem::resize_file(disk, 40 << 20);  // a file that exists, of its own size
  }
  // Two drives on one file: the file's parser refuses that; the shelf does not mind.
  std::vector<drive_spec> drives{{"d0", drive_kind::hdd, 0, disk, ""},
                                 {"d1", drive_kind::ssd, 8 << 20, disk, "sas_12g"},
                                 {"d2", drive_kind::ssd, 16 << 20, {}, ""}};
  test_loop loop;
  auto s = shelf::open(*loop.ring, loop.clock, dir.path() / "shelf", drives);
  REQUIRE(s);
  CHECK((*s)->spec(0).bytes == 40u << 20);  // all of it
  CHECK((*s)->spec(0).timing_model.empty());
  CHECK((*s)->drive(0).geometry().block_count == (40u << 20) / 4096);
  CHECK((*s)->spec(1).bytes == 8u << 20);  // the part asked for, behind a model
  CHECK((*s)->spec(1).timing_model == "sas_12g");
  CHECK(&(*s)->drive(1) != &(*s)->drive(0));
  CHECK((*s)->spec(2).path ==
        dir.path() / "shelf" / "d2.img");  // simulated: created, behind its kind's model
  CHECK((*s)->spec(2).timing_model == "sas_12g");
  CHECK(std::filesystem::file_size(dir.path() / "shelf" / "d2.img") == 16u << 20);

  auto absent = shelf::open(*loop.ring, loop.clock, dir.path() / "shelf",
                            {{"d9", drive_kind::hdd, 0, dir.path() / "absent", ""}});
  REQUIRE_FALSE(absent);
  CHECK(absent.error().message.find("d9") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "absent"));  // never created
  auto wrong = shelf::open(*loop.ring, loop.clock, dir.path() / "shelf",
                           {{"d8", drive_kind::hdd, 0, disk, "sas_12g"}});
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().message.find("d8") != std::string::npos);
}

TEST_CASE("config file: a Ceph group (the cold tier) and the pool's cold cooling",
          "[controller][config]") {
  const std::string ceph_group =
      "  {name = \"c1\", kind = \"ceph\", monitors = \"127.0.0.1:3300\", keyring = "
      "\"/etc/ceph/k\", rados_pool = \"rbd\", "
      "image = \"cold\", size = \"1T\", create = true},\n]";
  const std::string text = with(
      with(base, "  {name = \"g3\", kind = \"read_cache\", drives = [\"s2\"]},\n]",
           "  {name = \"g3\", kind = \"read_cache\", drives = [\"s2\"]},\n" + ceph_group),
      R"(pool = {groups = ["g1", "g2"], read_cache = "g3"})",
      R"(pool = {groups = ["g1", "g2", "c1"], read_cache = "g3", cold_cooling_seconds = 86400})");
  auto parsed = parse_config(text, "t.toml", "");
  INFO((parsed ? std::string() : parsed.error().message));
  REQUIRE(parsed);
  REQUIRE(parsed->plan);
  const group_plan& c1 = parsed->plan->groups.back();
  CHECK(c1.kind == group_kind::ceph);
  CHECK(c1.drives.empty());
  CHECK(c1.ceph ==
        ceph_plan{"127.0.0.1:3300", "admin", "/etc/ceph/k", "rbd", "cold", 1ull << 40, true});
  CHECK(parsed->plan->pools[0].groups == std::vector<std::string>{"g1", "g2", "c1"});
  CHECK(parsed->plan->pools[0].cold_cooling_seconds == 86400);

  const std::string with_drives =
      with(text, "image = \"cold\"", "image = \"cold\", drives = [\"s2\"]");
  CHECK(error_of(with_drives).find("group c1: drives: a Ceph group has no drives") !=
        std::string::npos);
  const std::string no_image = with(text, "image = \"cold\", ", "");
  CHECK(error_of(no_image).find("group c1: image is missing") != std::string::npos);
  const std::string odd = with(text, "size = \"1T\"", "size = \"5M\"");
  CHECK(error_of(odd).find("group c1: size: 5242880 bytes is not a positive multiple of 4 MiB") !=
        std::string::npos);
  const std::string misplaced = with(text, "{name = \"g2\", kind = \"raid1\",",
                                     "{name = \"g2\", kind = \"raid1\", image = \"x\",");
  CHECK(error_of(misplaced).find("group g2: image: only a Ceph group") != std::string::npos);
  const std::string negative =
      with(text, "cold_cooling_seconds = 86400", "cold_cooling_seconds = -1");
  CHECK(error_of(negative).find("cold_cooling_seconds: expected a number of seconds from 0") !=
        std::string::npos);
  const std::string centuries =
      with(text, "cold_cooling_seconds = 86400", "cold_cooling_seconds = 3153600001");
  CHECK(error_of(centuries).find("to 3153600000 (100 years)") != std::string::npos);
}
