// The event log and the operation log over a real config store: numbering
// that continues across a reopen, newest-first reads, operations that end
// with their outcome, cancellation, and those a stop cut short.
#include <catch2/catch.hpp>
#include <string>

#include "controller/event_log.h"
#include "controller/operations.h"
#include "strata/v1/operations.pb.h"
#include "tests/raid/device/harness.h"

using namespace strata;
using strata::device::testing::temp_dir;

TEST_CASE("config store: list_backward pages newest first, within the prefix", "[controller]") {
  temp_dir dir;
  auto store = controller::config_store::open((dir.path() / "config").string());
  REQUIRE(store);
  controller::config_batch b;
  for (const char* k : {"events/1", "events/2", "events/3", "eventsx/9", "event/0", "hosts/a"})
    b.put(k, k);
  REQUIRE((*store)->commit(b));
  auto keys = [](const auto& records) {
    std::vector<std::string> out;
    for (const auto& [k, v] : records) out.push_back(k);
    return out;
  };
  CHECK(keys((*store)->list_backward("events/")) ==
        std::vector<std::string>{"events/3", "events/2", "events/1"});
  CHECK(keys((*store)->list_backward("events/", {}, 2)) ==
        std::vector<std::string>{"events/3", "events/2"});
  CHECK(keys((*store)->list_backward("events/", "events/2", 5)) ==
        std::vector<std::string>{"events/1"});
  CHECK((*store)->list_backward("nothing/").empty());
}

TEST_CASE("event log: events are numbered in order, kept, and numbered on after a reopen",
          "[controller]") {
  temp_dir dir;
  const std::string path = (dir.path() / "config").string();
  std::vector<std::string> echoed;
  {
    auto store = controller::config_store::open(path);
    REQUIRE(store);
    controller::event_log log(**store, [&](controller::severity s, std::string_view m) {
      echoed.push_back(std::string(controller::to_string(s)) + " " + std::string(m));
    });
    log.record(controller::severity::info, "pools/p1/volumes/v1", "created");
    log.record(controller::severity::warning, "", "a fan is slow");
    log.drain();
    const auto records = (*store)->list("events/");
    REQUIRE(records.size() == 2);
    v1::Event e;
    REQUIRE(e.ParseFromString(records[0].second));
    CHECK(e.name() == "events/00000000000000000001");
    CHECK(e.severity() == v1::INFO);
    CHECK(e.resource() == "pools/p1/volumes/v1");
    CHECK(e.time_unix_ms() > 0);
  }
  CHECK(echoed ==
        std::vector<std::string>{"info pools/p1/volumes/v1: created", "warning a fan is slow"});
  auto store = controller::config_store::open(path);
  REQUIRE(store);
  {
    controller::event_log log(**store);
    log.record(controller::severity::error, "groups/g1", "a member failed");
  }  // the destructor drains
  const auto newest = (*store)->list_backward("events/", {}, 1);
  REQUIRE(newest.size() == 1);
  CHECK(newest[0].first == "events/00000000000000000003");
}

TEST_CASE(
    "operations: each ends with its outcome; cancel reaches the work; a stop's leftovers are "
    "listed",
    "[controller]") {
  temp_dir dir;
  const std::string path = (dir.path() / "config").string();
  auto store = controller::config_store::open(path);
  REQUIRE(store);
  std::string cut_short;
  {
    controller::operation_log ops(**store);
    const v1::Operation done = ops.start("volume.delete", "pools/p1/volumes/v2");
    CHECK(done.name() == "operations/op-000001");
    CHECK(done.state() == v1::Operation::RUNNING);
    ops.progress(done.name(), 0.5);
    CHECK(ops.get(done.name())->progress_fraction() == 0.5);
    ops.finish(done.name(), {});
    CHECK(ops.get(done.name())->state() == v1::Operation::SUCCEEDED);
    CHECK(ops.get(done.name())->progress_fraction() == 1.0);

    const v1::Operation failed = ops.start("group.scrub", "groups/g1");
    ops.finish(failed.name(), std::unexpected(make_error(errc::io_error, "member hdd-03 failed")));
    CHECK(ops.get(failed.name())->state() == v1::Operation::FAILED);
    CHECK(ops.get(failed.name())->error().message() == "member hdd-03 failed");
    CHECK(ops.get(failed.name())->end_time_unix_ms() >=
          ops.get(failed.name())->create_time_unix_ms());

    bool asked = false;
    const v1::Operation stoppable = ops.start("group.scrub", "groups/g2", [&] { asked = true; });
    auto cancelled = ops.cancel(stoppable.name());
    REQUIRE(cancelled);
    CHECK(asked);
    ops.finish(stoppable.name(), {}, true);
    CHECK(ops.get(stoppable.name())->state() == v1::Operation::CANCELLED);
    CHECK(ops.cancel(stoppable.name()).error().code ==
          make_error_code(errc::invalid_argument));  // ended
    CHECK(ops.cancel("operations/op-999999").error().code == make_error_code(errc::not_found));
    const v1::Operation unstoppable = ops.start("volume.delete", "pools/p1/volumes/v3");
    const auto refused = ops.cancel(unstoppable.name());
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("cannot be stopped") != std::string::npos);
    cut_short = unstoppable.name();
  }
  controller::operation_log again(**store);
  const auto left = again.interrupted();
  REQUIRE(left.size() == 1);
  CHECK(left[0].name() == cut_short);
  again.finish(cut_short,
               std::unexpected(make_error(errc::io_error, "the controller stopped while it ran")));
  CHECK(again.interrupted().empty());
  CHECK(again.get(cut_short)->state() == v1::Operation::FAILED);
  CHECK(again.start("x", "y").name() == "operations/op-000005");  // numbering goes on
}
