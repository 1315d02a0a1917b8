// A RAID-6 group: n data + 2 parity members, itself a block_device.
//
// Each request is cut at stripe boundaries; each piece runs as a stripe
// operation under that stripe's lock, so concurrent writes to one stripe
// never interleave their parity updates:
//   read        the touched data ranges -- at once, beside the lock's
//               holders, when their members all work (md's direct read of a
//               healthy chunk); if a member holding one has failed or fails
//               the read, under the lock: the same rows of every surviving
//               strip, and the lost strips are rebuilt (pq_codec)
//   full-stripe write
//               P and Q from the new data, no reads
//   partial write
//               whichever reads less. Read-modify-write (healthy stripes):
//               read the old data and P and Q, fold old XOR new into P and Q,
//               write data, P and Q. Reconstruct-write: read the touched rows
//               of the surviving strips, rebuild what a failed member held,
//               lay the new data over them, recompute P and Q, write the
//               changed strips back
//   flush       every working member
//   discard     a write of zeros (members need not zero what they discard)
// Up to two failed members: reads reconstruct and writes go on, and no error
// reaches the caller. A member that fails an I/O with device_failed, or a
// write at all, is failed out of the group. A third failure fails the
// group: every request then gets device_failed, never wrong data.
//
// A member whose backing store is full (no_space: a file-backed drive on a
// full filesystem) is not failed: nothing is wrong with the disk, and
// failing members one by one would lose the group. The write fails with
// no_space and the stripes it touched are torn (some strips new, some
// old): their write-intent region stays marked, on disk, until a resync
// of the torn regions (started when a write succeeds again, at most every
// options.torn_resync_interval) or the next assembly resyncs it; until then
// it is treated as one the resync has not reached (writes recompute
// parity, rebuilt reads are checked against Q, scrubs are refused). A
// flush that fails so fails with no_space.
//
// A member that leaves an I/O unanswered past options.member_timeout, or
// fails more reads than options.member_read_error_limit, is failed out
// too; health() keeps its counters and the reason, and on_member_event
// reports each failure.
//
// A member's read error (a latent sector error) costs the operation that
// strip: it is rebuilt from the others, returned, and written back to the
// member, which clears the error on a real drive; repaired_blocks() counts.
//
// Scrub (scrub()) checks every stripe's parity and repairs a single wrong
// strip. A failed member is rebuilt onto a spare (replace_member()) in the
// background, with progress (rebuild_status()).
//
// Superblocks (format(), assemble()) record membership; every change bumps
// an event count, and acknowledgements wait until it is on the members.
//
// The write hole (docs/raid-write-hole.md): a formatted group keeps a
// write-intent bitmap on every member. A region's bit is on disk before
// any write to it starts, and cleared once a flush has covered its writes
// and it has been idle for a flush interval. After a crash, assembly
// resyncs the regions whose bits are set (P and Q recomputed from the
// data) in the background; writes to a region not yet resynced recompute
// parity rather than update it, and reads there that must rebuild lost
// data check it against the second parity first (media_error if they
// cannot). A clean shutdown pauses the resync; the next assembly resumes it.
//
// Not yet (the rest of the RAID engine's issue): automatic spare
// assignment, and a journal for the degraded write hole (see the doc).
//
// Threads and lifetime: as block_device; the members live on the same loop
// and outlive the group.
#pragma once

#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "raid/assembly.h"
#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/device/clock.h"
#include "raid/device/range_lock.h"
#include "raid/device/request_queue.h"
#include "raid/device/timing.h"
#include "raid/member_health.h"
#include "raid/member_replacement.h"
#include "raid/members.h"
#include "raid/new_member.h"
#include "raid/pq.h"
#include "raid/progress.h"
#include "raid/raid6_layout.h"
#include "raid/superblock.h"
#include "raid/watchdog.h"
#include "raid/write_intent.h"

