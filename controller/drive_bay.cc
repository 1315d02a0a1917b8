#include "controller/drive_bay.h"

#include <algorithm>
#include <boost/asio/post.hpp>

#include "raid/superblock_io.h"
#include "strata/v1/resources.pb.h"

namespace strata::controller {

namespace {

constexpr auto progress_interval = std::chrono::seconds(1);
// Records "rebuild-resume/groups/g1" → "disks/hdd-03": rebuilds to start
// again at the next start.
constexpr std::string_view resume_prefix = "rebuild-resume/";

std::unexpected<error> refuse(errc code, std::string why) {
  return std::unexpected(make_error(code, std::move(why)));
}

std::string member_text(unsigned member) {
  return "member " + std::to_string(member);
}

constexpr const char* partner_took_text =
    "was taken by the partner controller as a hot spare for one of its groups: only it may use it";

}  // namespace

drive_bay::drive_bay(boost::asio::any_io_executor loop, device::clock& clock, shelf& drives,
                     const std::vector<std::unique_ptr<disk_group>>& groups,
                     const std::vector<std::string>& group_names, config_store& config,
                     event_log& events, operation_log& operations)
    : loop_(std::move(loop)),
      clock_(clock),
      shelf_(drives),
      groups_(groups),
      group_names_(group_names),
      config_(config),
      events_(events),
      operations_(operations),
      progress_timer_(loop_) {}

drive_bay::~drive_bay() {
  *alive_ = false;
}

void drive_bay::start(std::function<void()> done) {
  raid::hot_spare_options options;
  options.clock = &clock_;
  options.on_event = [this](const raid::spare_event& e) { on_spare_event(e); };
  if (claim_) {
    options.claim = [this](device::block_device& spare,
                           std::function<void(raid::spare_claim)> answer) {
      const auto drive = drive_of(&spare);
      if (!drive) return answer(raid::spare_claim::granted);
      claim_(disk_name(*drive), std::move(answer));
    };
  }
  spare_pool_ = std::make_unique<raid::hot_spares>(loop_, options);
  for (std::size_t i = 0; i < shelf_.size(); ++i)
    disk_names_.push_back("disks/" + shelf_.spec(i).name);
  used_.assign(shelf_.size(), false);
  // Drives outside every group: blank, or members a replacement left
  // behind (their superblock still names the group). Read them all, then
  // hand out the recorded spares that are blank.
  std::vector<std::size_t> outside;
  for (std::size_t i = 0; i < shelf_.size(); ++i) {
    if (membership(i)) {
      used_[i] = true;  // should it leave its group, it keeps the superblock
    } else {
      outside.push_back(i);
    }
  }
  auto left = std::make_shared<std::size_t>(outside.size());
  auto finish = [this, done = std::move(done)] {
    for (std::size_t i = 0; i < shelf_.size(); ++i) {
      v1::Disk record;
      const auto bytes = config_.get(disk_name(i));
      if (!bytes || !record.ParseFromString(*bytes) || !record.spare() || membership(i)) continue;
      if (used_[i]) {
        events_.record(
            severity::warning, disk_name(i),
            "recorded as a hot spare, but it holds a group's superblock: not used as one");
        continue;
      }
      spare_pool_->add(shelf_.drive(i));
    }
    resume_rebuilds();
    for (const auto& g : groups_) {
      if (g->kind() != group_kind::read_cache) spare_pool_->watch(g->replacement());
    }
    done();
  };
  if (outside.empty()) return boost::asio::post(loop_, finish);
  for (const std::size_t i : outside) {
    raid::read_superblock(
        shelf_.drive(i),
        [this, i, left, finish](std::expected<raid::superblock, std::error_code> sb) {
          used_[i] = sb.has_value();
          if (--*left == 0) finish();
        });
  }
}

void drive_bay::resume_rebuilds() {
  config_batch done;
  for (const auto& [key, disk] : config_.list(resume_prefix)) {
    const auto group = group_named(key.substr(resume_prefix.size()));
    const auto drive = drive_named(disk);
    const auto at = drive ? membership(*drive) : std::nullopt;
    if (!group || !at || at->first != *group || !groups_[*group]->member_failed(at->second)) {
      done.erase(key);  // nothing to resume any more
      continue;
    }
    auto started = replace(disk, disk, "resumed: the last stop cut it short");
    if (!started && started.error().code == make_error_code(errc::busy) &&
        groups_[*group]->rebuild_status().running == false &&
        started.error().message.find("resync") != std::string::npos) {
      // A resync after an unclean stop runs first: the record stays for the next start.
      events_.record(severity::warning, key.substr(resume_prefix.size()),
                     "the rebuild onto " + disk + " waits: " + started.error().message +
                         "; it resumes at the next start, or by command");
      continue;
    }
    done.erase(key);
    if (!started) {
      events_.record(severity::error, key.substr(resume_prefix.size()),
                     "the rebuild onto " + disk +
                         " a stop cut short did not start again: " + started.error().message);
    }
  }
  if (auto written = config_.commit(done); !written) {
    events_.record(severity::error, "",
                   "the rebuilds to resume were not cleared: " + written.error().message);
  }
}

void drive_bay::stop() {
  // A rebuild a stop cuts short starts again in place at the next start:
  // its new member is failed out partly rebuilt, and nothing else would
  // take it back. (A shutdown call: the loop waits for this commit.)
  config_batch resume;
  for (const rebuild& r : rebuilds_)
    resume.put(std::string(resume_prefix) + group_names_[r.group], disk_name(r.drive));
  if (auto written = config_.commit(resume); !written) {
    events_.record(severity::error, "",
                   "the rebuilds to resume were not recorded: " + written.error().message);
  }
  stopped_ = true;
  for (const auto& g : groups_) spare_pool_->forget(g->replacement());
  for (const rebuild& r : rebuilds_) groups_[r.group]->cancel_rebuild();
  for (const scrub_run& s : scrubs_) groups_[s.group]->cancel_scrub();
  progress_timer_.cancel();
}

bool drive_bay::idle() const noexcept {
  return rebuilds_.empty() && scrubs_.empty();
}

std::optional<std::size_t> drive_bay::drive_named(const std::string& name) const {
  const auto it = std::ranges::find(disk_names_, name);
  if (it == disk_names_.end()) return std::nullopt;
  return static_cast<std::size_t>(it - disk_names_.begin());
}

std::optional<std::size_t> drive_bay::group_named(const std::string& name) const {
  const auto it = std::ranges::find(group_names_, name);
  if (it == group_names_.end()) return std::nullopt;
  return static_cast<std::size_t>(it - group_names_.begin());
}

std::optional<std::size_t> drive_bay::drive_of(const device::block_device* d) const {
  for (std::size_t i = 0; i < shelf_.size(); ++i) {
    if (&shelf_.drive(i) == d) return i;
  }
  return std::nullopt;  // a stand-in for a member missing at assembly
}

std::optional<std::pair<std::size_t, unsigned>> drive_bay::membership(std::size_t drive) const {
  const device::block_device* d = &shelf_.drive(drive);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (unsigned m = 0; m < groups_[g]->member_count(); ++m) {
      if (groups_[g]->member_device(m) == d) return std::pair{g, m};
    }
  }
  return std::nullopt;
}

