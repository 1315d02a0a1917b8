// A redundant group's members, as both group kinds see them: which device
// is in each place, which have failed and why, how many failures the group
// survives, and what every group does the same way around them -- failing
// a member out (recorded in the superblocks before anything further is
// acknowledged), timing member I/O, flushing every member, and holding
// acknowledgements while a membership change is being recorded.
//
// What stays with each group kind is how it spreads data over the members
// (RAID-1 mirrors, RAID-6 stripes) and so what a member's failed read or
// write costs an operation.
//
// Threads: the group's loop.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/device/clock.h"
#include "raid/device/request_queue.h"
#include "raid/device/timing.h"
#include "raid/member_health.h"
#include "raid/membership_log.h"
#include "raid/watchdog.h"
#include "raid/write_intent.h"

namespace strata::raid {

// A clear error if the list has fewer than `min_members` or more than
// `max_members`, a missing member, a member listed twice, or members that
// differ in block size or block count or live on different loops.
// `kind` names the group in the message ("RAID-6").
std::optional<error> check_members(std::span<device::block_device* const> members,
                                   unsigned min_members, unsigned max_members,
                                   std::string_view kind);

// How many members a group may lose and still hold all its data.
struct failure_budget {
  unsigned members_lost_survived = 0;  // RAID-6: 2; RAID-1: all but one
  // Whether a member being rebuilt counts as lost until its rebuild ends.
  // RAID-1: yes (a write it alone took is not the group's). RAID-6: no, it
  // serves each stripe the rebuild has reached; the rest treat it as lost.
  bool rebuilding_counts_as_lost = false;
};

struct member_set_options {
  failure_budget budget;
  // A member I/O unanswered for this long fails the member out (needs the
  // clock; zero: no limit).
  device::clock* clock = nullptr;
  device::duration timeout{};
  // Read errors one member may have (each repaired from the others) before
  // it is failed out as failing: md's max_read_errors, without the decay.
  unsigned read_error_limit = 20;
  // Told of every member the group fails out, from the loop.
  member_event_fn on_member_event;
};

class member_set {
 public:
  static constexpr unsigned none = ~0u;

  struct hooks {
    // The member's superblock (docs/raid-superblock.md), for the membership log.
    std::function<superblock(unsigned)> describe;
    // A member was failed out: what the group itself must forget of it
    // (RAID-1: a resync reading from it picks another source). May be empty.
    std::function<void(unsigned)> failed;
  };

  // `devices` must have passed check_members.
  member_set(std::vector<device::block_device*> devices, const member_set_options& options,
             hooks h);
  member_set(const member_set&) = delete;
  member_set& operator=(const member_set&) = delete;
  // The group's write-intent bitmap: told of failed members and of flushes.
  // Built after this set (it times its writes with watchdog()), so given here.
  void attach(write_intent& intent) noexcept { intent_ = &intent; }

  unsigned size() const noexcept { return static_cast<unsigned>(devices_.size()); }
  // The device in member `member`'s place: after a replacement the spare;
  // for a member missing at assembly a stand-in that fails every I/O.
  device::block_device* operator[](unsigned member) const noexcept { return devices_[member]; }
  const std::vector<device::block_device*>& devices() const noexcept { return devices_; }
  boost::asio::any_io_executor executor() const noexcept { return devices_[0]->executor(); }

  bool failed(unsigned member) const noexcept {
    return health_[member].failure != member_failure::none;
  }
  unsigned failed_count() const noexcept;
  // The member being rebuilt onto a spare (none: no rebuild).
  unsigned rebuilding() const noexcept { return rebuilding_; }
  // Working and not being rebuilt: it holds the group's data and metadata.
  bool whole(unsigned member) const noexcept { return !failed(member) && member != rebuilding_; }
  unsigned whole_count() const noexcept;
  // More members lost than the budget: every request gets device_failed.
  bool group_failed() const noexcept;
  const member_health& health(unsigned member) const noexcept { return health_[member]; }