namespace strata::raid {

struct scrub_report {
  std::uint64_t stripes_checked = 0;
  std::uint64_t stripes_repaired = 0;       // one strip was wrong (or unreadable): rewritten
  std::uint64_t stripes_unrecoverable = 0;  // several strips disagree: left as found
  std::error_code error;                    // why the scrub stopped early, if it did
};

struct raid6_options {
  std::uint64_t strip_size_bytes = 64 * 1024;  // a power of two, at least one block
  // Reserved at the start of every member for the superblock and journal.
  std::uint64_t reserved_bytes = 1 << 20;
  // For pacing background work and reporting its ETA; none: unpaced, no ETA.
  device::clock* clock = nullptr;
  double rebuild_mb_per_s = 0;  // a rebuild's ceiling, 10^6 bytes/s of the new member (0: none)
  // Stripes a rebuild keeps in flight: enough that every member streams.
  unsigned rebuild_stripes_in_flight = 8;
  // A member I/O unanswered for this long fails the member out (needs the
  // clock; zero: no limit). Longer than a healthy drive's worst queueing,
  // shorter than the initiators' own command timeouts (30 s on Linux).
  device::duration member_timeout{};
  // Read errors one member may have (each repaired from the others) before
  // it is failed out as failing: md's max_read_errors, without the decay.
  unsigned member_read_error_limit = 20;
  // Told of every member the group fails out, from the loop.
  member_event_fn on_member_event;
  // Told, from the loop, when the resync after an unclean shutdown ends
  // or a clean shutdown pauses it: what it found, unverifiable stripes
  // included (docs/raid-write-hole.md).
  std::function<void(const resync_progress&)> on_resync_stopped;
  // Member bytes one bit of the write-intent bitmap covers: rounded to
  // whole stripes, and doubled until the bitmap fits the reserved area.
  // Larger: fewer bitmap writes, longer resyncs.
  std::uint64_t bitmap_region_bytes = 64ull << 20;
  // Regions a full backing store tore are resynced once a write succeeds
  // again, at most this often (needs the clock; without one, each time).
  device::duration torn_resync_interval = std::chrono::seconds(10);
};

class raid6_group final : public device::block_device, public member_replacement {
 public:
  // Clear errors, and nothing touched on any member, for: fewer than 4 or
  // more than 255 members, members of different block sizes or on
  // different loops, a strip size that is not a power of two or not whole
  // blocks, members too small to hold one stripe.
  static std::expected<std::unique_ptr<raid6_group>, error> create(
      std::vector<device::block_device*> members, const raid6_options& options);

  using assembled = std::expected<std::unique_ptr<raid6_group>, error>;

  // Writes a superblock (docs/raid-superblock.md) to every member, under a
  // new group id: from now on membership changes are recorded, and the
  // group can be assembled from its members after a restart. `done` gets
  // nothing on success. A clear error, nothing written, if a member
  // already holds a superblock (it belongs to a group) or the reserved
  // area cannot hold two superblock copies and a bitmap block.
  void format(std::function<void(std::optional<error>)> done);

  // Rebuilds a formatted group from its members' superblocks alone: the
  // member order, geometry and failed members come from them. Devices that
  // hold no superblock (blank spares) are ignored. A member is untrusted if
  // no device holds it or the newest superblock records it failed; one
  // merely behind in events took every write (a crash cut short the update
  // of its copy) and is trusted. A clear error if the devices hold more
  // than one group or fewer members than the group survives with.
  static void assemble(std::vector<device::block_device*> devices, const raid6_options& options,
                       std::function<void(assembled)> done);

  const device::block_geometry& geometry() const noexcept override { return geometry_; }
  boost::asio::any_io_executor executor() const noexcept override {
    return members_[0]->executor();
  }
  void submit(device::request& req) noexcept override;

