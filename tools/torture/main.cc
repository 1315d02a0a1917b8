// strata-torture: the daemon-level crash torture (README.md).
//
//   strata-torture --stratad PATH --cli PATH [--rounds N | --bench] [--seed S]
//                  [--work-dir DIR] [--keep] [--raid6-rebuilds] [--takeover | --freeze]
//
// Starts stratad on a fresh state directory with its drives' volatile write
// caches in its own memory (--volatile-drive-caches), and runs rounds: over
// a real iSCSI initiator (libiscsi), overlapping writers, readers and
// flushes in flight; kill -9 at a random moment, sometimes during an
// extent migration, a rebuild, a resync or read-cache fills; restart on the
// same state; read back the whole area written and check it against the
// model (model.h). --rounds: 20 (CI); --bench: 1,000. --raid6-rebuilds:
// rebuild rounds fail RAID-6 members too, not only the RAID-1 SSDs'
// (README.md: the degraded RAID-6 write hole loses data there).
// --takeover: two controllers over one shelf, the owner killed and its
// pool taken over by the partner (its write log replayed), or the partner
// killed under forwarded writes. --freeze: two controllers, the owner
// frozen (SIGSTOP) under writes with destage and a volume move running,
// its pool taken over and written through the partner, then thawed with
// its queues as they were; at the end every RAID-6 group is scrubbed and
// must repair nothing.
//
// Exit status: 0 no write lost and no garbage; 1 a loss, garbage, or a
// stratad that crashed by itself or did not come back; 2 usage.
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tools/cli.h"
#include "tools/torture/model.h"
#include "tools/torture/stratad_process.h"

namespace {

using namespace strata::torture;
using clock_type = std::chrono::steady_clock;

volatile sig_atomic_t interrupted = 0;

constexpr std::uint64_t area_blocks = 8192;  // 32 MiB: 8 of the pool's 4 MiB extents
constexpr int lun = 0;                       // the small shelf's v1 (1 GiB)
constexpr std::uint32_t max_write_blocks = 16;
constexpr std::uint32_t verify_read_blocks = 64;

constexpr const char* tool = "strata-torture";

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// One SCSI command in flight, and what came back.
struct command {
  enum class kind { write, read, flush };
  explicit command(kind k, std::uint64_t first_lba = 0, std::uint32_t blocks = 0)
      : what(k), lba(first_lba), block_count(blocks) {}
  kind what;
  std::uint64_t lba = 0;
  std::uint32_t block_count = 0;
  std::uint64_t seq = 0;        // write
  bool fua = false;             // write
  std::size_t flush_index = 0;  // flush
  std::vector<std::byte> data;  // write: what it sends; read: what came back
  bool done = false;
  bool good = false;
  bool unit_attention = false;
};

// A libiscsi session to the LUN, driven with its asynchronous API.
class initiator {
 public:
  static std::unique_ptr<initiator> connect(const std::string& portal, const std::string& target,
                                            std::string& why) {
    std::unique_ptr<initiator> i(new initiator);
    i->ctx_ = iscsi_create_context("iqn.2026-11.io.strata:torture");
    if (i->ctx_ == nullptr) {
      why = "iscsi_create_context failed";
      return nullptr;
    }
    iscsi_set_targetname(i->ctx_, target.c_str());
    iscsi_set_session_type(i->ctx_, ISCSI_SESSION_NORMAL);
    iscsi_set_header_digest(i->ctx_, ISCSI_HEADER_DIGEST_NONE_CRC32C);
    iscsi_set_noautoreconnect(
        i->ctx_, 1);  // a lost session is the crash: nothing may be resent behind our back
    if (iscsi_full_connect_sync(i->ctx_, portal.c_str(), lun) != 0) {
      why = std::string("login to ") + portal + ": " + iscsi_get_error(i->ctx_);
      return nullptr;
    }
    // The unit attentions a new session after a restart starts with.
    for (int tries = 0; tries < 10; ++tries) {
      scsi_task* t = iscsi_testunitready_sync(i->ctx_, lun);
      const bool good = t != nullptr && t->status == SCSI_STATUS_GOOD;
      if (t != nullptr) scsi_free_scsi_task(t);
      if (good) break;
    }
    scsi_task* t = iscsi_readcapacity16_sync(i->ctx_, lun);
    if (t == nullptr || t->status != SCSI_STATUS_GOOD) {
      why = std::string("READ CAPACITY(16): ") + iscsi_get_error(i->ctx_);
      if (t != nullptr) scsi_free_scsi_task(t);
      return nullptr;
    }
    const auto* capacity = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(t));
    // The torture's blocks are 4 KiB; a 512e LUN (the default) has 8
    // logical blocks in each.
    const std::uint32_t lun_block_bytes = capacity != nullptr ? capacity->block_length : 0;
    const bool fits = (lun_block_bytes == 512 || lun_block_bytes == block_bytes) &&
                      (capacity->returned_lba + 1) * lun_block_bytes >= area_blocks * block_bytes;
    scsi_free_scsi_task(t);
    if (!fits) {
      why = "LUN 0 has neither 512- nor 4096-byte blocks, or is smaller than the torture's area";
      return nullptr;
    }
    i->lun_block_bytes_ = lun_block_bytes;
    return i;
  }
  ~initiator() {
    dead_ = true;  // completions reported from here on (cancelled) are no acknowledgements
    if (ctx_ != nullptr) iscsi_destroy_context(ctx_);
  }

  bool send(command& c) {
    scsi_task* t = nullptr;
    switch (c.what) {
      case command::kind::write:
        t = iscsi_write16_task(
            ctx_, lun, lun_lba(c.lba), reinterpret_cast<unsigned char*>(c.data.data()),
            static_cast<std::uint32_t>(c.data.size()), static_cast<int>(lun_block_bytes_), 0, 0,
            c.fua ? 1 : 0, 0, 0, on_done, this);
        break;
      case command::kind::read:
        t = iscsi_read16_task(ctx_, lun, lun_lba(c.lba), c.block_count * block_bytes,
                              static_cast<int>(lun_block_bytes_), 0, 0, 0, 0, 0, on_done, this);
        break;
      case command::kind::flush:
        t = iscsi_synchronizecache10_task(ctx_, lun, 0, 0, 0, 0, on_done, this);
        break;
    }
    if (t == nullptr) return false;
    scsi_set_task_private_ptr(t, &c);
    return true;
  }
  // Waits up to `timeout_ms` for the socket and handles what came. False
  // once the session is lost.
  bool pump(int timeout_ms) {
    pollfd p{iscsi_get_fd(ctx_), static_cast<short>(iscsi_which_events(ctx_)), 0};
    const int n = ::poll(&p, 1, timeout_ms);
    if (n < 0) return errno == EINTR;
    return iscsi_service(ctx_, n == 0 ? 0 : p.revents) == 0;
  }
  // Runs `c` alone until it completes; false if the session is lost.
  bool run(command& c) {
    if (!send(c)) return false;
    while (!c.done) {
      if (!pump(1000)) return false;
    }
    return true;
  }

