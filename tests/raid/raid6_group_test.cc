// The RAID-6 group: every single and every pair of failed members of 4- to
// 8-member groups, data verified against a reference; a third failure; read
// errors reconstructed; bad geometry refused with nothing touched.
#include "raid/raid6_group.h"

#include <cstring>
#include <optional>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "tests/raid/device/harness.h"

namespace strata::raid {
namespace {

using namespace device;
using namespace device::testing;

constexpr std::uint32_t block_size = 512;
constexpr std::uint64_t strip_blocks = 8;  // 4 KiB strips: small stripes, many of them
constexpr std::uint64_t stripes = 16;

// A group over memory members, each behind a fault device.
struct array {
  test_loop loop;
  std::vector<std::unique_ptr<memory_device>> disks;
  std::vector<std::unique_ptr<fault_device>> faults;
  std::unique_ptr<raid6_group> group;
  std::vector<std::byte> reference;  // what the group must read back

  std::vector<member_event> member_events;

  explicit array(unsigned members, std::uint64_t seed = 1, double rebuild_mb_per_s = 0,
                 duration member_timeout = {}) {
    raid6_options options;
    options.member_timeout = member_timeout;
    options.on_member_event = [this](const member_event& e) { member_events.push_back(e); };
    options.strip_size_bytes = strip_blocks * block_size;
    options.reserved_bytes = 8 * block_size;
    options.clock = &loop.clock;
    options.rebuild_mb_per_s = rebuild_mb_per_s;
    std::vector<block_device*> members_list;
    for (unsigned i = 0; i < members; ++i) {
      auto m = memory_device::create(loop.context.get_executor(),
                                     {block_size, 8 + stripes * strip_blocks});
      REQUIRE(m);
      disks.push_back(std::move(*m));
      fault_options fo;
      fo.seed = seed + i;
      faults.push_back(std::make_unique<fault_device>(*disks.back(), loop.clock, fo));
      members_list.push_back(faults.back().get());
    }
    auto g = raid6_group::create(members_list, options);
    REQUIRE(g);
    group = std::move(*g);
    reference.assign(group->geometry().size_bytes(), std::byte{0});
  }

  void write(std::uint64_t lba, std::uint64_t blocks, std::uint64_t seed) {
    const auto data = pattern(blocks * block_size, seed);
    write_blocks(loop, *group, lba, data);
    std::memcpy(reference.data() + lba * block_size, data.data(), data.size());
  }
  void verify_all() {
    const auto got = read_blocks(loop, *group, 0, group->geometry().block_count);
    REQUIRE(got == reference);
  }
  // Writes that exercise every path: whole stripes, partial strips, writes
  // across strip and stripe boundaries.
  void write_mix(std::uint64_t seed) {
    const std::uint64_t per_stripe = group->layout().stripe_data_blocks();
    write(0, per_stripe * 2, seed);                         // two full stripes
    write(per_stripe * 2 + 3, 2, seed + 1);                 // inside one strip
    write(per_stripe * 3 + strip_blocks - 2, 5, seed + 2);  // across a strip boundary
    write(per_stripe * 5 - 3, per_stripe + 6, seed + 3);    // across stripes
    write(group->geometry().block_count - 1, 1, seed + 4);  // the last block
  }
};

}  // namespace

TEST_CASE("raid6: every single and pair of failed members, 4 to 8 members", "[raid][raid6]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  for (unsigned members = 4; members <= 8; ++members) {
    std::vector<std::pair<unsigned, unsigned>> cases;
    for (unsigned a = 0; a < members; ++a) {
      cases.push_back({a, a});
      for (unsigned b = a + 1; b < members; ++b) cases.push_back({a, b});
    }
    for (const auto& [a, b] : cases) {
      INFO(members << " members, failed " << a << " and " << b);
      array r(members);
      r.write_mix(seed);
      r.group->fail_member(a);
      r.group->fail_member(b);
      r.verify_all();           // degraded reads reconstruct
      r.write_mix(seed + 100);  // degraded writes go on
      r.verify_all();
      CHECK_FALSE(r.group->group_failed());
    }
  }
}

namespace {

// Stripe 1 held by a read-modify-write of strip 0 whose parity read hangs
// (until release()), for reads of that stripe to run beside it.
struct held_stripe {
  static constexpr std::uint64_t stripe = 1;
  array& r;
  std::uint64_t base;  // the stripe's first block
  unsigned parity_member;
  std::vector<std::byte> data;
  std::unique_ptr<io> w;

