// Fault injection, fault by fault, then a randomized power-loss test against
// a reference model of what must survive.
#include "raid/device/fault_device.h"

#include <cstring>
#include <map>

#include "raid/device/forwarding_device.h"
#include "raid/device/memory_device.h"
#include "raid/device/ssd_model.h"
#include "tests/raid/device/harness.h"

namespace strata::device::testing {
namespace {

using std::chrono::milliseconds;
constexpr std::uint32_t block_size = 512;
constexpr std::uint64_t device_blocks = 4096;

struct faulty {
  test_loop loop;
  std::unique_ptr<memory_device> backing;
  std::unique_ptr<fault_device> device;

  explicit faulty(fault_options options = {}) {
    auto m = memory_device::create(loop.context.get_executor(), {block_size, device_blocks});
    REQUIRE(m);
    backing = std::move(*m);
    device = std::make_unique<fault_device>(*backing, loop.clock, options);
  }
  std::error_code read(std::uint64_t lba, std::uint64_t blocks) {
    auto x = io::make(op::read, lba, blocks, block_size);
    return run(loop, *device, *x);
  }
  std::error_code write(std::uint64_t lba, std::span<const std::byte> data) {
    auto x = io::make(op::write, lba, data.size() / block_size, block_size);
    std::memcpy(x->buffer.data(), data.data(), data.size());
    return run(loop, *device, *x);
  }
  // Cuts the power, waits for what survives to settle, powers on again
  // with an empty cache.
  void power_cycle(power_loss mode) {
    bool settled = false;
    device->power_cut(mode, [&] { settled = true; });
    loop.run_until([&] { return settled; });
    device->power_on();
  }
};

const std::error_code media_error = make_error_code(errc::media_error);
const std::error_code device_failed = make_error_code(errc::device_failed);

}  // namespace

// A device below that tracks allocation: its first half deallocated.
class half_thin final : public forwarding_device {
 public:
  explicit half_thin(block_device& below) : forwarding_device(below) {}
  void submit(request& req) noexcept override { backing().submit(req); }
  allocation_run allocation_at(std::uint64_t lba,
                               std::uint64_t max_blocks) const noexcept override {
    const std::uint64_t half = geometry().block_count / 2;
    if (lba < half) return {allocation::deallocated, std::min(max_blocks, half - lba)};
    return {allocation::mapped, max_blocks};
  }
};

TEST_CASE("decorators forward allocation_at, except a volatile write cache's", "[device][fault]") {
  test_loop loop;
  auto m = memory_device::create(loop.context.get_executor(), {block_size, device_blocks});
  REQUIRE(m);
  half_thin thin(**m);
  ssd_model ssd(thin, loop.clock, ssd_profile::sas_12g());
  fault_device plain(ssd, loop.clock, fault_options{});
  fault_device cached(ssd, loop.clock, fault_options{.seed = 2, .volatile_write_cache = true});
  CHECK(ssd.allocation_at(0, 10).state == allocation::deallocated);
  CHECK(plain.allocation_at(0, device_blocks).block_count == device_blocks / 2);
  CHECK(plain.allocation_at(device_blocks / 2, 8).state == allocation::mapped);
  // Its cache may hold writes the device below has not seen.
  CHECK(cached.allocation_at(0, 10).state == allocation::mapped);
}

TEST_CASE("fault device: silent corruption returns wrong data without an error, until rewritten",
          "[device][fault]") {
  for (bool cache : {false, true}) {
    INFO("volatile cache " << cache);
    faulty f(fault_options{.seed = 5, .volatile_write_cache = cache});
    const auto data = pattern(8 * block_size, 1);
    REQUIRE_FALSE(f.write(100, data));
    f.device->corrupt(102, 2);
    CHECK(read_blocks(f.loop, *f.device, 100, 2) ==
          std::vector<std::byte>(data.begin(), data.begin() + 2 * block_size));
    const auto rotten = read_blocks(f.loop, *f.device, 100, 8);  // no error
    CHECK(rotten != data);
    for (std::uint64_t b = 0; b < 8; ++b) {
      const bool same = std::memcmp(rotten.data() + b * block_size, data.data() + b * block_size,
                                    block_size) == 0;
      CHECK(same == (b < 2 || b >= 4));
    }
    CHECK(f.device->counters().corrupt_blocks_read == 2);
    REQUIRE_FALSE(f.write(102, std::span(data).subspan(2 * block_size, 2 * block_size)));
    CHECK(read_blocks(f.loop, *f.device, 100, 8) == data);
  }
}

TEST_CASE("fault device: a misdirected write lands elsewhere and succeeds", "[device][fault]") {
  for (bool cache : {false, true}) {
    INFO("volatile cache " << cache);
    faulty f(fault_options{.seed = 6, .volatile_write_cache = cache});
    const auto old_data = pattern(4 * block_size, 1);
    const auto victim = pattern(4 * block_size, 2);
    REQUIRE_FALSE(f.write(200, old_data));
    REQUIRE_FALSE(f.write(264, victim));
    f.device->misdirect_next_write(64);
    const auto new_data = pattern(4 * block_size, 3);
    CHECK_FALSE(f.write(200, new_data));  // sent to 200, lands at 264
    CHECK(read_blocks(f.loop, *f.device, 200, 4) == old_data);
    CHECK(read_blocks(f.loop, *f.device, 264, 4) == new_data);
    CHECK(f.device->counters().writes_misdirected == 1);
    CHECK_FALSE(f.write(200, new_data));  // once only
    CHECK(read_blocks(f.loop, *f.device, 200, 4) == new_data);
    f.device->misdirect_next_write(-1000);  // off the device: where it was sent
    CHECK_FALSE(f.write(0, victim));
    CHECK(read_blocks(f.loop, *f.device, 0, 4) == victim);
    CHECK(f.device->counters().writes_misdirected == 1);
  }
}

TEST_CASE("fault device: a latent sector error fails reads until the blocks are rewritten",
          "[device][fault]") {
  faulty f;
  f.device->add_latent_error(100, 4);  // blocks 100..103
  CHECK(f.read(100, 1) == media_error);
  CHECK(f.read(96, 8) == media_error);  // touches the range
  CHECK_FALSE(f.read(104, 8));          // next to it: fine
  CHECK(f.device->counters().read_errors_injected == 2);

  REQUIRE_FALSE(f.write(100, pattern(2 * block_size, 1)));  // rewrites 100..101 only
  CHECK_FALSE(f.read(100, 2));
  CHECK(f.read(102, 1) == media_error);
  CHECK(f.device->latent_error_blocks() == 2);
  REQUIRE_FALSE(f.write(102, pattern(2 * block_size, 2)));
  CHECK_FALSE(f.read(96, 16));
  CHECK(f.device->latent_error_blocks() == 0);
}

TEST_CASE("fault device: failing writes fail, and nothing is written", "[device][fault]") {
  faulty f;
  f.device->fail_writes(10, 1);
  CHECK(f.write(8, pattern(4 * block_size, 1)) == media_error);
  CHECK(read_blocks(f.loop, *f.device, 8, 4) == std::vector<std::byte>(4 * block_size));
  f.device->clear_write_failures();
  CHECK_FALSE(f.write(8, pattern(4 * block_size, 1)));
}

TEST_CASE("fault device: a failed device fails everything, including what was in flight",
          "[device][fault]") {
  faulty f;
  auto in_flight = io::make(op::write, 0, 1, block_size);
  f.device->submit(in_flight->req);
  f.device->fail();
  f.loop.run_until([&] { return in_flight->completions == 1; });
  CHECK(in_flight->req.result == device_failed);
  CHECK(f.read(0, 1) == device_failed);
  auto x = io::flush();
  CHECK(run(f.loop, *f.device, *x) == device_failed);
  CHECK(f.device->counters().requests_failed_device_gone == 3);
}

TEST_CASE("fault device: slow I/O completes exactly that much later", "[device][fault]") {
  faulty f;
  f.device->set_delay(milliseconds(250), 1.0);
  const time_point before = f.loop.clock.now();
  CHECK_FALSE(f.read(0, 1));
  CHECK(f.loop.clock.now() - before == milliseconds(250));
  f.device->set_delay({}, 0);
  const time_point after = f.loop.clock.now();
  CHECK_FALSE(f.read(0, 1));
  CHECK(f.loop.clock.now() == after);
  CHECK(f.device->counters().requests_delayed == 1);
}

TEST_CASE("fault device: reordering lets a later write overtake an earlier one to the medium",
          "[device][fault]") {
  faulty f;
  const std::vector<std::byte> first = pattern(block_size, 1), second = pattern(block_size, 2);
  f.device->set_reorder(milliseconds(10), 1.0);
  auto early = io::make(op::write, 7, 1, block_size);
  std::memcpy(early->buffer.data(), first.data(), first.size());
  f.device->submit(early->req);
  f.device->set_reorder({}, 0);
  auto late = io::make(op::write, 7, 1, block_size);
  std::memcpy(late->buffer.data(), second.data(), second.size());
  f.device->submit(late->req);
  f.loop.run_until([&] { return late->completions == 1; });
  CHECK(early->completions == 0);  // still held back
  f.loop.run_until([&] { return early->completions == 1; });
  CHECK_FALSE(early->req.result);
  CHECK_FALSE(late->req.result);
  // The earlier write reached the medium last: it is what the block holds.
  CHECK(read_blocks(f.loop, *f.device, 7, 1) == first);
  CHECK(f.device->counters().requests_reordered == 1);
}

TEST_CASE("fault device: a request held back across a power cut fails and never lands",
          "[device][fault][power]") {
  faulty f(fault_options{.seed = 3, .volatile_write_cache = true});
  const std::vector<std::byte> data = pattern(block_size, 5);
  f.device->set_reorder(milliseconds(10), 1.0);
  auto held = io::make(op::write, 3, 1, block_size);
  std::memcpy(held->buffer.data(), data.data(), data.size());
  f.device->submit(held->req);
  f.device->set_reorder({}, 0);
  f.power_cycle(power_loss::drop);
  f.loop.run_until([&] { return held->completions == 1; });
  CHECK(held->req.result == device_failed);
  CHECK(read_blocks(f.loop, *f.device, 3, 1) == std::vector<std::byte>(block_size, std::byte{0}));
}

TEST_CASE("fault device: a hung device holds requests until resumed or failed", "[device][fault]") {
  faulty f;
  f.device->hang();
  auto held = io::make(op::read, 0, 1, block_size);
  f.device->submit(held->req);
  f.loop.clock.advance_by(std::chrono::seconds(60));
  f.loop.settle();
  CHECK(held->completions == 0);  // an initiator-side timeout would fire now
  f.device->resume();
  f.loop.run_until([&] { return held->completions == 1; });
  CHECK_FALSE(held->req.result);

  f.device->hang();
  f.device->submit(held->req);
  f.device->fail();
  f.loop.run_until([&] { return held->completions == 2; });
  CHECK(held->req.result == device_failed);
}

TEST_CASE("fault device: power loss keeps flushed writes and drops the rest",
          "[device][fault][power]") {
  fault_options options;
  options.volatile_write_cache = true;
  faulty f(options);
  const auto flushed = pattern(8 * block_size, 1);
  const auto unflushed = pattern(8 * block_size, 2);
  REQUIRE_FALSE(f.write(0, flushed));
  flush(f.loop, *f.device);
  REQUIRE_FALSE(f.write(0, unflushed));                      // overwrites flushed data
  REQUIRE_FALSE(f.write(100, unflushed));                    // new data
  CHECK(read_blocks(f.loop, *f.device, 0, 8) == unflushed);  // the cache serves reads
  CHECK(f.device->dirty_blocks() == 16);

  f.power_cycle(power_loss::drop);
  CHECK(read_blocks(f.loop, *f.device, 0, 8) == flushed);
  CHECK(read_blocks(f.loop, *f.device, 100, 8) == std::vector<std::byte>(8 * block_size));
  CHECK(f.device->counters().blocks_lost_at_power_cut == 16);
}

TEST_CASE("fault device: while the power is off every request fails", "[device][fault][power]") {
  fault_options options;
  options.volatile_write_cache = true;
  faulty f(options);
  bool settled = false;
  f.device->power_cut(power_loss::drop, [&] { settled = true; });
  CHECK(f.read(0, 1) == device_failed);
  f.loop.run_until([&] { return settled; });
  f.device->power_on();
  CHECK_FALSE(f.read(0, 1));
}

TEST_CASE("fault device: a delayed request fails if the device fails before it is answered",
          "[device][fault]") {
  faulty f;
  f.device->set_delay(milliseconds(10), 1.0);
  auto x = io::make(op::write, 0, 1, block_size);
  f.device->submit(x->req);
  f.loop.settle();  // the write is done below; its answer waits out the delay
  f.device->fail();
  f.loop.run_until([&] { return x->completions == 1; });
  CHECK(x->req.result == device_failed);
}

// A write cache over a device with real latency: a read and a flush in
// flight together, the flush finishing first.
struct cached_over_ssd {
  test_loop loop;
  std::unique_ptr<memory_device> memory;
  std::unique_ptr<ssd_model> ssd;
  std::unique_ptr<fault_device> device;
  cached_over_ssd() {
    auto m = memory_device::create(loop.context.get_executor(), {block_size, device_blocks});
    REQUIRE(m);
    memory = std::move(*m);
    ssd = std::make_unique<ssd_model>(*memory, loop.clock, ssd_profile::sas_12g());
    fault_options options;
    options.volatile_write_cache = true;
    device = std::make_unique<fault_device>(*ssd, loop.clock, options);
  }
};

TEST_CASE("fault device: a read in flight across a flush still sees the cached write",
          "[device][fault][power]") {
  cached_over_ssd c;
  const auto data = pattern(block_size, 7);
  write_blocks(c.loop, *c.device, 5, data);  // in the cache only
  // The read fetches the old block below (90 us); the flush writes the new
  // one out and completes first (30 + 20 us), dropping it from the cache.
  auto r = io::make(op::read, 5, 1, block_size);
  auto f = io::flush();
  c.device->submit(r->req);
  c.device->submit(f->req);
  c.loop.run_until([&] { return r->completions == 1 && f->completions == 1; });
  REQUIRE_FALSE(f->req.result);
  REQUIRE_FALSE(r->req.result);
  CHECK(std::memcmp(r->buffer.data(), data.data(), block_size) == 0);
  CHECK(c.device->dirty_blocks() == 0);  // dropped once the read was done
}

TEST_CASE("fault device: a power cut during a flush keeps what already reached the medium",
          "[device][fault][power]") {
  cached_over_ssd c;
  const auto data = pattern(4 * block_size, 9);
  write_blocks(c.loop, *c.device, 20, data);
  auto f = io::flush();
  c.device->submit(f->req);
  // The flush's write lands; its flush of the medium is still in flight.
  c.loop.run_until([&] { return c.device->dirty_blocks() == 0; });
  REQUIRE(f->completions == 0);
  bool settled = false;
  c.device->power_cut(power_loss::drop, [&] { settled = true; });
  c.loop.run_until([&] { return settled && f->completions == 1; });
  CHECK(f->req.result == device_failed);  // its outcome is unknown to the caller
  CHECK(c.device->counters().blocks_lost_at_power_cut == 0);
  c.device->power_on();
  CHECK(read_blocks(c.loop, *c.device, 20, 4) == data);
}

TEST_CASE("fault device: randomized writes, flushes and a torn power cut against a reference",
          "[device][fault][power]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (replay with STRATA_TEST_SEED=" << seed << ")");
  std::mt19937_64 random(seed);
  for (int round = 0; round < 20; ++round) {
    fault_options options;
    options.volatile_write_cache = true;
    options.seed = random();
    faulty f(options);
    // Per block: its content at the last completed flush, and the newest
    // unflushed content, if any. Block contents are identified by a tag.
    std::map<std::uint64_t, std::uint64_t> durable;
    std::map<std::uint64_t, std::uint64_t> newest;
    constexpr std::uint64_t span_blocks = 64;
    std::uint64_t tag = 1;

    auto block_with = [](std::uint64_t t) { return pattern(block_size, t); };
    const int operations = 10 + static_cast<int>(random() % 40);
    for (int i = 0; i < operations; ++i) {
      if (random() % 5 == 0) {
        flush(f.loop, *f.device);
        for (auto& [lba, t] : newest) durable[lba] = t;
        newest.clear();
        continue;
      }
      const std::uint64_t lba = random() % span_blocks;
      const std::uint64_t blocks = 1 + random() % std::min<std::uint64_t>(8, span_blocks - lba);
      std::vector<std::byte> data;
      for (std::uint64_t b = 0; b < blocks; ++b) {
        const auto one = block_with(tag);
        data.insert(data.end(), one.begin(), one.end());
        newest[lba + b] = tag++;
      }
      REQUIRE_FALSE(f.write(lba, data));
    }
    const bool tear = random() % 2 == 0;
    f.power_cycle(tear ? power_loss::tear : power_loss::drop);

    const auto image = read_blocks(f.loop, *f.device, 0, span_blocks);
    for (std::uint64_t lba = 0; lba < span_blocks; ++lba) {
      INFO("round " << round << ", block " << lba << (tear ? ", torn" : ", dropped"));
      const std::vector<std::byte> got(
          image.begin() + static_cast<std::ptrdiff_t>(lba * block_size),
          image.begin() + static_cast<std::ptrdiff_t>((lba + 1) * block_size));
      const std::vector<std::byte> old =
          durable.contains(lba) ? block_with(durable[lba]) : std::vector<std::byte>(block_size);
      if (!tear || !newest.contains(lba)) {
        CHECK(got == old);  // flushed data survives; unflushed is gone
      } else {
        CHECK((got == old || got == block_with(newest[lba])));  // either, never a mix
      }
    }
  }
}

}  // namespace strata::device::testing
