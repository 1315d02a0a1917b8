#include "raid/hot_spares.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cassert>

namespace strata::raid {

hot_spares::hot_spares(boost::asio::any_io_executor executor, const hot_spare_options& options)
    : executor_(std::move(executor)), options_(options) {
  assert(options_.clock != nullptr);
  retry_ = options_.clock->make_timer(executor_, [this] {
    retry_armed_ = false;
    cover_all();
  });
}

hot_spares::~hot_spares() {
  assert(rebuilding() == 0);
  *alive_ = false;
  retry_->cancel();
}

std::size_t hot_spares::rebuilding() const noexcept {
  return static_cast<std::size_t>(
      std::count_if(groups_.begin(), groups_.end(), [](const watched& w) { return w.rebuilding; }));
}

void hot_spares::add(device::block_device& spare) {
  spares_.push_back(&spare);
  cover_all();
}

bool hot_spares::remove(device::block_device& spare) {
  return std::erase(spares_, &spare) > 0;
}

bool hot_spares::holds(const device::block_device& spare) const noexcept {
  return std::find(spares_.begin(), spares_.end(), &spare) != spares_.end();
}

void hot_spares::watch(member_replacement& group) {
  if (find(group) == nullptr) {
    watched w;
    w.group = &group;
    groups_.push_back(std::move(w));
  }
  cover_later(group);
}

void hot_spares::forget(member_replacement& group) {
  std::erase_if(groups_, [&](const watched& w) { return w.group == &group; });
}

void hot_spares::member_failed(member_replacement& group) {
  cover_later(group);
}

hot_spares::watched* hot_spares::find(member_replacement& group) noexcept {
  auto it = std::find_if(groups_.begin(), groups_.end(),
                         [&](const watched& w) { return w.group == &group; });
  return it == groups_.end() ? nullptr : &*it;
}

void hot_spares::cover_later(member_replacement& group) {
  watched* w = find(group);
  if (w == nullptr || w->cover_posted) return;
  w->cover_posted = true;
  boost::asio::post(executor_, [this, alive = alive_, &group] {
    if (!*alive) return;
    if (watched* later = find(group)) {
      later->cover_posted = false;
      cover(*later);
    }
  });
}

void hot_spares::cover_all() {
  for (watched& w : groups_) cover(w);
}

void hot_spares::cover(watched& w) {
  if (w.rebuilding || w.claiming) return;  // its end covers the next member
  member_replacement& group = *w.group;
  for (unsigned member = 0; member < group.member_count(); ++member) {
    if (!group.member_failed(member)) continue;
    for (device::block_device* spare : std::vector(spares_)) {
      if (std::find(w.unfit.begin(), w.unfit.end(), spare) != w.unfit.end()) continue;
      if (!options_.claim) {
        if (give(w, member, spare) != given::unfit) return;
        continue;
      }
      // Claimed first: the partner must neither hold it nor take it.
      // One claim at a time, so that two groups never claim one spare.
      if (claiming_ != nullptr) return retry_later();
      std::erase(spares_, spare);
      claiming_ = spare;
      w.claiming = true;
      options_.claim(*spare, [this, alive = alive_, &group, member, spare](spare_claim answer) {
        if (!*alive) return;
        claiming_ = nullptr;
        watched* now = find(group);
        if (now != nullptr) now->claiming = false;
        switch (answer) {
          case spare_claim::taken:
            report({spare_event::kind::taken_elsewhere,
                    &group,
                    member,
                    spare,
                    {},
                    "another pool's group has taken it"});
            break;
          case spare_claim::later:
            spares_.push_back(spare);
            retry_later();
            return;
          case spare_claim::granted:
            spares_.push_back(spare);
            if (now != nullptr && group.member_failed(member) &&
                give(*now, member, spare) != given::unfit)
              return;
            break;
        }
        cover_all();  // another spare, or another group waiting
      });
      return;
    }
    return;  // no spare fits: the next add() tries again
  }
}

hot_spares::given hot_spares::give(watched& w, unsigned member, device::block_device* spare) {
  member_replacement& group = *w.group;
  auto refused = group.replace_member(
      member, spare, [this, alive = alive_, &group, member, spare](std::error_code result) {
        if (*alive) rebuild_done(group, member, *spare, result);
      });
  if (!refused) {
    std::erase(spares_, spare);
    w.rebuilding = true;
    report({spare_event::kind::rebuild_started, &group, member, spare, {}, {}});
    return given::yes;
  }
  if (refused->code == errc::busy) {
    retry_later();
    return given::not_now;
  }
  if (refused->code == errc::device_failed) return given::not_now;  // nothing to rebuild from
  // The spare does not fit this group: another may take it.
  w.unfit.push_back(spare);
  report({spare_event::kind::refused, &group, member, spare, refused->code, refused->message});
  return given::unfit;
}

void hot_spares::retry_later() {
  if (retry_armed_) return;
  retry_armed_ = true;
  retry_->arm(options_.clock->now() + options_.retry_interval);
}

void hot_spares::rebuild_done(member_replacement& group, unsigned member,
                              device::block_device& spare, std::error_code result) {
  watched* w = find(group);
  if (w != nullptr) w->rebuilding = false;
  if (result) {
    report({spare_event::kind::rebuild_failed, &group, member, &spare, result,
            "the rebuild onto the spare failed: " + result.message()});
  } else {
    report({spare_event::kind::rebuilt, &group, member, &spare, {}, {}});
  }
  if (w != nullptr) cover_later(group);  // another failed member may wait
}

void hot_spares::report(spare_event e) const {
  if (options_.on_event) options_.on_event(e);
}

}  // namespace strata::raid