  held_stripe(array& a, std::uint64_t seed)
      : r(a),
        base(stripe * a.group->layout().stripe_data_blocks()),
        parity_member(a.group->layout().p_member(stripe)),
        data(pattern(2 * block_size, seed + 5)),
        w(io::make(op::write, base + 1, 2, block_size)) {
    r.faults[parity_member]->hang();
    std::memcpy(w->buffer.data(), data.data(), data.size());
    r.group->submit(w->req);
    r.loop.settle();
    REQUIRE(w->completions == 0);
  }
  // A read of strip 2, which the write does not touch.
  std::unique_ptr<io> read_strip_2() {
    auto x = io::make(op::read, base + 2 * strip_blocks, strip_blocks, block_size);
    r.group->submit(x->req);
    return x;
  }
  bool holds_strip_2(const io& x) const {
    return std::memcmp(x.buffer.data(), r.reference.data() + (base + 2 * strip_blocks) * block_size,
                       strip_blocks * block_size) == 0;
  }
  // The parity read answers: the write ends, and the reference takes it.
  void release(const io* also = nullptr) {
    r.faults[parity_member]->resume();
    r.loop.run_until(
        [&] { return w->completions == 1 && (also == nullptr || also->completions == 1); });
    REQUIRE_FALSE(w->req.result);
    std::memcpy(r.reference.data() + (base + 1) * block_size, data.data(), data.size());
  }
};

}  // namespace

TEST_CASE("raid6: a healthy read does not wait for a write holding its stripe", "[raid][raid6]") {
  // md reads a healthy chunk directly: an OLTP load whose hot blocks
  // cluster in a few stripes must not queue its reads behind each
  // read-modify-write of those stripes.
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  array r(6, seed);
  r.write_mix(seed);
  held_stripe held(r, seed);
  // A read of strip 2, and one of strip 0 itself (it may see the old data
  // or the new, as the write is not acknowledged yet).
  auto x = held.read_strip_2();
  auto y = io::make(op::read, held.base, 4, block_size);
  r.group->submit(y->req);
  r.loop.settle();
  CHECK(x->completions == 1);
  CHECK(y->completions == 1);
  CHECK_FALSE(x->req.result);
  CHECK(held.holds_strip_2(*x));
  held.release();
  r.verify_all();
}

TEST_CASE(
    "raid6: a healthy read that meets a read error waits for its stripe and rebuilds the strip",
    "[raid][raid6]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  array r(6, seed);
  r.write_mix(seed);
  const raid6_layout& layout = r.group->layout();
  r.faults[layout.data_member(held_stripe::stripe, 2)]->add_latent_error(
      layout.member_lba(held_stripe::stripe, 0), strip_blocks);
  // The read fails while the write holds the stripe, and must queue: it
  // completes only after the write.
  held_stripe held(r, seed);
  auto x = held.read_strip_2();
  r.loop.settle();
  CHECK(x->completions == 0);  // its strip is lost: it waits for the stripe
  held.release(x.get());
  REQUIRE_FALSE(x->req.result);
  CHECK(held.holds_strip_2(*x));
  CHECK(r.group->repaired_blocks() == strip_blocks);
  r.verify_all();
}

