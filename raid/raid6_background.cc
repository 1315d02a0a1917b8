// A RAID-6 group's background work: scrub, rebuild onto a spare, and the
// resync after an unclean shutdown (docs/raid-write-hole.md). Each runs
// stripe operations of its own purpose (raid6_group::stripe_purpose)
// through the same stripe locks as foreground I/O; this file holds their
// pacing and bookkeeping, and what each does once a stripe is read.
#include <boost/asio/post.hpp>
#include <string>

#include "raid/members.h"
#include "raid/raid6_group.h"

namespace strata::raid {

using device::block_device;
using device::op;
using device::request;

// ---- Per stripe: the last step of each background purpose ----

void raid6_group::scrub_stripe(stripe_op& o, std::span<const unsigned> lost,
                               std::uint64_t row_bytes) {
  if (lost.empty()) {
    check_and_repair(o, o.pointers, row_bytes);
    return;
  }
  ++scrub_.report.stripes_repaired;  // unreadable strips: rebuilt above, written back now
  write_back_repairs(o, 0, layout_.strip_blocks);
}

void raid6_group::write_rebuilt_strip(stripe_op& o) {
  // The new member's strip, rebuilt from the others, and anything unreadable.
  const unsigned n = layout_.data_strips();
  o.pending = 1;
  for (unsigned s = 0; s < n + 2; ++s) {
    const unsigned member = layout_.member_of(o.stripe, s);
    const bool is_new = member == members_.rebuilding();
    if (members_.failed(member) || (!is_new && !o.repair[s])) continue;
    issue(o, s, op::write, 0, layout_.strip_blocks);
  }
  if (--o.pending == 0) finish(o, {});
}

void raid6_group::resync_stripe(stripe_op& o, std::span<const unsigned> lost,
                                std::uint64_t row_bytes) {
  const unsigned n = layout_.data_strips();
  std::span<std::byte* const> pointers = o.pointers;
  // Lost data came from parity that a crash may have left torn.
  if (!rebuilt_verified(lost, pointers, row_bytes)) {
    ++resync_.progress.unverifiable;
    ++unverifiable_stripes_;
  }
  (void)codec_.encode(pointers, row_bytes);  // P and Q from the data
  o.pending = 1;
  for (unsigned s = 0; s < n + 2; ++s) {
    if (members_.failed(layout_.member_of(o.stripe, s)) || (s < n && !o.repair[s]) ||
        (s >= n && o.lost[s] && !o.repair[s])) {
      continue;
    }
    issue(o, s, op::write, 0, layout_.strip_blocks);
  }
  if (--o.pending == 0) finish(o, {});
}

// ---- Scrub ----

void raid6_group::check_and_repair(stripe_op& o, std::span<std::byte* const> strips,
                                   std::uint64_t row_bytes) {
  const pq_check_result check = codec_.check(strips, row_bytes);
  switch (check.verdict) {
    case pq_check_result::kind::consistent:
      finish(o, {});
      return;
    case pq_check_result::kind::several_wrong:
      ++scrub_.report.stripes_unrecoverable;  // no single strip explains it: leave it
      finish(o, {});
      return;
    case pq_check_result::kind::one_strip_wrong:
      break;
  }
  ++scrub_.report.stripes_repaired;
  const unsigned wrong[] = {check.strip};
  (void)codec_.rebuild(strips, wrong, row_bytes);
  o.pending = 1;
  issue(o, check.strip, op::write, 0, layout_.strip_blocks);
  if (--o.pending == 0) finish(o, {});
}

void raid6_group::scrub(std::function<void(const scrub_report&)> done) {
  // A torn stripe's parity disagrees with its data for a known reason: a
  // scrub would take it for corruption and could "repair" a data strip.
  if (scrub_.running || failed_members() > 0 || members_.rebuilding() != member_set::none ||
      resync_.running || torn_regions_ > 0) {
    scrub_report refused;
    refused.error = make_error_code(scrub_.running ? errc::invalid_argument : errc::not_supported);
    boost::asio::post(executor(), [done = std::move(done), refused] { done(refused); });
    return;
  }
  scrub_.done = std::move(done);
  scrub_.report = {};
  scrub_.next_stripe = 0;
  scrub_.running = true;
  scrub_.cancel = false;
  scrub_next();
}

void raid6_group::scrub_next() {
  const bool degraded = failed_members() > 0;
  if (scrub_.next_stripe == layout_.stripes || degraded || scrub_.cancel) {
    // A member failed mid-scrub: without every member there is nothing to
    // check against, so stop and say so.
    if (degraded && !scrub_.report.error) scrub_.report.error = errc::not_supported;
    if (scrub_.cancel && !scrub_.report.error) scrub_.report.error = errc::canceled;
    scrub_.cancel = false;
    scrub_.running = false;
    auto done = std::move(scrub_.done);
    done(scrub_.report);
    return;
  }
  request& r = scrub_.req;
  r = request{};
  r.operation = op::read;
  r.priority = device::io_class::background;
  r.lba = scrub_.next_stripe * layout_.stripe_data_blocks();
  r.block_count = layout_.stripe_data_blocks();
  r.context = this;
  r.on_complete = &raid6_group::on_scrub_stripe;
  start_request(r);  // internal: no caller buffers; the op checks instead of copying
}

void raid6_group::on_scrub_stripe(request& r) noexcept {
  raid6_group& g = *static_cast<raid6_group*>(r.context);
  if (r.result) {
    g.scrub_.report.error = r.result;
    g.scrub_.next_stripe = g.layout_.stripes;  // stop
  } else {
    ++g.scrub_.report.stripes_checked;
    ++g.scrub_.next_stripe;
  }
  g.scrub_next();
}

// ---- Rebuild onto a spare ----

std::optional<error> raid6_group::replace_member(unsigned member, block_device* spare,
                                                 std::function<void(std::error_code)> done) {
  if (member >= members_.size()) {
    return make_error(errc::invalid_argument, "no member " + std::to_string(member));
  }
  if (!members_.failed(member)) {
    return make_error(errc::invalid_argument, "member " + std::to_string(member) +
                                                  " is working: fail it before replacing it");
  }
  if (group_failed()) {
    return make_error(errc::device_failed,
                      std::to_string(failed_members()) +
                          " members have failed: too few are left to rebuild from");
  }
  if (members_.rebuilding() != member_set::none) {
    return make_error(errc::busy, "member " + std::to_string(members_.rebuilding()) +
                                      " is being rebuilt already");
  }
  if (scrub_.running) {
    return make_error(errc::busy, "a scrub is running; replace the member after it");
  }
  if (resync_.running) {
    return make_error(
        errc::busy, "the resync after an unclean shutdown is running; replace the member after it");
  }
  std::vector<block_device*> check = members_.devices();
  check[member] = spare;
  if (auto problem = check_members(check, 4, pq_codec::max_data_strips + 2, "RAID-6")) {
    return make_error(errc::invalid_argument, "the spare does not fit: " + problem->message);
  }
  members_.begin_rebuild(member, spare);
  rebuild_.rebuilt.assign(layout_.stripes, false);
  rebuild_.rebuilt_count = 0;
  rebuild_.next_stripe = 0;
  rebuild_.error = {};
  rebuild_.reqs.assign(rebuild_in_flight_max_, request{});
  rebuild_.idle.clear();
  for (request& r : rebuild_.reqs) rebuild_.idle.push_back(&r);
  rebuild_.done = std::move(done);
  rebuild_.started = clock_ != nullptr ? clock_->now() : device::time_point{};
  if (clock_ != nullptr && !rebuild_.pacing) {
    rebuild_.pacing = clock_->make_timer(executor(), [this] { rebuild_next(); });
  }
  rebuild_.member_steps.claim(*spare, layout_.data_offset_blocks, this,
                              [](void* group, std::error_code ec) {
                                raid6_group& g = *static_cast<raid6_group*>(group);
                                if (!g.rebuild_.error) g.rebuild_.error = ec;
                                g.rebuild_next();  // ends it once its stripes in flight are done
                              });
  // Start from the loop: the caller gets its answer first.
  boost::asio::post(executor(), [this] { rebuild_next(); });
  return std::nullopt;
}

void raid6_group::cancel_rebuild() {
  if (members_.rebuilding() == member_set::none || rebuild_.error) return;
  rebuild_.error = make_error_code(errc::canceled);
  boost::asio::post(executor(), [this] { rebuild_next(); });  // ends it if nothing is in flight
}

rebuild_progress raid6_group::rebuild_status() const {
  rebuild_progress p;
  if (members_.rebuilding() == member_set::none) return p;
  const std::uint64_t strip_bytes = layout_.strip_blocks * geometry_.logical_block_size_bytes;
  p.running = true;
  p.bytes_done = rebuild_.rebuilt_count * strip_bytes;
  p.bytes_total = layout_.stripes * strip_bytes;
  if (clock_ != nullptr && p.bytes_done > 0) {
    const device::duration elapsed = clock_->now() - rebuild_.started;
    p.eta = device::duration(static_cast<std::int64_t>(
        static_cast<double>(elapsed.count()) * static_cast<double>(p.bytes_total - p.bytes_done) /
        static_cast<double>(p.bytes_done)));
  }
  return p;
}

// Starts stripes while there is room in flight and the rate allows; ends
// the rebuild when every stripe is in and nothing is in flight.
void raid6_group::rebuild_next() {
  if (members_.rebuilding() == member_set::none) return;  // ended; a late pacing tick
  const bool stopping = rebuild_.error || members_.failed(members_.rebuilding());
  const bool all_started = rebuild_.next_stripe == layout_.stripes;
  if (stopping || all_started) {
    if (rebuild_.idle.size() == rebuild_.reqs.size()) {
      end_rebuild(rebuild_.error                           ? rebuild_.error
                  : members_.failed(members_.rebuilding()) ? make_error_code(errc::device_failed)
                                                           : std::error_code{});
    }
    return;
  }
  const std::uint64_t strip_bytes = layout_.strip_blocks * geometry_.logical_block_size_bytes;
  while (!rebuild_.idle.empty() && rebuild_.next_stripe < layout_.stripes) {
    if (clock_ != nullptr && rebuild_mb_per_s_ > 0) {
      // Not ahead of the ceiling: the next stripe starts when the stripes
      // started so far would have taken at that rate.
      const auto allowed =
          rebuild_.started +
          device::duration(static_cast<std::int64_t>(
              static_cast<double>(rebuild_.next_stripe * strip_bytes) * 1e3 / rebuild_mb_per_s_));
      if (clock_->now() < allowed) {
        rebuild_.pacing->arm(allowed);
        return;
      }
    }
    request& r = *rebuild_.idle.back();
    rebuild_.idle.pop_back();
    r = request{};
    r.operation = op::read;
    // Not deferred behind the hosts (io_scheduler.h): until the rebuild
    // ends the group is degraded, the window a second failure is dangerous
    // in, and host reads of stripes it has not reached rebuild their strips.
    r.priority = device::io_class::foreground;
    r.lba = rebuild_.next_stripe++ * layout_.stripe_data_blocks();
    r.block_count = layout_.stripe_data_blocks();
    r.context = this;
    r.on_complete = &raid6_group::on_rebuild_stripe;
    start_request(r);  // internal: reads the survivors, writes the new member's strip
  }
}

void raid6_group::on_rebuild_stripe(request& r) noexcept {
  raid6_group& g = *static_cast<raid6_group*>(r.context);
  if (r.result && !g.rebuild_.error) g.rebuild_.error = r.result;
  g.rebuild_.idle.push_back(&r);
  g.rebuild_next();  // finish() has marked the stripe rebuilt
}

void raid6_group::end_rebuild(std::error_code result) {
  const auto resume = [](void* group, std::error_code flushed) {
    raid6_group& g = *static_cast<raid6_group*>(group);
    g.end_rebuild(flushed            ? flushed
                  : g.rebuild_.error ? g.rebuild_.error
                  : g.members_.failed(g.members_.rebuilding())
                      ? make_error_code(errc::device_failed)
                      : std::error_code{});
  };
  if (!rebuild_.member_steps.ready(result, *members_[members_.rebuilding()], this, resume)) return;
  rebuild_.rebuilt.clear();
  if (rebuild_.pacing) rebuild_.pacing->cancel();
  members_.end_rebuild(result, std::move(rebuild_.done));
}

// ---- The resync after an unclean shutdown ----

// Reads every current member's bitmap: a region set on any of them was
// being written when the group stopped, and is resynced.
void raid6_group::begin_resync(std::vector<bool> regions, bool torn_pass) {
  resync_.regions = std::move(regions);
  resync_.progress = {};
  for (std::uint64_t r = 0; r < resync_.regions.size(); ++r) {
    if (!resync_.regions[r]) continue;
    const std::uint64_t first = r * intent_region_stripes_;
    resync_.progress.stripes_total +=
        std::min(layout_.stripes, first + intent_region_stripes_) - first;
  }
  resync_.next_stripe = 0;
  resync_.done_below = 0;
  resync_.paused = false;
  resync_.reported = false;
  resync_.torn_pass = torn_pass;
  resync_.running = resync_.progress.stripes_total > 0;
  resync_.progress.running = resync_.running;
}

void raid6_group::read_intents(std::function<void()> then) {
  intent_.load([this, then = std::move(then)](std::vector<std::uint64_t> marked) {
    std::vector<bool> regions(intent_.regions(), false);
    for (std::uint64_t r : marked) {
      regions[r] = true;
      intent_.begin(r);  // held marked until the region is resynced
    }
    begin_resync(std::move(regions), false);
    // Every member gets the union, so that no single one must survive
    // for the resync to be remembered.
    if (resync_.running) intent_.write_now([] {});
    then();
  });
}

bool raid6_group::needs_resync(std::uint64_t stripe) const noexcept {
  if (torn_regions_ > 0 && torn_[stripe / intent_region_stripes_]) return true;
  // Not next_stripe: a stripe whose resync is queued behind a write on its
  // lock is not resynced yet.
  return resync_.running && resync_.regions[stripe / intent_region_stripes_] &&
         stripe >= resync_.done_below;
}

// A torn stripe's parity may disagree with its data, as after a crash, and
// the same repair applies: a resync. Not now -- its writes would meet the
// same full store -- but at the next assembly, from the region's bit, held
// set (on disk already: the write waited for it) until then.
void raid6_group::tear(std::uint64_t stripe) {
  if (!intent_.enabled()) return;  // no regions: nothing to mark
  const std::uint64_t region = stripe / intent_region_stripes_;
  if (torn_.empty()) {
    torn_.assign(intent_.regions(), false);
    retorn_.assign(intent_.regions(), false);
  }
  if (torn_[region]) {
    // Torn again while a resync of torn regions is at it: its pin is
    // released when that resync ends the region, so the region takes a
    // second one, and stays torn.
    if (resync_.running && resync_.torn_pass && resync_.regions[region] && !retorn_[region]) {
      retorn_[region] = true;
      intent_.begin(region);
    }
    return;
  }
  torn_[region] = true;
  ++torn_regions_;
  ++regions_torn_;
  // Never ended: mark_clean leaves it set. (An unformatted group has no
  // bitmap on disk: it remembers the tear until it is destroyed only.)
  if (members_.log().formatted()) intent_.begin(region);
}

resync_progress raid6_group::resync_status() const {
  return resync_.progress;
}

// A clean shutdown must not wait for a whole resync (hours on a large
// group, past any service manager's stop timeout): it stops after the
// stripe in flight. The regions it has not finished keep their bits, held
// in memory (intent_.begin at assembly) so that mark_clean leaves them set.
void raid6_group::pause_resync() {
  if (!resync_.running || resync_.paused) return;
  resync_.paused = true;
  resync_.progress.paused = true;
  if (!resync_.stripe_in_flight) report_resync();  // else once that stripe ends
}

void raid6_group::report_resync() {
  if (resync_.reported) return;
  resync_.reported = true;
  if (on_resync_stopped_) on_resync_stopped_(resync_.progress);
}

// One stripe at a time through the marked regions, at background priority.
void raid6_group::resync_next() {
  const std::uint64_t per_region = intent_region_stripes_;
  std::uint64_t& next = resync_.next_stripe;
  while (next < layout_.stripes && !resync_.regions[next / per_region]) {
    next = (next / per_region + 1) * per_region;
  }
  if (resync_.paused) {
    report_resync();  // the marked regions left wait for the next assembly
    return;
  }
  if (next >= layout_.stripes || group_failed()) {
    resync_.running = false;
    resync_.progress.running = false;
    // The bits go once a flush covers the rewritten parity.
    mark_clean([](std::error_code) {});
    report_resync();
    return;
  }
  request& r = resync_.req;
  r = request{};
  r.operation = op::read;
  r.priority = device::io_class::foreground;  // as a rebuild: the torn window is the exposure
  r.lba = next * layout_.stripe_data_blocks();
  r.block_count = layout_.stripe_data_blocks();
  r.context = this;
  r.on_complete = &raid6_group::on_resync_stripe;
  ++next;
  resync_.stripe_in_flight = true;
  start_request(r);  // internal: reads every strip, writes P and Q
}

void raid6_group::on_resync_stripe(request& r) noexcept {
  raid6_group& g = *static_cast<raid6_group*>(r.context);
  const std::uint64_t stripe = r.lba / g.layout_.stripe_data_blocks();
  g.resync_.stripe_in_flight = false;
  ++g.resync_.progress.stripes_done;
  g.resync_.done_below = stripe + 1;
  if ((stripe + 1) % g.intent_region_stripes_ == 0 || stripe + 1 == g.layout_.stripes) {
    const std::uint64_t region = stripe / g.intent_region_stripes_;
    g.resync_.regions[region] = false;
    if (g.resync_.torn_pass && g.torn_[region]) {
      if (g.retorn_[region]) {
        g.retorn_[region] = false;  // torn again meanwhile: its second pin stays
      } else {
        g.torn_[region] = false;  // consistent again
        --g.torn_regions_;
      }
    }
    g.intent_.end(region);  // resynced: the next flushes may clear it
  }
  g.resync_next();
}

// Torn regions are resynced as soon as a write lands again (the store has
// room, perhaps), not only at the next assembly: until then a member
// failure would leave their lost strips rebuildable only from parity that
// may not match the data. At most once per torn_resync_interval, so that
// a store still full is not read through again and again. The tear's own
// pin on each region is what this pass releases as it ends the region.
void raid6_group::resync_torn() {
  if (torn_regions_ == 0 || !members_.log().formatted() || resync_.running ||
      members_.rebuilding() != member_set::none || scrub_.running || group_failed()) {
    return;
  }
  if (clock_ != nullptr) {
    if (clock_->now() < next_torn_resync_) return;
    next_torn_resync_ = clock_->now() + torn_resync_interval_;
  }
  begin_resync(torn_, true);
  boost::asio::post(executor(), [this] {
    resync_next();
  });  // resync_.running keeps the group from idle() till then
}

}  // namespace strata::raid
