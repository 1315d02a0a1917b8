// The controller area (docs/controller-area.md): records encoded and
// decoded, two copies where a torn write must not lose the record, and the
// area on real group members beside the superblocks, the bitmap and the
// data, none of which it disturbs.
#include "controller/controller_area.h"

#include <catch2/catch.hpp>

#include "controller/disk_group.h"
#include "controller/shelf.h"
#include "raid/device/memory_device.h"
#include "raid/superblock.h"
#include "tests/raid/device/harness.h"

using namespace strata;
using namespace strata::controller;
using namespace strata::device::testing;

namespace {

array_identity identity() {
  array_identity a;
  for (std::size_t i = 0; i < a.id.size(); ++i) a.id[i] = static_cast<std::uint8_t>(0x10 + i);
  for (std::size_t i = 0; i < a.link_key.size(); ++i)
    a.link_key[i] = static_cast<std::uint8_t>(0xa0 ^ i);
  a.created_unix_ms = 1'790'000'000'000;
  return a;
}

std::vector<std::byte> blank_area() {
  return std::vector<std::byte>(area::slots * area::slot_bytes);
}

void put(std::vector<std::byte>& area_bytes, std::size_t slot,
         const std::vector<std::byte>& record) {
  std::copy(record.begin(), record.end(),
            area_bytes.begin() + static_cast<std::ptrdiff_t>(slot * area::slot_bytes));
}

std::uint64_t locate(test_loop& loop, device::block_device& member) {
  std::optional<std::expected<std::uint64_t, std::error_code>> at;
  area::locate(member, [&](auto r) { at = r; });
  loop.run_until([&] { return at.has_value(); });
  REQUIRE(*at);
  return **at;
}

area_contents read_area(test_loop& loop, device::block_device& member, std::uint64_t at) {
  std::optional<std::expected<area_contents, std::error_code>> got;
  area::read(member, at, [&](auto r) { got = std::move(r); });
  loop.run_until([&] { return got.has_value(); });
  REQUIRE(*got);
  return **got;
}

void wait_written(test_loop& loop,
                  std::function<void(std::function<void(std::error_code)>)> start) {
  std::optional<std::error_code> done;
  start([&](std::error_code e) { done = e; });
  loop.run_until([&] { return done.has_value(); });
  REQUIRE_FALSE(*done);
}

}  // namespace

TEST_CASE(
    "controller area: records round-trip, the newer copy wins, a corrupt copy falls back to the "
    "other",
    "[controller][area]") {
  auto bytes = blank_area();
  CHECK(area::decode(bytes).error() == errc::not_found);  // blank: no area records

  const drive_heartbeat a{"a", 41, 1'790'000'000'123, controller_state::running, 7};
  const drive_heartbeat b{"b", 9, 1'790'000'000'456, controller_state::stopped, 6};
  const pool_ownership old_owner{"pools/p1", "a", 3, 1};
  const pool_ownership new_owner{"pools/p1", "b", 4, 2};
  put(bytes, area::array_slot, area::encode(identity(), 1));
  put(bytes, area::array_slot + 1, area::encode(identity(), 1));
  put(bytes, area::heartbeat_a_slot, area::encode(a, 41));
  put(bytes, area::heartbeat_b_slot, area::encode(b, 9));
  put(bytes, area::ownership_slot, area::encode(new_owner, 2));  // a takeover wrote copy one...
  put(bytes, area::ownership_slot + 1,
      area::encode(old_owner, 1));  // ...and was cut before copy two
  auto c = area::decode(bytes);
  REQUIRE(c);
  CHECK(c->array == identity());
  CHECK(c->heartbeat_a == a);
  CHECK(c->heartbeat_b == b);
  CHECK(c->ownership == new_owner);

  // The newer copy torn (a bit flipped): the older one stands.
  bytes[area::ownership_slot * area::slot_bytes + 100] ^= std::byte{1};
  c = area::decode(bytes);
  REQUIRE(c);
  CHECK(c->ownership == old_owner);
  // Both copies of the identity gone: none, but the rest still reads.
  bytes[area::array_slot * area::slot_bytes + 40] ^= std::byte{1};
  bytes[(area::array_slot + 1) * area::slot_bytes + 3000] ^= std::byte{1};
  c = area::decode(bytes);
  REQUIRE(c);
  CHECK_FALSE(c->array);
  CHECK(c->heartbeat_a == a);

  // A heartbeat in the other controller's slot is not taken for its own.
  auto swapped = blank_area();
  put(swapped, area::heartbeat_a_slot, area::encode(b, 9));
  c = area::decode(swapped);
  REQUIRE(c);
  CHECK_FALSE(c->heartbeat_a);
  CHECK_FALSE(c->heartbeat_b);
  CHECK(area::heartbeat_slot("a") == area::heartbeat_a_slot);
  CHECK(area::heartbeat_slot("b") == area::heartbeat_b_slot);
  CHECK_FALSE(area::heartbeat_slot("c"));
}