TEST_CASE("raid6: a scrub finds and repairs silent corruption and a misdirected member write",
          "[raid][raid6][scrub]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  array r(6, seed);
  r.write_mix(seed);
  const raid6_layout& layout = r.group->layout();
  const std::uint64_t per_stripe = layout.stripe_data_blocks();
  auto scrub = [&] {
    std::optional<scrub_report> report;
    r.group->scrub([&](const scrub_report& s) { report = s; });
    r.loop.run_until([&] { return report.has_value(); });
    return *report;
  };
  // Bit rot on one member: a read returns it as it is (no checksums: the
  // group cannot tell on the read path); the scrub locates and rewrites it.
  const unsigned rotten = layout.data_member(3, 1);
  r.faults[rotten]->corrupt(layout.member_lba(3, 0), strip_blocks);
  const std::uint64_t strip_lba = 3 * per_stripe + strip_blocks;
  CHECK(read_blocks(r.loop, *r.group, strip_lba, strip_blocks) !=
        std::vector<std::byte>(
            r.reference.begin() + static_cast<std::ptrdiff_t>(strip_lba * block_size),
            r.reference.begin() +
                static_cast<std::ptrdiff_t>((strip_lba + strip_blocks) * block_size)));
  scrub_report found = scrub();
  CHECK(found.stripes_repaired == 1);
  CHECK(found.stripes_unrecoverable == 0);
  r.verify_all();

  // A misdirected write: member d's strip of a read-modify-write lands two
  // stripes on. Stripe 5 keeps its old strip under new parity, stripe 7
  // has a foreign strip under its own parity: one wrong strip each, and
  // the scrub puts both right (nothing else wrote those stripes since).
  const unsigned d = layout.data_member(5, 2);
  r.faults[d]->misdirect_next_write(static_cast<std::int64_t>(2 * strip_blocks));
  r.write(5 * per_stripe + 2 * strip_blocks + 1, 2, seed + 50);
  CHECK(r.faults[d]->counters().writes_misdirected == 1);
  found = scrub();
  CHECK(found.stripes_repaired == 2);
  CHECK(found.stripes_unrecoverable == 0);
  r.verify_all();
}

TEST_CASE("raid6: a third failure fails the group, never returning wrong data", "[raid][raid6]") {
  array r(6);
  r.write_mix(test_seed());
  r.group->fail_member(1);
  r.group->fail_member(4);
  r.verify_all();
  r.group->fail_member(2);
  CHECK(r.group->group_failed());
  auto x = io::make(op::read, 0, 8, block_size);
  CHECK(run(r.loop, *r.group, *x) == make_error_code(errc::device_failed));
  auto w = io::make(op::write, 0, 8, block_size);
  CHECK(run(r.loop, *r.group, *w) == make_error_code(errc::device_failed));
}

TEST_CASE("raid6: a member's read error is answered from the others", "[raid][raid6]") {
  array r(6);
  r.write_mix(test_seed());
  // Latent errors on two members, over the same rows: still within budget.
  r.faults[0]->add_latent_error(8, 64);
  r.faults[3]->add_latent_error(8, 64);
  r.verify_all();
  CHECK(r.faults[0]->counters().read_errors_injected > 0);
  CHECK_FALSE(r.group->member_failed(0));  // a read error is not a failed disk
  // Rebuilt and written back: the members read cleanly again.
  CHECK(r.faults[0]->latent_error_blocks() == 0);
  CHECK(r.faults[3]->latent_error_blocks() == 0);
  CHECK(r.group->repaired_blocks() >= 128);
  const auto errors_before = r.faults[0]->counters().read_errors_injected;
  r.verify_all();
  CHECK(r.faults[0]->counters().read_errors_injected == errors_before);
  // Writes over the bad rows go on too.
  r.write_mix(test_seed() + 7);
  r.verify_all();
}

TEST_CASE("raid6: a member that fails mid-flight leaves the group; I/O goes on", "[raid][raid6]") {
  array r(6);
  r.write_mix(test_seed());
  r.faults[2]->fail();
  r.write_mix(test_seed() + 1);  // its write fails: it is failed out, the write succeeds
  CHECK(r.group->member_failed(2));
  r.verify_all();
  r.faults[5]->fail();
  r.verify_all();
  CHECK(r.group->failed_members() >= 1);
  CHECK_FALSE(r.group->group_failed());
}

TEST_CASE("raid6: a member that stops answering is failed out after the timeout; I/O goes on",
          "[raid][raid6][timeout]") {
  array r(6, 1, 0, std::chrono::seconds(7));
  r.write_mix(test_seed());
  const time_point hung_at = r.loop.clock.now();
  r.faults[2]->hang();
  // Reads, writes and a flush that need member 2 finish without it, after
  // the timeout and not before.
  r.verify_all();
  CHECK(r.loop.clock.now() - hung_at >= std::chrono::seconds(7));
  CHECK(r.group->member_failed(2));
  CHECK(r.group->health(2).failure == member_failure::timed_out);
  CHECK(r.group->health(2).timeouts == 1);
  REQUIRE(r.member_events.size() == 1);
  CHECK(r.member_events[0].member == 2);
  CHECK(r.member_events[0].reason == member_failure::timed_out);
  r.write_mix(test_seed() + 7);
  flush(r.loop, *r.group);
  r.verify_all();
  // The abandoned I/Os keep their buffers until the member answers at last.
  CHECK_FALSE(r.group->idle());
  r.faults[2]->resume();
  r.loop.run_until([&] { return r.group->idle(); });
  r.verify_all();
}

