// Two controllers, the pools' side (array.h; README.md, "Two controllers"):
// each owned pool's metadata mirrored to the partner, the records on its
// drives saying whether that copy is current, and the takeover of a DOWN
// partner's pools from those copies.
#include <algorithm>
#include <boost/asio/post.hpp>

#include "controller/array.h"
#include "controller/array_records.h"
#include "controller/config_sync.h"
#include "strata/v1/resources.pb.h"

namespace strata::controller {

using namespace records;

void array::attach_mirror(const std::string& name, served_pool& p) {
  if (!partner_ || !p.metadata || p.mirror) return;
  p.mirror = std::make_unique<pool_mirror>(
      loop_.get_executor(), name,
      [this](std::uint16_t type, link_bytes payload, link_reply done) {
        partner_->call(type, std::move(payload), std::move(done));
      },
      [this, name](bool current, std::function<void(std::error_code)> done) {
        record_copy(name, current, std::move(done));
      });
  p.metadata->set_copy(p.mirror.get());
  if (partner_->up()) {
    p.mirror->link_up();
    p.metadata->poke();
  }
}

void array::claim_spare(const std::string& disk, std::function<void(raid::spare_claim)> answer) {
  if (closed_) return answer(raid::spare_claim::later);
  if (partner_->state() == partner::liveness::down) return answer(raid::spare_claim::granted);
  if (!partner_->up()) return answer(raid::spare_claim::later);
  partner_->call(link_type::spare_claim, link_bytes(disk.begin(), disk.end()),
                 [answer = std::move(answer)](std::expected<link_bytes, error> r) {
                   if (!r || r->size() != 1) return answer(raid::spare_claim::later);
                   answer((*r)[0] == 1 ? raid::spare_claim::granted : raid::spare_claim::taken);
                 });
}

void array::read_drive_areas(const std::vector<device::block_device*>& drives,
                             std::function<void(std::vector<drive_area>)> done) {
  ++area_io_in_flight_;
  read_areas(drives, [this, done = std::move(done)](std::vector<drive_area> found) {
    done(std::move(found));  // first: a write it starts keeps the count above zero
    --area_io_in_flight_;
  });
}

void array::write_drive_stamps(std::vector<area_stamp> stamps,
                               std::function<void(std::error_code)> done) {
  ++area_io_in_flight_;
  write_stamps(std::move(stamps), [this, done = std::move(done)](std::error_code e) {
    done(e);
    --area_io_in_flight_;
  });
}

void array::stamp_after_check(std::vector<area_stamp> stamps, std::shared_ptr<void> claim,
                              std::function<void(std::error_code)> done) {
  auto write = [this, stamps = std::move(stamps), claim = std::move(claim),
                done = std::move(done)]() mutable {
    write_drive_stamps(std::move(stamps), [claim = std::move(claim),
                                           done = std::move(done)](std::error_code e) mutable {
      claim.reset();  // written: the echo may move on
      done(e);
    });
  };
  if (!options_.test_stamps_after_partner_beats) return write();
  // The test hook (STRATA_TEST_HOOKS=stamps-after-partner-beats): the
  // thaw race made, not waited for. The epoch is written only once the
  // partner, checked DOWN a moment ago, beats again (or after 3 s).
  auto timer = std::make_shared<boost::asio::steady_timer>(loop_);
  auto poll = std::make_shared<std::function<void(int)>>();
  *poll = [this, timer, poll, write = std::move(write)](int left) mutable {
    if (closed_) return;
    if (left == 0 || !partner_->beats_silent()) {
      log("test hook: the takeover's epoch is written now, after its check");
      auto now = std::move(write);
      *poll = nullptr;  // the cycle ends (this lambda with it: only locals from here)
      return now();
    }
    timer->expires_after(std::chrono::milliseconds(10));
    timer->async_wait([poll, left](boost::system::error_code) { (*poll)(left - 1); });
  };
  (*poll)(300);
}

void array::read_ownership(const std::string& pool, std::function<void(ownership_found)> done) {
  std::vector<device::block_device*> drives;
  for (std::size_t i = 0; i < shelf_->size(); ++i) drives.push_back(&shelf_->drive(i));
  read_drive_areas(drives, [drives, pool, done = std::move(done)](std::vector<drive_area> areas) {
    ownership_found f;
    for (const drive_area& a : areas) {
      const auto& o = a.contents.ownership;
      if (!o || o->pool != pool) continue;
      f.members.push_back({drives[a.drive], a.offset_bytes, std::nullopt, std::nullopt});
      f.drives.push_back(a.drive);
      if (!f.newest || o->sequence() > f.newest->sequence()) f.newest = *o;
    }
    done(std::move(f));
  });
}

void array::record_copy(const std::string& name, bool current,
                        std::function<void(std::error_code)> done) {
  const std::error_code fenced = make_error_code(errc::permission_denied);
  const served_pool* served = pool_named(name);
  if (served == nullptr) return done(make_error_code(errc::not_found));
  if (served->lost) return done(fenced);
  if (closed_) return done(make_error_code(errc::canceled));
  if (lease_ && lease_->fenced()) {
    // Lapsed: once the drives say whether the pool is still this
    // controller's (confirm_ownership), again.
    confirm_ownership();
    auto later = std::make_shared<boost::asio::steady_timer>(loop_, std::chrono::milliseconds(20));
    later->async_wait(
        [this, later, name, current, done = std::move(done)](boost::system::error_code) mutable {
          record_copy(name, current, std::move(done));
        });
    return;
  }
  read_ownership(name, [this, name, current, fenced, done = std::move(done)](ownership_found f) {
    served_pool* p = pool_named(name);
    if (p == nullptr) return done(make_error_code(errc::not_found));
    if (f.newest && f.newest->sequence() > p->ownership.sequence() &&
        f.newest->owner != options_.controller) {
      events_->record(severity::critical, name,
                      "its drives say controller " + f.newest->owner + " owns it (epoch " +
                          std::to_string(f.newest->epoch) +
                          "): this controller no longer writes to them");
      // Not only this batch: a controller that finds its pool taken over
      // steps down, whatever way it learnt it.
      if (!p->lost) step_down(name, *f.newest, f.drives);
      return done(fenced);
    }
    if (lease_ && lease_->fenced())
      return record_copy(name, current, std::move(done));  // again, right before writing
    pool_ownership o = p->ownership;
    o.serial = std::max(o.serial, f.newest ? f.newest->serial : 0) + 1;
    o.partner_copy = current;
    o.unix_ms = unix_ms_now();
    p->ownership = o;
    for (area_stamp& s : f.members) s.ownership = o;
    write_drive_stamps(std::move(f.members), [this, name, current, done](std::error_code e) {
      if (e) {
        events_->record(severity::error, name,
                        "its drives could not be told whether controller " + partner_->name() +
                            "'s copy of its metadata is current: " + e.message());
      } else {
        events_->record(current ? severity::info : severity::warning, name,
                        current
                            ? "controller " + partner_->name() +
                                  " holds a current copy of its metadata: it can take the pool over"
                            : "controller " + partner_->name() +
                                  "'s copy of its metadata is behind: it cannot take the pool over "
                                  "until the link is back and the copy is made anew");
        // Its home is back and caught up: failback (out of this drive completion: it drives the
        // loop).
        if (current) boost::asio::post(loop_, [this, name] { hand_over(name); });
      }
      done(e);
    });
  });
}

void array::note_owner(const std::string& pool, const std::string& owner, std::uint64_t epoch) {
  const auto bytes = config_->get(pool);
  auto record =
      bytes ? decode<v1::Pool>(pool, *bytes) : std::unexpected(make_error(errc::not_found, pool));
  if (!record || (record->owner() == "controllers/" + owner && record->ownership_epoch() == epoch))
    return;
  record->set_owner("controllers/" + owner);
  record->set_ownership_epoch(epoch);
  config_batch b;
  b.put(pool, record->SerializeAsString());
  if (auto committed = config_->commit(b); !committed) {
    events_->record(
        severity::error, pool,
        "its new owner is not in this controller's configuration: " + committed.error().message);
  }
}

void array::take_over_pools() {
  if (closed_ || !partner_ || partner_->state() != partner::liveness::down) return;
  // A read of the config store on the loop: rare (a partner just died), and small.
  for (const auto& [key, bytes] : config_->list("pools/")) {
    if (!top_level(key, "pools/")) continue;
    auto record = decode<v1::Pool>(key, bytes);
    if (!record || short_name(record->owner()) != partner_->name() || pools_.contains(key) ||
        taking_over_.contains(key))
      continue;
    take_over(*record);
  }
}

void array::take_over(const v1::Pool& record) {
  const std::string name = record.name();
  taking_over_.insert(name);
  events_->record(severity::warning, name,
                  "controller " + partner_->name() + " is DOWN: taking the pool over");
  const auto started = clock_.now();
  auto fail = [this, name](const std::string& why) {
    taking_over_.erase(name);
    if (replicas_) replicas_->release(name);  // copies of it may be made here again
    events_->record(severity::critical, name, "not taken over: " + why);
    log(name + ": not taken over: " + why);
  };
  read_ownership(name, [this, record, name, fail, started](ownership_found f) {
    if (closed_) return;
    if (partner_->state() != partner::liveness::down)
      return fail("controller " + partner_->name() + " is back");
    if (!f.newest) return fail("no drive holds its ownership record");
    if (f.newest->owner == options_.controller) {
      // A hand-over to this controller cut short: the partner closed the
      // pool and wrote this controller's epoch, then died before it said
      // so over the link. Nobody else will serve it; the copy here is
      // whole (the partner hands a pool over only then, and wrote nothing
      // to it after).
      return replicas_->take(name, [this, record, name, fail, o = *f.newest](bool copied) {
        if (closed_) return;
        if (!copied)
          return fail(
              "its drives name this controller (a hand-over cut short), but it holds no whole copy "
              "of its metadata made since it started");
        one_at_a_time([this, record, name, fail, o] {
          if (closed_) return;
          if (auto served = take_over_now(record, o); !served) return fail(served.error().message);
          taking_over_.erase(name);
          events_->record(severity::warning, name,
                          "served here: controller " + partner_->name() +
                              " handed it over (epoch " + std::to_string(o.epoch) +
                              ") and died before it said so");
        });
      });
    }
    if (f.newest->owner != partner_->name())
      return fail("its drives say controller " + f.newest->owner + " owns it");
    // A configuration older than the partner's (changes made there while
    // this controller was away) would serve the pool without them: its
    // volumes made since, unmapped, deleted at the next start.
    const std::uint64_t mine = generation_of(*config_);
    if (const auto theirs = partner_->beat_generation(); theirs && *theirs > mine) {
      return fail("this controller's configuration (generation " + std::to_string(mine) +
                  ") is older than controller " + partner_->name() + "'s (generation " +
                  std::to_string(*theirs) + ", its last drive beat): it waits for controller " +
                  partner_->name() + " to copy it");
    }
    if (!f.newest->partner_copy) {
      return fail(
          "its drives say this controller's copy of its metadata is behind (the partner link was "
          "down when controller " +
          partner_->name() +
          " last wrote it): taking it over would lose acknowledged writes. It waits for "
          "controller " +
          partner_->name());
    }
    replicas_->take(name, [this, record, name, fail, started, f](bool copied) {
      if (closed_) return;
      if (!copied)
        return fail("this controller holds no whole copy of its metadata made since it started");
      // Again right before the epoch is written: a partner that started
      // again meanwhile waits to be heard before it opens its pools
      // (array::reclaim_pools), and is heard by now.
      if (partner_->state() != partner::liveness::down)
        return fail("controller " + partner_->name() + " is back");
      if (lease_ && !lease_->usable())
        return fail("this controller's own lease lapsed (it was frozen itself)");
      // Fenced from here on: the old owner, if it only froze, finds the
      // higher epoch before it writes again (its lease lapsed already, and
      // it confirms only once this controller echoes a beat it wrote after
      // thawing: the claim holds the echo until the epoch is written).
      pool_ownership o{name, options_.controller, f.newest->epoch + 1, unix_ms_now(), 0, false};
      std::vector<area_stamp> stamps = f.members;
      for (area_stamp& s : stamps) s.ownership = o;
      // The partner's key off the pool's drives first, within the claim:
      // they refuse its writes from here on, those it queued before it
      // froze too (raid/device/reservations.h).
      auto claim = partner_->claim();
      const std::set<std::size_t> drives = drives_of_pool(name, f.drives);
      shelf_->preempt(
          {drives.begin(), drives.end()}, reservation_key_of(partner_->name()),
          [this, name, count = drives.size(), stamps = std::move(stamps), claim = std::move(claim),
           record, fail, started, o](std::error_code preempted) mutable {
            if (closed_) return;
            if (preempted) {
              events_->record(severity::warning, name,
                              "controller " + partner_->name() +
                                  "'s reservation key could not be removed from every drive (" +
                                  preempted.message() + "): it is fenced by its lease alone");
            } else {
              log(name + ": controller " + partner_->name() + "'s reservation key removed from " +
                  std::to_string(count) + " drives");
            }
            take_over_stamped(record, std::move(stamps), std::move(claim), fail, started, o);
          });
    });
  });
}

void array::take_over_stamped(const v1::Pool& record, std::vector<area_stamp> stamps,
                              std::shared_ptr<void> claim,
                              std::function<void(const std::string&)> fail,
                              device::time_point started, const pool_ownership& o) {
  const std::string name = record.name();
  stamp_after_check(
      std::move(stamps), std::move(claim),
      [this, record, name, fail, started, o](std::error_code e) {
        if (closed_) return;
        if (e)
          return fail("the new ownership epoch could not be written to its drives: " + e.message());
        // Out of the drive's completion first: opening the pool drives the
        // loop, whose ring takes completions again only after this one.
        one_at_a_time([this, record, name, fail, started, o] {
          if (closed_) return;
          if (auto served = take_over_now(record, o); !served) return fail(served.error().message);
          taking_over_.erase(name);
          const auto ms =
              std::chrono::duration_cast<std::chrono::milliseconds>(clock_.now() - started).count();
          events_->record(severity::warning, name,
                          "taken over from controller " + partner_->name() + " (epoch " +
                              std::to_string(o.epoch) + ") in " + std::to_string(ms) +
                              " ms: served here");
          log(name + ": taken over from controller " + partner_->name() + " in " +
              std::to_string(ms) + " ms");
        });
      });
}

std::expected<void, error> array::take_over_now(const v1::Pool& record, const pool_ownership& o) {
  std::vector<std::string> groups(record.groups().begin(), record.groups().end());
  if (!record.read_cache_group().empty()) groups.push_back(record.read_cache_group());
  if (!record.write_log_group().empty()) groups.push_back(record.write_log_group());
  for (const std::string& g : groups) {
    const auto at = std::ranges::find(group_names_, g);
    if (at != group_names_.end() &&
        !lost_groups_.contains(static_cast<std::size_t>(at - group_names_.begin())))
      continue;
    const auto bytes = config_->get(g);
    if (!bytes)
      return std::unexpected(
          make_error(errc::not_found, "its group " + g + " is not in the config"));
    if (auto assembled = assemble_named(g, *bytes); !assembled) return assembled;
  }
  auto loaded = load_pool(record, true);  // the copy at STATE/pools/NAME; its write log replayed
  if (!loaded) return std::unexpected(loaded.error());
  loaded->ownership = o;
  adopt_pool(record.name(), std::move(*loaded));
  // Each volume's own write cache mode (and a delete the last owner's stop
  // cut short), as at start-up: a volume recorded write-through writes
  // through on every owner.
  if (auto reconciled = reconcile_volumes(record.name()); !reconciled) {
    events_->record(severity::error, record.name(),
                    "its volumes' records were not applied after the change of owner: " +
                        reconciled.error().message);
  }
  // The LUNs this controller's ports forwarded are served here now; any
  // mapping not yet presented (made while the link was down) is added.
  present_pool(record.name(), true);
  for (const auto& [key, bytes] : config_->list("mappings/")) {
    auto mapping = decode<v1::Mapping>(key, bytes);
    if (!mapping || !mapping->volume().starts_with(record.name() + "/volumes/")) continue;
    if (const auto h = hosts_.find(mapping->host());
        h != hosts_.end() && h->second.luns->find(mapping->lun()) != nullptr)
      continue;
    const auto volume_bytes = config_->get(mapping->volume());
    if (!volume_bytes) continue;
    auto volume = decode<v1::Volume>(mapping->volume(), *volume_bytes);
    if (!volume) continue;
    if (auto mapped = map_volume(volume->name(), volume->serial(), volume->block_size_bytes(),
                                 mapping->host(), mapping->lun());
        !mapped) {
      events_->record(severity::error, key,
                      "not presented after the takeover: " + mapped.error().message);
    }
  }
  note_owner(record.name(), options_.controller, o.epoch);
  return {};
}

bool array::home_is_partner(const v1::Pool& record) const {
  return partner_ &&
         (record.home().empty() ? std::string("a") : short_name(record.home())) == partner_->name();
}

bool array::belongs_with_partner(const v1::Pool& record) const {
  if (!partner_) return false;
  auto failed_over = [this](const std::string& controller) {
    const auto bytes = config_->get("controllers/" + controller);
    v1::Controller c;
    return bytes && c.ParseFromString(*bytes) && c.failed_over();
  };
  if (failed_over(options_.controller)) return true;
  return home_is_partner(record) && !failed_over(partner_->name());
}

void array::placement_changed() {
  std::vector<std::string> served;
  for (const auto& [name, p] : pools_) {
    if (!p.lost) served.push_back(name);
  }
  for (const std::string& name : served) hand_over(name);
}

void array::follow_pools(const std::string& operation, std::map<std::string, std::string> pools,
                         std::chrono::seconds limit) {
  if (closed_) {
    operations_->finish(
        operation,
        std::unexpected(make_error(errc::canceled, "stopped: the controller is stopping")), true);
    return;
  }
  pool_moves_.push_back({operation, std::move(pools), clock_.now() + limit});
  if (!pool_move_timer_) {
    pool_move_timer_ = std::make_unique<boost::asio::steady_timer>(loop_);
    check_pool_moves();
  }
}

void array::check_pool_moves() {
  std::erase_if(pool_moves_, [&](const followed_pools& f) {
    std::size_t moved = 0;
    std::string waiting;
    for (const auto& [name, to] : f.pools) {
      // A small read of the config store on the loop, ten times a second
      // while an administrator's move runs.
      const auto bytes = config_->get(name);
      v1::Pool record;
      const bool known = bytes && record.ParseFromString(*bytes);
      if (known && (record.owner().empty() ? std::string("controllers/a") : record.owner()) == to) {
        ++moved;
      } else {
        waiting += (waiting.empty() ? "" : ", ") + name + " (to " + to + ")";
      }
    }
    operations_->progress(
        f.operation,
        f.pools.empty() ? 1.0 : static_cast<double>(moved) / static_cast<double>(f.pools.size()));
    if (moved == f.pools.size()) {
      operations_->finish(f.operation, {});
      return true;
    }
    if (clock_.now() < f.until) return false;
    operations_->finish(
        f.operation, std::unexpected(make_error(errc::timed_out, "not moved in time: " + waiting +
                                                                     "; the events say why")));
    return true;
  });
  if (pool_moves_.empty() || closed_) {
    pool_move_timer_.reset();
    return;
  }
  pool_move_timer_->expires_after(std::chrono::milliseconds(100));
  pool_move_timer_->async_wait([this](boost::system::error_code ec) {
    if (!ec && !closed_) check_pool_moves();
  });
}

void array::reclaim_pools() {
  if (reclaim_timer_ || closed_) return;
  // Time for a takeover the partner began before it heard this controller
  // to write its epoch (it checks right before writing that this
  // controller is still DOWN; it heard it within a beat of the change).
  reclaim_timer_ = std::make_unique<boost::asio::steady_timer>(loop_, std::chrono::seconds(2));
  reclaim_timer_->async_wait([this](boost::system::error_code ec) {
    if (ec || closed_) return;
    for (const std::string& name : std::exchange(reclaim_, {})) {
      read_ownership(name, [this, name](ownership_found f) {
        if (closed_) return;
        const auto bytes = config_->get(name);
        auto record = bytes ? decode<v1::Pool>(name, *bytes)
                            : std::unexpected(make_error(errc::not_found, name));
        if (!f.newest || pools_.contains(name) || !record) {
          taking_over_.erase(name);
          return;
        }
        if (f.newest->owner != options_.controller) {
          taking_over_.erase(name);
          // Taken over while this controller was away: the partner's now.
          note_owner(name, f.newest->owner, f.newest->epoch);
          events_->record(severity::info, name,
                          "controller " + f.newest->owner +
                              " took it over while this controller was away: it serves it");
          if (partner_->state() == partner::liveness::down) take_over_pools();
          return;
        }
        pool_ownership o{name, options_.controller, f.newest->epoch + 1, unix_ms_now(), 0, false};
        for (area_stamp& s : f.members) s.ownership = o;
        write_drive_stamps(std::move(f.members), [this, record = *record, name,
                                                  o](std::error_code e) {
          one_at_a_time([this, record, name, o, e] {
            if (closed_) return;
            if (e) {
              taking_over_.erase(name);
              events_->record(
                  severity::critical, name,
                  "not opened: its drives did not take the ownership record (" + e.message() + ")");
              return;
            }
            auto served = take_over_now(record, o);
            taking_over_.erase(name);
            if (!served) {
              events_->record(severity::critical, name, "not opened: " + served.error().message);
              return;
            }
            events_->record(severity::info, name,
                            "opened once controller " + partner_->name() +
                                " heard this controller: its drives still name this one (epoch " +
                                std::to_string(o.epoch) + ")");
          });
        });
      });
    }
  });
}

void array::one_at_a_time(std::function<void()> work) {
  boost::asio::post(loop_, [this, work = std::move(work)]() mutable {
    if (moving_pool_) {
      pool_work_.push_back(std::move(work));
      return;
    }
    moving_pool_ = true;
    work();
    moving_pool_ = false;
    if (pool_work_.empty()) return;
    auto next = std::move(pool_work_.front());
    pool_work_.pop_front();
    one_at_a_time(std::move(next));
  });
}

void array::hand_over(const std::string& name) {
  one_at_a_time([this, name] { hand_over_now(name); });
}

void array::hand_over_now(const std::string& name) {
  served_pool* p = pool_named(name);
  if (closed_ || p == nullptr || p->lost || handing_over_.contains(name) || !partner_ ||
      !partner_->up())
    return;
  if (!p->mirror || !p->mirror->current()) return;  // the partner's copy first
  const auto bytes = config_->get(name);
  auto record =
      bytes ? decode<v1::Pool>(name, *bytes) : std::unexpected(make_error(errc::not_found, name));
  if (!record || !belongs_with_partner(*record)) return;
  if (const auto theirs = partner_->beat_generation();
      !theirs || *theirs < generation_of(*config_)) {
    // The partner has not caught up with this configuration yet (changes
    // made here while it was away): it would serve the pool without them.
    // Again once its drive beat names this generation.
    auto later = std::make_shared<boost::asio::steady_timer>(loop_, std::chrono::milliseconds(250));
    later->async_wait([this, later, name](boost::system::error_code ec) {
      if (!ec && !closed_) hand_over(name);
    });
    return;
  }
  handing_over_.insert(name);
  const std::string to = partner_->name();
  const std::string why = home_is_partner(*record)
                              ? "its home"
                              : "as controller " + options_.controller + " is failed over";
  events_->record(severity::info, name,
                  "handing the pool over to controller " + to + ", " + why +
                      ", which holds a current copy of its metadata: its I/O pauses");
  const auto started = clock_.now();
  // Its LUNs forwarded from now on (answering "transitioning" until the
  // partner serves the pool); the units here retire once their commands end.
  present_pool(name, false);
  wait([&] { return retiring_.empty(); });
  p = pool_named(name);
  p->migrator->stop();
  quiesce_pool(*p);
  wait([&] { return p->metadata->in_flight() == 0; });
  const bool copied = p->mirror->current();
  p->mirror->stop();
  p->migrator.reset();
  p->pool.reset();
  p->write_cache.reset();
  p->metadata.reset();
  const pool_ownership mine = p->ownership;
  pools_.erase(name);
  replicas_->release(name);
  std::vector<std::string> groups(record->groups().begin(), record->groups().end());
  groups.push_back(record->read_cache_group());
  groups.push_back(record->write_log_group());
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (std::ranges::find(groups, group_names_[g]) == groups.end()) continue;
    std::optional<std::error_code> clean;
    groups_[g]->mark_clean([&](std::error_code ec) { clean = ec; });
    wait([&] { return clean.has_value() && groups_[g]->idle(); });
    if (ceph_image* image = groups_[g]->ceph()) {
      // Its lock, for the partner. Closed off the loop, which goes on
      // meanwhile (a partitioned cluster holds the close for seconds).
      bool closed = false;
      const auto closing = clock_.now();
      image->release([&closed] { closed = true; });
      wait([&] { return closed; });
      log(group_names_[g] + ": its Ceph image closed, its lock released, in " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(clock_.now() - closing)
                  .count()) +
          " ms");
    }
    lost_groups_.insert(g);  // the partner's from now on: assembled anew if the pool comes back
  }
  if (!copied) return take_back(*record, "its last metadata did not reach controller " + to);
  // The store just closed is as current as the receiver's copy: it becomes
  // this controller's copy, and the record says so, so that this
  // controller can take the pool over should the receiver die before it
  // serves (or while its own first copy to here is under way).
  replicas_->adopt(name);
  read_ownership(name, [this, record = *record, name, to, why, started, mine](ownership_found f) {
    pool_ownership o{name,          to, std::max(mine.epoch, f.newest ? f.newest->epoch : 0) + 1,
                     unix_ms_now(), 0,  true};
    for (area_stamp& s : f.members) s.ownership = o;
    write_drive_stamps(
        std::move(f.members), [this, record, name, to, why, started, o](std::error_code e) {
          if (e)
            return take_back(record,
                             "its new owner could not be written to its drives: " + e.message());
          partner_->call(
              link_type::pool_handover, link_bytes(name.begin(), name.end()),
              [this, record, name, to, why, started, o](std::expected<link_bytes, error> r) {
                handing_over_.erase(name);
                if (!r && r.error().code != make_error_code(errc::canceled)) {
                  return take_back(record,
                                   "controller " + to + " did not take it: " + r.error().message);
                }
                note_owner(name, to, o.epoch);
                if (!r) {
                  // The link went down with the answer unknown: the partner may
                  // serve the pool. Taking it back could make two owners; the
                  // drives name the partner, which serves it at its next start.
                  events_->record(severity::critical, name,
                                  "the partner link went down during the hand-over to controller " +
                                      to +
                                      ", whose answer never came: the drives name it as the owner, "
                                      "so this controller "
                                      "does not take the pool back; if controller " +
                                      to + " does not serve it, restarting it does");
                  return;
                }
                const auto ms =
                    std::chrono::duration_cast<std::chrono::milliseconds>(clock_.now() - started)
                        .count();
                events_->record(severity::info, name,
                                "handed over to controller " + to + ", " + why + ", in " +
                                    std::to_string(ms) + " ms");
                log(name + ": handed over to controller " + to + ", " + why + ", in " +
                    std::to_string(ms) + " ms");
              });
        });
  });
}

