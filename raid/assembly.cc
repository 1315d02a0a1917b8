#include "raid/assembly.h"

#include <algorithm>
#include <string>

#include "raid/device/request_queue.h"
#include "raid/superblock_io.h"
#include "raid/write_intent.h"

namespace strata::raid {
namespace {

using device::block_device;
using device::request;

// Stands in for a member that was not found at assembly.
class absent_device final : public block_device {
 public:
  absent_device(boost::asio::any_io_executor executor, const device::block_geometry& geometry)
      : executor_(executor), geometry_(geometry), answers_(executor) {}
  const device::block_geometry& geometry() const noexcept override { return geometry_; }
  boost::asio::any_io_executor executor() const noexcept override { return executor_; }
  void submit(request& req) noexcept override { answers_.complete_later(req, errc::device_failed); }

 private:
  boost::asio::any_io_executor executor_;
  device::block_geometry geometry_;
  device::completion_queue answers_;
};

std::string list(const std::vector<unsigned>& members) {
  std::string text;
  for (unsigned m : members) text += (text.empty() ? "" : ", ") + std::to_string(m);
  return text;
}

std::string_view name(group_level level) {
  return level == group_level::raid6 ? "RAID-6" : "RAID-1";
}

std::expected<assembly_plan, error> decide(
    const std::vector<block_device*>& devices,
    const std::vector<std::expected<superblock, std::error_code>>& found, group_level level,
    unsigned (*tolerated)(unsigned)) {
  const superblock* newest = nullptr;
  for (auto& f : found) {
    if (f && f->level == level && (!newest || f->events > newest->events)) newest = &*f;
  }
  if (newest == nullptr) {
    return std::unexpected(make_error(
        errc::not_found, "none of the " + std::to_string(devices.size()) + " devices holds a " +
                             std::string(name(level)) + " superblock"));
  }
  assembly_plan plan;
  plan.newest = *newest;
  const unsigned m = newest->member_count;
  plan.members.assign(m, nullptr);
  std::vector<std::uint64_t> member_events(m, 0);
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& f = found[i];
    if (!f) continue;  // blank or unreadable: not a member
    if (f->group_id != newest->group_id) {
      return std::unexpected(make_error(
          errc::invalid_argument, "device " + std::to_string(i) + " belongs to another group"));
    }
    if (f->member_index >= m || f->member_count != m || f->level != level) {
      return std::unexpected(
          make_error(errc::invalid_argument,
                     "device " + std::to_string(i) + " has an inconsistent superblock"));
    }
    if (plan.members[f->member_index] == nullptr || f->events > member_events[f->member_index]) {
      plan.members[f->member_index] = devices[i];
      member_events[f->member_index] = f->events;
    }
  }
  // A member is untrusted if the newest superblock records it failed or
  // no device holds it. One merely behind in events, but not recorded
  // failed, was working through the change and took every write: a crash
  // cut the superblock update short before its copy was written.
  for (unsigned i = 0; i < m; ++i) {
    if (plan.members[i] == nullptr) {
      plan.missing.push_back(i);
    } else if (newest->failed[i]) {
      plan.recorded.push_back(i);
    }
  }
  const unsigned can_lose = tolerated(m);
  if (plan.missing.size() + plan.recorded.size() > can_lose) {
    return std::unexpected(make_error(
        errc::device_failed,
        std::string(name(level)) + " group of " + std::to_string(m) +
            " members cannot start: it needs " + std::to_string(m - can_lose) + " current members" +
            (plan.missing.empty() ? "" : "; missing: " + list(plan.missing)) +
            (plan.recorded.empty() ? "" : "; failed: " + list(plan.recorded))));
  }
  device::block_geometry member_geometry;
  member_geometry.logical_block_size_bytes = newest->logical_block_size_bytes;
  member_geometry.block_count = newest->member_block_count;
  member_geometry.buffer_alignment_bytes = newest->logical_block_size_bytes;
  for (unsigned i : plan.missing) {
    plan.stand_ins.push_back(
        std::make_unique<absent_device>(devices[0]->executor(), member_geometry));
    plan.members[i] = plan.stand_ins.back().get();
  }
  return plan;
}

}  // namespace