bool drive_bay::is_spare(std::size_t drive) const {
  return spare_pool_->holds(shelf_.drive(drive));
}

void drive_bay::drive_added(std::size_t drive) {
  disk_names_.resize(shelf_.size());
  disk_names_[drive] = "disks/" + shelf_.spec(drive).name;
  used_.resize(shelf_.size(), false);
  // A file left from before may hold a group's superblock.
  raid::read_superblock(
      shelf_.drive(drive),
      [this, alive = alive_, drive](std::expected<raid::superblock, std::error_code> sb) {
        if (*alive) used_[drive] = sb.has_value();
      });
}

std::expected<std::vector<device::block_device*>, error> drive_bay::blank_drives(
    const std::vector<std::string>& disks) const {
  std::vector<device::block_device*> out;
  for (const std::string& name : disks) {
    const auto drive = drive_named(name);
    if (!drive) return refuse(errc::not_found, "no disk " + name);
    if (const auto at = membership(*drive))
      return refuse(errc::busy, name + " is a member of " + group_names_[at->first]);
    if (is_spare(*drive)) return refuse(errc::busy, name + " is a hot spare: unspare it first");
    if (partner_took_.contains(*drive)) return refuse(errc::busy, name + " " + partner_took_text);
    if (used_[*drive])
      return refuse(errc::busy, name + " holds a superblock of a group it left: no group takes it");
    out.push_back(&shelf_.drive(*drive));
  }
  return out;
}

