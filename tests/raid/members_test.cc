// The member set both group kinds share: the failure budget as data, what
// a member's error says of it, the flush of every member, and
// acknowledgements held while a membership change is recorded.
#include "raid/members.h"

#include <memory>
#include <vector>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "tests/raid/device/harness.h"

namespace strata::raid {
namespace {

using namespace device;
using namespace device::testing;

constexpr std::uint32_t block_size = 4096;

struct members_fixture {
  test_loop loop;
  std::vector<std::unique_ptr<memory_device>> disks;
  std::vector<std::unique_ptr<fault_device>> faults;
  std::vector<member_event> events;
  std::unique_ptr<member_set> set;

  members_fixture(unsigned count, failure_budget budget) {
    std::vector<block_device*> list;
    for (unsigned i = 0; i < count; ++i) {
      auto m = memory_device::create(loop.context.get_executor(), {block_size, 512});
      REQUIRE(m);
      disks.push_back(std::move(*m));
      faults.push_back(
          std::make_unique<fault_device>(*disks.back(), loop.clock, fault_options{.seed = i + 1}));
      list.push_back(faults.back().get());
    }
    set = std::make_unique<member_set>(
        list,
        member_set_options{
            .budget = budget,
            .clock = &loop.clock,
            .timeout = std::chrono::seconds(5),
            .read_error_limit = 2,
            .on_member_event = [this](const member_event& e) { events.push_back(e); }},
        member_set::hooks{.describe = [](unsigned) { return superblock{}; }, .failed = {}});
  }

  std::error_code flush_all() {
    auto f = io::flush();
    set->flush(f->req);
    loop.run_until([&] { return f->completions == 1; });
    return f->req.result;
  }
};

}  // namespace

TEST_CASE("member set: RAID-6's budget survives two failures, a member being rebuilt not counted",
          "[raid][members]") {
  members_fixture m(6, {.members_lost_survived = 2, .rebuilding_counts_as_lost = false});
  m.set->fail(0, member_failure::administrator);
  m.set->fail(1, member_failure::write_error);
  CHECK(m.set->failed_count() == 2);
  CHECK_FALSE(m.set->group_failed());
  m.set->begin_rebuild(0, m.faults[0].get());
  CHECK(m.set->rebuilding() == 0);
  CHECK_FALSE(m.set->failed(0));
  CHECK_FALSE(m.set->whole(0));
  CHECK(m.set->whole_count() == 4);
  m.set->fail(2, member_failure::timed_out);
  CHECK_FALSE(m.set->group_failed());  // two failed, one rebuilding: stripe by stripe
  m.set->fail(3, member_failure::timed_out);
  CHECK(m.set->group_failed());
  REQUIRE(m.events.size() == 4);
  CHECK(m.events[1].member == 1);
  CHECK(m.events[1].reason == member_failure::write_error);
}

TEST_CASE("member set: RAID-1's budget is all but one, and a member being rebuilt counts as lost",
          "[raid][members]") {
  members_fixture m(2, {.members_lost_survived = 1, .rebuilding_counts_as_lost = true});
  m.set->fail(0, member_failure::device_failed);
  CHECK_FALSE(m.set->group_failed());
  m.set->begin_rebuild(0, m.faults[0].get());
  CHECK_FALSE(m.set->group_failed());
  m.set->fail(1, member_failure::device_failed);
  CHECK(m.set->group_failed());  // only the half-copied member is left
  std::error_code told;
  m.set->end_rebuild(make_error_code(errc::device_failed), [&](std::error_code ec) { told = ec; });
  m.loop.settle();
  CHECK(told == errc::device_failed);
  CHECK(m.set->rebuilding() == member_set::none);
  CHECK(m.set->health(0).failure ==
        member_failure::rebuild);  // failed anew, as only partly rebuilt
}

TEST_CASE("member set: what a member's error says of it", "[raid][members]") {
  members_fixture m(4, {.members_lost_survived = 2, .rebuilding_counts_as_lost = false});
  const block_device* d1 = (*m.set)[1];
  m.set->note_error(1, d1, op::read, make_error_code(errc::media_error));
  m.set->note_error(1, d1, op::read, make_error_code(errc::media_error));
  CHECK(m.set->health(1).read_errors == 2);
  CHECK_FALSE(m.set->failed(1));  // within the limit of 2
  m.set->note_error(1, d1, op::read, make_error_code(errc::media_error));
  CHECK(m.set->health(1).failure == member_failure::read_errors);

  const block_device* d2 = (*m.set)[2];
  m.set->note_error(2, d2, op::write, make_error_code(errc::no_space));
  m.set->note_error(2, d2, op::discard, make_error_code(errc::io_error));
  CHECK(m.set->health(2).no_space_errors == 1);
  CHECK_FALSE(m.set->failed(2));  // a full store and a refused discard leave it in

  // A late answer from a device since replaced says nothing of its successor.
  m.set->fail(3, member_failure::administrator);
  const block_device* old3 = (*m.set)[3];
  m.set->begin_rebuild(3, m.faults[0].get());
  m.set->note_error(3, old3, op::write, make_error_code(errc::io_error));
  CHECK_FALSE(m.set->failed(3));
  m.set->note_error(3, (*m.set)[3], op::flush, make_error_code(errc::io_error));
  CHECK(m.set->health(3).failure == member_failure::flush_error);
}

TEST_CASE(
    "member set: a flush goes to every working member; one that fails it is failed out, "
    "and past the budget the flush fails",
    "[raid][members]") {
  members_fixture m(4, {.members_lost_survived = 2, .rebuilding_counts_as_lost = false});
  CHECK_FALSE(m.flush_all());
  m.set->fail(0, member_failure::administrator);
  m.faults[0]->hang();  // failed out: never asked again, so the flush does not wait for it
  CHECK_FALSE(m.flush_all());
  m.faults[3]->fail();
  CHECK_FALSE(m.flush_all());  // one more lost, within the budget
  CHECK(m.set->health(3).failure == member_failure::device_failed);
  m.faults[2]->fail();
  CHECK(m.flush_all() == errc::device_failed);  // three lost: the group with them
  m.faults[0]->resume();
}

TEST_CASE("member set: a hung member's flush is abandoned at the timeout and the member failed out",
          "[raid][members]") {
  members_fixture m(4, {.members_lost_survived = 2, .rebuilding_counts_as_lost = false});
  m.faults[2]->hang();
  CHECK_FALSE(m.flush_all());
  CHECK(m.set->health(2).failure == member_failure::timed_out);
  CHECK(m.set->health(2).timeouts == 1);
  CHECK(m.set->abandoned_ios() == 1);  // its flush is still the device's
  m.faults[2]->resume();
  m.loop.run_until([&] { return m.set->abandoned_ios() == 0; });
}

}  // namespace strata::raid