TEST_CASE("raid6: a flush to a hung member completes after the timeout", "[raid][raid6][timeout]") {
  array r(5, 1, 0, std::chrono::seconds(2));
  r.write_mix(test_seed());
  r.faults[4]->hang();
  flush(r.loop, *r.group);
  CHECK(r.group->member_failed(4));
  r.verify_all();
  r.faults[4]->resume();
  r.loop.run_until([&] { return r.group->idle(); });
}

TEST_CASE("raid6: a member with too many read errors is failed out", "[raid][raid6]") {
  array r(6);
  r.write_mix(test_seed());
  // Every block of member 1 unreadable: each read repairs what it touched,
  // but a member that keeps failing goes.
  r.faults[1]->add_latent_error(0, 8 + stripes * strip_blocks);
  for (int pass = 0; pass < 30 && !r.group->member_failed(1); ++pass) {
    r.faults[1]->add_latent_error(0, 8 + stripes * strip_blocks);
    r.verify_all();
  }
  CHECK(r.group->member_failed(1));
  CHECK(r.group->health(1).failure == member_failure::read_errors);
  CHECK(r.group->health(1).read_errors > 20);  // more may have been in flight
  r.verify_all();
}

TEST_CASE("raid6: concurrent writes to one stripe keep parity consistent", "[raid][raid6]") {
  array r(5);
  // 40 single-block writes to the first stripe, all in flight at once, then
  // two members fail: every block must still be rebuilt correctly from parity.
  std::vector<std::unique_ptr<io>> writes;
  for (std::uint64_t i = 0; i < 40; ++i) {
    const std::uint64_t lba = i % r.group->layout().stripe_data_blocks();
    auto w = io::make(op::write, lba, 1, block_size);
    const auto data = pattern(block_size, 1000 + i);
    std::memcpy(w->buffer.data(), data.data(), block_size);
    std::memcpy(r.reference.data() + lba * block_size, data.data(), block_size);  // last one wins
    writes.push_back(std::move(w));
  }
  for (auto& w : writes) r.group->submit(w->req);
  r.loop.run_until([&] {
    return std::all_of(writes.begin(), writes.end(), [](auto& w) { return w->completions == 1; });
  });
  for (auto& w : writes) REQUIRE_FALSE(w->req.result);
  r.group->fail_member(0);
  r.group->fail_member(1);
  r.verify_all();
}

TEST_CASE("raid6: randomized reads and writes with failures and latent errors, against a reference",
          "[raid][raid6]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (replay with STRATA_TEST_SEED=" << seed << ")");
  std::mt19937_64 random(seed);
  for (int round = 0; round < 12; ++round) {
    const unsigned members = 4 + static_cast<unsigned>(random() % 5);
    array r(members, random());
    const std::uint64_t blocks = r.group->geometry().block_count;
    INFO("round " << round << ", " << members << " members");
    for (int step = 0; step < 60; ++step) {
      const auto dice = random() % 100;
      if (dice < 4 && r.group->failed_members() < 2) {
        // Fail a member, but not while another holds latent errors it will
        // need: three lost strips in a row are beyond RAID-6.
        bool latent = false;
        for (auto& f : r.faults) latent |= f->latent_error_blocks() > 0;
        if (!latent) r.group->fail_member(static_cast<unsigned>(random() % members));
        continue;
      }
      if (dice < 8 && r.group->failed_members() == 0) {
        const unsigned m = static_cast<unsigned>(random() % members);
        r.faults[m]->add_latent_error(8 + random() % (stripes * strip_blocks), 1 + random() % 16);
        continue;
      }
      // A batch of 1..6 requests in flight at once, to disjoint ranges.
      const int batch = 1 + static_cast<int>(random() % 6);
      std::vector<std::unique_ptr<io>> ios;
      std::vector<std::pair<std::uint64_t, std::uint64_t>> taken;
      for (int k = 0; k < batch; ++k) {
        const std::uint64_t length = 1 + random() % (3 * r.group->layout().stripe_data_blocks());
        const std::uint64_t lba = random() % (blocks - std::min(length, blocks - 1));
        const std::uint64_t count = std::min(length, blocks - lba);
        bool overlaps = false;
        for (auto [a, b] : taken) overlaps |= lba < b && a < lba + count;
        if (overlaps) continue;
        taken.push_back({lba, lba + count});
        const bool writing = random() % 2 == 0;
        auto x = io::make(writing ? op::write : op::read, lba, count, block_size);
        if (writing) {
          const auto data = pattern(count * block_size, random());
          std::memcpy(x->buffer.data(), data.data(), data.size());
          std::memcpy(r.reference.data() + lba * block_size, data.data(), data.size());
        }
        ios.push_back(std::move(x));
      }
      for (auto& x : ios) r.group->submit(x->req);
      r.loop.run_until([&] {
        return std::all_of(ios.begin(), ios.end(), [](auto& x) { return x->completions == 1; });
      });
      for (auto& x : ios) {
        INFO("step " << step << ": " << (x->req.operation == op::write ? "write" : "read")
                     << " lba " << x->req.lba << " blocks " << x->req.block_count);
        REQUIRE_FALSE(x->req.result);
        if (x->req.operation == op::read) {
          REQUIRE(std::memcmp(x->buffer.data(), r.reference.data() + x->req.lba * block_size,
                              x->req.block_count * block_size) == 0);
        }
      }
    }
    r.verify_all();
  }
}