void drive_bay::group_added(std::size_t group) {
  for (unsigned m = 0; m < groups_[group]->member_count(); ++m) {
    if (const auto drive = drive_of(groups_[group]->member_device(m))) used_[*drive] = true;
  }
  if (groups_[group]->kind() != group_kind::read_cache && !stopped_)
    spare_pool_->watch(groups_[group]->replacement());
}

void drive_bay::resync_stopped(std::size_t group, const raid::resync_progress& p) {
  const std::string& name = group_names_[group];
  const std::string done =
      std::to_string(p.stripes_done) + " of " + std::to_string(p.stripes_total) + " stripes";
  if (p.unverifiable > 0) {
    // The degraded write hole (docs/raid-write-hole.md): what these stripes
    // lost is as good as the parity that survived the crash.
    events_.record(severity::error, name,
                   "resync: " + std::to_string(p.unverifiable) +
                       " stripes could not be verified (their lost strips were rebuilt from parity "
                       "a crash may "
                       "have torn; a second parity was missing or disagreed)");
  }
  if (p.paused) {
    events_.record(severity::warning, name,
                   "resync paused by the stop after " + done + "; it resumes at the next start");
  } else {
    events_.record(severity::info, name,
                   "resync of the regions marked in the write-intent bitmap finished: " + done);
  }
}

void drive_bay::member_failed(std::size_t group, const raid::member_event& e) {
  const disk_group& g = *groups_[group];
  const auto drive = drive_of(g.member_device(e.member));
  const std::string who =
      drive ? disk_name(*drive) : group_names_[group] + " " + member_text(e.member);
  events_.record(severity::warning, who,
                 "failed out of " + group_names_[group] + " (" + member_text(e.member) +
                     "): " + std::string(raid::to_string(e.reason)));
  if (g.kind() == group_kind::read_cache) {
    events_.record(severity::warning, group_names_[group],
                   "the read cache is offline; nothing is lost: it held copies");
  } else if (g.failed()) {
    events_.record(severity::critical, group_names_[group],
                   "has failed: " + std::to_string(g.failed_members()) + " of its " +
                       std::to_string(g.member_count()) +
                       " members are lost, and its data with them");
  } else if (!stopped_) {
    spare_pool_->member_failed(groups_[group]->replacement());
  }
}

void drive_bay::describe(v1::Disk& disk) const {
  const auto drive = drive_named(disk.name());
  if (!drive) return;
  disk.set_slot(static_cast<std::uint32_t>(*drive));
  disk.set_spare(is_spare(*drive));
  disk.clear_group();
  disk.clear_member();
  disk.clear_health();
  if (const auto at = membership(*drive)) {
    const disk_group& g = *groups_[at->first];
    disk.set_group(group_names_[at->first]);
    disk.set_member(at->second);
    const raid::member_health& h = g.health(at->second);
    disk.mutable_health()->set_read_errors(h.read_errors);
    disk.mutable_health()->set_timeouts(h.timeouts);
    if (g.member_failed(at->second))
      disk.mutable_health()->set_failure(std::string(raid::to_string(h.failure)));
    const bool rebuilding =
        std::ranges::any_of(rebuilds_, [&](const rebuild& r) { return r.drive == *drive; });
    disk.set_state(g.member_failed(at->second) ? v1::DISK_FAILED
                   : rebuilding                ? v1::DISK_REBUILDING
                                               : v1::DISK_ONLINE);
    return;
  }
  disk.set_state(is_spare(*drive) ? v1::DISK_SPARE
                 : used_[*drive]  ? v1::DISK_LEFT
                                  : v1::DISK_UNUSED);
}

