// Timers of both clocks: fire once, in order, never inside arm(), never
// after cancel or destruction.
#include "tests/raid/device/harness.h"

namespace strata::device::testing {

using std::chrono::milliseconds;

TEST_CASE("virtual clock: timers fire in deadline order when time is advanced", "[device][clock]") {
  test_loop loop;
  std::vector<int> fired;
  auto a = loop.clock.make_timer(loop.context.get_executor(), [&] { fired.push_back(1); });
  auto b = loop.clock.make_timer(loop.context.get_executor(), [&] { fired.push_back(2); });
  auto c = loop.clock.make_timer(loop.context.get_executor(), [&] { fired.push_back(3); });
  const time_point t0 = loop.clock.now();
  a->arm(t0 + milliseconds(30));
  b->arm(t0 + milliseconds(10));
  c->arm(t0 + milliseconds(20));
  c->arm(t0 + milliseconds(40));  // re-arming replaces
  loop.settle();
  CHECK(fired.empty());  // time has not moved

  loop.clock.advance_by(milliseconds(30));
  loop.settle();
  CHECK(fired == std::vector<int>{2, 1});
  CHECK(loop.clock.now() == t0 + milliseconds(30));

  c->cancel();
  loop.clock.advance_by(milliseconds(100));
  loop.settle();
  CHECK(fired == std::vector<int>{2, 1});
  CHECK_FALSE(loop.clock.next_deadline());
}

TEST_CASE("virtual clock: a destroyed timer never fires, even if already due", "[device][clock]") {
  test_loop loop;
  int fired = 0;
  auto t = loop.clock.make_timer(loop.context.get_executor(), [&] { ++fired; });
  t->arm(loop.clock.now() + milliseconds(1));
  loop.clock.advance_by(milliseconds(1));  // due: its delivery is queued
  t.reset();
  loop.settle();
  CHECK(fired == 0);
}

TEST_CASE("real clock: a timer fires once, no earlier than its deadline", "[device][clock]") {
  boost::asio::io_context context;
  real_clock clock;
  int fired = 0;
  time_point fired_at{};
  auto t = clock.make_timer(context.get_executor(), [&] {
    ++fired;
    fired_at = clock.now();
  });
  const time_point deadline = clock.now() + milliseconds(20);
  t->arm(clock.now() + milliseconds(5));
  t->arm(deadline);  // replaces the first arming
  context.run_for(std::chrono::milliseconds(200));
  CHECK(fired == 1);
  CHECK(fired_at >= deadline);
}

}  // namespace strata::device::testing