  const raid6_layout& layout() const noexcept { return layout_; }
  // Membership changes recorded so far (0: never formatted).
  std::uint64_t events() const noexcept { return members_.log().events(); }
  // No background work (superblock update, rebuild, scrub) in flight: the
  // group may be destroyed once this holds and no request is in flight.
  // I/O abandoned to a timeout counts as in flight until its device
  // answers: the device may still write into the group's buffers.
  bool idle() const noexcept {
    return !members_.log().updating() && members_.rebuilding() == member_set::none &&
           !scrub_.running && members_.abandoned_ios() == 0 &&
           !(resync_.running && !resync_.paused) && !resync_.stripe_in_flight &&
           !intent_.writing() && !intent_.cleaning();
  }
  // A clean shutdown: flushes every member and clears every bit of the
  // write-intent bitmap not held by a write in flight, so the next assembly
  // has nothing to resync. `done` gets the flush's outcome. A resync still
  // running pauses after the stripe it has in flight (the group is idle()
  // then, whatever is left): the regions it has not finished stay marked,
  // on disk too, and the next assembly resyncs them.
  void mark_clean(std::function<void(std::error_code)> done);
  // The resync an assembly started after an unclean shutdown.
  resync_progress resync_status() const;
  // Regions of the write-intent bitmap set in memory (for tests and
  // diagnostics): each is resynced if the power fails now.
  std::uint64_t intent_regions_set() const noexcept { return intent_.regions_set(); }
  ~raid6_group() override;
  // Takes a member out of the group (an administrator's "fail disk").
  void fail_member(unsigned member) { members_.fail(member, member_failure::administrator); }
  const member_health& health(unsigned member) const noexcept { return members_.health(member); }
  unsigned member_count() const noexcept override { return layout_.members; }
  bool member_failed(unsigned member) const noexcept override { return members_.failed(member); }
  // The device in member `member`'s place: after a replacement the spare;
  // for a member missing at assembly a stand-in that fails every I/O.
  const device::block_device* member_device(unsigned member) const noexcept {
    return members_[member];
  }
  unsigned failed_members() const noexcept { return members_.failed_count(); }
  // More members failed than the group survives.
  bool group_failed() const noexcept { return members_.group_failed(); }
  // Puts `spare` in the place of failed member `member` and rebuilds its
  // strips from the others, stripe by stripe under each stripe's lock, at
  // background priority and at most options.rebuild_mb_per_s. Foreground
  // I/O goes on: stripes already rebuilt use the new member, the rest treat
  // it as lost (writes there go to parity, which the rebuild reads). `done`
  // gets the outcome, from the loop. A clear error, nothing changed, if the
  // member is working, the spare does not fit (invalid_argument), a
  // rebuild, scrub or resync runs (busy), or more than two members have
  // failed (device_failed).
  std::optional<error> replace_member(unsigned member, device::block_device* spare,
                                      std::function<void(std::error_code)> done) override;
  rebuild_progress rebuild_status() const;
  // Stops the running rebuild once its stripes in flight end: the new
  // member is then failed out, partly rebuilt (member_failure::rebuild),
  // and `done` gets errc::canceled. Nothing if no rebuild runs.
  void cancel_rebuild();

  // Reads every stripe, checks P and Q against the data and rewrites a
  // single wrong strip, located from the syndromes (pq_codec::check). One
  // stripe at a time, at background priority, under the stripe's lock, so
  // foreground I/O goes on and stays correct. Needs every member: on a
  // degraded or rebuilding group `done` gets not_supported, and while a
  // scrub runs invalid_argument, at once, from the loop.
  void scrub(std::function<void(const scrub_report&)> done);
  bool scrubbing() const noexcept { return scrub_.running; }
  std::uint64_t scrub_stripes_done() const noexcept { return scrub_.next_stripe; }
  std::uint64_t stripes() const noexcept { return layout_.stripes; }
  // Stops the running scrub after the stripe it checks: `done` gets what
  // it found so far, with error errc::canceled. Nothing if none runs.
  void cancel_scrub() noexcept { scrub_.cancel = scrub_.running; }