namespace {

// Flips one byte of strip `strip` (0..n-1 data, n = P, n+1 = Q) of `stripe`
// directly on the member's disk, under the group: silent corruption.
void corrupt(array& r, std::uint64_t stripe, unsigned strip, std::uint64_t row, std::size_t byte) {
  const raid6_layout& layout = r.group->layout();
  memory_device& disk = *r.disks[layout.member_of(stripe, strip)];
  const std::uint64_t lba = layout.member_lba(stripe, row);
  auto block = read_blocks(r.loop, disk, lba, 1);
  block[byte] ^= std::byte{0x5a};
  write_blocks(r.loop, disk, lba, block);
}

scrub_report scrub(array& r) {
  std::optional<scrub_report> report;
  r.group->scrub([&](const scrub_report& done) { report = done; });
  r.loop.run_until([&] { return report.has_value(); });
  return *report;
}

}  // namespace

TEST_CASE("raid6: scrub finds and rewrites single wrong strips, and reports what it cannot fix",
          "[raid][raid6][scrub]") {
  array r(6);
  r.write_mix(test_seed());
  const unsigned n = r.group->layout().data_strips();
  corrupt(r, 1, 2, 3, 100);      // a data strip
  corrupt(r, 4, n, 0, 7);        // P
  corrupt(r, 9, n + 1, 7, 511);  // Q
  scrub_report first = scrub(r);
  CHECK_FALSE(first.error);
  CHECK(first.stripes_checked == stripes);
  CHECK(first.stripes_repaired == 3);
  CHECK(first.stripes_unrecoverable == 0);
  r.verify_all();  // the data strip reads right again
  // Parity is whole: with two members gone, everything still rebuilds.
  scrub_report second = scrub(r);
  CHECK(second.stripes_repaired == 0);
  r.group->fail_member(0);
  r.group->fail_member(1);
  r.verify_all();
}

TEST_CASE("raid6: scrub leaves a stripe it cannot explain, and refuses a degraded group",
          "[raid][raid6][scrub]") {
  array r(6);
  r.write_mix(test_seed());
  corrupt(r, 2, 0, 1, 10);  // two data strips wrong in different rows
  corrupt(r, 2, 1, 5, 20);
  scrub_report report = scrub(r);
  CHECK(report.stripes_unrecoverable == 1);
  CHECK(report.stripes_repaired == 0);

  r.group->fail_member(3);
  scrub_report refused = scrub(r);
  CHECK(refused.error == make_error_code(errc::not_supported));
  CHECK(refused.stripes_checked == 0);
}