void plan_assembly(std::vector<block_device*> devices, group_level level,
                   unsigned (*tolerated)(unsigned),
                   std::function<void(std::expected<assembly_plan, error>)> done) {
  if (devices.empty() || std::count(devices.begin(), devices.end(), nullptr) > 0) {
    done(std::unexpected(make_error(errc::invalid_argument, "assembly needs a list of devices")));
    return;
  }
  struct state {
    std::vector<block_device*> devices;
    std::vector<std::expected<superblock, std::error_code>> found;
    std::size_t pending = 0;
    std::function<void(std::expected<assembly_plan, error>)> done;
  };
  auto st = std::make_shared<state>();
  st->devices = std::move(devices);
  st->found.assign(st->devices.size(), std::unexpected(make_error_code(errc::not_found)));
  st->pending = st->devices.size();
  st->done = std::move(done);
  for (std::size_t i = 0; i < st->devices.size(); ++i) {
    read_superblock(*st->devices[i],
                    [st, i, level, tolerated](std::expected<superblock, std::error_code> sb) {
                      st->found[i] = std::move(sb);
                      if (--st->pending > 0) return;
                      st->done(decide(st->devices, st->found, level, tolerated));
                    });
  }
}

std::optional<error> check_bitmap_placement(const superblock& newest) {
  if (newest.bitmap_offset_blocks == 0) return std::nullopt;  // none
  const std::uint64_t block_size = newest.logical_block_size_bytes;
  const std::uint64_t per_region = newest.bitmap_region_stripes;
  if (per_region == 0 || newest.bitmap_offset_blocks * block_size < 2 * superblock::size_bytes ||
      newest.bitmap_offset_blocks * block_size +
              write_intent::bytes_for((newest.stripes + per_region - 1) / per_region, block_size) >
          newest.data_offset_blocks * block_size) {
    return make_error(errc::invalid_argument,
                      "the superblocks place the write-intent bitmap outside the reserved area");
  }
  return std::nullopt;
}

std::vector<member_failure> member_failures(const assembly_plan& plan) {
  std::vector<member_failure> failures(plan.members.size(), member_failure::none);
  for (unsigned i = 0; i < failures.size(); ++i) {
    if (plan.newest.failed[i]) failures[i] = member_failure::recorded;
  }
  for (unsigned i : plan.missing) failures[i] = member_failure::absent;
  return failures;
}

void check_blank(std::vector<block_device*> members,
                 std::function<void(std::optional<error>)> done) {
  struct state {
    std::vector<std::expected<superblock, std::error_code>> found;
    std::size_t pending = 0;
    std::function<void(std::optional<error>)> done;
  };
  auto st = std::make_shared<state>();
  st->found.assign(members.size(), std::unexpected(make_error_code(errc::not_found)));
  st->pending = members.size();
  st->done = std::move(done);
  for (std::size_t i = 0; i < members.size(); ++i) {
    read_superblock(*members[i], [st, i](std::expected<superblock, std::error_code> sb) {
      st->found[i] = std::move(sb);
      if (--st->pending > 0) return;
      for (std::size_t m = 0; m < st->found.size(); ++m) {
        const auto& f = st->found[m];
        const std::string who = "member " + std::to_string(m);
        if (f) {
          st->done(make_error(errc::invalid_argument,
                              who + " already belongs to a " + std::string(name(f->level)) +
                                  " group (member " + std::to_string(f->member_index) + " of " +
                                  std::to_string(f->member_count) +
                                  "); remove it from that group and wipe it first"));
          return;
        }
        if (f.error() == errc::media_error) {
          st->done(make_error(
              errc::invalid_argument,
              who + " holds a damaged superblock: it may belong to a group; wipe it first"));
          return;
        }
        if (f.error() != errc::not_found) {
          st->done(error{f.error(), who + " cannot be read: " + f.error().message()});
          return;
        }
      }
      st->done(std::nullopt);
    });
  }
}

}  // namespace strata::raid