void drive_bay::describe(v1::DiskGroup& group) const {
  const auto index = group_named(group.name());
  if (!index) return;
  const disk_group& g = *groups_[*index];
  group.clear_members();
  for (unsigned m = 0; m < g.member_count(); ++m) {
    const auto drive = drive_of(g.member_device(m));
    group.add_members(drive ? disk_name(*drive) : "(missing)");
  }
  const raid::rebuild_progress rebuilt = g.rebuild_status();
  group.set_failed_members(g.failed_members());
  group.set_state(g.failed()               ? v1::GROUP_FAILED
                  : rebuilt.running        ? v1::GROUP_REBUILDING
                  : g.failed_members() > 0 ? v1::GROUP_DEGRADED
                                           : v1::GROUP_OPTIMAL);
  group.set_rebuild_bytes_done(rebuilt.bytes_done);
  group.set_rebuild_bytes_total(rebuilt.bytes_total);
  group.set_rebuild_eta_seconds(std::chrono::duration<double>(rebuilt.eta).count());
  group.set_scrubbing(g.scrubbing());
  group.set_repaired_blocks(g.repaired_blocks());
  const raid::resync_progress resync = g.resync_status();
  group.set_resyncing(resync.running && !resync.paused);
  group.set_resync_unverifiable_stripes(resync.unverifiable);
  const device::block_geometry& geometry = g.device().geometry();
  group.set_size_bytes(geometry.block_count * geometry.logical_block_size_bytes);
  if (const ceph_image* image = g.ceph()) describe_ceph(*image, group);
}

void describe_ceph(const ceph_image& image, v1::DiskGroup& group) {
  const ceph_status s = image.status();
  v1::CephImage& out = *group.mutable_ceph();
  out.set_connected(s.connected);
  out.set_status(s.status);
  out.set_health(s.health);
  out.clear_health_checks();
  bool unavailable = !s.connected || !s.status.empty();
  for (const std::string& check : s.checks) {
    out.add_health_checks(check);
    // Placement groups that cannot serve I/O: some of the image can't either.
    unavailable = unavailable || check.starts_with("PG_AVAILABILITY");
  }
  out.set_cluster_size_bytes(s.usage.size_bytes);
  out.set_cluster_used_bytes(s.usage.used_bytes);
  out.set_cluster_available_bytes(s.usage.available_bytes);
  out.set_rados_pool_available_bytes(s.pool_available_bytes.value_or(0));
  group.set_state(unavailable ? v1::GROUP_UNAVAILABLE : v1::GROUP_OPTIMAL);
}

std::expected<void, error> drive_bay::fail_disk(const std::string& name) {
  const auto drive = drive_named(name);
  if (!drive) return refuse(errc::not_found, "no disk " + name);
  const auto at = membership(*drive);
  if (!at) return refuse(errc::busy, name + " is in no group: only a group's member can be failed");
  disk_group& g = *groups_[at->first];
  if (g.member_failed(at->second)) {
    return refuse(errc::busy, name + " has failed already (" +
                                  std::string(raid::to_string(g.health(at->second).failure)) + ")");
  }
  // A member being rebuilt holds nothing yet: it counts as lost.
  const unsigned lost = g.failed_members() + (g.rebuild_status().running ? 1u : 0u);
  const unsigned survivable = g.kind() == group_kind::raid6 ? 2u : g.member_count() - 1;
  if (lost + 1 > survivable) {
    return refuse(errc::busy, name + ": failing it would fail " + group_names_[at->first] +
                                  ", which has " + std::to_string(g.member_count()) +
                                  " member(s), " + std::to_string(lost) +
                                  " lost or rebuilding already; replace those first");
  }
  g.fail_member(at->second);  // its member event records why
  return {};
}

std::expected<v1::Operation, error> drive_bay::replace_disk(const std::string& name,
                                                            const std::string& replacement) {
  return replace(name, replacement, "replacing " + name + " by command");
}

std::expected<v1::Operation, error> drive_bay::replace(const std::string& name,
                                                       const std::string& replacement,
                                                       const std::string& why) {
  const auto drive = drive_named(name);
  if (!drive) return refuse(errc::not_found, "no disk " + name);
  const auto at = membership(*drive);
  if (!at) return refuse(errc::busy, name + " is in no group: there is nothing to replace");
  disk_group& g = *groups_[at->first];
  if (!g.member_failed(at->second))
    return refuse(errc::busy, name + " is working: fail it first (strata disk fail)");
  const auto with = drive_named(replacement);
  if (!with) return refuse(errc::not_found, "no disk " + replacement);
  const bool spare = is_spare(*with);
  if (*with != *drive) {
    if (const auto other = membership(*with))
      return refuse(errc::busy, replacement + " is a member of " + group_names_[other->first]);
    if (partner_took_.contains(*with))
      return refuse(errc::busy, replacement + " " + partner_took_text);
    if (used_[*with])
      return refuse(errc::busy,
                    replacement + " holds a superblock of a group it left: no group takes it");
    if (spare && !spare_pool_->remove(shelf_.drive(*with)))
      return refuse(errc::busy, replacement + " is taken by a rebuild");
  }
  auto refused = g.replacement().replace_member(
      at->second, &shelf_.drive(*with),
      [this, alive = alive_, group = at->first, d = *with](std::error_code result) {
        if (*alive) rebuild_ended(group, d, result);
      });
  if (refused) {
    if (spare && *with != *drive) spare_pool_->add(shelf_.drive(*with));
    return refuse(refused->code == errc::invalid_argument ? errc::invalid_argument : errc::busy,
                  name + ": " + refused->message);
  }
  return rebuild_started(at->first, at->second, *with, why);
}

