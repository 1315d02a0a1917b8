// The shelf's drives and the RAID groups on them, as an administrator
// manages them: each disk's state and health, each group's state and
// background work, and the commands that change them. Fail a member out,
// replace it (the group rebuilds onto the new disk), assign hot spares
// (raid/hot_spares.h: they replace failed members with no command), and
// scrub a RAID-6 group. Rebuilds and scrubs are operations (operations.h)
// with progress and cancel; every change is an event (event_log.h).
//
// What it keeps is little: a disk's `spare` flag is its Disk record's (the
// management service writes it). Everything else (who is a member, which
// member failed and why, what rebuilds) the groups themselves hold, in
// their superblocks, so a restart finds it there.
//
// Threads: the loop's, like the groups. start() and stop() are start-up
// and shutdown calls, made while the caller runs the loop itself.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "controller/config_store.h"
#include "controller/disk_group.h"
#include "controller/event_log.h"
#include "controller/operations.h"
#include "controller/shelf.h"
#include "raid/hot_spares.h"
#include "raid/member_health.h"
#include "strata/v1/operations.pb.h"

namespace strata::v1 {
class Disk;
class DiskGroup;
}  // namespace strata::v1

namespace strata::controller {

class drive_bay {
 public:
  // The groups are the array's, named by `group_names` ("groups/g1") in
  // the same order; both outlive the bay.
  drive_bay(boost::asio::any_io_executor loop, device::clock& clock, shelf& drives,
            const std::vector<std::unique_ptr<disk_group>>& groups,
            const std::vector<std::string>& group_names, config_store& config, event_log& events,
            operation_log& operations);
  ~drive_bay();  // REQUIRES: stop() has run and idle() holds
  drive_bay(const drive_bay&) = delete;
  drive_bay& operator=(const drive_bay&) = delete;

  // After the groups are assembled: learns which drives outside the
  // groups still hold a superblock, puts the recorded spares in the spare
  // pool and starts covering the groups' failed members. `done` from the
  // loop, later.
  void start(std::function<void()> done);
  // Shutdown: stops covering failures, and cancels running scrubs and
  // rebuilds. The rebuilds are recorded and start again, in place, at the
  // next start(); a scrub does not.
  void stop();
  // No rebuild or scrub runs.
  bool idle() const noexcept;

  // Group `group` (its index) failed a member out: its on_member_event.
  void member_failed(std::size_t group, const raid::member_event& e);
  // Group `group`'s resync after an unclean shutdown ended, or the stop
  // paused it: its on_resync_stopped. An event says what it found.
  void resync_stopped(std::size_t group, const raid::resync_progress& p);
  // A drive the shelf gained (shelf::add), blank.
  void drive_added(std::size_t drive);

  // Two controllers list the same global spares: before a spare takes a
  // failed member's place here, `claim` asks the partner (the disk's name;
  // the answer on the loop). Set before start(); unset (one controller),
  // the spares are this controller's alone and nothing is asked.
  using claim_fn =
      std::function<void(const std::string& disk, std::function<void(raid::spare_claim)> answer)>;
  void set_spare_claims(claim_fn claim) { claim_ = std::move(claim); }
  // The partner's claim of spare `disk`: granted (dropped from the spare
  // pool here, if it was in it), or taken (a member of a group here). A
  // spare claimed here at the same moment goes to controller a's claim:
  // `asker_first` says whether the asker is a. On the loop.
  raid::spare_claim answer_claim(const std::string& disk, bool asker_first);

  // The drives named `disks` ("disks/hdd-20"), if each is blank: in no
  // group, no spare, holding no superblock. For a new group.
  std::expected<std::vector<device::block_device*>, error> blank_drives(
      const std::vector<std::string>& disks) const;
  // The array made group `group` (the last of its groups): spares cover it.
  void group_added(std::size_t group);

  // What the array sees now, into the output-only fields of a record
  // read from the config store (its name says which).
  void describe(v1::Disk& disk) const;
  void describe(v1::DiskGroup& group) const;