  // Blocks that members could not read, rebuilt from the others and
  // written back (a drive remaps a sector when it is rewritten).
  std::uint64_t repaired_blocks() const noexcept { return repaired_blocks_; }
  // Bitmap regions torn by writes a full backing store refused: resynced
  // at the next assembly.
  std::uint64_t torn_regions() const noexcept { return torn_regions_; }
  // Stripes whose lost strip a rebuild wrote to a new member from torn
  // parity that the other parity could not vouch for (the degraded write
  // hole, docs/raid-write-hole.md), since the group was assembled.
  std::uint64_t rebuild_unverifiable() const noexcept { return rebuild_unverifiable_; }
  // Since the group was assembled: stripes that any resync or rebuild
  // rebuilt from parity it could not verify, and regions ever torn.
  std::uint64_t unverifiable_stripes() const noexcept { return unverifiable_stripes_; }
  std::uint64_t regions_torn() const noexcept { return regions_torn_; }

 private:
  // What a stripe operation is for. The three background purposes read
  // the whole stripe, parity included, and are run from
  // raid6_background.cc; their internal requests carry no caller buffers.
  enum class stripe_purpose : std::uint8_t {
    read,     // a caller's read
    write,    // a caller's write
    discard,  // a caller's discard: a write of zeros
    scrub,    // check P and Q against the data; repair a single wrong strip
    rebuild,  // write the new member's strip, rebuilt from the others
    resync,   // after a crash: P and Q recomputed from the data
  };
  struct stripe_op;
  struct member_io {
    stripe_op* op = nullptr;
    unsigned member = 0;
    const device::block_device* device = nullptr;  // the member's device when issued
    device::request req;
    iovec segment{};
    watched_io watch;
    bool in_flight = false;  // submitted, not yet answered
  };
  // One request's progress over its stripes.
  struct parent {
    device::request* outer = nullptr;
    unsigned pending = 0;
    std::error_code result;
  };
  struct stripe_op {
    raid6_group* group = nullptr;
    parent* owner = nullptr;
    std::uint64_t stripe = 0;
    std::uint64_t begin = 0;  // stripe-data blocks [begin, end) this op covers
    std::uint64_t end = 0;
    std::uint64_t caller_offset_bytes = 0;  // where the op's data sits in the caller's buffers
    stripe_purpose purpose = stripe_purpose::read;
    bool intent = false;          // counted as a write in its bitmap region
    bool rmw = false;             // read-modify-write: old data, P and Q only
    bool reconstructing = false;  // reading the touched rows of the surviving strips
    bool wide = false;            // ... parity included: enough to rebuild lost data
    bool out_of_space = false;    // a member's backing store refused a write
    bool unlocked = false;        // a healthy read run beside the stripe's lock holders
    // Background work a caller's op waits for (behind it on the stripe's
    // lock): its member I/O goes as foreground from then on.
    bool expedited = false;
    device::range_lock_entry lock_entry;  // in stripes_
    unsigned pending = 0;
    unsigned abandoned = 0;         // member I/Os timed out whose devices have not answered yet
    bool finished = false;          // done, but held for its abandoned I/Os
    std::vector<bool> lost;         // per codec strip, for this op
    std::vector<bool> repair;       // lost to a read error on a working member: rewrite it
    device::aligned_buffer strips;  // (n + 2) strips of strip_blocks
    // Full-stripe writes: data strips written straight from the caller's
    // buffers (nullptr: from `strips`).
    std::vector<std::byte*> direct;
    std::vector<member_io> ios;  // one per member
    std::vector<std::byte*>
        pointers;  // strip addresses for the codec (kept: no allocation per I/O)
  };