TEST_CASE("raid6: a scrub and foreground writes interleave safely", "[raid][raid6][scrub]") {
  array r(6);
  r.write_mix(test_seed());
  std::optional<scrub_report> report;
  r.group->scrub([&](const scrub_report& done) { report = done; });
  // Writes while the scrub walks the stripes, then wait for both.
  for (int i = 0; i < 10; ++i)
    r.write(static_cast<std::uint64_t>(i) * 37 % 500, 9,
            test_seed() + 50 + static_cast<std::uint64_t>(i));
  r.loop.run_until([&] { return report.has_value(); });
  CHECK(report->stripes_repaired == 0);
  CHECK(report->stripes_unrecoverable == 0);
  r.group->fail_member(2);
  r.group->fail_member(5);
  r.verify_all();
}

namespace {

// A fresh disk the size of the others, behind its own fault device.
fault_device& add_spare(array& r) {
  auto m = memory_device::create(r.loop.context.get_executor(),
                                 {block_size, 8 + stripes * strip_blocks});
  REQUIRE(m);
  r.disks.push_back(std::move(*m));
  r.faults.push_back(
      std::make_unique<fault_device>(*r.disks.back(), r.loop.clock, fault_options{}));
  return *r.faults.back();
}

}  // namespace

TEST_CASE("raid6: a failed member is rebuilt onto a spare", "[raid][raid6][rebuild]") {
  for (unsigned members : {4u, 6u, 8u}) {
    INFO(members << " members");
    array r(members);
    r.write_mix(test_seed());
    r.group->fail_member(1);
    r.write_mix(test_seed() + 1);  // degraded writes: member 1 misses them
    std::optional<std::error_code> done;
    REQUIRE_FALSE(
        r.group->replace_member(1, &add_spare(r), [&](std::error_code ec) { done = ec; }));
    CHECK(r.group->rebuild_status().running);
    r.loop.run_until([&] { return done.has_value(); });
    CHECK_FALSE(*done);
    CHECK_FALSE(r.group->rebuild_status().running);
    CHECK(r.group->failed_members() == 0);
    // The spare carries its share: lose two others and read everything.
    r.group->fail_member(0);
    r.group->fail_member(members - 1);
    r.verify_all();
  }
}

TEST_CASE("raid6: foreground I/O during a paced rebuild stays correct on both sides of it",
          "[raid][raid6][rebuild]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  // 1 MB/s over 16 stripes of 4 KiB on the new member: ~4 ms a stripe.
  array r(6, seed, 1.0);
  r.write_mix(seed);
  r.group->fail_member(4);
  std::optional<std::error_code> done;
  REQUIRE_FALSE(r.group->replace_member(4, &add_spare(r), [&](std::error_code ec) { done = ec; }));
  std::mt19937_64 random(seed);
  bool saw_middle = false;
  const std::uint64_t blocks = r.group->geometry().block_count;
  while (!done) {
    const rebuild_progress p = r.group->rebuild_status();
    if (p.bytes_done > 0 && p.bytes_done < p.bytes_total) {
      saw_middle = true;
      CHECK(p.eta > device::duration::zero());
    }
    const std::uint64_t count = 1 + random() % 20;
    const std::uint64_t lba = random() % (blocks - count);
    r.write(lba, count, random());
    CHECK(read_blocks(r.loop, *r.group, lba, count) ==
          std::vector<std::byte>(
              r.reference.begin() + static_cast<std::ptrdiff_t>(lba * block_size),
              r.reference.begin() + static_cast<std::ptrdiff_t>((lba + count) * block_size)));
    r.loop.clock.advance_by(std::chrono::milliseconds(1));
    r.loop.settle();
  }
  CHECK_FALSE(*done);
  CHECK(saw_middle);
  r.group->fail_member(0);
  r.group->fail_member(2);
  r.verify_all();
}