  // The commands. Errors: not_found (no such disk or group), busy (its
  // state does not allow it now: the message says what would), and
  // invalid_argument.
  //
  // Fails working member `disk` out of its group, as a dying drive would
  // be. Refused when the group would fail with it.
  std::expected<void, error> fail_disk(const std::string& disk);
  // Puts `replacement` (a blank disk: unused or a spare, or `disk` itself
  // to rebuild it in place) in failed member `disk`'s place; the group
  // rebuilds onto it. Returns the rebuild's operation.
  std::expected<v1::Operation, error> replace_disk(const std::string& disk,
                                                   const std::string& replacement);
  // Makes blank disk `disk` a hot spare, or takes it back (not while a
  // rebuild uses it). The caller records the flag in the Disk record.
  std::expected<void, error> set_spare(const std::string& disk, bool spare);
  // Wipes both superblock copies of `disk`, a member left behind by a
  // replacement (LEFT), so that it is blank again: a spare, or a new
  // group's. `done` from the loop. busy for a disk any group or spare
  // uses; invalid_argument for one that is blank already.
  void erase_disk(const std::string& disk, std::function<void(std::expected<void, error>)> done);
  // Checks every stripe of RAID-6 group `group`, repairing what one bad
  // strip explains. Returns the scrub's operation (cancel stops it).
  std::expected<v1::Operation, error> scrub(const std::string& group);

 private:
  struct rebuild {
    std::size_t group = 0;
    std::size_t drive = 0;  // the new member
    std::string operation;
  };
  struct scrub_run {
    std::size_t group = 0;
    std::string operation;
  };
  std::optional<std::size_t> drive_named(const std::string& name) const;
  std::optional<std::size_t> group_named(const std::string& name) const;
  std::optional<std::size_t> drive_of(const device::block_device* d) const;
  // Where drive `drive` is a member: (group, member).
  std::optional<std::pair<std::size_t, unsigned>> membership(std::size_t drive) const;
  // A spare waiting in the spare pool (one a rebuild took is a member).
  bool is_spare(std::size_t drive) const;
  const std::string& disk_name(std::size_t drive) const { return disk_names_[drive]; }
  // replace_disk, saying `why` in its event.
  std::expected<v1::Operation, error> replace(const std::string& name,
                                              const std::string& replacement,
                                              const std::string& why);
  // Starts the operation of a rebuild the group has begun.
  v1::Operation rebuild_started(std::size_t group, unsigned member, std::size_t drive,
                                const std::string& why);
  void rebuild_ended(std::size_t group, std::size_t drive, std::error_code result);
  void on_spare_event(const raid::spare_event& e);
  // Starts again the rebuilds the last stop() cut short.
  void resume_rebuilds();
  // Every second while background work runs: its operations' progress.
  void report_progress();

  boost::asio::any_io_executor loop_;
  device::clock& clock_;
  shelf& shelf_;
  const std::vector<std::unique_ptr<disk_group>>& groups_;
  const std::vector<std::string>& group_names_;
  config_store& config_;
  event_log& events_;
  operation_log& operations_;
  std::vector<std::string> disk_names_;  // by drive index: "disks/hdd-00"
  // Drives that hold a group's superblock: members, and members replaced
  // and left behind, which no group takes.
  std::vector<bool> used_;
  std::unique_ptr<raid::hot_spares> spare_pool_;
  claim_fn claim_;
  // Drives whose claim this controller granted the partner: its group's
  // now (or soon), which nothing here may use, erase or make a spare.
  std::set<std::size_t> partner_took_;
  std::vector<rebuild> rebuilds_;
  std::vector<scrub_run> scrubs_;
  boost::asio::steady_timer progress_timer_;
  bool progress_armed_ = false;
  bool stopped_ = false;
  // Shared with handlers posted to the loop (cancels come from gRPC
  // threads), which must not run after the bay is gone.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// A Ceph group's output fields: its cluster as last seen, and its state
// (GROUP_UNAVAILABLE while the image is not open or the cluster cannot
// serve all of it).
void describe_ceph(const ceph_image& image, v1::DiskGroup& group);

}  // namespace strata::controller