std::expected<void, error> drive_bay::set_spare(const std::string& name, bool spare) {
  const auto drive = drive_named(name);
  if (!drive) return refuse(errc::not_found, "no disk " + name);
  if (spare == is_spare(*drive)) return {};
  if (spare) {
    if (const auto at = membership(*drive))
      return refuse(errc::busy, name + " is a member of " + group_names_[at->first]);
    if (partner_took_.contains(*drive)) return refuse(errc::busy, name + " " + partner_took_text);
    if (used_[*drive])
      return refuse(errc::busy,
                    name + " holds a superblock of a group it left: it cannot be a spare");
    spare_pool_->add(shelf_.drive(*drive));
    events_.record(severity::info, name, "is a hot spare");
    return {};
  }
  if (!spare_pool_->remove(shelf_.drive(*drive)))
    return refuse(errc::busy, name + " is taken by a rebuild");
  events_.record(severity::info, name, "is no longer a hot spare");
  return {};
}

void drive_bay::erase_disk(const std::string& name,
                           std::function<void(std::expected<void, error>)> done) {
  const auto drive = drive_named(name);
  std::optional<std::unexpected<error>> refused;
  if (!drive) {
    refused = refuse(errc::not_found, "no disk " + name);
  } else if (const auto at = membership(*drive)) {
    refused = refuse(errc::busy, name + " is a member of " + group_names_[at->first] +
                                     ": fail and replace it first");
  } else if (is_spare(*drive) ||
             std::ranges::any_of(rebuilds_, [&](const rebuild& r) { return r.drive == *drive; })) {
    refused = refuse(errc::busy, name + " is a hot spare: unspare it first");
  } else if (partner_took_.contains(*drive)) {
    refused = refuse(errc::busy, name + " " + partner_took_text);
  } else if (!used_[*drive]) {
    refused = refuse(errc::invalid_argument, name + " holds no superblock: it is blank already");
  }
  if (refused) {
    boost::asio::post(loop_, [done = std::move(done), e = *refused] { done(e); });
    return;
  }
  // Both copies, each a block of zeros, written and flushed one after the
  // other: a torn erase leaves one copy, which read_superblock still finds.
  device::block_device& d = shelf_.drive(*drive);
  const std::uint32_t block = d.geometry().logical_block_size_bytes;
  auto zeros = std::make_shared<std::vector<std::byte>>(raid::superblock::size_bytes);
  auto erase_copy = [&d, block, zeros](std::uint64_t offset,
                                       std::function<void(std::error_code)> then) {
    raid::write_reserved(d, offset / block, *zeros, std::move(then));
  };
  erase_copy(raid::superblock::copy_a_offset_bytes, [this, alive = alive_, erase_copy, name,
                                                     i = *drive, done = std::move(done)](
                                                        std::error_code ec) mutable {
    if (!*alive) return;
    if (ec)
      return done(std::unexpected(
          make_error(errc::io_error, name + ": erasing its superblock: " + ec.message())));
    erase_copy(raid::superblock::copy_b_offset_bytes,
               [this, alive, name, i, done = std::move(done)](std::error_code ec2) {
                 if (!*alive) return;
                 if (ec2)
                   return done(std::unexpected(make_error(
                       errc::io_error, name + ": erasing its superblock: " + ec2.message())));
                 used_[i] = false;
                 events_.record(severity::info, name, "erased: blank, for a spare or a new group");
                 done({});
               });
  });
}