void array::take_back(const v1::Pool& record, const std::string& why) {
  const std::string name = record.name();
  handing_over_.erase(name);
  events_->record(severity::error, name,
                  "not handed over: " + why + "; this controller serves it again");
  // The store, adopted as a copy when the hand-over began, closed first.
  replicas_->take(name, [this, record, name](bool) {
    read_ownership(name, [this, record, name](ownership_found f) {
      pool_ownership o{
          name, options_.controller, (f.newest ? f.newest->epoch : 0) + 1, unix_ms_now(), 0, false};
      for (area_stamp& s : f.members) s.ownership = o;
      write_drive_stamps(std::move(f.members), [this, record, name, o](std::error_code e) {
        one_at_a_time([this, record, name, o, e] {
          if (closed_) return;
          if (e) {
            events_->record(severity::critical, name,
                            "cannot take it back: its drives did not take the ownership record (" +
                                e.message() + "): no controller serves it");
            return;
          }
          if (auto served = take_over_now(record, o); !served) {
            events_->record(
                severity::critical, name,
                "cannot take it back: " + served.error().message + ": no controller serves it");
          }
        });
      });
    });
  });
}

void array::receive_pool(const std::string& name, link_reply reply) {
  const auto bytes = config_->get(name);
  auto record = bytes ? decode<v1::Pool>(name, *bytes)
                      : std::unexpected(make_error(
                            errc::not_found, name + " is not in this controller's configuration"));
  if (!record) return reply(std::unexpected(record.error()));
  if (pools_.contains(name)) {
    return reply(std::unexpected(
        make_error(errc::busy, name + " is still open on controller " + options_.controller +
                                   " (it stepped down from it): restart it first")));
  }
  taking_over_.insert(name);  // TAKING_OVER in the controller list meanwhile
  read_ownership(name, [this, record = *record, name,
                        reply = std::move(reply)](ownership_found f) mutable {
    if (!f.newest || f.newest->owner != options_.controller) {
      taking_over_.erase(name);
      return reply(std::unexpected(
          make_error(errc::invalid_argument,
                     "the drives of " + name + " do not name controller " + options_.controller)));
    }
    replicas_->take(
        name, [this, record, name, o = *f.newest, reply = std::move(reply)](bool copied) mutable {
          if (!copied) {
            taking_over_.erase(name);
            replicas_->release(name);
            return reply(std::unexpected(
                make_error(errc::not_found, "controller " + options_.controller +
                                                " holds no copy of " + name + "'s metadata")));
          }
          one_at_a_time([this, record, name, o, reply = std::move(reply)]() mutable {
            if (closed_) return reply(std::unexpected(make_error(errc::canceled, "stopping")));
            auto served = take_over_now(record, o);
            taking_over_.erase(name);
            if (!served) {
              replicas_->release(name);
              return reply(std::unexpected(served.error()));
            }
            events_->record(severity::info, record.name(),
                            "handed over by controller " + partner_->name() + " (epoch " +
                                std::to_string(o.epoch) + "): served here");
            reply(link_bytes{});
          });
        });
  });
}

