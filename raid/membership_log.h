// A group's record of its membership on its members (docs/raid-superblock.md).
// Every change -- a member failed out, a rebuilt member joining, an
// assembly -- bumps the event count and rewrites the superblock on every
// member that holds the group's metadata.
//
// While a change is being recorded, the group's acknowledgements are held
// (hold()). A write acknowledged after a member failed therefore never
// depends on a superblock that still calls that member current. A member
// that fails during the update is not waited for: a hung member must not
// hold up the record of its own failure.
//
// Threads: the group's loop.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "raid/device/block_device.h"
#include "raid/superblock.h"
#include "raid/watchdog.h"

namespace strata::raid {

class membership_log {
 public:
  struct hooks {
    const std::vector<device::block_device*>* members = nullptr;
    // Whether the member holds the group's metadata now (working, not being rebuilt).
    std::function<bool(unsigned)> holds_metadata;
    // The member's superblock, but for the group id and events, which this fills in.
    std::function<superblock(unsigned)> describe;
    // A member could not take its superblock: it must leave the group.
    std::function<void(unsigned)> write_failed;
    // What waiters and held requests learn when an update ends: device_failed
    // if the group has failed meanwhile.
    std::function<std::error_code()> outcome;
  };

  membership_log(boost::asio::any_io_executor executor, member_watchdog& watchdog, hooks h);
  ~membership_log();
  membership_log(const membership_log&) = delete;
  membership_log& operator=(const membership_log&) = delete;

  // A new group id, and the first record; `done` once it is on every member.
  void format(std::function<void(std::error_code)> done);
  // At assembly: the group the superblocks describe.
  void adopt(const std::array<std::uint8_t, 16>& group_id, std::uint64_t events);
  // Whether there is a record to keep (formatted or assembled).
  bool formatted() const noexcept { return events_ > 0 || updating_; }
  std::uint64_t events() const noexcept { return events_; }
  const std::array<std::uint8_t, 16>& group_id() const noexcept { return group_id_; }
  bool updating() const noexcept { return updating_; }

  // Records a change (nothing on a group never formatted).
  void changed();
  // A member failed: its superblock write is not waited for.
  void forget(unsigned member);
  // Runs `fn` with the outcome when the update in flight, or the next one,
  // and any that follow it, are done. Callers start one with changed().
  void after(std::function<void(std::error_code)> fn) { after_.push_back(std::move(fn)); }
  // Tells `done` the outcome of background work once the change it causes
  // is recorded (the caller then calls changed(), or fails a member): its
  // own error, or else the record's (work not recorded is not done); on a
  // group never formatted, at once, from the loop.
  void report_after_record(std::function<void(std::error_code)> done, std::error_code result);
  // Holds a request's completion while an update is in flight: true if held.
  bool hold(device::request& req, std::error_code result);

 private:
  void start_update();
  void member_written(unsigned member, std::uint64_t ticket, std::error_code ec);
  void update_done();

  boost::asio::any_io_executor executor_;
  member_watchdog& watchdog_;
  hooks hooks_;
  std::array<std::uint8_t, 16> group_id_{};
  std::uint64_t events_ = 0;
  bool updating_ = false;
  bool again_ = false;
  unsigned pending_ = 0;
  std::vector<std::uint64_t> ticket_;  // per member: 0 none outstanding
  std::uint64_t tickets_issued_ = 0;
  std::vector<watched_io> watch_;  // per member: its superblock write
  std::vector<std::pair<device::request*, std::error_code>> held_;
  std::vector<std::function<void(std::error_code)>> after_;
  // Lets a member's late answer see that this log is gone.
  std::shared_ptr<membership_log*> self_;
};

}  // namespace strata::raid