 private:
  initiator() = default;
  static void on_done(iscsi_context*, int status, void* command_data, void* private_data) {
    auto* self = static_cast<initiator*>(private_data);
    auto* t = static_cast<scsi_task*>(command_data);
    auto* c = static_cast<command*>(scsi_get_task_private_ptr(t));
    if (c != nullptr && !self->dead_) {
      c->good = status == SCSI_STATUS_GOOD;
      c->unit_attention =
          status == SCSI_STATUS_CHECK_CONDITION && t->sense.key == SCSI_SENSE_UNIT_ATTENTION;
      if (c->good && c->what == command::kind::read) {
        const auto* from = reinterpret_cast<const std::byte*>(t->datain.data);
        c->data.assign(from, from + std::min<std::size_t>(
                                        static_cast<std::size_t>(std::max(t->datain.size, 0)),
                                        c->block_count * block_bytes));
        if (c->data.size() != c->block_count * block_bytes) c->good = false;
      }
      c->done = true;
    }
    scsi_free_scsi_task(t);
  }
  iscsi_context* ctx_ = nullptr;
  std::uint32_t lun_block_bytes_ = block_bytes;  // the LUN's logical block: 512 (512e) or 4096
  // The LUN address of torture block `block` (4 KiB).
  std::uint64_t lun_lba(std::uint64_t block) const noexcept {
    return block * (block_bytes / lun_block_bytes_);
  }
  bool dead_ = false;
};

enum class scenario { plain, resync, migration, rebuild, cache_fill };
const char* name_of(scenario s) {
  switch (s) {
    case scenario::plain:
      return "plain";
    case scenario::resync:
      return "resync";
    case scenario::migration:
      return "migration";
    case scenario::rebuild:
      return "rebuild";
    case scenario::cache_fill:
      return "cache-fill";
  }
  return "?";
}

struct totals {
  std::uint64_t rounds = 0;
  std::uint64_t writes_sent = 0;
  std::uint64_t writes_acknowledged = 0;
  std::uint64_t writes_durable = 0;
  std::uint64_t writes_verified = 0;
  std::uint64_t writes_lost = 0;
  std::uint64_t garbage_blocks = 0;
  std::uint64_t reads_checked = 0;
  std::uint64_t command_errors = 0;
};

struct settings {
  std::filesystem::path stratad, cli, work_dir;
  std::uint64_t rounds = 20;
  std::uint64_t seed = 0;
  bool keep = false;
  bool raid6_rebuilds = false;
  bool takeover = false;    // two controllers, kills of the owner and takeovers
  bool freeze = false;      // two controllers, the owner frozen and thawed (implies takeover)
  bool seed_given = false;  // else the seed is random, and printed for a replay
};

settings parse(int argc, char** argv) {
  settings s;
  s.seed = std::random_device{}();
  CLI::App app{
      "The daemon-level crash torture: stratad with volatile drive caches, writers and flushes "
      "over "
      "iSCSI, kill -9 at random moments, every block checked after each restart. Exit status: 0 no "
      "write lost and no garbage; 1 a loss, garbage, or a stratad that crashed or did not come "
      "back; "
      "2 usage.",
      tool};
  strata::tools::use_conventions(app);
  app.add_option("--stratad", s.stratad, "The stratad to torture")->type_name("PATH")->required();
  app.add_option("--cli", s.cli, "The strata CLI, to drive it")->type_name("PATH")->required();
  auto* rounds = app.add_option("--rounds", s.rounds,
                                "Rounds: each a kill -9 and a restart, then a full check")
                     ->type_name("N")
                     ->check(strata::tools::positive);
  auto* bench = app.add_flag("--bench")->description(
      "1,000 rounds (the benchmark; the later of --rounds and --bench wins)");
  app.add_option("--seed", s.seed,
                 "Seed of every random choice, to replay a run (the seed used is printed)")
      ->type_name("S")
      ->default_str("random");
  app.add_option("--work-dir", s.work_dir,
                 "Where the state and logs go (default: a new /var/tmp/strata-torture.XXXXXX)")
      ->type_name("DIR");
  app.add_flag("--keep", s.keep, "Keep the work directory at the end");
  app.add_flag("--raid6-rebuilds", s.raid6_rebuilds,
               "Rebuild rounds fail RAID-6 members too, not only the SSDs'");
  app.add_flag("--takeover", s.takeover,
               "Two controllers over one shelf: the owner killed and its pool taken over, or the "
               "partner killed "
               "under forwarded writes");
  app.add_flag(
      "--freeze", s.freeze,
      "Two controllers (as --takeover): the owner frozen (SIGSTOP) under a write load with "
      "destage and a volume move running, its pool taken over and written through the "
      "partner, then thawed; every acknowledged write checked, and at the end every "
      "RAID-6 group scrubbed, repairing nothing");
  strata::tools::parse_or_exit(app, argc, argv);
  if (s.freeze) s.takeover = true;
  s.seed_given = app.count("--seed") > 0;
  const auto& order = app.parse_order();
  const auto last = std::find_if(order.rbegin(), order.rend(),
                                 [&](const CLI::Option* o) { return o == rounds || o == bench; });
  if (last != order.rend() && *last == bench) s.rounds = 1000;
  return s;
}

class torture {
 public:
  // `partner`: controller b, with `d` controller a (--takeover).
  torture(const settings& s, stratad_process& d, stratad_process* partner = nullptr)
      : s_(s), daemon_(d), partner_(partner), random_(s.seed), base_(area_blocks, 0) {}