void array::confirm_ownership() {
  if (confirming_ || closed_ || !lease_) return;
  confirming_ = true;
  events_->record(severity::warning, "",
                  "this controller's lease on its pools lapsed (it was frozen, or its drive "
                  "heartbeat stalled): its I/O to the "
                  "shared drives is held until the drives say it still owns its pools");
  confirm_timer_ = std::make_unique<boost::asio::steady_timer>(loop_);
  // Polls for the renewed lease (the next drive beat), then for the
  // partner's echo of a beat written since (heartbeat.h): a takeover the
  // partner began before it heard this controller again has its records
  // on the drives by then, and one it begins later finds this controller
  // beating and gives up. Reading the records any earlier could miss a
  // takeover that has checked "DOWN" and not yet written its epoch: both
  // would serve the pool (the thaw race). A partner that is silent itself
  // takes nothing over; one whose beats carry no echo (an older version)
  // gets the 2 s that reclaim_pools gives at start-up.
  auto poll = std::make_shared<std::function<void()>>();
  auto since = std::make_shared<std::optional<std::pair<std::uint64_t, device::time_point>>>();
  *poll = [this, poll, since] {
    if (closed_) return;
    auto again = [this, poll] {
      confirm_timer_->expires_after(std::chrono::milliseconds(20));
      confirm_timer_->async_wait([poll](boost::system::error_code ec) {
        if (!ec) (*poll)();
      });
    };
    if (!lease_->valid()) return again();
    if (!*since) *since = std::pair{partner_->own_beat(), clock_.now()};
    const auto [mark, valid_at] = **since;
    const bool heard =
        partner_->echoed() >= mark || partner_->beats_silent() ||
        (partner_->echoed() == 0 && clock_.now() - valid_at >= std::chrono::seconds(2));
    if (!heard) return again();
    std::vector<device::block_device*> raw;
    for (std::size_t i = 0; i < shelf_->size(); ++i) raw.push_back(&shelf_->raw_drive(i));
    read_drive_areas(raw, [this, poll](std::vector<drive_area> areas) {
      *poll = nullptr;  // the cycle ends
      if (closed_) return;
      if (!lease_->valid()) {  // lapsed again while reading: what was read may be old already
        confirming_ = false;
        return confirm_ownership();
      }
      std::map<std::string, std::pair<pool_ownership, std::vector<std::size_t>>>
          newest;  // by pool: its newest record, its drives
      for (const drive_area& a : areas) {
        const auto& o = a.contents.ownership;
        if (!o) continue;
        auto& [best, drives] = newest[o->pool];
        if (drives.empty() || o->sequence() > best.sequence()) best = *o;
        drives.push_back(a.drive);
      }
      lease_
          ->confirm();  // read while valid: what the drives say now is what this controller goes by
      for (auto& [name, p] : pools_) {
        const auto found = newest.find(name);
        if (p.lost || found == newest.end()) continue;
        const pool_ownership& o = found->second.first;
        if (o.owner != options_.controller && o.sequence() > p.ownership.sequence())
          step_down(name, o, found->second.second);
      }
      // This controller's key on every drive again before the gates open:
      // a takeover that preempted it and died before its epoch landed left
      // the pools this controller's, and their drives refusing it. Those
      // of pools it lost stay held for good at both gates.
      register_again("its ownership confirmed", [this] {
        shelf_->open_gates();  // those of lost pools stay held
        confirming_ = false;
        std::string kept;
        for (const auto& [name, p] : pools_) {
          if (!p.lost) kept += (kept.empty() ? "" : ", ") + name;
        }
        events_->record(
            severity::info, "",
            kept.empty()
                ? std::string("the drives say this controller owns no pool now")
                : "the drives say this controller still owns " + kept + ": their I/O goes on");
      });
    });
  };
  (*poll)();
}