std::expected<v1::Operation, error> drive_bay::scrub(const std::string& name) {
  const auto index = group_named(name);
  if (!index) return refuse(errc::not_found, "no group " + name);
  disk_group& g = *groups_[*index];
  if (g.kind() != group_kind::raid6) {
    return refuse(errc::invalid_argument,
                  name + " is " + to_string(g.kind()) + ": a scrub checks RAID-6 parity");
  }
  if (const auto running = std::ranges::find(scrubs_, *index, &scrub_run::group);
      running != scrubs_.end()) {
    return refuse(errc::busy, name + " is being scrubbed already (" + running->operation + ")");
  }
  if (g.failed_members() > 0 || g.rebuild_status().running) {
    return refuse(errc::busy, name + " is degraded or rebuilding: a scrub needs every member");
  }
  auto op_name = std::make_shared<std::string>();
  v1::Operation op = operations_.start(
      "group.scrub", name, [this, loop = loop_, alive = alive_, index = *index, op_name] {
        // On the loop, and only if this scrub still runs: not a later one.
        boost::asio::post(loop, [this, alive, index, op_name] {
          if (*alive &&
              std::ranges::find(scrubs_, *op_name, &scrub_run::operation) != scrubs_.end())
            groups_[index]->cancel_scrub();
        });
      });
  *op_name = op.name();
  scrubs_.push_back({*index, op.name()});
  events_.record(severity::info, name, "scrub started (" + op.name() + ")");
  g.scrub([this, alive = alive_, index = *index, op = op.name()](const raid::scrub_report& report) {
    if (!*alive) return;
    std::erase_if(scrubs_, [&](const scrub_run& s) { return s.operation == op; });
    const std::string found = std::to_string(report.stripes_checked) + " stripes checked, " +
                              std::to_string(report.stripes_repaired) + " repaired, " +
                              std::to_string(report.stripes_unrecoverable) + " unrecoverable";
    const std::string& group = group_names_[index];
    if (report.error == make_error_code(errc::canceled)) {
      operations_.finish(op, std::unexpected(make_error(errc::canceled, "cancelled: " + found)),
                         true);
      events_.record(severity::info, group, "scrub cancelled: " + found);
    } else if (report.error) {
      const std::string why = report.error == make_error_code(errc::not_supported)
                                  ? "a member failed during it"
                                  : report.error.message();
      operations_.finish(
          op, std::unexpected(make_error(errc::io_error, "stopped: " + why + "; " + found)));
      events_.record(severity::error, group, "scrub stopped: " + why + "; " + found);
    } else {
      operations_.finish(op, {});
      events_.record(report.stripes_unrecoverable > 0 ? severity::error
                     : report.stripes_repaired > 0    ? severity::warning
                                                      : severity::info,
                     group, "scrub finished: " + found);
    }
  });
  if (!progress_armed_) report_progress();
  return op;
}

v1::Operation drive_bay::rebuild_started(std::size_t group, unsigned member, std::size_t drive,
                                         const std::string& why) {
  auto op_name = std::make_shared<std::string>();
  v1::Operation op = operations_.start(
      "group.rebuild", group_names_[group], [this, loop = loop_, alive = alive_, group, op_name] {
        // On the loop, and only if this rebuild still runs: not a later one.
        boost::asio::post(loop, [this, alive, group, op_name] {
          if (*alive &&
              std::ranges::find(rebuilds_, *op_name, &rebuild::operation) != rebuilds_.end())
            groups_[group]->cancel_rebuild();
        });
      });
  *op_name = op.name();
  rebuilds_.push_back({group, drive, op.name()});
  used_[drive] = true;  // a member now: should it leave, it keeps the superblock
  events_.record(severity::info, group_names_[group],
                 "rebuilding " + member_text(member) + " onto " + disk_name(drive) + " (" + why +
                     "): " + op.name());
  if (!progress_armed_) report_progress();
  return op;
}

