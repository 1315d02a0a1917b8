// Persistent reservations (raid/device/reservations.h): the simulated
// drive's model, shared through its file by every opener as a real
// drive's state is shared by every host; the file device refusing a
// preempted host's writes where it hands them to the kernel, and handing
// them to its caller (a gate that holds them) rather than failing them.
// The real drives' ioctls are proven against a real SCSI target through
// the guest's kernel (tests/controller/guest_reservations_test.sh).
#include "raid/device/reservations.h"

#include <cstring>

#include "raid/device/file_device.h"
#include "raid/device/gate_device.h"
#include "tests/raid/device/harness.h"

namespace strata::device::testing {
namespace {

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t key_a = 0x11;
constexpr std::uint64_t key_b = 0x22;

std::unique_ptr<file_reservations> open_model(const std::filesystem::path& path) {
  auto r = file_reservations::open(path);
  REQUIRE(r);
  return std::move(*r);
}

}  // namespace

TEST_CASE("reservations: the model is one state for every opener, as a drive's is",
          "[device][reservations]") {
  temp_dir dir;
  const auto path = dir.path() / "hdd-00.pr";
  auto a = open_model(path);  // controller a's view
  auto b = open_model(path);  // controller b's, as another process maps it

  CHECK(a->admits_write(key_a));                           // no reservation: anyone writes
  CHECK(a->reserve(key_a) == errc::reservation_conflict);  // not registered
  REQUIRE_FALSE(a->register_key(key_a));
  REQUIRE_FALSE(a->register_key(key_a));  // idempotent
  REQUIRE_FALSE(a->reserve(key_a));
  CHECK(b->holder() == key_a);
  CHECK_FALSE(b->admits_write(key_b));  // reserved, b not registered
  REQUIRE_FALSE(b->register_key(key_b));
  CHECK(b->reserve(key_b) == errc::reservation_conflict);  // a holds it
  CHECK(b->admits_write(key_b));                           // Registrants Only: both write
  CHECK(a->admits_write(key_a));

  const std::uint64_t before = a->generation();
  REQUIRE_FALSE(b->preempt(key_b, key_a));
  CHECK(a->generation() > before);
  CHECK_FALSE(a->registered(key_a));
  CHECK(a->holder() == key_b);  // the reservation passes to the preemptor
  CHECK_FALSE(a->admits_write(key_a));
  CHECK(b->admits_write(key_b));
  CHECK_FALSE(b->preempt(key_b, key_a));  // a second preempt: gone already, success
  CHECK(a->preempt(key_a, key_b) == errc::reservation_conflict);  // a preempted host cannot

  // Reopened (a restart): the state is the file's.
  b.reset();
  auto again = open_model(path);
  CHECK(again->holder() == key_b);
  CHECK_FALSE(again->registered(key_a));
  REQUIRE_FALSE(a->register_key(key_a));  // registered again: writes again
  CHECK(again->admits_write(key_a));
}

TEST_CASE("reservations: a file that is not a reservations file is refused",
          "[device][reservations]") {
  temp_dir dir;
  const auto path = dir.path() / "other.pr";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("not a reservations file", f);
    std::fclose(f);
  }
  auto r = file_reservations::open(path);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find(path.string()) != std::string::npos);
  auto block = block_reservations(path.string());  // a regular file: no reservations
  REQUIRE_FALSE(block);
  CHECK(block.error().code == errc::not_supported);
  CHECK(errc_from_errno(EBADE) == errc::reservation_conflict);  // the block layer's conflict
}