  // Fails a member out (nothing if failed already): its metadata writes are
  // not waited for any more -- a hung member must not hold up the record
  // of its own failure -- the change is recorded, and on_member_event told.
  void fail(unsigned member, member_failure reason);
  // What a member I/O's error says of the member that answered it. A late
  // answer from a device since replaced says nothing of its successor. A
  // member that is gone, or cannot write or flush, leaves the group (one
  // that timed out has left already); a read error costs only the I/O, until
  // the member has had too many; a discard it cannot do changes nothing;
  // a full backing store (no_space) is not the disk's fault: it stays.
  void note_error(unsigned member, const device::block_device* answered, device::op operation,
                  std::error_code ec);

  // A rebuild onto `spare` in failed member `member`'s place begins: a new
  // device with fresh counters, working but not whole until end_rebuild.
  void begin_rebuild(unsigned member, device::block_device* spare);
  // The rebuild ended (its new member flushed, if it succeeded). Failed:
  // the member is failed out again, as only partly rebuilt. Succeeded: it
  // holds the bitmap and counts as whole, recorded. `done` gets the outcome
  // once recorded.
  void end_rebuild(std::error_code result, std::function<void(std::error_code)> done);
  // At assembly: the members the superblocks call failed, and the stand-ins
  // for the missing ones (kept for the group's life).
  void assembled(std::span<const member_failure> failures,
                 std::vector<std::unique_ptr<device::block_device>> stand_ins);

  // Member I/O timing: every member I/O is started under the watchdog.
  member_watchdog& watchdog() noexcept { return watchdog_; }
  // I/O abandoned to a timeout whose device has not answered yet: it may
  // still write into the group's buffers, so the group must not go.
  void count_abandoned() noexcept { ++abandoned_ios_; }
  void abandoned_answered() noexcept { --abandoned_ios_; }
  std::uint64_t abandoned_ios() const noexcept { return abandoned_ios_; }

  // Flushes every working member, and completes `outer` through
  // acknowledge(): device_failed if the group failed meanwhile, no_space if
  // a member's backing store had no room to write its cache out (the disk
  // is sound, the flush is not done), else success -- a member whose flush
  // failed otherwise is failed out, since it may have lost what it
  // acknowledged. The write-intent bitmap learns of the flush.
  void flush(device::request& outer);

  // Completes a caller's request -- after the membership change being
  // recorded, if one is, so nothing is acknowledged before a failure it
  // depends on is on the members; through the loop while the watchdog
  // abandons I/O, as the caller may destroy the group from its completion.
  void acknowledge(device::request& req, std::error_code result);

  membership_log& log() noexcept { return log_; }
  const membership_log& log() const noexcept { return log_; }

 private:
  struct flush_op;
  struct member_flush {
    flush_op* flush = nullptr;
    unsigned member = 0;
    device::request req;
    watched_io watch;
  };
  struct flush_op {
    member_set* set = nullptr;
    device::request* outer = nullptr;
    unsigned pending = 0;
    unsigned abandoned = 0;
    bool finished = false;  // done, but held for its abandoned flushes
    std::error_code result;
    std::uint64_t epoch = 0;  // write_intent::flush_started
    bool eager = false;       // mark_clean's
    std::vector<member_flush> members;
  };
  static void on_flush_done(device::request& r) noexcept;
  static void expire_flush(watched_io& w);
  void member_flush_done(member_flush& mf, std::error_code result);
  void on_overdue(unsigned member, const device::block_device* device);

  std::vector<device::block_device*> devices_;
  std::vector<member_health> health_;
  failure_budget budget_;
  unsigned read_error_limit_;
  member_event_fn on_member_event_;
  hooks hooks_;
  unsigned rebuilding_ = none;
  member_watchdog watchdog_;
  std::uint64_t abandoned_ios_ = 0;
  bool deferring_acks_ = false;  // the watchdog is abandoning I/O
  device::completion_queue deferred_;
  device::slot_pool<flush_op> flushes_;
  write_intent* intent_ = nullptr;
  std::vector<std::unique_ptr<device::block_device>> stand_ins_;
  // Superblocks: membership, recorded (after the watchdog, which it uses).
  membership_log log_;
};

}  // namespace strata::raid