TEST_CASE(
    "controller area: on group members after the bitmap, kept apart from superblocks, bitmap and "
    "data across a restart",
    "[controller][area]") {
  temp_dir dir;
  std::vector<drive_spec> specs;
  for (int i = 0; i < 6; ++i)
    specs.push_back({"hdd-0" + std::to_string(i), drive_kind::hdd, 256ull << 20});
  for (int i = 0; i < 2; ++i)
    specs.push_back({"ssd-0" + std::to_string(i), drive_kind::ssd, 128ull << 20});
  const auto data = pattern(64 * 4096, test_seed());
  group_id raid6_id{}, raid1_id{};
  std::vector<std::uint64_t> where;
  {
    test_loop loop;
    auto s = shelf::open(*loop.ring, loop.clock, dir.path(), specs);
    REQUIRE(s);
    std::vector<device::block_device*> hdds, ssds, all;
    for (std::size_t i = 0; i < 8; ++i) (i < 6 ? hdds : ssds).push_back(&(*s)->drive(i));
    for (std::size_t i = 0; i < 8; ++i) all.push_back(&(*s)->drive(i));
    const group_options o{&loop.clock, {}, {}, {}};
    std::optional<std::expected<std::unique_ptr<disk_group>, error>> r6, r1;
    create_group(group_kind::raid6, hdds, o, [&](auto r) { r6 = std::move(r); });
    create_group(group_kind::raid1, ssds, o, [&](auto r) { r1 = std::move(r); });
    loop.run_until([&] { return r6.has_value() && r1.has_value(); });
    REQUIRE(*r6);
    REQUIRE(*r1);
    raid6_id = (**r6)->id();
    raid1_id = (**r1)->id();

    for (device::block_device* d : all) {
      const std::uint64_t at = locate(loop, *d);
      // The last 64 KiB of the 1 MiB reserved area, after the bitmap.
      CHECK(at == (1u << 20) - raid::controller_area::size_bytes);
      where.push_back(at);
      wait_written(loop, [&](auto done) {
        area::write_both(*d, at, area::array_slot, area::encode(identity(), 1), done);
      });
      wait_written(loop, [&](auto done) {
        area::write(*d, at, area::heartbeat_a_slot,
                    area::encode(drive_heartbeat{"a", 1, 0, controller_state::running, 1}, 1),
                    done);
      });
      wait_written(loop, [&](auto done) {
        area::write_both(*d, at, area::ownership_slot,
                         area::encode(pool_ownership{"pools/p1", "a", 1, 0}, 1), done);
      });
    }
    // Data through both groups, with the bitmap marking and clearing regions.
    write_blocks(loop, (**r6)->device(), 0, data);
    write_blocks(loop, (**r6)->device(), (**r6)->device().geometry().block_count - 64, data);
    write_blocks(loop, (**r1)->device(), 0, data);
    for (std::size_t i = 0; i < all.size(); ++i) {
      const auto c = read_area(loop, *all[i], where[i]);
      CHECK(c.array == identity());
      CHECK(c.heartbeat_a->counter == 1);
      CHECK(c.ownership->pool == "pools/p1");
    }
    for (auto* g : {&**r6, &**r1}) {
      std::optional<std::error_code> clean;
      (*g)->mark_clean([&](std::error_code e) { clean = e; });
      loop.run_until([&] { return clean.has_value() && (*g)->idle(); });
      REQUIRE_FALSE(*clean);
    }
  }
  // After a restart: the groups assemble (their superblocks untouched) with
  // their data, and the areas read back.
  test_loop loop;
  auto s = shelf::open(*loop.ring, loop.clock, dir.path(), specs);
  REQUIRE(s);
  std::vector<device::block_device*> all;
  for (std::size_t i = 0; i < 8; ++i) all.push_back(&(*s)->drive(i));
  const group_options o{&loop.clock, {}, {}, {}};
  std::optional<std::expected<std::unique_ptr<disk_group>, error>> r6, r1;
  assemble_group(group_kind::raid6, raid6_id, all, o, [&](auto r) { r6 = std::move(r); });
  loop.run_until([&] { return r6.has_value(); });
  assemble_group(group_kind::raid1, raid1_id, all, o, [&](auto r) { r1 = std::move(r); });
  loop.run_until([&] { return r1.has_value(); });
  REQUIRE(*r6);
  REQUIRE(*r1);
  CHECK(read_blocks(loop, (**r6)->device(), 0, 64) == data);
  CHECK(read_blocks(loop, (**r6)->device(), (**r6)->device().geometry().block_count - 64, 64) ==
        data);
  CHECK(read_blocks(loop, (**r1)->device(), 0, 64) == data);
  for (std::size_t i = 0; i < all.size(); ++i) {
    CHECK(locate(loop, *all[i]) == where[i]);
    CHECK(read_area(loop, *all[i], where[i]).array == identity());
  }
  for (auto* g : {&**r6, &**r1}) {
    std::optional<std::error_code> clean;
    (*g)->mark_clean([&](std::error_code e) { clean = e; });
    loop.run_until([&] { return clean.has_value() && (*g)->idle(); });
  }
}

TEST_CASE("controller area: none on a blank drive, nor where the reserved area is too small",
          "[controller][area]") {
  test_loop loop;
  auto blank = device::memory_device::create(loop.context.get_executor(), {4096, 1024});
  REQUIRE(blank);
  std::optional<std::expected<std::uint64_t, std::error_code>> at;
  area::locate(**blank, [&](auto r) { at = r; });
  loop.run_until([&] { return at.has_value(); });
  REQUIRE_FALSE(*at);
  CHECK(at->error() == errc::not_found);
  CHECK_FALSE(raid::controller_area::offset_bytes(8 * 4096));
  CHECK(raid::controller_area::room_before(8 * 4096) == 8 * 4096);
  CHECK(raid::controller_area::offset_bytes(1u << 20) == (1u << 20) - (64u << 10));
}
