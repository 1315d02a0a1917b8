// Features and asynchronous events (target/nvme/features.h).
#include <catch2/catch.hpp>

#include "target/nvme/features.h"

namespace strata::nvme {

TEST_CASE(
    "nvme features: Number of Queues grants what was asked up to the most, once; others as set; "
    "saving refused") {
  controller_features f(8, 5000, true);
  CHECK(f.io_queues() == 1);
  CHECK(*f.set(feature::number_of_queues, 3 | 3u << 16, false) ==
        (3 | 3u << 16));  // four asked, four granted
  CHECK(f.io_queues() == 4);
  CHECK(*f.set(feature::number_of_queues, 63 | 63u << 16, false) ==
        (3 | 3u << 16));  // asked again: what it granted
  controller_features many(8, 5000, true);
  CHECK(*many.set(feature::number_of_queues, 63 | 63u << 16, false) ==
        (7 | 7u << 16));  // 64 asked, 8 granted
  CHECK(many.set(feature::number_of_queues, 0xffff, false).error() == generic(code::invalid_field));
  CHECK(*many.get(feature::number_of_queues, 0) == (7 | 7u << 16));

  CHECK(*f.get(feature::keep_alive_timer, 0) == 5000);
  CHECK(*f.set(feature::keep_alive_timer, 10000, false) == 0);
  CHECK(*f.get(feature::keep_alive_timer, 0) == 10000);
  CHECK(*f.get(feature::keep_alive_timer, 1) == 5000);  // the default
  CHECK(*f.set(feature::volatile_write_cache, 0, false) == 0);
  CHECK_FALSE(f.write_cache());
  CHECK(*f.get(feature::volatile_write_cache, 1) == 1);
  CHECK(*f.set(feature::async_event_configuration, 0xffffffff, false) == 0);
  CHECK(f.async_events_enabled() ==
        (async_event_config::namespace_attribute | async_event_config::ana_change));
  CHECK(*f.get(feature::keep_alive_timer, 3) == 0x4);  // changeable, not saveable
  CHECK(f.set(feature::keep_alive_timer, 1, true).error() ==
        status{status_type::command_specific, 0x0d, true});
  CHECK(f.set(0x42, 0, false).error() == generic(code::invalid_field));
  CHECK(f.get(0x42, 0).error() == generic(code::invalid_field));
}

TEST_CASE(
    "nvme async events: reported to an outstanding request, once until its page is read, and only "
    "if enabled") {
  const std::uint32_t all =
      async_event_config::namespace_attribute | async_event_config::ana_change;
  async_events e(2);
  CHECK_FALSE(e.request(10).now);
  CHECK_FALSE(e.request(11).now);
  CHECK(e.request(12).refusal ==
        status{status_type::command_specific, 0x05, true});  // past AERL + 1
  const auto first = e.raise(ana_changed(), all);
  REQUIRE(first);
  CHECK(first->command_id == 10);
  CHECK(first->result == (2u | 0x03u << 8 | 0x0cu << 16));
  CHECK_FALSE(e.raise(ana_changed(), all));  // masked until the ANA page is read
  e.page_read(0x0c);
  const auto again = e.raise(ana_changed(), all);
  REQUIRE(again);
  CHECK(again->command_id == 11);
  // No request waiting: the event waits for the next one.
  CHECK_FALSE(e.raise(namespace_attribute_changed(), all));
  const auto later = e.request(13);
  CHECK(later.refusal.ok());
  REQUIRE(later.now);
  CHECK(later.now->result == (2u | 0x04u << 16));
  // Disabled: nothing.
  async_events off(4);
  (void)off.request(1);
  CHECK_FALSE(off.raise(ana_changed(), async_event_config::namespace_attribute));
  CHECK(off.outstanding() == std::vector<std::uint16_t>{1});
}

}  // namespace strata::nvme