  raid6_group(std::vector<device::block_device*> members, const raid6_layout& layout,
              pq_codec codec, const raid6_options& options);
  void start_request(device::request& req);
  // Runs the op under its stripe's FIFO lock -- except a read whose data
  // strips all work, which reads them at once, beside whatever holds the
  // lock (md reads a healthy chunk directly): each block it returns is
  // then the old or the new of a write in flight, as any read overlapping
  // a write may return. If one of its reads fails, it queues for the lock
  // and starts again (reconstruction needs the stripe still).
  void lock_and_run(stripe_op& op);
  void run_locked(stripe_op& op);
  // A caller's op waits for `holder` on the stripe's lock: if that is
  // background I/O (a scrub's), its held member I/O goes at once and the
  // rest of it as foreground, so the host does not wait at background pace
  // (priority inheritance). Rebuilds and resyncs run as foreground.
  void expedite_op(stripe_op& holder);
  void run(stripe_op& op);
  void start_reads(stripe_op& op);
  void after_reads(stripe_op& op);
  void read_modify_write(stripe_op& op);
  void start_writes(stripe_op& op);
  // Write-intent bitmap: whether the op must wait for its region's bit to
  // be on disk (it is queued and run again then).
  bool await_intent(stripe_op& op);
  bool needs_resync(std::uint64_t stripe) const noexcept;
  // A write to `stripe` landed on some members only, for want of space:
  // its region stays marked until the next assembly resyncs it.
  void tear(std::uint64_t stripe);
  // Starts a resync of the torn regions, if none runs and the interval allows.
  void resync_torn();
  // A resync of `regions` (of the write-intent bitmap) is to run: its
  // progress counted, nothing started (resync_next does).
  void begin_resync(std::vector<bool> regions, bool torn_pass);
  void set_intent_geometry(std::uint64_t offset_blocks, std::uint64_t region_stripes);
  void resync_next();
  void pause_resync();
  // The resync ended or paused: on_resync_stopped, once.
  void report_resync();
  // Whether data strips rebuilt from parity can be trusted: one strip
  // was lost, and the parity not used to rebuild it agrees.
  bool rebuilt_verified(std::span<const unsigned> lost, std::span<std::byte* const> strips,
                        std::uint64_t row_bytes);
  static void on_resync_stripe(device::request& r) noexcept;
  void read_intents(std::function<void()> then);
  // Assembly's second half: the group the superblocks describe.
  static assembled from_plan(assembly_plan plan, const raid6_options& options);
  void finish(stripe_op& op, std::error_code result);
  void issue(stripe_op& op, unsigned strip, device::op operation, std::uint64_t row_begin,
             std::uint64_t row_end);
  static void on_member_done(device::request& req) noexcept;
  // A member I/O's outcome: its answer, or timed_out when abandoned.
  void member_io_done(member_io& io, std::error_code result);
  static void expire_member_io(watched_io& w);
  void release_op(stripe_op& op);
  std::byte* strip_data(stripe_op& op, unsigned strip, std::uint64_t row) const noexcept;
  // Rows [first, last) of the strips touched by the op.
  std::pair<std::uint64_t, std::uint64_t> touched_rows(const stripe_op& op) const noexcept;
  bool touches(const stripe_op& op, unsigned data_strip) const noexcept;
  std::pair<std::uint64_t, std::uint64_t> rows_of(const stripe_op& op,
                                                  unsigned data_strip) const noexcept;
  stripe_purpose purpose_of(const device::request& req) const noexcept;
  static bool background(const stripe_op& op) noexcept {
    return op.purpose == stripe_purpose::scrub || op.purpose == stripe_purpose::rebuild ||
           op.purpose == stripe_purpose::resync;
  }
  static bool zeros(const stripe_op& op) noexcept { return op.purpose == stripe_purpose::discard; }
  // Rewrites rows [first, last) of the strips a working member could not
  // read (rebuilt from the others), then finishes the op.
  void write_back_repairs(stripe_op& op, std::uint64_t first, std::uint64_t last);
  // The background purposes' last step, once every strip is read and the
  // lost ones rebuilt (raid6_background.cc).
  void scrub_stripe(stripe_op& op, std::span<const unsigned> lost, std::uint64_t row_bytes);
  void write_rebuilt_strip(stripe_op& op);
  void resync_stripe(stripe_op& op, std::span<const unsigned> lost, std::uint64_t row_bytes);
  void check_and_repair(stripe_op& op, std::span<std::byte* const> strips, std::uint64_t row_bytes);
  void scrub_next();
  static void on_scrub_stripe(device::request& r) noexcept;
  // Whether `member` cannot serve `stripe`: failed, or a new member whose
  // rebuild has not reached it.
  bool unusable(unsigned member, std::uint64_t stripe) const noexcept;
  void rebuild_next();
  static void on_rebuild_stripe(device::request& r) noexcept;
  void end_rebuild(std::error_code result);
  superblock describe(unsigned member) const;

