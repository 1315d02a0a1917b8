// Hot spares, as scripts: members fail, spares step in with no command, and
// the data stays whole.
#include "raid/hot_spares.h"

#include <boost/asio/post.hpp>
#include <cstring>
#include <optional>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "raid/raid1_group.h"
#include "raid/raid6_group.h"
#include "tests/raid/device/harness.h"

namespace strata::raid {
namespace {

using namespace device;
using namespace device::testing;

constexpr std::uint32_t block_size = 512;
constexpr std::uint64_t strip_blocks = 4;
constexpr std::uint64_t stripes = 16;
constexpr std::uint64_t reserved_blocks = 8;
constexpr std::uint64_t member_blocks = reserved_blocks + stripes * strip_blocks;

// Disks on one loop: the group's members first, then spares.
struct shelf {
  test_loop loop;
  std::vector<std::unique_ptr<memory_device>> disks;
  std::vector<std::unique_ptr<fault_device>> faults;
  std::vector<spare_event> events;
  // With claims: the partner's answers, in order (granted once they run
  // out), each given from the loop later; and the spares it was asked for.
  std::vector<spare_claim> answers;
  std::vector<block_device*> claimed;
  hot_spares spares;

  explicit shelf(bool with_claims = false)
      : spares(loop.context.get_executor(), pool_options(with_claims)) {}

  hot_spare_options pool_options(bool with_claims) {
    hot_spare_options o;
    o.clock = &loop.clock;
    o.retry_interval = std::chrono::milliseconds(100);
    o.on_event = [this](const spare_event& e) { events.push_back(e); };
    if (with_claims) {
      o.claim = [this](block_device& spare, std::function<void(spare_claim)> answer) {
        claimed.push_back(&spare);
        const spare_claim a = answers.empty() ? spare_claim::granted : answers.front();
        if (!answers.empty()) answers.erase(answers.begin());
        boost::asio::post(loop.context, [answer = std::move(answer), a] { answer(a); });
      };
    }
    return o;
  }
  fault_device& disk(std::uint64_t blocks = member_blocks) {
    auto m = memory_device::create(loop.context.get_executor(), {block_size, blocks});
    REQUIRE(m);
    disks.push_back(std::move(*m));
    faults.push_back(std::make_unique<fault_device>(*disks.back(), loop.clock, fault_options{}));
    return *faults.back();
  }
  std::vector<spare_event::kind> kinds() const {
    std::vector<spare_event::kind> k;
    for (const auto& e : events) k.push_back(e.what);
    return k;
  }
};

// A RAID-6 group whose member failures are reported to the shelf's spares.
struct raid6_rig {
  shelf& s;
  std::unique_ptr<raid6_group> group;
  std::vector<std::byte> reference;

