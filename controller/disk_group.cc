#include "controller/disk_group.h"

#include <boost/asio/post.hpp>

#include "raid/superblock_io.h"

namespace strata::controller {

const char* to_string(group_kind k) noexcept {
  switch (k) {
    case group_kind::raid6:
      return "RAID6";
    case group_kind::raid1:
      return "RAID1";
    case group_kind::read_cache:
      return "READ_CACHE";
    case group_kind::write_log:
      return "WRITE_LOG";
    case group_kind::ceph:
      return "CEPH";
  }
  return "?";
}

std::string to_hex(const group_id& id) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const std::uint8_t b : id) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

device::block_device& disk_group::device() const noexcept {
  return std::visit([](const auto& g) -> device::block_device& { return *g; }, group_);
}

std::uint64_t disk_group::stripe_data_blocks() const noexcept {
  if (const auto* r6 = std::get_if<std::unique_ptr<raid::raid6_group>>(&group_))
    return (*r6)->layout().stripe_data_blocks();
  return 1;
}

bool disk_group::idle() const noexcept {
  return std::visit([](const auto& g) { return g->idle(); }, group_);
}

void disk_group::mark_clean(std::function<void(std::error_code)> done) {
  std::visit([&](const auto& g) { g->mark_clean(std::move(done)); }, group_);
}

unsigned disk_group::member_count() const noexcept {
  return std::visit([](const auto& g) { return g->member_count(); }, group_);
}

const device::block_device* disk_group::member_device(unsigned member) const noexcept {
  return std::visit([&](const auto& g) { return g->member_device(member); }, group_);
}

bool disk_group::member_failed(unsigned member) const noexcept {
  return std::visit([&](const auto& g) { return g->member_failed(member); }, group_);
}

const raid::member_health& disk_group::health(unsigned member) const noexcept {
  return std::visit([&](const auto& g) -> const raid::member_health& { return g->health(member); },
                    group_);
}

unsigned disk_group::failed_members() const noexcept {
  unsigned failed = 0;
  for (unsigned m = 0; m < member_count(); ++m) failed += member_failed(m) ? 1 : 0;
  return failed;
}

bool disk_group::failed() const noexcept {
  // RAID-6 survives two lost members; RAID-1 (and the read cache) one
  // working member; a Ceph group is never lost here (an outage ends).
  if (kind_ == group_kind::ceph) return false;
  return kind_ == group_kind::raid6 ? failed_members() > 2 : failed_members() == member_count();
}

ceph_image* disk_group::ceph() const noexcept {
  const auto* g = std::get_if<std::unique_ptr<ceph_image>>(&group_);
  return g != nullptr ? g->get() : nullptr;
}

std::unique_ptr<disk_group> ceph_disk_group(const group_id& id, std::unique_ptr<ceph_image> image) {
  auto g = std::make_unique<disk_group>();
  g->kind_ = group_kind::ceph;
  g->id_ = id;
  g->group_ = std::move(image);
  return g;
}

void disk_group::fail_member(unsigned member) {
  std::visit([&](const auto& g) { g->fail_member(member); }, group_);
}

raid::member_replacement& disk_group::replacement() noexcept {
  return std::visit([](const auto& g) -> raid::member_replacement& { return *g; }, group_);
}

raid::rebuild_progress disk_group::rebuild_status() const {
  return std::visit([](const auto& g) { return g->rebuild_status(); }, group_);
}

std::uint64_t disk_group::rebuild_unverifiable() const noexcept {
  const auto* g = std::get_if<std::unique_ptr<raid::raid6_group>>(&group_);
  return g != nullptr ? (*g)->rebuild_unverifiable() : 0;
}

void disk_group::cancel_rebuild() {
  std::visit([](const auto& g) { g->cancel_rebuild(); }, group_);
}

std::uint64_t disk_group::repaired_blocks() const noexcept {
  return std::visit([](const auto& g) { return g->repaired_blocks(); }, group_);
}

void disk_group::scrub(std::function<void(const raid::scrub_report&)> done) {
  if (auto* g = std::get_if<std::unique_ptr<raid::raid6_group>>(&group_))
    return (*g)->scrub(std::move(done));
  raid::scrub_report refused;
  refused.error = make_error_code(errc::not_supported);
  boost::asio::post(device().executor(), [done = std::move(done), refused] { done(refused); });
}

void disk_group::cancel_scrub() noexcept {
  if (auto* g = std::get_if<std::unique_ptr<raid::raid6_group>>(&group_)) (*g)->cancel_scrub();
}

bool disk_group::scrubbing() const noexcept {
  const auto* g = std::get_if<std::unique_ptr<raid::raid6_group>>(&group_);
  return g != nullptr && (*g)->scrubbing();
}

raid::resync_progress disk_group::resync_status() const {
  if (const auto* g = std::get_if<std::unique_ptr<raid::raid6_group>>(&group_))
    return (*g)->resync_status();
  if (ceph() != nullptr) return {};
  const raid::rebuild_progress copy =
      std::get<std::unique_ptr<raid::raid1_group>>(group_)->resync_status();
  raid::resync_progress p;
  p.running = copy.running;
  return p;
}