TEST_CASE("reservations: keys tell the array and the controller apart", "[device][reservations]") {
  const std::uint8_t one[16] = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::uint8_t two[16] = {9, 2, 3, 4, 5, 6, 7, 8};
  CHECK(reservation_key(one, 'a') != reservation_key(one, 'b'));
  CHECK(reservation_key(one, 'a') != reservation_key(two, 'a'));
  CHECK(reservation_key(one, 'a') == 0x01020304050607'61ull);
  CHECK(reservation_key(one, 'a') != 0);
}

TEST_CASE(
    "reservations: a preempted host's writes are refused where they reach the kernel, and held "
    "by its gate; its own records fail; the preemptor's land",
    "[device][reservations]") {
  test_loop loop;
  temp_dir dir;
  const auto image = dir.path() / "hdd-00.img";
  file_options options;
  options.create = true;
  options.block_count = 64;
  auto a_file = file_device::open(*loop.ring, image.string(), options);
  REQUIRE(a_file);
  auto b_file = file_device::open(*loop.ring, image.string(), options);
  REQUIRE(b_file);
  auto a_model = open_model(dir.path() / "hdd-00.pr");
  auto b_model = open_model(dir.path() / "hdd-00.pr");
  int holds = 0;
  gate_device a_gate(**a_file, {}, [&] { ++holds; });
  file_device::fence_checks a_checks;
  a_checks.model = a_model.get();
  a_checks.key = key_a;
  a_checks.refused = [&](request& r) { a_gate.refused(r); };
  (*a_file)->fence(a_checks);
  file_device::fence_checks b_checks;
  b_checks.model = b_model.get();
  b_checks.key = key_b;
  (*b_file)->fence(b_checks);
  REQUIRE_FALSE(a_model->register_key(key_a));
  REQUIRE_FALSE(a_model->reserve(key_a));
  REQUIRE_FALSE(b_model->register_key(key_b));

  write_blocks(loop, a_gate, 0, pattern(block_size, 1));  // a owns it: lands
  REQUIRE_FALSE(b_model->preempt(key_b, key_a));          // b takes over

  // What a had queued when it froze, now dispatched: none of it lands.
  std::vector<std::unique_ptr<io>> stale;
  for (std::uint64_t lba = 0; lba < 8; ++lba) {
    auto x = io::make(op::write, lba, 1, block_size);
    std::memset(x->buffer.data(), 0xee, block_size);
    a_gate.submit(x->req);
    stale.push_back(std::move(x));
  }
  auto trim = io::discard(0, 1);
  a_gate.submit(trim->req);
  loop.settle();
  CHECK(holds == 1);
  CHECK(a_gate.current() == gate_device::state::held);
  CHECK(a_gate.held() == 9);
  for (const auto& x : stale) CHECK(x->completions == 0);
  CHECK(read_blocks(loop, **b_file, 0, 1) == pattern(block_size, 1));
  CHECK(read_blocks(loop, **b_file, 1, 1) == std::vector<std::byte>(block_size));

  // a's own records (its heartbeat) are refused, not held: that is how it
  // learns it was fenced.
  auto beat = io::make(op::write, 63, 1, block_size);
  beat->req.fence_exempt = true;
  a_gate.submit(beat->req);
  loop.run_until([&] { return beat->completions == 1; });
  CHECK(beat->req.result == errc::reservation_conflict);

  // Without a caller to hold it, a refused write fails with the conflict.
  a_checks.refused = {};
  (*a_file)->fence(a_checks);
  auto bare = io::make(op::write, 9, 1, block_size);
  CHECK(run(loop, **a_file, *bare) == errc::reservation_conflict);

  write_blocks(loop, **b_file, 1, pattern(block_size, 2));  // the preemptor's writes land
  CHECK(read_blocks(loop, **a_file, 1, 1) == pattern(block_size, 2));  // a still reads

  // Stepped down, a shuts the gate: its stale writes fail, and never land.
  a_gate.shut(make_error_code(errc::canceled));
  loop.run_until([&] {
    for (const auto& x : stale) {
      if (x->completions == 0) return false;
    }
    return trim->completions == 1;
  });
  for (const auto& x : stale) CHECK(x->req.result == errc::canceled);
  CHECK(read_blocks(loop, **b_file, 0, 1) == pattern(block_size, 1));
  CHECK(read_blocks(loop, **b_file, 1, 1) == pattern(block_size, 2));
}

}  // namespace strata::device::testing

namespace strata::device::testing {

TEST_CASE(
    "fence: the lease is asked last where the ring hands a request to the kernel: one prepared "
    "before a lapse and submitted after it is held, and never written",
    "[device][reservations][gate]") {
  test_loop loop;
  temp_dir dir;
  file_options options;
  options.create = true;
  options.block_count = 16;
  auto file = file_device::open(*loop.ring, (dir.path() / "ssd-00.img").string(), options);
  REQUIRE(file);
  auto partner = file_device::open(*loop.ring, (dir.path() / "ssd-00.img").string(), options);
  REQUIRE(partner);  // the partner's view of the drive, unfenced
  bool lease_valid = true;
  int holds = 0;
  gate_device bottom(
      **file, [&] { return lease_valid; }, [&] { ++holds; });
  file_device::fence_checks checks;
  checks.allowed = [&] { return lease_valid; };
  checks.refused = [&](request& r) { bottom.refused(r); };
  (*file)->fence(checks);

  // Past the gate while the lease holds; prepared, and left for the ring's
  // next enter (as inside a batch of completions). The process "freezes"
  // here; its lease lapses meanwhile.
  auto stale = io::make(op::write, 3, 1, block_size);
  std::memset(stale->buffer.data(), 0xee, block_size);
  bottom.submit(stale->req);
  auto beat = io::make(op::write, 15, 1, block_size);  // the controller's own record
  beat->req.fence_exempt = true;
  bottom.submit(beat->req);
  CHECK(holds == 0);
  lease_valid = false;
  loop.run_until([&] { return beat->completions == 1 && holds == 1; });
  CHECK_FALSE(beat->req.result);  // its own records go through
  CHECK(stale->completions == 0);
  CHECK(bottom.held() == 1);
  CHECK(read_blocks(loop, **partner, 3, 1) == std::vector<std::byte>(block_size));

  // Confirmed the owner again: it goes on, written once.
  lease_valid = true;
  bottom.open();
  loop.run_until([&] { return stale->completions == 1; });
  CHECK_FALSE(stale->req.result);
  CHECK(read_blocks(loop, **file, 3, 1) == std::vector<std::byte>(block_size, std::byte{0xee}));
}

}  // namespace strata::device::testing