  // Which device is each member, their failures (at most two), timeouts,
  // flushes, acknowledgements and the superblocks that record membership.
  member_set members_;
  raid6_layout layout_;
  pq_codec codec_;
  device::block_geometry geometry_;
  std::uint64_t repaired_blocks_ = 0;
  device::slot_pool<stripe_op> ops_;
  device::slot_pool<parent> parents_;
  // The stripe lock: one operation per stripe at a time, in arrival order
  // (ranges of one stripe; buckets by stripe number).
  device::range_lock<stripe_op, &stripe_op::lock_entry> stripes_{256};
  device::completion_queue rejected_;
  struct scrub_state {
    device::request req;  // the stripe being checked, as an internal whole-stripe read
    std::function<void(const scrub_report&)> done;
    scrub_report report;
    std::uint64_t next_stripe = 0;
    bool running = false;
    bool cancel = false;  // stop before the next stripe
  };
  scrub_state scrub_;
  // A rebuild onto a spare; the member it rebuilds is members_.rebuilding().
  struct rebuild_state {
    std::vector<bool> rebuilt;  // per stripe: the new member holds it
    std::uint64_t rebuilt_count = 0;
    std::uint64_t next_stripe = 0;       // the next to start
    std::vector<device::request> reqs;   // one per stripe in flight
    std::vector<device::request*> idle;  // of reqs
    std::error_code error;               // the first failure; stops the rebuild
    std::function<void(std::error_code)> done;
    device::time_point started{};
    std::unique_ptr<device::timer> pacing;
    new_member member_steps;  // the new member claimed first, flushed before the rebuild ends
  };
  rebuild_state rebuild_;
  // The write-intent bitmap: one bit per region of intent_region_stripes_ stripes.
  write_intent intent_;
  std::uint64_t intent_region_stripes_ = 0;
  struct resync_state {
    std::vector<bool> regions;  // still to resync
    device::request req;
    std::uint64_t next_stripe = 0;  // the next to start
    std::uint64_t done_below = 0;   // every marked stripe below this is resynced
    bool running = false;           // marked regions are left to resync
    bool paused = false;            // by mark_clean: no stripe starts any more
    bool stripe_in_flight = false;
    bool reported = false;   // on_resync_stopped told
    bool torn_pass = false;  // of torn regions (resync_torn), not after a crash
    resync_progress progress;
  };
  resync_state resync_;
  std::vector<bool> torn_;    // per bitmap region: torn by a full backing store (see tear())
  std::vector<bool> retorn_;  // ... and torn again while resync_torn's pass was at it
  std::uint64_t torn_regions_ = 0;
  device::time_point next_torn_resync_{};
  device::duration torn_resync_interval_{};
  std::uint64_t rebuild_unverifiable_ = 0;
  std::uint64_t unverifiable_stripes_ = 0;
  std::uint64_t regions_torn_ = 0;
  device::clock* clock_ = nullptr;
  double rebuild_mb_per_s_ = 0;
  std::function<void(const resync_progress&)> on_resync_stopped_;
  unsigned rebuild_in_flight_max_ = 8;
};

}  // namespace strata::raid