double disk_group::scrub_fraction() const noexcept {
  const auto* g = std::get_if<std::unique_ptr<raid::raid6_group>>(&group_);
  if (g == nullptr || (*g)->stripes() == 0) return 0;
  return static_cast<double>((*g)->scrub_stripes_done()) / static_cast<double>((*g)->stripes());
}

namespace {

raid::raid6_options raid6_options_for(const group_options& g) {
  raid::raid6_options o;
  o.clock = g.clock;
  o.member_timeout = g.member_timeout;
  o.on_member_event = g.on_member_event;
  o.on_resync_stopped = g.on_resync_stopped;
  return o;
}

raid::raid1_options raid1_options_for(const group_options& g) {
  raid::raid1_options o;
  o.clock = g.clock;
  o.member_timeout = g.member_timeout;
  o.on_member_event = g.on_member_event;
  return o;
}

// The group being built, held by the callbacks until it is handed over
// (std::function needs copyable callbacks).
using group_box = std::shared_ptr<std::unique_ptr<disk_group>>;

raid::group_level level_of(group_kind k) noexcept {
  return k == group_kind::raid6 ? raid::group_level::raid6 : raid::group_level::raid1;
}

}  // namespace

void create_group(group_kind kind, std::vector<device::block_device*> members,
                  const group_options& options, group_done done) {
  if (kind == group_kind::read_cache && members.size() != 1) {
    done(std::unexpected(make_error(errc::invalid_argument, "group: a read cache is one SSD, not " +
                                                                std::to_string(members.size()))));
    return;
  }
  if ((kind == group_kind::raid1 || kind == group_kind::write_log) && members.size() < 2) {
    done(std::unexpected(make_error(
        errc::invalid_argument,
        std::string("group: ") + (kind == group_kind::raid1 ? "RAID-1" : "a write log (mirrored)") +
            " needs 2 or more members")));
    return;
  }
  if (members.empty()) {
    done(std::unexpected(make_error(errc::invalid_argument, "group: no members")));
    return;
  }
  auto box = std::make_shared<std::unique_ptr<disk_group>>(new disk_group());
  disk_group& g = **box;
  g.kind_ = kind;
  device::block_device* first = members.front();
  auto formatted = [box, first, done](std::optional<error> e) {
    if (e) return done(std::unexpected(*e));
    // The id format() chose is in every member's superblock.
    raid::read_superblock(*first, [box, done](std::expected<raid::superblock, std::error_code> sb) {
      if (!sb)
        return done(std::unexpected(make_error(
            errc::io_error, "group: cannot read back its superblock: " + sb.error().message())));
      (*box)->id_ = sb->group_id;
      done(std::move(*box));
    });
  };
  if (kind == group_kind::raid6) {
    auto r = raid::raid6_group::create(std::move(members), raid6_options_for(options));
    if (!r) return done(std::unexpected(r.error()));
    raid::raid6_group* raw = r->get();
    g.group_ = std::move(*r);
    raw->format(formatted);
  } else {
    auto r = raid::raid1_group::create(std::move(members), raid1_options_for(options));
    if (!r) return done(std::unexpected(r.error()));
    raid::raid1_group* raw = r->get();
    g.group_ = std::move(*r);
    raw->format(formatted);
  }
}

void assemble_group(group_kind kind, const group_id& id, std::vector<device::block_device*> drives,
                    const group_options& options, group_done done) {
  if (drives.empty()) {
    done(std::unexpected(
        make_error(errc::not_found, "group " + to_hex(id) + ": no drives to look on")));
    return;
  }
  struct scan {
    std::vector<device::block_device*> members;
    std::size_t left = 0;
    bool other_level = false;
  };
  auto s = std::make_shared<scan>();
  s->left = drives.size();
  auto finish = [s, kind, id, options, done]() {
    if (s->other_level) {
      return done(std::unexpected(
          make_error(errc::invalid_argument, "group " + to_hex(id) +
                                                 ": its superblocks say another RAID level than " +
                                                 to_string(kind))));
    }
    if (s->members.empty())
      return done(std::unexpected(
          make_error(errc::not_found, "group " + to_hex(id) + ": no drive holds it")));
    auto box = std::make_shared<std::unique_ptr<disk_group>>(new disk_group());
    (*box)->kind_ = kind;
    (*box)->id_ = id;
    auto take = [box, done](auto r) {
      if (!r) return done(std::unexpected(r.error()));
      (*box)->group_ = std::move(*r);
      done(std::move(*box));
    };
    if (kind == group_kind::raid6) {
      raid::raid6_group::assemble(s->members, raid6_options_for(options), take);
    } else {
      raid::raid1_group::assemble(s->members, raid1_options_for(options), take);
    }
  };
  for (device::block_device* d : drives) {
    // A blank drive, or one whose superblock cannot be read, is not this group's.
    raid::read_superblock(
        *d, [s, d, id, kind, finish](std::expected<raid::superblock, std::error_code> sb) {
          if (sb && sb->group_id == id) {
            if (sb->level == level_of(kind)) {
              s->members.push_back(d);
            } else {
              s->other_level = true;
            }
          }
          if (--s->left == 0) finish();
        });
  }
}

}  // namespace strata::controller