TEST_CASE("raid6: a write queued behind the rebuild of its stripe lands on the new member",
          "[raid][raid6][rebuild]") {
  const std::uint64_t seed = test_seed();
  array r(6, seed, 1.0);  // paced: each stripe waits for its timer
  r.write_mix(seed);
  r.group->fail_member(4);
  std::optional<std::error_code> done;
  REQUIRE_FALSE(r.group->replace_member(4, &add_spare(r), [&](std::error_code ec) { done = ec; }));
  const std::uint64_t strip_bytes = strip_blocks * block_size;
  r.loop.run_until([&] { return r.group->rebuild_status().bytes_done >= 3 * strip_bytes; });
  // Stripe 3 waits for the pacing timer. Fire just that: its rebuild starts
  // and holds the stripe's lock, its reads not yet answered...
  const auto deadline = r.loop.clock.next_deadline();
  REQUIRE(deadline);
  r.loop.clock.advance_to(*deadline);
  r.loop.context.restart();
  REQUIRE(r.loop.context.poll_one() == 1);
  // ...and a write to stripe 3, into the strip the new member holds, queues
  // behind it.
  unsigned spare_strip = 0;
  while (r.group->layout().data_member(3, spare_strip) != 4) ++spare_strip;
  const std::uint64_t lba =
      3 * r.group->layout().stripe_data_blocks() + spare_strip * strip_blocks + 2;
  auto w = io::make(op::write, lba, 3, block_size);
  const auto data = pattern(3 * block_size, seed + 99);
  std::memcpy(w->buffer.data(), data.data(), data.size());
  std::memcpy(r.reference.data() + lba * block_size, data.data(), data.size());
  r.group->submit(w->req);
  r.loop.run_until([&] { return w->completions == 1 && done.has_value(); });
  REQUIRE_FALSE(w->req.result);
  REQUIRE_FALSE(*done);
  // If that write had skipped the new member, losing two others shows it.
  r.group->fail_member(0);
  r.group->fail_member(2);
  r.verify_all();
}

TEST_CASE("raid6: a paced rebuild that stops early leaves no timer behind",
          "[raid][raid6][rebuild]") {
  array r(6, test_seed(), 1.0);
  r.write_mix(test_seed());
  r.group->fail_member(2);
  fault_device& spare = add_spare(r);
  std::optional<std::error_code> done;
  REQUIRE_FALSE(r.group->replace_member(2, &spare, [&](std::error_code ec) { done = ec; }));
  r.loop.run_until(
      [&] { return r.group->rebuild_status().bytes_done >= 2 * strip_blocks * block_size; });
  spare.fail();  // the new member dies mid-rebuild
  r.loop.run_until([&] { return done.has_value(); });
  CHECK(*done);
  CHECK(r.group->member_failed(2));
  // Time runs on past any pacing deadline: nothing may fire into the ended rebuild.
  r.loop.clock.advance_by(std::chrono::seconds(10));
  r.loop.settle();
  CHECK(r.group->idle());
  r.verify_all();
}

TEST_CASE("raid6: a late error from a replaced disk does not fail its replacement",
          "[raid][raid6][rebuild]") {
  array r(6);
  r.write_mix(test_seed());
  // A read waits on a hung member...
  r.faults[1]->hang();
  auto x = io::make(op::read, 0, r.group->layout().stripe_data_blocks(), block_size);
  r.group->submit(x->req);
  r.loop.settle();
  // ...which is failed out and replaced while its answer is still owed.
  r.group->fail_member(1);
  std::optional<std::error_code> done;
  REQUIRE_FALSE(r.group->replace_member(1, &add_spare(r), [&](std::error_code ec) { done = ec; }));
  r.faults[1]->fail();  // now the old disk answers: device_failed
  r.loop.run_until([&] { return x->completions == 1 && done.has_value(); });
  CHECK_FALSE(x->req.result);
  CHECK_FALSE(*done);
  CHECK_FALSE(r.group->member_failed(1));
  r.group->fail_member(0);
  r.group->fail_member(3);
  r.verify_all();
}

TEST_CASE(
    "raid6: a write that must read again after a member was replaced treats the new member as lost",
    "[raid][raid6][rebuild]") {
  // Found by the simulation (seed 643): a reconstruct-write read the data
  // strips; one read failed on a latent error, so it read every strip again
  // to rebuild that one -- but meanwhile another member had failed and a
  // spare had taken its place, not yet rebuilt there. The second pass read
  // the blank spare as data, computed parity over it, and the rebuild then
  // rebuilt the lost strip from that parity: zeros where data stood.
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  array r(6, seed);
  r.write_mix(seed);
  const raid6_layout& layout = r.group->layout();
  const std::uint64_t stripe = 1;
  const unsigned unreadable = layout.data_member(stripe, 2);  // read in the first pass, fails
  const unsigned replaced = layout.data_member(stripe, 3);  // read in the first pass, then replaced
  r.faults[unreadable]->add_latent_error(layout.member_lba(stripe, 0), strip_blocks);
  r.faults[unreadable]->hang();
  // Strips 0 and 1 of the stripe: a reconstruct-write (two of four data strips).
  const std::uint64_t lba = stripe * layout.stripe_data_blocks() + strip_blocks - 2;
  auto w = io::make(op::write, lba, 4, block_size);
  const auto data = pattern(4 * block_size, seed + 7);
  std::memcpy(w->buffer.data(), data.data(), data.size());
  std::memcpy(r.reference.data() + lba * block_size, data.data(), data.size());
  r.group->submit(w->req);
  r.loop.settle();  // every first-pass read but the hung one answered
  r.group->fail_member(replaced);
  std::optional<std::error_code> done;
  REQUIRE_FALSE(
      r.group->replace_member(replaced, &add_spare(r), [&](std::error_code ec) { done = ec; }));
  r.faults[unreadable]->resume();  // media_error: the write reads again, wide
  r.loop.run_until([&] { return w->completions == 1 && done.has_value(); });
  REQUIRE_FALSE(w->req.result);
  REQUIRE_FALSE(*done);
  // The spare's strips came from parity: wrong parity shows once two
  // other members are gone and reads come from the spare and parity.
  r.group->fail_member(layout.data_member(stripe, 0));
  r.group->fail_member(layout.data_member(stripe, 1));
  r.verify_all();
}

