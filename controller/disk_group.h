// A RAID group of shelf drives as the controller holds it: its kind, the
// id its superblocks carry, and the group itself as a block device.
//
// create_group() formats blank drives into a new group; assemble_group()
// finds a recorded group again after a restart, from the superblocks on
// the drives (any drives may be offered: those of other groups and blank
// ones are left out), so that the group is what its members say, not
// what a configuration file claims.
//
// Threads: everything on the drives' loop; `done` runs there, later.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "controller/ceph_group.h"
#include "raid/device/block_device.h"
#include "raid/device/clock.h"
#include "raid/device/status.h"
#include "raid/raid1_group.h"
#include "raid/raid6_group.h"

namespace strata::controller {

// RAID-6 (the capacity tier), RAID-1 (the performance tier), the read
// cache: a RAID-1 group of one SSD, whose loss loses nothing, the write
// log of a pool's write-back cache: a RAID-1 group of 2 or more SSDs, and
// an RBD image in a Ceph cluster (the cold tier; ceph_group.h).
enum class group_kind : std::uint8_t { raid6, raid1, read_cache, write_log, ceph };
const char* to_string(group_kind k) noexcept;

using group_id = std::array<std::uint8_t, 16>;
std::string to_hex(const group_id& id);

// How the controller runs its groups.
struct group_options {
  device::clock* clock = nullptr;  // required
  // A member that stops answering is failed out after this, rather than
  // hanging its group (zero: never; tests in virtual time over real files).
  device::duration member_timeout = std::chrono::seconds(10);
  // Told of each member the group fails out, from the loop.
  raid::member_event_fn on_member_event;
  // Told when the resync after an unclean shutdown ends or a clean stop
  // pauses it, from the loop (RAID-6: raid6_options::on_resync_stopped).
  std::function<void(const raid::resync_progress&)> on_resync_stopped;
};

class disk_group;
using group_done = std::function<void(std::expected<std::unique_ptr<disk_group>, error>)>;

class disk_group {
 public:
  group_kind kind() const noexcept { return kind_; }
  const group_id& id() const noexcept { return id_; }
  device::block_device& device() const noexcept;
  // A full stripe's data blocks (RAID-6), or 1: what writes without a
  // read-modify-write cover.
  std::uint64_t stripe_data_blocks() const noexcept;
  bool idle() const noexcept;
  // Flushes the members and records a clean stop (raid6_group::mark_clean);
  // a resync still running pauses, to go on at the next start.
  void mark_clean(std::function<void(std::error_code)> done);
  // The resync after an unclean shutdown: whether one is left to run, and
  // (RAID-6) its stripes and unverifiable count.
  raid::resync_progress resync_status() const;

  // Its members, as raid6_group and raid1_group say.
  unsigned member_count() const noexcept;
  const device::block_device* member_device(unsigned member) const noexcept;
  bool member_failed(unsigned member) const noexcept;
  const raid::member_health& health(unsigned member) const noexcept;
  unsigned failed_members() const noexcept;
  // More members failed than it survives: its data is unavailable.
  bool failed() const noexcept;
  void fail_member(unsigned member);
  raid::member_replacement& replacement() noexcept;
  raid::rebuild_progress rebuild_status() const;
  // RAID-6: stripes a rebuild wrote from torn parity it could not verify
  // since assembly (raid6_group::rebuild_unverifiable); RAID-1: none.
  std::uint64_t rebuild_unverifiable() const noexcept;
  void cancel_rebuild();
  std::uint64_t repaired_blocks() const noexcept;

  // Scrub: RAID-6 only (raid6_group::scrub); a RAID-1 group refuses with
  // not_supported, from the loop.
  void scrub(std::function<void(const raid::scrub_report&)> done);
  void cancel_scrub() noexcept;
  bool scrubbing() const noexcept;
  double scrub_fraction() const noexcept;  // of the running scrub
  // A Ceph group's image, or null for the others.
  ceph_image* ceph() const noexcept;

 private:
  friend void create_group(group_kind, std::vector<device::block_device*>, const group_options&,
                           group_done);
  friend void assemble_group(group_kind, const group_id&, std::vector<device::block_device*>,
                             const group_options&, group_done);
  friend std::unique_ptr<disk_group> ceph_disk_group(const group_id&, std::unique_ptr<ceph_image>);
  group_kind kind_ = group_kind::raid6;
  group_id id_{};
  std::variant<std::unique_ptr<raid::raid6_group>, std::unique_ptr<raid::raid1_group>,
               std::unique_ptr<ceph_image>>
      group_;
};

// A Ceph group over an image ceph_image has opened (or is opening).
std::unique_ptr<disk_group> ceph_disk_group(const group_id& id, std::unique_ptr<ceph_image> image);

// Formats `members` (blank: a drive with a superblock is refused) into a
// new group of `kind`. RAID-6 needs 4 or more members, RAID-1 2 or more,
// the read cache exactly 1.
void create_group(group_kind kind, std::vector<device::block_device*> members,
                  const group_options& options, group_done done);

// Assembles group `id` from those of `drives` whose superblock names it.
// Fails, saying why, if too few of its members are there or their
// superblocks say another kind.
void assemble_group(group_kind kind, const group_id& id, std::vector<device::block_device*> drives,
                    const group_options& options, group_done done);

}  // namespace strata::controller
