// Hot spares shared by groups (a PowerVault's global spares): when a watched
// group fails a member out, the first spare that fits takes its place and
// the group rebuilds onto it in the background, with no administrator.
//
// One rebuild per group at a time, as the groups themselves allow; a group
// with two failed members gets its second spare when the first rebuild
// ends. A group busy with other background work (a scrub, a resync, a
// rebuild an administrator started) is tried again every retry_interval.
// A spare whose rebuild fails is not used again: it is more likely bad than
// the member was. A group too far gone to rebuild takes no spare.
//
// The owner wires each group's on_member_event to member_failed(), so that
// the spare is chosen from the loop, after the group has finished failing
// the member, never from inside the group's own callback.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "raid/device/clock.h"
#include "raid/member_replacement.h"

namespace strata::raid {

struct spare_event {
  enum class kind : std::uint8_t {
    rebuild_started,  // `spare` now stands in for `member`
    rebuilt,          // ... and holds everything: a full member
    rebuild_failed,   // ... but the rebuild failed (result); the spare is dropped
    refused,          // the group would not take `spare` (message says why); kept for others
    taken_elsewhere,  // the claim found `spare` taken by another pool's group: dropped
  };
  kind what = kind::rebuild_started;
  member_replacement* group = nullptr;
  unsigned member = 0;
  device::block_device* spare = nullptr;
  std::error_code result;
  std::string message;
};

// What another user of the same spares (the partner controller, whose pool
// lists the same global spares) says when this pool would take one.
enum class spare_claim : std::uint8_t {
  granted,  // it neither holds nor takes it from now on
  taken,    // it has taken it (a member of one of its groups): never offered again
  later,    // it cannot say now (unreachable): the spare waits, and is asked for again
};

struct hot_spare_options {
  device::clock* clock = nullptr;  // required: times the retries
  // How long a group busy with other background work waits before its
  // failed members are offered a spare again.
  device::duration retry_interval = std::chrono::seconds(1);
  std::function<void(const spare_event&)> on_event;  // from the loop
  // Asked before a spare is given to a group; `answer` from the loop,
  // once. Null: the spares are this pool's alone.
  std::function<void(device::block_device& spare, std::function<void(spare_claim)> answer)> claim;
};

class hot_spares {
 public:
  hot_spares(boost::asio::any_io_executor executor, const hot_spare_options& options);
  hot_spares(const hot_spares&) = delete;
  hot_spares& operator=(const hot_spares&) = delete;
  // REQUIRES: no rebuild it started still runs (rebuilding() == 0).
  ~hot_spares();

  // A blank device to hand out. It covers a failed member already waiting.
  void add(device::block_device& spare);
  // Takes back a spare no rebuild uses: false if it is not waiting here
  // (a rebuild took it, or it was never added).
  bool remove(device::block_device& spare);
  // `spare` waits here: added, and not taken by a rebuild.
  bool holds(const device::block_device& spare) const noexcept;
  // `spare` is being claimed for a group here (options.claim asked, not
  // yet answered): neither held nor taken.
  bool claiming(const device::block_device& spare) const noexcept { return claiming_ == &spare; }
  std::size_t available() const noexcept { return spares_.size(); }
  std::size_t rebuilding() const noexcept;

  // Gives spares to `group`'s failed members from now on, starting with
  // those failed already (a group assembled degraded).
  void watch(member_replacement& group);
  // Stops: the group's running rebuild goes on, but nothing new starts.
  void forget(member_replacement& group);
  // `group` has failed a member: cover it, from the loop, soon.
  void member_failed(member_replacement& group);

 private:
  struct watched {
    member_replacement* group = nullptr;
    bool rebuilding = false;  // a rebuild this pool started runs
    bool cover_posted = false;
    bool claiming = false;  // a spare is being claimed for it
    // Spares it refused as not fitting: they never will, so they are not
    // offered (or reported) again.
    std::vector<device::block_device*> unfit;
  };

  watched* find(member_replacement& group) noexcept;
  void cover_later(member_replacement& group);
  void cover(watched& w);
  // Gives `spare` (claimed, or needing no claim) to `w`'s failed `member`.
  // Not given, the spare stays here: the group is busy (tried again
  // later) or cannot rebuild (not_now), or the spare does not fit it.
  enum class given : std::uint8_t { yes, not_now, unfit };
  given give(watched& w, unsigned member, device::block_device* spare);
  void retry_later();
  void cover_all();
  void rebuild_done(member_replacement& group, unsigned member, device::block_device& spare,
                    std::error_code result);
  void report(spare_event e) const;

  boost::asio::any_io_executor executor_;
  hot_spare_options options_;
  std::vector<device::block_device*> spares_;
  device::block_device* claiming_ = nullptr;  // one claim at a time
  std::list<watched> groups_;                 // stable addresses: callbacks may watch more
  std::unique_ptr<device::timer> retry_;
  bool retry_armed_ = false;
  // Shared with handlers posted to the loop, which must not run after the
  // pool is gone.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace strata::raid