  // False on a loss, garbage, or a daemon that failed.
  bool run(totals& t) {
    std::string why;
    if (!daemon_.start(std::chrono::seconds(180), why)) return fail("the first start: " + why);
    if (partner_ != nullptr && !partner_->start(std::chrono::seconds(180), why))
      return fail("the first start of b: " + why);
    for (std::uint64_t round = 1; round <= s_.rounds && !interrupted; ++round) {
      if (!one_round(round, t)) return false;
    }
    if (s_.freeze && !interrupted && !scrub_all()) return false;
    if (s_.freeze && partner_ != nullptr) {
      std::printf(
          "strata-torture: %llu of %llu rounds froze the owner under writes, had b take the pool "
          "over and write, and thawed it\n",
          static_cast<unsigned long long>(takeovers_), static_cast<unsigned long long>(t.rounds));
      if (!partner_->stop(why)) return fail("the last stop of b: " + why);
    } else if (partner_ != nullptr) {
      std::printf(
          "strata-torture: %llu of %llu rounds killed the owner and had b take the pool over; %llu "
          "cut a planned move short "
          "(in %llu the survivor refused p1 until the killed one restarted: its copy behind, or "
          "its configuration)\n",
          static_cast<unsigned long long>(takeovers_), static_cast<unsigned long long>(t.rounds),
          static_cast<unsigned long long>(moves_cut_),
          static_cast<unsigned long long>(moves_refused_));
      if (!partner_->stop(why)) return fail("the last stop of b: " + why);
    }
    if (!daemon_.stop(why)) return fail("the last stop: " + why);
    return true;
  }

 private:
  bool fail(const std::string& what) {
    std::printf("FAIL: %s\n", what.c_str());
    std::fflush(stdout);
    return false;
  }
  std::uint64_t uniform(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(random_);
  }
  double uniform_real(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(random_);
  }

  // Background work to be under way at the kill; returns what it set off.
  std::string set_off(scenario& sc) {
    std::string out;
    switch (sc) {
      case scenario::migration: {
        const char* to = moves_++ % 2 == 0 ? "capacity" : "performance";
        const int rc = daemon_.cli({"volume", "move", "v1", "--to", to}, out);
        return rc == 0 ? std::string("volume move --to ") + to
                       : std::string("volume move refused: ") + first_line(out);
      }
      case scenario::cache_fill: {
        // Random reads fill the cache from the capacity tier only.
        const int rc = daemon_.cli({"volume", "move", "v1", "--to", "capacity"}, out);
        return rc == 0 ? "volume move --to capacity" : "";
      }
      case scenario::rebuild: {
        if (daemon_.cli({"disk", "list"}, out) != 0 ||
            out.find("REBUILDING") != std::string::npos ||
            out.find("FAILED") != std::string::npos) {
          sc = scenario::plain;
          return "no rebuild: one is under way or a disk is failed";
        }
        // A RAID-1 SSD member by default, of the performance tier (ssd-00,
        // ssd-01) or of the write log (ssd-03, ssd-04: the cache writes
        // through and drains while it rebuilds): a crash of a degraded
        // RAID-6 group tears stripes whose lost strip no parity can restore
        // (the degraded write hole, docs/raid-write-hole.md, open until the
        // journal).
        const bool raid6 = s_.raid6_rebuilds && uniform(0, 1) == 0;
        constexpr int raid1_ssds[] = {0, 1, 3, 4};
        const std::string disk = raid6 ? "hdd-0" + std::to_string(uniform(0, 9))
                                       : "ssd-0" + std::to_string(raid1_ssds[uniform(0, 3)]);
        std::string ignored;
        if (daemon_.cli({"disk", "fail", disk}, out) != 0)
          return "disk fail " + disk + " refused: " + first_line(out);
        if (daemon_.cli({"disk", "replace", disk, "--with", disk}, ignored) != 0)
          return "disk replace " + disk + " refused: " + first_line(ignored);
        return "rebuilding " + disk + " in place";
      }
      default:
        return "";
    }
  }
  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

  // A failed member (a rebuild a crash cut short comes back as one) is rebuilt in place.
  std::string repair() {
    std::string out;
    if (daemon_.cli({"disk", "list"}, out) != 0) return "disk list failed: " + first_line(out);
    std::string done;
    std::size_t at = 0;
    while ((at = out.find("FAILED", at)) != std::string::npos) {
      const std::size_t line = out.rfind('\n', at) + 1;
      const std::string disk = out.substr(line, out.find(' ', line) - line);
      std::string ignored;
      if (daemon_.cli({"disk", "replace", disk, "--with", disk}, ignored) == 0)
        done += " rebuild " + disk;
      at = out.find('\n', at);
      if (at == std::string::npos) break;
    }
    return done;
  }

  // What a round's workload did before the kill.
  struct workload_result {
    double killed_at_s = 0;
    std::uint64_t reads_checked = 0, errors = 0, bad_reads = 0;
    std::vector<std::string> bad_read_lines;
    bool session_lost = false;
  };