void array::step_down(const std::string& name, const pool_ownership& newer,
                      const std::vector<std::size_t>& drives) {
  served_pool& p = *pool_named(name);
  p.lost = true;
  std::vector<std::string> groups = p.groups;
  if (const auto bytes = config_->get(name)) {
    if (auto record = decode<v1::Pool>(name, *bytes)) {
      groups.push_back(record->read_cache_group());
      groups.push_back(record->write_log_group());
    }
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (std::ranges::find(groups, group_names_[g]) != groups.end()) lost_groups_.insert(g);
  }
  // Every drive of every group of the pool, not only those whose areas
  // said so: a member without the pool's ownership record (a group made
  // or a member replaced since) must not let what waited for it through.
  std::set<std::size_t> held(drives.begin(), drives.end());
  for (std::size_t g : lost_groups_) {
    for (unsigned m = 0; m < groups_[g]->member_count(); ++m) {
      const device::block_device* member = groups_[g]->member_device(m);
      for (std::size_t i = 0; i < shelf_->size(); ++i) {
        if (member == &shelf_->drive(i)) held.insert(i);
      }
    }
  }
  for (std::size_t d : held) shelf_->hold_for_good(d);
  log(name + ": " + std::to_string(held.size()) + " drives held for good (" +
      std::to_string(drives.size()) + " hold its ownership record)");
  if (p.write_cache) p.write_cache->abandon();
  if (p.mirror) p.mirror->stop();
  p.migrator->stop();
  // Its LUNs forward to the new owner, but only once every host
  // connection this controller had is closed, and what their sockets held
  // unread with it: commands the hosts sent before or during the freeze
  // must never run now, after the writes they made since through the new
  // owner (a host that timed out such a write sent it again there, and
  // wrote over it; forwarding the old one late would revert that: the
  // freeze torture found it). Until then the old units hold them, as they
  // hold the commands stopped at the gates, until close(). The hosts log
  // in again, as to a controller that restarted.
  auto forward = [this, name, alive = std::weak_ptr<int>(alive_)] {
    if (!alive.expired() && !closed_) present_pool(name, false, true);
  };
  const auto both = std::make_shared<int>(0);
  auto closed = [both, forward] {
    if (++*both == 2) forward();
  };
  if (server_) {
    server_->close_connections(closed);
  } else {
    closed();
  }
  if (nvme_) {
    nvme_->close_connections(closed);
  } else {
    closed();
  }
  // The pool's record says who owns it now, as the drives and the partner
  // do: GetPool, ListControllers, the console and /metrics read it.
  note_owner(name, newer.owner, newer.epoch);
  const std::string why = "controller " + newer.owner + " took it over (epoch " +
                          std::to_string(newer.epoch) +
                          ") while this controller was frozen: it stepped down. Nothing it held "
                          "was written to the pool's drives "
                          "after its lease lapsed; the commands it held wait for good (hosts time "
                          "out and send them again), its hosts' connections are reset, and its "
                          "ports forward the pool's LUNs to controller " +
                          newer.owner + ", and a restart makes it a partner again";
  events_->record(severity::critical, name, why);
  log(name + ": " + why);
}

