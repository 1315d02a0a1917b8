// The drive bay's view of a group's resync after an unclean shutdown: what
// it found reaches the event log and the DiskGroup resource.
#include "controller/drive_bay.h"

#include <catch2/catch.hpp>
#include <optional>

#include "controller/disk_group.h"
#include "controller/event_log.h"
#include "controller/operations.h"
#include "controller/shelf.h"
#include "raid/raid6_layout.h"
#include "strata/v1/operations.pb.h"
#include "strata/v1/resources.pb.h"
#include "tests/raid/device/harness.h"

using namespace strata;
using namespace strata::controller;
using namespace strata::device::testing;

TEST_CASE(
    "drive bay: a degraded resync's unverifiable stripes reach an event and the DiskGroup resource",
    "[controller]") {
  temp_dir dir;
  std::vector<drive_spec> specs;
  for (int i = 0; i < 6; ++i)
    specs.push_back({"hdd-0" + std::to_string(i), drive_kind::hdd, 64ull << 20});
  test_loop loop;
  auto s = shelf::open(*loop.ring, loop.clock, dir.path() / "shelf", specs);
  REQUIRE(s);
  std::vector<device::block_device*> all;
  for (std::size_t i = 0; i < (*s)->size(); ++i) all.push_back(&(*s)->drive(i));

  // A RAID-6 4+2 group whose first stripes were written and flushed: their
  // bits are still set when the power goes.
  group_id id{};
  {
    std::optional<std::expected<std::unique_ptr<disk_group>, error>> made;
    create_group(group_kind::raid6, all, {&loop.clock, {}, {}, {}},
                 [&](auto r) { made = std::move(r); });
    loop.run_until([&] { return made.has_value(); });
    REQUIRE(*made);
    disk_group& g = ***made;
    id = g.id();
    write_blocks(loop, g.device(), 0, pattern(4 * 64 * 1024, 1));  // stripe 0
    flush(loop, g.device());
    loop.run_until([&] { return g.idle(); });
  }  // a crash: no mark_clean
  // Stripe 0 was being rewritten: data strip 0 landed, P and Q did not. At
  // the restart the drive holding data strip 1 is gone.
  raid::raid6_layout layout;
  layout.members = 6;
  layout.strip_blocks = 16;         // 64 KiB of 4 KiB blocks, the default
  layout.data_offset_blocks = 256;  // 1 MiB reserved, the default
  write_blocks(loop, *all[layout.member_of(0, 0)], layout.member_lba(0, 0), pattern(64 * 1024, 2));
  std::vector<device::block_device*> present = all;
  present.erase(present.begin() + layout.member_of(0, 1));

  auto config = config_store::open((dir.path() / "config").string());
  REQUIRE(config);
  event_log events(**config);
  operation_log operations(**config);
  std::vector<std::unique_ptr<disk_group>> groups;
  const std::vector<std::string> names{"groups/g1"};
  drive_bay bay(loop.context.get_executor(), loop.clock, **s, groups, names, **config, events,
                operations);
  group_options options{&loop.clock, {}, {}, {}};
  options.on_resync_stopped = [&](const raid::resync_progress& p) { bay.resync_stopped(0, p); };
  std::optional<std::expected<std::unique_ptr<disk_group>, error>> found;
  assemble_group(group_kind::raid6, id, present, options, [&](auto r) { found = std::move(r); });
  loop.run_until([&] { return found.has_value(); });
  REQUIRE(*found);
  groups.push_back(std::move(**found));
  bool started = false;
  bay.start([&] { started = true; });
  loop.run_until([&] { return started && groups[0]->idle(); });

  const raid::resync_progress resync = groups[0]->resync_status();
  CHECK_FALSE(resync.running);
  CHECK(resync.unverifiable == 1);
  v1::DiskGroup resource;
  resource.set_name("groups/g1");
  bay.describe(resource);
  CHECK_FALSE(resource.resyncing());
  CHECK(resource.resync_unverifiable_stripes() == 1);
  events.drain();
  std::vector<std::string> messages;
  for (const auto& [key, value] : (*config)->list("events/")) {
    v1::Event e;
    REQUIRE(e.ParseFromString(value));
    if (e.resource() == "groups/g1") messages.push_back(e.message());
  }
  CHECK(std::ranges::count_if(messages, [](const std::string& m) {
          return m.find("1 stripes could not be verified") != std::string::npos;
        }) == 1);
  CHECK(std::ranges::count_if(messages, [](const std::string& m) {
          return m.find("resync of the regions marked in the write-intent bitmap finished") !=
                 std::string::npos;
        }) == 1);

  bay.stop();
  loop.run_until([&] { return bay.idle(); });
  std::optional<std::error_code> clean;
  groups[0]->mark_clean([&](std::error_code ec) { clean = ec; });
  loop.run_until([&] { return clean.has_value() && groups[0]->idle(); });
}