TEST_CASE("raid6: replacing a member while a scrub runs is refused", "[raid][raid6][rebuild]") {
  array r(6);
  r.write_mix(test_seed());
  std::optional<scrub_report> report;
  r.group->scrub([&](const scrub_report& s) { report = s; });
  r.group->fail_member(2);
  auto refused = r.group->replace_member(2, &add_spare(r), [](std::error_code) {});
  REQUIRE(refused);
  CHECK(refused->message.find("scrub") != std::string::npos);
  r.loop.run_until([&] { return report.has_value(); });
  CHECK(report->error == make_error_code(errc::not_supported));  // degraded mid-scrub: it stops
}

TEST_CASE("raid6: replacing a working member, or with a misfit, is refused",
          "[raid][raid6][rebuild]") {
  array r(6);
  auto none = [](std::error_code) {};
  auto working = r.group->replace_member(2, &add_spare(r), none);
  REQUIRE(working);
  CHECK(working->message.find("is working") != std::string::npos);
  r.group->fail_member(2);
  auto small = memory_device::create(r.loop.context.get_executor(), {block_size, 64});
  REQUIRE(small);
  auto misfit = r.group->replace_member(2, small->get(), none);
  REQUIRE(misfit);
  CHECK(misfit->message.find("same size") != std::string::npos);
  CHECK(r.group->member_failed(2));  // nothing changed
}

TEST_CASE("raid6: bad geometry is refused with a clear error", "[raid][raid6]") {
  test_loop loop;
  std::vector<std::unique_ptr<memory_device>> disks;
  auto disk = [&](std::uint32_t bs, std::uint64_t blocks) {
    auto m = memory_device::create(loop.context.get_executor(), {bs, blocks});
    REQUIRE(m);
    disks.push_back(std::move(*m));
    return static_cast<block_device*>(disks.back().get());
  };
  auto message_of = [](auto result) { return result ? std::string() : result.error().message; };
  std::vector<block_device*> three = {disk(512, 4096), disk(512, 4096), disk(512, 4096)};
  CHECK(message_of(raid6_group::create(three, {})).find("4 to 255 members") != std::string::npos);

  std::vector<block_device*> four = three;
  four.push_back(disk(4096, 512));
  CHECK(message_of(raid6_group::create(four, {})).find("4096-byte blocks") != std::string::npos);
  four.back() = disk(512, 8192);
  CHECK(message_of(raid6_group::create(four, {})).find("same size") != std::string::npos);
  four.back() = four[0];
  CHECK(message_of(raid6_group::create(four, {})).find("again") != std::string::npos);
  four.back() = disk(512, 4096);
  raid6_options odd;
  odd.strip_size_bytes = 48 * 1024;
  CHECK(message_of(raid6_group::create(four, odd)).find("power of two") != std::string::npos);
  raid6_options huge;
  huge.strip_size_bytes = 4 << 20;
  CHECK(message_of(raid6_group::create(four, huge)).find("cannot hold") != std::string::npos);
  CHECK(raid6_group::create(four, {}));
  // Nothing was written to any member by the refusals.
  for (auto& d : disks) CHECK(d->resident_bytes() == 0);
}

}  // namespace strata::raid