void drive_bay::rebuild_ended(std::size_t group, std::size_t drive, std::error_code result) {
  const auto it = std::ranges::find_if(
      rebuilds_, [&](const rebuild& r) { return r.group == group && r.drive == drive; });
  if (it == rebuilds_.end()) return;
  const std::string op = it->operation;
  rebuilds_.erase(it);
  const std::string& name = group_names_[group];
  if (!result) {
    operations_.finish(op, {});
    events_.record(severity::info, name, disk_name(drive) + " is rebuilt: a full member");
    if (const std::uint64_t unverifiable = groups_[group]->rebuild_unverifiable();
        unverifiable > 0) {
      // The degraded write hole (docs/raid-write-hole.md), reached by a
      // rebuild rather than a resync: say so, as the resync does.
      events_.record(severity::error, name,
                     "rebuilds since the group was assembled wrote " +
                         std::to_string(unverifiable) +
                         " stripes from parity that a crash or a full store had torn while the "
                         "group was degraded; "
                         "the second parity was missing or disagreed, so their rebuilt strips "
                         "could not be verified");
    }
  } else if (result == make_error_code(errc::canceled) && stopped_) {
    operations_.finish(
        op,
        std::unexpected(make_error(errc::canceled,
                                   "stopped by the shutdown; it starts again at the next start")),
        true);
    events_.record(severity::warning, name,
                   "rebuild onto " + disk_name(drive) +
                       " stopped by the shutdown; it starts again at the next start");
  } else if (result == make_error_code(errc::canceled)) {
    operations_.finish(op, std::unexpected(make_error(errc::canceled, "cancelled")), true);
    events_.record(severity::warning, name,
                   "rebuild onto " + disk_name(drive) +
                       " cancelled: it is failed out, partly rebuilt; a hot spare, if one fits, "
                       "takes its place, or `strata disk replace " +
                       disk_name(drive) + " --with DISK` starts a rebuild again");
  } else {
    operations_.finish(
        op, std::unexpected(make_error(errc::io_error, "rebuild onto " + disk_name(drive) +
                                                           " failed: " + result.message())));
    events_.record(severity::error, name,
                   "rebuild onto " + disk_name(drive) + " failed: " + result.message());
  }
}

void drive_bay::on_spare_event(const raid::spare_event& e) {
  std::size_t group = groups_.size();
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (&groups_[g]->replacement() == e.group) group = g;
  }
  const auto drive = drive_of(e.spare);
  if (group == groups_.size() || !drive) return;
  switch (e.what) {
    case raid::spare_event::kind::rebuild_started:
      rebuild_started(group, e.member, *drive, "a hot spare took its place");
      break;
    case raid::spare_event::kind::rebuilt:
    case raid::spare_event::kind::rebuild_failed:
      rebuild_ended(group, *drive, e.result);
      break;
    case raid::spare_event::kind::refused:
      events_.record(severity::warning, disk_name(*drive),
                     group_names_[group] + " would not take it as a spare: " + e.message);
      break;
    case raid::spare_event::kind::taken_elsewhere:
      events_.record(
          severity::info, disk_name(*drive),
          "no longer a hot spare here: a group of the partner controller took it first (" +
              group_names_[group] + " looks for another)");
      break;
  }
}

raid::spare_claim drive_bay::answer_claim(const std::string& disk, bool asker_first) {
  const auto drive = drive_named(disk);
  if (!drive) return raid::spare_claim::granted;  // not on this controller's shelf: never used here
  const bool member_here =
      membership(*drive) ||
      std::ranges::any_of(rebuilds_, [&](const rebuild& r) { return r.drive == *drive; });
  if (member_here) return raid::spare_claim::taken;
  // Both claiming it at once: controller a's claim wins, on both sides
  // (the claim from here then comes back taken).
  if (spare_pool_->claiming(shelf_.drive(*drive)) && !asker_first) return raid::spare_claim::taken;
  if (spare_pool_->remove(shelf_.drive(*drive))) {
    events_.record(
        severity::info, disk,
        "no longer a hot spare here: the partner controller took it for one of its groups");
  }
  partner_took_.insert(*drive);
  return raid::spare_claim::granted;
}

void drive_bay::report_progress() {
  progress_armed_ = false;
  for (const rebuild& r : rebuilds_) {
    const raid::rebuild_progress p = groups_[r.group]->rebuild_status();
    if (p.bytes_total > 0)
      operations_.progress(r.operation,
                           static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total));
  }
  for (const scrub_run& s : scrubs_)
    operations_.progress(s.operation, groups_[s.group]->scrub_fraction());
  if (stopped_ || idle()) return;
  progress_armed_ = true;
  progress_timer_.expires_after(progress_interval);
  progress_timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (!ec && *alive) report_progress();
  });
}

}  // namespace strata::controller