std::uint64_t array::reservation_key_of(const std::string& controller) const {
  return device::reservation_key(identity_.id, controller.empty() ? '?' : controller[0]);
}

std::set<std::size_t> array::drives_of_pool(const std::string& pool,
                                            const std::vector<std::size_t>& recorded) const {
  std::set<std::size_t> drives(recorded.begin(), recorded.end());
  const auto bytes = config_->get(pool);
  if (!bytes) return drives;
  const auto record = decode<v1::Pool>(pool, *bytes);
  if (!record) return drives;
  std::vector<std::string> groups(record->groups().begin(), record->groups().end());
  groups.push_back(record->read_cache_group());
  groups.push_back(record->write_log_group());
  for (const std::string& g : groups) {
    const auto group_bytes = g.empty() ? std::nullopt : config_->get(g);
    if (!group_bytes) continue;
    const auto group = decode<v1::DiskGroup>(g, *group_bytes);
    if (!group) continue;
    for (const std::string& member : group->members()) {
      for (std::size_t i = 0; i < shelf_->size(); ++i) {
        if (shelf_->spec(i).name == short_name(member)) drives.insert(i);
      }
    }
  }
  return drives;
}

void array::register_again(const std::string& why, std::function<void()> then) {
  if (registering_ && !then) return;
  registering_ = true;
  shelf_->register_again([this, why, then = std::move(then)](std::error_code e) {
    registering_ = false;
    if (closed_) return;
    if (e) {
      log("persistent reservations: registering again (" + why + ") failed: " + e.message());
    } else if (!then) {
      log("persistent reservations: this controller's key registered again (" + why + ")");
    }
    if (then) then();
  });
}

}  // namespace strata::controller