  explicit raid6_rig(shelf& sh, unsigned members, double rebuild_mb_per_s = 0) : s(sh) {
    raid6_options options;
    options.strip_size_bytes = strip_blocks * block_size;
    options.reserved_bytes = reserved_blocks * block_size;
    options.clock = &s.loop.clock;
    options.rebuild_mb_per_s = rebuild_mb_per_s;
    options.on_member_event = [this](const member_event&) { s.spares.member_failed(*group); };
    std::vector<block_device*> list;
    for (unsigned i = 0; i < members; ++i) list.push_back(&s.disk());
    auto g = raid6_group::create(list, options);
    REQUIRE(g);
    group = std::move(*g);
    reference = pattern(group->geometry().size_bytes(), test_seed());
    write_blocks(s.loop, *group, 0, reference);
    s.spares.watch(*group);
  }
  ~raid6_rig() { s.spares.forget(*group); }
  // Every block reads back, even with two more members lost: the rebuilt
  // members carry their share.
  void verify(unsigned lose_a, unsigned lose_b) {
    REQUIRE(read_blocks(s.loop, *group, 0, group->geometry().block_count) == reference);
    group->fail_member(lose_a);
    group->fail_member(lose_b);
    REQUIRE(read_blocks(s.loop, *group, 0, group->geometry().block_count) == reference);
  }
  void wait_rebuilds() {
    s.loop.run_until(
        [&] { return s.spares.rebuilding() == 0 && !group->rebuild_status().running; });
  }
};

using kind = spare_event::kind;

TEST_CASE(
    "hot spares: fail member 2, a spare rebuilds it; fail 4 and 5, the second waits for the first",
    "[raid][spares]") {
  shelf s;
  raid6_rig r(s, 6);
  s.spares.add(s.disk());
  s.spares.add(s.disk());
  s.spares.add(s.disk());

  r.group->fail_member(2);
  s.loop.run_until([&] { return s.events.size() == 2; });
  CHECK(s.kinds() == std::vector{kind::rebuild_started, kind::rebuilt});
  CHECK(s.events[0].member == 2);
  CHECK(r.group->failed_members() == 0);
  CHECK(s.spares.available() == 2);

  r.group->fail_member(4);
  r.group->fail_member(5);
  s.loop.run_until([&] { return s.events.size() == 6; });
  r.wait_rebuilds();
  CHECK(s.events[2].member == 4);
  CHECK(s.events[4].member == 5);
  CHECK(r.group->failed_members() == 0);
  CHECK(s.spares.available() == 0);
  r.verify(0, 1);
  // Those two failures find no spare left: nothing starts.
  s.loop.settle();
  CHECK(s.events.size() == 6);
}

TEST_CASE(
    "hot spares shared with a partner: each is claimed first; one it took is dropped, one it "
    "cannot answer for waits",
    "[raid][spares]") {
  shelf s(true);
  raid6_rig r(s, 6);
  fault_device& taken = s.disk();
  fault_device& later = s.disk();
  s.spares.add(taken);
  s.spares.add(later);
  s.answers = {spare_claim::taken, spare_claim::later};

  r.group->fail_member(2);
  s.loop.run_until([&] { return s.events.size() == 3; });
  r.wait_rebuilds();
  // The first was the partner's: dropped, never asked for again. The
  // second waited for an answer (the partner unreachable), then came.
  CHECK(s.kinds() == std::vector{kind::taken_elsewhere, kind::rebuild_started, kind::rebuilt});
  CHECK(s.events[0].spare == &taken);
  CHECK(s.events[1].spare == &later);
  CHECK(s.claimed == std::vector<block_device*>{&taken, &later, &later});
  CHECK(s.spares.available() == 0);
  CHECK(r.group->failed_members() == 0);
  r.verify(0, 1);
}

TEST_CASE("hot spares: a spare being claimed is neither held nor given twice", "[raid][spares]") {
  shelf s(true);
  raid6_rig first(s, 5);
  raid6_rig second(s, 5);
  fault_device& spare = s.disk();
  s.spares.add(spare);
  first.group->fail_member(1);
  second.group->fail_member(3);
  // Both groups want it; one claim goes out, and while it does the spare
  // is not held (the partner's claim of it would find it claimed here).
  s.loop.run_until([&] { return !s.claimed.empty(); });
  CHECK(s.spares.claiming(spare));
  CHECK_FALSE(s.spares.holds(spare));
  s.loop.run_until([&] { return s.events.size() == 2; });
  first.wait_rebuilds();
  second.wait_rebuilds();
  s.loop.settle();
  CHECK(s.kinds() == std::vector{kind::rebuild_started, kind::rebuilt});
  CHECK(s.claimed.size() == 1);
  CHECK(first.group->failed_members() + second.group->failed_members() == 1);
}

TEST_CASE("hot spares: a member failed with no spare is covered when one is added",
          "[raid][spares]") {
  shelf s;
  raid6_rig r(s, 5);
  r.group->fail_member(3);
  s.loop.settle();
  CHECK(s.events.empty());
  s.spares.add(s.disk());
  r.wait_rebuilds();
  CHECK(s.kinds() == std::vector{kind::rebuild_started, kind::rebuilt});
  r.verify(0, 4);
}

TEST_CASE("hot spares: a spare too small is refused and kept for a group it fits",
          "[raid][spares]") {
  shelf s;
  raid6_rig r(s, 5);
  fault_device& small = s.disk(member_blocks / 2);
  s.spares.add(small);
  r.group->fail_member(1);
  s.loop.settle();
  REQUIRE(s.kinds() == std::vector{kind::refused});
  CHECK(s.events[0].message.find("does not fit") != std::string::npos);
  CHECK(s.spares.available() == 1);
  s.spares.add(s.disk());
  r.wait_rebuilds();
  CHECK(s.kinds() == std::vector{kind::refused, kind::rebuild_started, kind::rebuilt});
  CHECK(s.events[1].spare != &small);
  CHECK(s.spares.available() == 1);
  r.verify(0, 2);
}

TEST_CASE("hot spares: a group busy with an administrator's rebuild gets its spare after it",
          "[raid][spares]") {
  shelf s;
  raid6_rig r(s, 6, 1.0);  // 1 MB/s: the rebuild lasts a while
  r.group->fail_member(1);
  std::optional<std::error_code> admin;
  REQUIRE_FALSE(r.group->replace_member(1, &s.disk(), [&](std::error_code ec) { admin = ec; }));
  s.spares.add(s.disk());
  r.group->fail_member(3);
  s.loop.run_until([&] { return admin.has_value(); });
  CHECK_FALSE(*admin);
  CHECK(s.events.empty());  // refused as busy, silently retried
  s.loop.run_until([&] { return s.events.size() == 2; });
  CHECK(s.kinds() == std::vector{kind::rebuild_started, kind::rebuilt});
  CHECK(s.events[0].member == 3);
  r.verify(0, 5);
}

TEST_CASE("hot spares: a spare that fails its rebuild is dropped and the next one used",
          "[raid][spares]") {
  shelf s;
  raid6_rig r(s, 5);
  fault_device& bad = s.disk();
  bad.fail_writes(0, member_blocks);
  s.spares.add(bad);
  s.spares.add(s.disk());
  r.group->fail_member(0);
  s.loop.run_until([&] { return s.events.size() == 4; });
  r.wait_rebuilds();
  CHECK(s.kinds() == std::vector{kind::rebuild_started, kind::rebuild_failed, kind::rebuild_started,
                                 kind::rebuilt});
  CHECK(s.events[0].spare == &bad);
  CHECK(s.events[1].result);
  CHECK(s.events[2].spare != &bad);
  CHECK(s.spares.available() == 0);
  r.verify(1, 2);
}

TEST_CASE("hot spares: a group past its redundancy takes no spare", "[raid][spares]") {
  shelf s;
  raid6_rig r(s, 5);
  r.group->fail_member(0);
  r.group->fail_member(1);
  r.group->fail_member(2);
  s.spares.add(s.disk());
  s.loop.settle();
  CHECK(s.events.empty());
  CHECK(s.spares.available() == 1);
  std::optional<std::error_code> done;
  auto refused = r.group->replace_member(0, &s.disk(), [&](std::error_code ec) { done = ec; });
  REQUIRE(refused);
  CHECK(refused->code == errc::device_failed);
  CHECK(refused->message.find("too few") != std::string::npos);
}

TEST_CASE("hot spares: a RAID-1 pair loses a member and is whole again", "[raid][spares][raid1]") {
  shelf s;
  raid1_options options;
  options.reserved_bytes = reserved_blocks * block_size;
  options.sync_chunk_bytes = 16 * block_size;
  options.clock = &s.loop.clock;
  std::unique_ptr<raid1_group> group;
  options.on_member_event = [&](const member_event&) { s.spares.member_failed(*group); };
  auto g = raid1_group::create({&s.disk(), &s.disk()}, options);
  REQUIRE(g);
  group = std::move(*g);
  const auto data = pattern(group->geometry().size_bytes(), test_seed());
  write_blocks(s.loop, *group, 0, data);
  s.spares.watch(*group);
  s.spares.add(s.disk());
  group->fail_member(0);
  s.loop.run_until([&] { return s.events.size() == 2; });
  CHECK(s.kinds() == std::vector{kind::rebuild_started, kind::rebuilt});
  CHECK(group->working_members() == 2);
  group->fail_member(1);  // only the rebuilt member is left
  s.loop.settle();
  REQUIRE(read_blocks(s.loop, *group, 0, group->geometry().block_count) == data);
  s.spares.forget(*group);
}

}  // namespace
}  // namespace strata::raid