  // Overlapping writers, readers and flushes over `session` in a random
  // hot window, for `kill_after_s`; `model` records what was sent and
  // acknowledged, and reads are checked as they come.
  // With `drain`, it then waits for every command sent, and ends with a
  // flush that completes (what was acknowledged is durable: the model
  // checks all of it).
  workload_result run_workload(initiator& session, round_model& model, double kill_after_s,
                               std::uint32_t writers, std::uint32_t readers, bool drain = false) {
    // The round's hot window: overlapping writes land in it.
    const std::uint64_t window_blocks = uniform(16, 2048);
    const std::uint64_t window_lba = uniform(0, area_blocks - window_blocks);
    workload_result r;
    std::vector<std::unique_ptr<command>> in_flight;
    std::uint32_t writes_out = 0, reads_out = 0, flushes_out = 0;
    auto send = [&](std::unique_ptr<command> c) {
      if (!session.send(*c)) return false;
      in_flight.push_back(std::move(c));
      return true;
    };
    const auto workload_start = clock_type::now();
    bool draining = false, flushed = false;
    while (!interrupted) {
      if (seconds_since(workload_start) >= kill_after_s) {
        if (!drain) break;
        draining = true;
      }
      if (draining && in_flight.empty()) {
        if (flushed) break;
        // After every write: it covers them all.
        auto c = std::make_unique<command>(command::kind::flush);
        c->flush_index = model.flush_sent();
        if (!send(std::move(c))) break;
        flushed = true;
      }
      while (!draining && writes_out < writers) {
        const auto blocks = static_cast<std::uint32_t>(
            uniform(1, 8) == 1 ? uniform(1, max_write_blocks) : uniform(1, 4));
        const std::uint64_t lba =
            window_lba + uniform(0, window_blocks - std::min<std::uint64_t>(blocks, window_blocks));
        const std::uint32_t count =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(blocks, window_blocks));
        auto c = std::make_unique<command>(command::kind::write, lba, count);
        c->seq = model.next_seq();
        c->fua = uniform(0, 15) == 0;  // durable once acknowledged
        c->data.resize(std::size_t{count} * block_bytes);
        for (std::uint32_t i = 0; i < count; ++i)
          fill_block({c->data.data() + std::size_t{i} * block_bytes, block_bytes}, c->seq, lba + i);
        model.write_sent(lba, count, c->fua);
        if (!send(std::move(c))) break;
        ++writes_out;
      }
      while (!draining && reads_out < readers) {
        const auto count = static_cast<std::uint32_t>(uniform(1, 16));
        const bool in_window = uniform(0, 3) != 0;
        const std::uint64_t lba =
            in_window ? window_lba + uniform(0, window_blocks -
                                                    std::min<std::uint64_t>(count, window_blocks))
                      : uniform(0, area_blocks - count);
        auto c = std::make_unique<command>(
            command::kind::read, lba,
            in_window ? std::min<std::uint32_t>(count, static_cast<std::uint32_t>(window_blocks))
                      : count);
        if (!send(std::move(c))) break;
        ++reads_out;
      }
      if (!draining && flushes_out < 2 && uniform(0, 5) == 0) {
        auto c = std::make_unique<command>(command::kind::flush);
        c->flush_index = model.flush_sent();
        if (send(std::move(c))) ++flushes_out;
      }
      if (!session.pump(2)) {
        r.session_lost = true;
        break;
      }
      for (auto& c : in_flight) {
        if (!c || !c->done) continue;
        if (!c->good) ++r.errors;
        switch (c->what) {
          case command::kind::write:
            model.write_done(c->seq, c->good);
            --writes_out;
            break;
          case command::kind::flush:
            model.flush_done(c->flush_index, c->good);
            --flushes_out;
            break;
          case command::kind::read:
            --reads_out;
            if (!c->good) break;
            for (std::uint32_t i = 0; i < c->block_count; ++i) {
              const std::uint64_t lba = c->lba + i;
              const auto value =
                  decode_block({c->data.data() + std::size_t{i} * block_bytes, block_bytes}, lba);
              ++r.reads_checked;
              if (!value || !model.plausible(lba, *value)) {
                ++r.bad_reads;
                if (r.bad_read_lines.size() < 10) {
                  const std::span<const std::byte> block{
                      c->data.data() + std::size_t{i} * block_bytes, block_bytes};
                  r.bad_read_lines.push_back("a read during the round found " +
                                             (value ? "write " + std::to_string(*value)
                                                    : "garbage (" + describe_block(block) + ")") +
                                             " at block " + std::to_string(lba));
                }
              }
            }
            break;
        }
        c.reset();
      }
      std::erase_if(in_flight, [](const auto& c) { return !c; });
    }
    r.killed_at_s = seconds_since(workload_start);
    return r;
  }

  // The crash: kill -9 of `victim` after the workload `w` over `session`
  // (closed here). Whatever was not acknowledged by now never was. False
  // if the victim had died by itself, or the session before the kill.
  bool crash(std::uint64_t round, stratad_process& victim, std::unique_ptr<initiator>& session,
             const round_model& model, const workload_result& w) {
    std::string why;
    const bool died_by_itself = !victim.kill_hard(why);
    session.reset();
    next_seq_ = model.next_seq();
    if (died_by_itself) return fail("round " + std::to_string(round) + ": " + why);
    if (w.session_lost)
      return fail("round " + std::to_string(round) +
                  ": the iSCSI session was lost before the kill");
    return true;
  }

  // Logs in through `through`'s portal, reads the area back, checks it
  // against the model, counts and prints the round; false on garbage.
  bool verdict(std::uint64_t round, const std::string& what, stratad_process& through,
               round_model& model, const workload_result& w, double restart_s,
               clock_type::time_point round_start, const std::string& repaired, totals& t) {
    std::string why;
    // libiscsi's login ends with a TEST UNIT READY, and fails on NOT READY:
    // a pool a moment from being served here (ALUA transitioning, 04/0A)
    // is logged in to again, as a host retries that sense, for up to 30 s.
    std::unique_ptr<initiator> reader;
    for (int tries = 0; tries < 150 && !reader; ++tries) {
      if (tries > 0) {
        if (why.find("0x040a") == std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      reader = initiator::connect(through.portal(), daemon_.target_name(), why);
    }
    if (!reader)
      return fail("round " + std::to_string(round) + ": after the kill (" + what + "): " + why +
                  (partner_ != nullptr ? two_controllers_now() : ""));
    std::vector<std::optional<block_value>> found(area_blocks);
    if (!read_area(*reader, found, why))
      return fail("round " + std::to_string(round) + ": reading back: " + why);
    const round_verdict v = model.verify(found);
    if (v.writes_lost > 0 || v.garbage_blocks > 0) {
      // Read once more, after a pause: blocks that read differently now
      // point at the read path (members that disagree, a cache), blocks
      // that read the same at what the drives hold.
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::vector<std::optional<block_value>> again(area_blocks);
      std::string ignored;
      if (read_area(*reader, again, ignored)) {
        std::uint64_t differ = 0;
        for (std::uint64_t b = 0; b < area_blocks; ++b) differ += again[b] != found[b] ? 1 : 0;
        std::printf("  read again 1 s later: %llu blocks read differently\n",
                    static_cast<unsigned long long>(differ));
      }
    }
    ++t.rounds;
    t.writes_sent += v.writes_sent;
    t.writes_acknowledged += v.writes_acknowledged;
    t.writes_durable += v.writes_durable;
    t.writes_verified += v.writes_verified;
    t.writes_lost += v.writes_lost;
    t.garbage_blocks += v.garbage_blocks + w.bad_reads;
    t.reads_checked += w.reads_checked;
    t.command_errors += w.errors;
    std::printf(
        "round %llu/%llu %s kill at %.2f s: writes %llu sent, %llu acked, %llu durable, %llu "
        "verified, %llu lost; "
        "%llu flushes; %llu acked-unflushed not found; %llu blocks read in flight; %llu errors; "
        "garbage %llu; restart %.1f s, round %.1f s\n",
        static_cast<unsigned long long>(round), static_cast<unsigned long long>(s_.rounds),
        what.c_str(), w.killed_at_s, static_cast<unsigned long long>(v.writes_sent),
        static_cast<unsigned long long>(v.writes_acknowledged),
        static_cast<unsigned long long>(v.writes_durable),
        static_cast<unsigned long long>(v.writes_verified),
        static_cast<unsigned long long>(v.writes_lost),
        static_cast<unsigned long long>(v.flushes_completed),
        static_cast<unsigned long long>(v.unflushed_not_found),
        static_cast<unsigned long long>(w.reads_checked), static_cast<unsigned long long>(w.errors),
        static_cast<unsigned long long>(v.garbage_blocks + w.bad_reads), restart_s,
        seconds_since(round_start));
    if (!repaired.empty()) std::printf("  at the round's start:%s\n", repaired.c_str());
    for (const std::string& p : v.problems) std::printf("  %s\n", p.c_str());
    for (const std::string& p : w.bad_read_lines) std::printf("  %s\n", p.c_str());
    std::fflush(stdout);
    if (v.garbage_blocks > 0 || w.bad_reads > 0)
      return fail("round " + std::to_string(round) + ": garbage read back (seed " +
                  std::to_string(s_.seed) + ")");
    // What the blocks hold now is the next round's start.
    for (std::uint64_t b = 0; b < area_blocks; ++b) base_[b] = *found[b];
    return true;
  }

  bool one_round(std::uint64_t round, totals& t) {
    if (partner_ != nullptr) return takeover_round(round, t);
    const auto round_start = clock_type::now();
    std::string why;
    auto session = initiator::connect(daemon_.portal(), daemon_.target_name(), why);
    if (!session) return fail("round " + std::to_string(round) + ": " + why);
    const std::string repaired = round > 1 ? repair() : "";

    scenario sc = static_cast<scenario>(uniform(0, 4));
    const std::string background = set_off(sc);
    double kill_after_s = 0;
    std::uint32_t writers = 8, readers = 2;
    switch (sc) {
      case scenario::resync:
        kill_after_s = uniform_real(0.0, 0.3);
        break;  // the restart's resync is still running
      case scenario::plain:
        kill_after_s = uniform_real(0.05, 1.5);
        break;
      case scenario::migration:
        kill_after_s = uniform_real(0.3, 3.0);
        break;
      case scenario::rebuild:
        kill_after_s = uniform_real(0.3, 3.0);
        break;
      case scenario::cache_fill:
        kill_after_s = uniform_real(0.3, 2.5);
        writers = 2;
        readers = 12;
        break;
    }
    round_model model(base_, next_seq_);
    const workload_result w = run_workload(*session, model, kill_after_s, writers, readers);
    if (!crash(round, daemon_, session, model, w)) return false;

    const auto restart_start = clock_type::now();
    if (!daemon_.start(std::chrono::seconds(180), why))
      return fail("round " + std::to_string(round) + ": the restart after the kill: " + why);
    const double restart_s = seconds_since(restart_start);
    char what[64];
    std::snprintf(what, sizeof what, "%-10s", name_of(sc));
    return verdict(round, std::string(what) + (background.empty() ? "" : " (" + background + ")"),
                   daemon_, model, w, restart_s, round_start, repaired, t);
  }

  // Two controllers (--takeover): a owns pool p1 (LUN 0) at the round's
  // start, both ACTIVE and b's copy of p1's metadata current. The writes
  // go through a's port (direct) or b's (forwarded to a); then kill -9 of
  // a (3 rounds in 4: b takes p1 over, replaying its write log, and the
  // area is read back through b) or of b (read back through a). The
  // killed controller starts again, and p1 fails back to a before the
  // next round.
  bool takeover_round(std::uint64_t round, totals& t) {
    const auto round_start = clock_type::now();
    std::string why;
    if (!settle(why)) return fail("round " + std::to_string(round) + ": " + why);
    if (s_.freeze) return freeze_round(round, t, round_start);
    if (uniform(0, 4) == 0) return move_round(round, t, round_start);
    stratad_process& a = daemon_;
    stratad_process& b = *partner_;
    const bool through_b = uniform(0, 1) == 0;
    const bool kill_owner = uniform(0, 3) != 0;
    auto session = initiator::connect((through_b ? b : a).portal(), a.target_name(), why);
    if (!session) return fail("round " + std::to_string(round) + ": " + why);
    round_model model(base_, next_seq_);
    const workload_result w = run_workload(*session, model, uniform_real(0.05, 1.5), 8, 2);
    stratad_process& survivor = kill_owner ? b : a;
    if (!crash(round, kill_owner ? a : b, session, model, w)) return false;
    const auto restart_start = clock_type::now();
    std::string outcome = kill_owner ? "kill a (owner)" : "kill b";
    stratad_process* read_through = &survivor;
    if (kill_owner) {
      // b takes p1 over once both of a's heartbeats are silent; the drives
      // may say its copy of p1's metadata is behind (a's mirror had not
      // caught up), and then p1 waits for a, which starts again first.
      if (serves(b, "b", 30)) {
        outcome += ", b took p1 over";
        ++takeovers_;
        if (uniform(0, 2) == 0) {
          // One round in three: a starts again, and b is killed in turn
          // while it hands p1 back (or before, or just after): whoever
          // holds p1 at the end must hold every durable write.
          if (!a.start(std::chrono::seconds(180), why))
            return fail("round " + std::to_string(round) + ": the restart of a: " + why);
          const double after_s = uniform_real(0.0, 4.0);
          std::this_thread::sleep_for(std::chrono::duration<double>(after_s));
          if (!b.kill_hard(why)) return fail("round " + std::to_string(round) + ": " + why);
          char at[96];
          std::snprintf(at, sizeof at, ", a restarted, b killed %.1f s later", after_s);
          outcome += at;
          if (serves(a, "a", 30)) {
            outcome += ", a serves p1";
          } else {
            // b died before a's copy was current: p1 waits for b.
            if (!b.start(std::chrono::seconds(180), why))
              return fail("round " + std::to_string(round) + ": the restart of b: " + why);
            outcome += ", b restarted first";
          }
          read_through = serves(a, "a", 30) ? &a : &b;
        }
      } else {
        outcome += ", b did not take p1 over (its copy was behind): a restarted first";
        if (!a.start(std::chrono::seconds(180), why))
          return fail("round " + std::to_string(round) + ": the restart of a: " + why);
        read_through = &a;
      }
    }
    const double restart_s = seconds_since(restart_start);
    const bool good =
        verdict(round, outcome + (through_b ? ", writes through b" : ", writes through a"),
                *read_through, model, w, restart_s, round_start, "", t);
    return restart_killed(round) && good;
  }

  // --freeze: a, the owner, frozen (SIGSTOP) under writes through its own
  // port, with destage and a volume move (migration) running, so that
  // whatever it had admitted waits in its queues; b takes p1 over, takes
  // writes of its own over the same window, drains them and flushes; then
  // a thaws (SIGCONT) with its queues as they were. A thawed owner that
  // wrote anything it held over b's acknowledged writes shows here as a
  // lost write or garbage (and in the scrub at the end as a repaired
  // stripe). a, stepped down, is stopped and started again; p1 fails back
  // before the next round.
  bool freeze_round(std::uint64_t round, totals& t, clock_type::time_point round_start) {
    stratad_process& a = daemon_;
    stratad_process& b = *partner_;
    std::string why;
    scenario sc = scenario::migration;
    const std::string background = set_off(sc);
    auto session = initiator::connect(a.portal(), a.target_name(), why);
    if (!session) return fail("round " + std::to_string(round) + ": " + why);
    round_model model(base_, next_seq_);
    const workload_result w = run_workload(*session, model, uniform_real(0.3, 2.0), 8, 2);
    if (!a.freeze()) return fail("round " + std::to_string(round) + ": a is not running");
    model.owner_cut();  // a's simulated drive caches are out of b's reach (model.h)
    const std::uint64_t first_through_b = model.next_seq();
    const auto frozen_at = clock_type::now();
    // a's session stays open: its commands wait inside the frozen a.
    if (!serves(b, "b", 30)) {
      a.thaw();
      return fail("round " + std::to_string(round) + ": b did not take p1 over from the frozen a" +
                  two_controllers_now());
    }
    const double took_s = seconds_since(frozen_at);
    ++takeovers_;
    auto through_b = initiator::connect(b.portal(), a.target_name(), why);
    if (!through_b) {
      a.thaw();
      return fail("round " + std::to_string(round) + ": a login through b: " + why);
    }
    const workload_result wb =
        run_workload(*through_b, model, uniform_real(0.3, 1.5), 8, 2, /*drain=*/true);
    if (wb.session_lost) {
      a.thaw();
      return fail("round " + std::to_string(round) + ": the session through b was lost");
    }
    a.thaw();
    // Time for whatever the thawed a held to reach the drives, if it could.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    session.reset();
    through_b.reset();
    next_seq_ = model.next_seq();
    workload_result both = wb;
    both.errors += w.errors;
    both.bad_reads += w.bad_reads;
    both.reads_checked += w.reads_checked;
    both.bad_read_lines.insert(both.bad_read_lines.end(), w.bad_read_lines.begin(),
                               w.bad_read_lines.end());
    both.killed_at_s = w.killed_at_s;
    char what[160];
    std::snprintf(what, sizeof what,
                  "freeze a (%s), b took p1 over in %.1f s and wrote (writes from %llu), a thawed",
                  background.c_str(), took_s, static_cast<unsigned long long>(first_through_b));
    const bool good = verdict(round, what, b, model, both, took_s, round_start, "", t);
    // a stepped down from p1: a restart makes it a partner again.
    if (!a.stop(why))
      return fail("round " + std::to_string(round) + ": the stop of the thawed a: " + why);
    return restart_killed(round) && good;
  }

  // Every RAID-6 group scrubbed through a (which serves p1 once settled):
  // false if a scrub repaired a stripe, found one it could not, or failed.
  bool scrub_all() {
    std::string why, list;
    if (!settle(why)) return fail("before the scrub: " + why);
    if (daemon_.cli({"group", "list"}, list) != 0) return fail("group list: " + first_line(list));
    std::size_t at = 0;
    int scrubbed = 0;
    while ((at = list.find("groups/", at)) != std::string::npos) {
      const std::size_t end = list.find_first_of(" \t\n", at);
      const std::string name = list.substr(at + 7, end - at - 7);
      const std::size_t line_end = list.find('\n', at);
      const std::string line = list.substr(at, line_end - at);
      at = end;
      if (line.find("RAID-6") == std::string::npos && line.find("RAID6") == std::string::npos &&
          line.find("raid6") == std::string::npos)
        continue;
      std::string out, events;
      const int rc = daemon_.cli({"group", "scrub", name, "--wait"}, out);
      // Its owner's event log says how it ended (b's groups are scrubbed there).
      std::string theirs;
      daemon_.cli({"events", "--limit", "50"}, events);
      partner_->cli({"events", "--limit", "50"}, theirs);
      events += "\n" + theirs;
      // The event log's newest line on the group's scrub (a table: the
      // subject and the message in their columns).
      std::size_t found = std::string::npos;
      for (std::size_t l = 0; l < events.size();) {
        const std::size_t e = std::min(events.find('\n', l), events.size());
        const std::string event = events.substr(l, e - l);
        if (event.find("groups/" + name + " ") != std::string::npos &&
            event.find("scrub finished: ") != std::string::npos) {
          found = l + event.find("scrub finished: ");
          break;
        }
        l = e + 1;
      }
      const std::string said = found == std::string::npos
                                   ? first_line(out)
                                   : events.substr(found, events.find('\n', found) - found);
      std::printf("scrub %s: %s\n", name.c_str(), said.c_str());
      std::fflush(stdout);
      if (rc != 0 || found == std::string::npos ||
          said.find(" checked, 0 repaired, 0 unrecoverable") == std::string::npos)
        return fail("the scrub of " + name + " repaired or refused something: " + said);
      ++scrubbed;
    }
    if (scrubbed == 0) return fail("no RAID-6 group to scrub in: " + first_line(list));
    return true;
  }

  // A planned move cut short (one takeover round in five): `strata pool
  // move p1 --to b` or `strata controller failover a` set off as the
  // writes start, and a or b killed within
  // 0.05 to 0.8 s, before, during or after the hand-over. Whoever serves
  // p1 then must hold every durable write; then p1 is moved back to a.
  bool move_round(std::uint64_t round, totals& t, clock_type::time_point round_start) {
    stratad_process& a = daemon_;
    stratad_process& b = *partner_;
    std::string why, out;
    const bool through_b = uniform(0, 1) == 0;
    auto session = initiator::connect((through_b ? b : a).portal(), a.target_name(), why);
    if (!session) return fail("round " + std::to_string(round) + ": " + why);
    round_model model(base_, next_seq_);
    // Half of them a planned failover of controller a (every pool a owns
    // moves to b, and a is marked failed over until failback).
    const bool failover = uniform(0, 1) == 0;
    const std::vector<std::string> move =
        failover ? std::vector<std::string>{"controller", "failover", "a"}
                 : std::vector<std::string>{"pool", "move", "p1", "--to", "b"};
    if (a.cli(move, out) != 0)
      return fail("round " + std::to_string(round) + ": " + move[0] + " " + move[1] +
                  " refused: " + first_line(out));
    const workload_result w = run_workload(*session, model, uniform_real(0.05, 0.8), 8, 2);
    const bool kill_a = uniform(0, 1) == 0;
    stratad_process& victim = kill_a ? a : b;
    stratad_process& other = kill_a ? b : a;
    const std::string other_name = kill_a ? "b" : "a";
    if (!crash(round, victim, session, model, w)) return false;
    const auto restart_start = clock_type::now();
    std::string outcome = std::string(failover ? "controller failover a" : "pool move p1 --to b") +
                          ", kill " + (kill_a ? "a" : "b");
    stratad_process* read_through = nullptr;
    if (serves(other, other_name, 30)) {
      read_through = &other;
      outcome += ", " + other_name + " serves p1";
    } else {
      // The survivor may refuse p1 for two reasons only, both of which
      // wait for the killed one: its copy is behind (the owner
      // acknowledged a write the copy lacks, and its drives say so), or
      // its configuration is older. Anything else (a hand-over whose
      // receiver died, leaving the giver with no copy it trusts) leaves a
      // pool unserved with a controller alive: a failure.
      const std::string refusal = takeover_refusal(other);
      if (refusal.find("copy of its metadata is behind") == std::string::npos &&
          refusal.find("configuration (generation") == std::string::npos) {
        return fail("round " + std::to_string(round) + ": " + outcome + ": " + other_name +
                    ", alive, does not serve p1 (" +
                    (refusal.empty() ? std::string("it gave no reason") : refusal) + ")" +
                    two_controllers_now());
      }
      ++moves_refused_;
      if (!victim.start(std::chrono::seconds(180), why))
        return fail("round " + std::to_string(round) + ": the restart: " + why);
      outcome +=
          ", " + other_name + " does not serve p1 (" + refusal + "): the killed one restarted";
      read_through = serves(a, "a", 30) ? &a : serves(b, "b", 30) ? &b : nullptr;
      if (read_through == nullptr) {
        return fail("round " + std::to_string(round) + ": " + outcome +
                    ": no controller serves p1 after the restart" + two_controllers_now());
      }
    }
    ++moves_cut_;
    const double restart_s = seconds_since(restart_start);
    const bool good =
        verdict(round, outcome + (through_b ? ", writes through b" : ", writes through a"),
                *read_through, model, w, restart_s, round_start, "", t);
    if (!restart_killed(round)) return false;
    // p1's home is b now (the move was recorded first), or a is failed
    // over (marked first): back to a.
    const std::vector<std::string> back =
        failover ? std::vector<std::string>{"controller", "failback", "a", "--wait"}
                 : std::vector<std::string>{"pool", "move", "p1", "--to", "a", "--wait"};
    for (int tries = 0; tries < 60; ++tries) {
      if (a.cli(back, out) == 0 && serves(a, "a", 10)) return good;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    return fail("round " + std::to_string(round) +
                ": p1 could not be moved back to a: " + first_line(out));
  }

  // Why `d` refused p1 in this round: the newest event about p1 in its log,
  // if that is a "not taken over" one (its message); "" if the newest
  // says anything else (an older round's refusal never counts).
  static std::string takeover_refusal(stratad_process& d) {
    std::string events;
    if (d.cli({"events", "--limit", "50"}, events) != 0) return "";
    std::istringstream lines(events);  // newest first: DATE TIME LEVEL RESOURCE MESSAGE
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string date, time, level, resource, message;
      fields >> date >> time >> level >> resource >> std::ws;
      std::getline(fields, message);
      if (resource != "pools/p1") continue;
      return message.starts_with("not taken over: ") ? message : "";
    }
    return "";
  }

  // For a failure's message: what each controller lists and its newest events.
  std::string two_controllers_now() {
    std::string out;
    for (stratad_process* d : {&daemon_, partner_}) {
      std::string list, events;
      d->cli({"controller", "list"}, list);
      d->cli({"events", "--limit", "25"}, events);
      out +=
          "\n--- " + d->name() + ": controller list\n" + list + "--- its newest events\n" + events;
    }
    return out;
  }

  // Both controllers running again: those killed in the round start again.
  bool restart_killed(std::uint64_t round) {
    std::string why;
    for (stratad_process* d : {&daemon_, partner_}) {
      if (!d->running() && !d->start(std::chrono::seconds(180), why)) {
        return fail("round " + std::to_string(round) +
                    ": the restart of a killed controller: " + why);
      }
    }
    return true;
  }

  // Whether `d` (controller `name`) serves pool p1 within `seconds`: it
  // lists p1 as its own, and LUN 0 answers a login through its portal.
  // (The list is its configuration's record of the owner, which a
  // hand-over changes only once the partner has answered: a controller
  // whose partner died during the hand-over lists p1 and forwards it to
  // the dead one, NOT READY until that one starts again.)
  bool serves(stratad_process& d, const std::string& name, int seconds) {
    const std::string mine = "\"name\":\"controllers/" + name + "\"";
    for (int i = 0;; ++i) {
      std::string out, why;
      if (d.cli({"--json", "controller", "list"}, out) == 0) {
        const auto at = out.find(mine);
        const auto end = at == std::string::npos ? at : out.find('}', at);
        if (at != std::string::npos &&
            out.substr(at, end - at).find("\"pools/p1\"") != std::string::npos &&
            initiator::connect(d.portal(), daemon_.target_name(), why) != nullptr) {
          return true;
        }
      }
      if (i >= seconds * 10 || interrupted) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // Two controllers: until a serves p1, both are ACTIVE, and a's drives
  // say b's copy of p1's metadata is current (a's event log's newest word
  // on it), so that a kill of a is a takeover.
  bool settle(std::string& why) {
    const auto until = clock_type::now() + std::chrono::seconds(90);
    while (clock_type::now() < until && !interrupted) {
      std::string list, events;
      const bool listed = daemon_.cli({"--json", "controller", "list"}, list) == 0;
      const bool both_active =
          listed && list.find("\"state\":\"CONTROLLER_ACTIVE\"") != std::string::npos &&
          list.find("\"state\":\"CONTROLLER_ACTIVE\"",
                    list.find("\"state\":\"CONTROLLER_ACTIVE\"") + 1) != std::string::npos;
      if (both_active && serves(daemon_, "a", 0) &&
          daemon_.cli({"events", "--limit", "200"}, events) == 0) {
        // Newest first: the first word on b's copy is the one that holds.
        const auto current = events.find("controller b holds a current copy of its metadata");
        const auto behind = events.find("controller b's copy of its metadata is behind");
        if (current != std::string::npos && (behind == std::string::npos || current < behind))
          return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    why =
        "the two controllers did not settle (a serving p1, both ACTIVE, b's copy current) in 90 s";
    return false;
  }

  // Every block of the area, a few reads in flight; a read that fails is
  // retried (unit attentions, a resync's first moments).
  bool read_area(initiator& session, std::vector<std::optional<block_value>>& found,
                 std::string& why) {
    for (std::uint64_t lba = 0; lba < area_blocks; lba += verify_read_blocks) {
      command c(command::kind::read, lba, verify_read_blocks);
      bool good = false;
      for (int tries = 0; tries < 20 && !good; ++tries) {
        // A moment between tries: a pool being handed over answers NOT READY for a while.
        if (tries > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        c.done = c.good = false;
        if (!session.run(c)) {
          why = "the session was lost";
          return false;
        }
        good = c.good;
      }
      if (!good) {
        why = "READ(16) of blocks " + std::to_string(lba) + "+" +
              std::to_string(verify_read_blocks) + " failed 20 times";
        return false;
      }
      for (std::uint32_t i = 0; i < verify_read_blocks; ++i) {
        const std::span<const std::byte> block{c.data.data() + std::size_t{i} * block_bytes,
                                               block_bytes};
        found[lba + i] = decode_block(block, lba + i);
        if (!found[lba + i])
          std::printf("  block %llu as read back: %s\n", static_cast<unsigned long long>(lba + i),
                      describe_block(block).c_str());
      }
    }
    return true;
  }

  const settings& s_;
  stratad_process& daemon_;
  stratad_process* const partner_;
  std::uint64_t takeovers_ = 0;
  std::uint64_t moves_cut_ = 0;
  std::uint64_t moves_refused_ = 0;  // of those, the survivor refused p1 (why: takeover_refusal)
  std::mt19937_64 random_;
  std::vector<block_value> base_;
  std::uint64_t next_seq_ = 1;
  std::uint64_t moves_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  settings s = parse(argc, argv);
  struct sigaction on_signal {};
  on_signal.sa_handler = [](int) { interrupted = 1; };
  sigaction(SIGINT, &on_signal, nullptr);
  sigaction(SIGTERM, &on_signal, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::error_code ec;
  bool made_work_dir = false;
  if (s.work_dir.empty()) {
    char pattern[] = "/var/tmp/strata-torture.XXXXXX";
    if (::mkdtemp(pattern) == nullptr)
      strata::tools::usage_error(
          tool, std::string("cannot make a work directory: ") + std::strerror(errno));
    s.work_dir = pattern;
    made_work_dir = true;
  }
  const std::filesystem::path state = s.work_dir / "state";
  std::filesystem::remove_all(state, ec);
  std::filesystem::create_directories(state, ec);
  std::printf("strata-torture: seed %llu%s, %llu rounds, work directory %s\n",
              static_cast<unsigned long long>(s.seed), s.seed_given ? "" : " (replay with --seed)",
              static_cast<unsigned long long>(s.rounds), s.work_dir.c_str());
  std::fflush(stdout);

  std::mt19937_64 ports(s.seed ^ static_cast<std::uint64_t>(::getpid()));
  // Below Linux's ephemeral ports (32768 and up): an outgoing connection
  // of another process could hold one of those when stratad restarts on it.
  const int iscsi_port =
      20000 + static_cast<int>(ports() % 12000);  // the API on the port two above
  totals t;
  bool ok = false;
  if (s.takeover) {
    // Controller a on 127.0.0.1, b on 127.0.0.2 (iSCSI P, the API P+2),
    // over one shelf; the partner link on b's P+5.
    const std::string link = "127.0.0.2:" + std::to_string(iscsi_port + 5);
    const std::filesystem::path shelf = state / "shelf";
    stratad_process a({s.stratad, s.cli, state / "a", s.work_dir}, iscsi_port, iscsi_port + 2,
                      {"127.0.0.1",
                       {"--small-shelf", "--shelf", shelf.string(), "--partner-link", link},
                       "stratad-a"});
    stratad_process b({s.stratad, s.cli, state / "b", s.work_dir}, iscsi_port, iscsi_port + 2,
                      {"127.0.0.2",
                       {"--controller", "b", "--shelf", shelf.string(), "--partner-link", link},
                       "stratad-b"});
    torture run(s, a, &b);
    ok = run.run(t);
  } else {
    stratad_process d({s.stratad, s.cli, state, s.work_dir}, iscsi_port, iscsi_port + 2);
    torture run(s, d);
    ok = run.run(t);
  }  // any stratad still running is killed here
  if (interrupted) ok = false;
  std::printf(
      "strata-torture: %llu rounds, %llu writes sent, %llu acknowledged, %llu durable, %llu writes "
      "verified, %llu writes lost, "
      "%llu garbage blocks, %llu blocks read in flight checked, %llu command errors (seed "
      "%llu)%s\n",
      static_cast<unsigned long long>(t.rounds), static_cast<unsigned long long>(t.writes_sent),
      static_cast<unsigned long long>(t.writes_acknowledged),
      static_cast<unsigned long long>(t.writes_durable),
      static_cast<unsigned long long>(t.writes_verified),
      static_cast<unsigned long long>(t.writes_lost),
      static_cast<unsigned long long>(t.garbage_blocks),
      static_cast<unsigned long long>(t.reads_checked),
      static_cast<unsigned long long>(t.command_errors), static_cast<unsigned long long>(s.seed),
      interrupted ? " (interrupted)" : "");
  ok = ok && t.writes_lost == 0 && t.garbage_blocks == 0;
  if (s.keep) {
    std::printf("strata-torture: kept %s\n", s.work_dir.c_str());
  } else {
    std::filesystem::remove_all(made_work_dir ? s.work_dir : state, ec);
  }
  std::printf("%s\n", ok ? "strata-torture: passed" : "strata-torture: FAILED");
  return ok ? 0 : 1;
}
