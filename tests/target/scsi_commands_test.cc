// The SBC-3 commands that go beyond reading and writing: COMPARE AND WRITE
// and its range interlock (scripted, then many commands at once over a
// device that lands requests in a random order), WRITE ATOMIC(16) and the
// interlock against reads, ORWRITE, PRE-FETCH, GET LBA STATUS, WRITE AND
// VERIFY(12), READ DEFECT DATA, START STOP UNIT and WRITE SAME edge cases
// (0 blocks: to the last LBA), and how REPORT SUPPORTED OPERATION CODES
// describes them. A logical unit over a memory volume on the test loop, with
// a decorator between them where a test needs to see or steer device
// requests.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/sense.h"
#include "tests/raid/device/harness.h"
#include "tests/target/scsi_harness.h"

namespace strata::scsi {
namespace {

using namespace device;
using namespace device::testing;
using namespace strata::scsi::testing;

constexpr std::uint32_t block_size = 4096;
constexpr std::uint64_t volume_blocks = 4096;  // 16 MiB, sparse

// ---------------------------------------------------------------------------
// CDBs and Data-Out (the rest in scsi_harness.h)

// COMPARE AND WRITE: the 16-byte layout, but NUMBER OF LOGICAL BLOCKS is
// one byte, byte 13.
cdb_bytes caw_cdb(std::uint64_t lba, std::uint8_t blocks, std::uint8_t byte1 = 0) {
  return block_cdb(0x89, byte1, lba, 8, blocks, 13, 1);
}
// WRITE ATOMIC(16): TRANSFER LENGTH is two bytes, 12 and 13, after the
// ATOMIC BOUNDARY in 10 and 11.
cdb_bytes write_atomic_cdb(std::uint64_t lba, std::uint16_t blocks, std::uint8_t byte1 = 0,
                           std::uint16_t atomic_boundary = 0) {
  cdb_bytes c = block_cdb(0x9c, byte1, lba, 8, blocks, 12, 2);
  put(c, 10, atomic_boundary, 2);
  return c;
}
// GET LBA STATUS: SERVICE ACTION IN(16) with service action 12h, the
// ALLOCATION LENGTH where the 16-byte transfer length goes.
cdb_bytes get_lba_status_cdb(std::uint64_t lba, std::uint32_t allocation_length) {
  return cdb16(0x9e, lba, allocation_length, 0x12);
}

std::vector<std::byte> concat(std::span<const std::byte> a, std::span<const std::byte> b) {
  std::vector<std::byte> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// ---------------------------------------------------------------------------
// Devices between the unit and its memory volume

// Passes each request on after a random number of loop turns, and its
// completion back after as many again, so that requests issued together
// reach the medium in a random order. Logs each request as it reaches the
// memory device below, which executes them in that order, with the data of
// each write.
class jitter_device final : public block_device {
 public:
  struct landing {
    op operation;
    std::uint64_t lba;
    std::uint64_t block_count;
    std::vector<std::byte> data;  // writes
  };

  jitter_device(block_device& below, std::uint64_t seed) : below_(below), random_(seed) {}
  const block_geometry& geometry() const noexcept override { return below_.geometry(); }
  boost::asio::any_io_executor executor() const noexcept override { return below_.executor(); }
  void submit(request& req) noexcept override {
    auto* h = new hop{this, &req, {}};
    copy_io(req, h->inner);
    h->inner.bind<&hop::on_done>(h);
    after_turns(turns(), [this, h] {
      landing l{h->inner.operation, h->inner.lba, h->inner.block_count, {}};
      if (h->inner.operation == op::write) {
        for (const iovec& v : h->inner.buffers) {
          const auto* p = static_cast<const std::byte*>(v.iov_base);
          l.data.insert(l.data.end(), p, p + v.iov_len);
        }
      }
      log.push_back(std::move(l));
      below_.submit(h->inner);
    });
  }

  std::vector<landing> log;

 private:
  struct hop {
    jitter_device* owner;
    request* outer;
    request inner;
    void on_done(request& r) noexcept {
      owner->after_turns(owner->turns(), [this, result = r.result] {
        request* caller = outer;
        delete this;
        complete(*caller, result);
      });
    }
  };
  int turns() { return std::uniform_int_distribution<int>(0, 6)(random_); }
  void after_turns(int n, std::function<void()> f) {
    if (n == 0) return f();
    boost::asio::post(below_.executor(),
                      [this, n, f = std::move(f)]() mutable { after_turns(n - 1, std::move(f)); });
  }

  block_device& below_;
  std::mt19937_64 random_;
};

// A thin device: tracks which blocks hold data (written) and which are
// deallocated (never written, or discarded), and answers allocation_at()
// one extent at a time, as the tiering volume would.
class thin_device final : public block_device {
 public:
  std::uint64_t extent_blocks = 64;
  explicit thin_device(block_device& below)
      : below_(below), mapped_(below.geometry().block_count, false) {}
  const block_geometry& geometry() const noexcept override { return below_.geometry(); }
  boost::asio::any_io_executor executor() const noexcept override { return below_.executor(); }
  void submit(request& req) noexcept override {
    if (req.operation == op::write || req.operation == op::discard) {
      for (std::uint64_t b = req.lba; b < req.lba + req.block_count && b < mapped_.size(); ++b)
        mapped_[b] = req.operation == op::write;
    }
    below_.submit(req);
  }
  allocation_run allocation_at(std::uint64_t lba,
                               std::uint64_t max_blocks) const noexcept override {
    ++queries;
    const std::uint64_t extent_end = (lba / extent_blocks + 1) * extent_blocks;
    const std::uint64_t end = std::min(lba + max_blocks, extent_end);
    std::uint64_t n = 1;
    while (lba + n < end && mapped_[lba + n] == mapped_[lba]) ++n;
    return {mapped_[lba] ? allocation::mapped : allocation::deallocated, n};
  }
  void map_all() { mapped_.assign(mapped_.size(), true); }
  mutable std::uint64_t queries = 0;

 private:
  block_device& below_;
  std::vector<bool> mapped_;
};

// ---------------------------------------------------------------------------

enum class between { none, gate, jitter, thin, faults };

struct rig {
  test_loop loop;
  std::unique_ptr<memory_device> memory;
  std::unique_ptr<gate_device> gate;
  std::unique_ptr<jitter_device> jitter;
  std::unique_ptr<thin_device> thin;
  std::unique_ptr<fault_device> faults;
  std::unique_ptr<logical_unit> unit;

  explicit rig(between kind = between::none, bool thin_provisioned = true, std::uint64_t seed = 1,
               std::uint64_t blocks = volume_blocks) {
    auto m = memory_device::create(loop.context.get_executor(), {block_size, blocks});
    REQUIRE(m);
    memory = std::move(*m);
    block_device* volume = memory.get();
    switch (kind) {
      case between::none:
        break;
      case between::gate:
        volume = (gate = std::make_unique<gate_device>(*memory)).get();
        break;
      case between::jitter:
        volume = (jitter = std::make_unique<jitter_device>(*memory, seed)).get();
        break;
      case between::thin:
        volume = (thin = std::make_unique<thin_device>(*memory)).get();
        break;
      case between::faults:
        volume = (faults = std::make_unique<fault_device>(*memory, loop.clock,
                                                          fault_options{seed, true}))
                     .get();
        break;
    }
    unit_identity id;
    id.serial = "ARRAY1-VOL0042";
    id.thin_provisioned = thin_provisioned;
    unit = std::make_unique<logical_unit>(*volume, id);
  }
  ~rig() {
    loop.settle();
    CHECK(unit->commands_in_flight() == 0);
  }

  // Starts a command; the caller runs the loop.
  std::unique_ptr<command> send(const cdb_bytes& cdb, std::span<const std::byte> data_out = {}) {
    auto c = std::make_unique<command>();
    c->t.cdb = cdb;
    c->set_data_out(data_out);
    unit->execute(c->t);
    REQUIRE(c->completions == 0);  // never inside execute()
    return c;
  }
  std::unique_ptr<command> run(const cdb_bytes& cdb, std::span<const std::byte> data_out = {}) {
    auto c = send(cdb, data_out);
    finish(loop, *c);
    return c;
  }
  void write(std::uint64_t lba, std::span<const std::byte> data) {
    const auto blocks = static_cast<std::uint32_t>(data.size() / block_size);
    require_good(*run(cdb16(0x8a, lba, blocks), data));
  }
  std::vector<std::byte> read(std::uint64_t lba, std::uint32_t blocks) {
    auto c = run(cdb16(0x88, lba, blocks));
    require_good(*c);
    REQUIRE(c->t.data_in_bytes == blocks * block_size);
    return c->data_bytes();
  }
};

// ---------------------------------------------------------------------------
// COMPARE AND WRITE

TEST_CASE("scsi compare and write: writes when the medium matches, not when it differs",
          "[target][scsi][caw]") {
  rig r;
  const auto old_data = pattern(3 * block_size, test_seed());
  const auto new_data = pattern(3 * block_size, test_seed() + 1);
  r.write(100, old_data);

  require_good(*r.run(caw_cdb(100, 3), concat(old_data, new_data)));
  CHECK(r.read(100, 3) == new_data);

  // The medium now holds new_data: comparing with old_data fails, at the
  // first byte that differs, as an offset into the Data-Out, and nothing is written.
  for (const std::size_t offset : {std::size_t{0}, std::size_t{27}, std::size_t{block_size - 1},
                                   std::size_t{block_size}, std::size_t{2 * block_size + 4000}}) {
    INFO("differs first at " << offset);
    auto compare = new_data;
    compare[offset] ^= std::byte{0x5a};
    auto c = r.run(caw_cdb(100, 3), concat(compare, old_data));
    require_sense(*c, sense_key::miscompare, asc::miscompare_during_verify);
    CHECK(c->t.sense_data.information == offset);
    CHECK(r.read(100, 3) == new_data);
  }
  // Never-written blocks read as zeros, and compare as such.
  const auto zeros = std::vector<std::byte>(block_size);
  const auto first = std::span<const std::byte>(new_data).first(block_size);
  require_sense(*r.run(caw_cdb(2000, 1), concat(first, first)), sense_key::miscompare,
                asc::miscompare_during_verify);
  require_good(*r.run(caw_cdb(2000, 1), concat(zeros, first)));
  CHECK(r.read(2000, 1) == std::vector(new_data.begin(), new_data.begin() + block_size));
}

TEST_CASE("scsi compare and write: fields, ranges and Data-Out sizes", "[target][scsi][caw]") {
  rig r;
  const auto data = pattern(2 * block_size, test_seed());
  r.write(10, std::span(data).first(block_size));
  const auto good_out = concat(std::span(data).first(block_size), std::span(data).last(block_size));

  // No blocks: nothing compared or written, not an error, whatever the Data-Out...
  require_good(*r.run(caw_cdb(10, 0)));
  require_good(*r.run(caw_cdb(10, 0), good_out));
  // ... unless there is more of it than the longest COMPARE AND WRITE
  // carries: 2 x 256 blocks is an initiator's 256 that wrapped to 0.
  const std::vector<std::byte> too_long(2 * 256 * block_size);
  require_sense(*r.run(caw_cdb(10, 0), too_long), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  require_sense(*r.run(caw_cdb(10, 1), too_long), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  // WRPROTECT: no protection information.
  require_sense(*r.run(caw_cdb(10, 1, 0x20), good_out), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  // Past the end.
  require_sense(*r.run(caw_cdb(volume_blocks - 1, 2), concat(good_out, good_out)),
                sense_key::illegal_request, asc::lba_out_of_range);
  require_sense(*r.run(caw_cdb(~0ull, 1), good_out), sense_key::illegal_request,
                asc::lba_out_of_range);
  // Data-Out must be exactly 2N blocks: short or long is refused with nothing written.
  require_sense(*r.run(caw_cdb(10, 1), std::span(good_out).first(block_size + 512)),
                sense_key::illegal_request, asc::invalid_field_in_command_iu);
  require_sense(*r.run(caw_cdb(10, 1), concat(good_out, good_out)), sense_key::illegal_request,
                asc::invalid_field_in_command_iu);
  CHECK(r.read(10, 1) == std::vector(data.begin(), data.begin() + block_size));
  // DPO and FUA are accepted.
  require_good(*r.run(caw_cdb(10, 1, 0x18), good_out));
  CHECK(r.read(10, 1) == std::vector(data.end() - block_size, data.end()));

  // The block limits page reports the longest COMPARE AND WRITE; every
  // length up to it works (the NUMBER OF LOGICAL BLOCKS field cannot ask
  // for more).
  auto limits = r.run(inquiry_cdb(true, 0xb0, 64));
  require_good(*limits);
  REQUIRE(limits->t.data_in_bytes == 64);
  CHECK(limits->data()[5] == logical_unit::max_compare_and_write_blocks);
  const std::uint32_t longest = logical_unit::max_compare_and_write_blocks;
  const auto before = pattern(std::size_t{longest} * block_size, 7);
  const auto after = pattern(std::size_t{longest} * block_size, 8);
  r.write(1000, before);
  require_good(*r.run(caw_cdb(1000, static_cast<std::uint8_t>(longest)), concat(before, after)));
  CHECK(r.read(1000, longest) == after);
}

TEST_CASE(
    "scsi compare and write: FUA leaves nothing in the write cache; a read error writes "
    "nothing",
    "[target][scsi][caw]") {
  rig r(between::faults);
  const auto old_data = pattern(2 * block_size, test_seed());
  const auto new_data = pattern(2 * block_size, test_seed() + 1);
  r.write(40, old_data);
  require_good(*r.run(cdb10(0x35, 0, 0)));
  REQUIRE(r.faults->dirty_blocks() == 0);
  require_good(*r.run(caw_cdb(40, 2), concat(old_data, new_data)));
  CHECK(r.faults->dirty_blocks() == 2);  // without FUA the cache holds it
  require_good(*r.run(caw_cdb(40, 2, 0x08), concat(new_data, old_data)));
  CHECK(r.faults->dirty_blocks() == 0);
  CHECK(r.read(40, 2) == old_data);

  r.faults->add_latent_error(41, 1);
  auto c = r.run(caw_cdb(40, 2), concat(old_data, new_data));
  require_sense(*c, sense_key::medium_error, asc::unrecovered_read_error);
  CHECK(c->t.sense_data.information == 41);
  CHECK(read_blocks(r.loop, *r.memory, 40, 1) ==
        std::vector(old_data.begin(), old_data.begin() + block_size));
}

// The interlock, step by step: the gate shows which requests the unit has
// issued, and lets them through when the script says so.
TEST_CASE("scsi compare and write: overlapping writes wait for it, and it for them",
          "[target][scsi][caw]") {
  rig r(between::gate);
  const auto initial = pattern(64 * block_size, test_seed());
  r.write(0, initial);
  auto blocks_of = [&](std::uint64_t lba, std::uint64_t n) {
    return std::span<const std::byte>(initial).subspan(lba * block_size, n * block_size);
  };
  const auto x = pattern(2 * block_size, 11);
  const auto w1_data = pattern(block_size, 12);
  const auto y = pattern(block_size, 13);
  auto held = [&](op operation, std::uint64_t lba) {
    return std::count_if(r.gate->held().begin(), r.gate->held().end(), [&](const request* q) {
      return q->operation == operation && q->lba == lba;
    });
  };
  // Lets every held request through, and runs what that makes runnable.
  auto let_through = [&] {
    r.gate->release_all();
    r.loop.settle();
  };
  r.gate->close();

  // A: COMPARE AND WRITE of [10, 12). Its read goes to the device.
  auto a = r.send(caw_cdb(10, 2), concat(blocks_of(10, 2), x));
  r.loop.settle();
  REQUIRE(r.gate->held().size() == 1);
  CHECK(held(op::read, 10) == 1);
  // A write of block 11 waits; one of block 20 does not; nor does a read of A's range.
  auto w1 = r.send(cdb16(0x8a, 11, 1), w1_data);
  auto w2 = r.send(cdb16(0x8a, 20, 1), w1_data);
  auto reader = r.send(cdb16(0x88, 10, 2));
  r.loop.settle();
  CHECK(r.gate->held().size() == 3);
  CHECK(held(op::write, 11) == 0);
  CHECK(held(op::write, 20) == 1);
  CHECK(held(op::read, 10) == 2);
  // B: COMPARE AND WRITE of block 11, expecting what w1 writes: it waits
  // behind A and behind w1, which came first.
  auto b = r.send(caw_cdb(11, 1), concat(w1_data, y));
  r.loop.settle();
  CHECK(r.gate->held().size() == 3);

  // A's read completes, it matches: A writes; w1 and B still wait.
  let_through();
  REQUIRE(r.gate->held().size() == 1);
  CHECK(held(op::write, 10) == 1);
  require_good(*w2);
  require_good(*reader);
  CHECK(a->completions == 0);
  // A done: w1 goes (B is behind it), B still waits.
  let_through();
  require_good(*a);
  REQUIRE(r.gate->held().size() == 1);
  CHECK(held(op::write, 11) == 1);
  CHECK(b->completions == 0);
  // w1 done: B reads, compares and writes.
  let_through();
  require_good(*w1);
  REQUIRE(r.gate->held().size() == 1);
  CHECK(held(op::read, 11) == 1);
  let_through();
  REQUIRE(r.gate->held().size() == 1);
  CHECK(held(op::write, 11) == 1);
  let_through();
  require_good(*b);
  CHECK(r.gate->held().empty());

  // The other way round: a write in flight holds back a COMPARE AND WRITE
  // of its range, until it is done.
  auto w3 = r.send(cdb16(0x8a, 30, 2), x);
  r.loop.settle();
  REQUIRE(r.gate->held().size() == 1);
  auto c = r.send(caw_cdb(31, 1), concat(std::span(x).last(block_size), y));
  r.loop.settle();
  CHECK(r.gate->held().size() == 1);
  // A write of block 31 arriving now queues behind the waiting COMPARE AND
  // WRITE, though nothing running overlaps it: arrival order holds.
  auto w4 = r.send(cdb16(0x8a, 31, 1), y);
  r.loop.settle();
  CHECK(r.gate->held().size() == 1);
  let_through();
  require_good(*w3);
  REQUIRE(r.gate->held().size() == 1);
  CHECK(held(op::read, 31) == 1);
  // WRITE SAME and UNMAP wait for it too.
  auto same = r.send(cdb16(0x93, 31, 1), y);
  const std::vector<std::uint8_t> list = {0, 22, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0, 0,  0, 31, 0, 0, 0, 1, 0, 0, 0, 0};
  auto unmap = r.send(cdb10(0x42, 0, static_cast<std::uint16_t>(list.size())),
                      std::as_bytes(std::span(list)));
  r.loop.settle();
  CHECK(r.gate->held().size() == 1);
  while (c->completions == 0 || w4->completions == 0 || same->completions == 0 ||
         unmap->completions == 0)
    let_through();
  require_good(*c);
  require_good(*w4);
  require_good(*same);
  require_good(*unmap);
  r.gate->open();

  // In all: A, then w1, then B; c, then w4, the WRITE SAME and the UNMAP of
  // block 31 (the last three in any order).
  CHECK(r.read(10, 1) == std::vector(x.begin(), x.begin() + block_size));
  CHECK(r.read(11, 1) == y);
  CHECK(r.read(20, 1) == w1_data);
  CHECK(r.read(30, 1) == std::vector(x.begin(), x.begin() + block_size));
  const auto last = r.read(31, 1);
  CHECK((last == y || all_zero(last)));
}

// Many COMPARE AND WRITEs, ORWRITEs, WRITEs and WRITE SAMEs in flight at
// once over overlapping ranges, reaching the medium in a random order. The
// log of what reached the medium, in order, is replayed: every write of a
// COMPARE AND WRITE must find the range holding what it compared against
// (so nothing came between its read and its write), every ORWRITE must
// write what was there ORed with its data, every miscompare must name the
// first byte that differed from what its read found, and the volume must
// end as the replay does. Since the log is a serial order, the outcome is
// one of a serial execution.
TEST_CASE("scsi compare and write: concurrent with writes, atomic and serializable",
          "[target][scsi][caw]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (STRATA_TEST_SEED=" << seed << " replays it)");
  rig r(between::jitter, true, seed);
  std::mt19937_64 random(seed);
  auto uniform = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(random);
  };

  // A block: its writer's id in bytes [0, 8), ORWRITE bits in [8, 8 + or_bytes).
  constexpr std::uint64_t region_blocks = 16;
  constexpr std::size_t or_bytes = 128;
  std::uint64_t next_id = 1;
  std::size_t next_or_bit = 0;
  auto block_with_id = [](std::uint64_t id) {
    std::vector<std::byte> b(block_size);
    std::memcpy(b.data(), &id, sizeof id);
    for (std::size_t i = 8 + or_bytes; i < block_size; i += 64)
      b[i] = static_cast<std::byte>(id * 31 + i);  // more than the id differs
    return b;
  };
  auto id_of = [](std::span<const std::byte> block) {
    std::uint64_t id = 0;
    std::memcpy(&id, block.data(), sizeof id);
    return id;
  };

  std::vector<std::byte> initial;
  for (std::uint64_t b = 0; b < region_blocks; ++b) {
    const auto block = block_with_id(next_id++);
    initial.insert(initial.end(), block.begin(), block.end());
  }
  r.write(0, initial);

  enum class kind { write, write_same, caw, orwrite };
  struct planned {
    kind what;
    std::uint64_t lba;
    std::uint64_t blocks;
    std::vector<std::byte> data_out;
    std::vector<std::byte> compare;  // CAW: the verify half
    std::vector<std::byte> written;  // what it writes: WRITE, CAW's write half, WRITE SAME's blocks
    std::size_t or_bit = 0;
    std::unique_ptr<command> c;
    int landings = 0;
    std::set<std::uint64_t> possible_offsets;  // CAW: first differences its read could have found
  };
  std::size_t caw_good = 0, caw_miscompare = 0;

  for (int round = 0; round < 40; ++round) {
    INFO("round " << round);
    const auto snapshot = r.read(0, region_blocks);
    r.jitter->log.clear();
    std::vector<planned> plan(uniform(8, 24));
    std::map<std::uint64_t, std::size_t> by_id;  // the id in a write's first block -> its command
    for (std::size_t i = 0; i < plan.size(); ++i) {
      planned& p = plan[i];
      p.lba = uniform(0, region_blocks - 1);
      p.blocks = std::min<std::uint64_t>(uniform(1, 4), region_blocks - p.lba);
      const std::uint64_t roll = uniform(0, 99);
      p.what = roll < 35   ? kind::write
               : roll < 45 ? kind::write_same
               : roll < 85 ? kind::caw
                           : kind::orwrite;
      if (p.what == kind::orwrite && next_or_bit == or_bytes * 8) p.what = kind::write;
      const std::uint32_t n = static_cast<std::uint32_t>(p.blocks);
      switch (p.what) {
        case kind::write:
          for (std::uint64_t b = 0; b < p.blocks; ++b) {
            const auto block = block_with_id(next_id++);
            p.written.insert(p.written.end(), block.begin(), block.end());
          }
          p.data_out = p.written;
          by_id[id_of(p.written)] = i;
          p.c = r.send(cdb16(0x8a, p.lba, n), p.data_out);
          break;
        case kind::write_same: {
          const auto block = block_with_id(next_id++);
          for (std::uint64_t b = 0; b < p.blocks; ++b)
            p.written.insert(p.written.end(), block.begin(), block.end());
          p.data_out = block;
          by_id[id_of(block)] = i;
          p.c = r.send(cdb16(0x93, p.lba, n), p.data_out);
          break;
        }
        case kind::caw: {
          // Compare with the range as it was when the round began: it
          // matches unless a command of this round overlapping it lands first.
          p.compare.assign(snapshot.begin() + p.lba * block_size,
                           snapshot.begin() + (p.lba + p.blocks) * block_size);
          if (uniform(0, 9) == 0) p.compare[uniform(0, p.compare.size() - 1)] ^= std::byte{1};
          for (std::uint64_t b = 0; b < p.blocks; ++b) {
            const auto block = block_with_id(next_id++);
            p.written.insert(p.written.end(), block.begin(), block.end());
          }
          by_id[id_of(p.written)] = i;
          p.data_out = concat(p.compare, p.written);
          p.c = r.send(caw_cdb(p.lba, static_cast<std::uint8_t>(n)), p.data_out);
          break;
        }
        case kind::orwrite:
          p.or_bit = next_or_bit++;
          p.data_out.assign(p.blocks * block_size, std::byte{0});
          for (std::uint64_t b = 0; b < p.blocks; ++b)
            p.data_out[b * block_size + 8 + p.or_bit / 8] = std::byte{1} << (p.or_bit % 8);
          p.c = r.send(cdb16(0x8b, p.lba, n), p.data_out);
          break;
      }
    }
    r.loop.run_until([&] {
      return std::all_of(plan.begin(), plan.end(),
                         [](const planned& p) { return p.c->completions > 0; });
    });
    r.loop.settle();

    // Replay what reached the medium, in the order it did.
    std::vector<std::byte> state = snapshot;
    for (const jitter_device::landing& l : r.jitter->log) {
      REQUIRE(l.lba + l.block_count <= region_blocks);
      const auto range = std::span(state).subspan(l.lba * block_size, l.block_count * block_size);
      if (l.operation == op::read) {
        // Could be the read of a COMPARE AND WRITE of exactly this range.
        for (planned& p : plan) {
          if (p.what != kind::caw || p.lba != l.lba || p.blocks != l.block_count) continue;
          const auto [a, b] = std::mismatch(p.compare.begin(), p.compare.end(), range.begin());
          if (a != p.compare.end()) p.possible_offsets.insert(a - p.compare.begin());
        }
        continue;
      }
      REQUIRE(l.operation == op::write);
      REQUIRE(l.data.size() == range.size());
      // Which command wrote this: an ORWRITE sets a bit no block had; any
      // other write carries a fresh id in its first block.
      std::optional<std::size_t> writer;
      for (std::size_t i = 0; i < plan.size() && !writer; ++i) {
        const planned& p = plan[i];
        if (p.what != kind::orwrite) continue;
        const std::size_t at = 8 + p.or_bit / 8;
        const auto bit = std::byte{1} << (p.or_bit % 8);
        if ((l.data[at] & bit) != std::byte{0} && (range[at] & bit) == std::byte{0}) writer = i;
      }
      if (!writer) {
        const auto found = by_id.find(id_of(l.data));
        REQUIRE(found != by_id.end());
        writer = found->second;
      }
      planned& p = plan[*writer];
      INFO("command " << *writer << " kind " << static_cast<int>(p.what) << " lba " << p.lba
                      << " blocks " << p.blocks);
      REQUIRE(p.lba == l.lba);
      REQUIRE(p.blocks == l.block_count);
      ++p.landings;
      switch (p.what) {
        case kind::write:
        case kind::write_same:
          CHECK(l.data == p.written);
          break;
        case kind::caw:
          // The heart of it: the range still holds what the CAW compared with.
          CHECK(std::equal(range.begin(), range.end(), p.compare.begin(), p.compare.end()));
          CHECK(l.data == p.written);
          break;
        case kind::orwrite: {
          std::vector<std::byte> expected(range.begin(), range.end());
          for (std::size_t k = 0; k < expected.size(); ++k) expected[k] |= p.data_out[k];
          CHECK(l.data == expected);
          break;
        }
      }
      std::copy(l.data.begin(), l.data.end(), range.begin());
    }

    for (std::size_t i = 0; i < plan.size(); ++i) {
      const planned& p = plan[i];
      INFO("command " << i << " kind " << static_cast<int>(p.what) << " " << describe(*p.c));
      if (p.what != kind::caw) {
        CHECK(p.c->t.result == status::good);
        CHECK(p.landings == 1);
        continue;
      }
      if (p.c->t.result == status::good) {
        ++caw_good;
        CHECK(p.landings == 1);
      } else {
        ++caw_miscompare;
        require_sense(*p.c, sense_key::miscompare, asc::miscompare_during_verify);
        CHECK(p.landings == 0);
        REQUIRE(p.c->t.sense_data.information.has_value());
        CHECK(p.possible_offsets.contains(*p.c->t.sense_data.information));
      }
    }
    REQUIRE(r.read(0, region_blocks) == state);
  }
  INFO("COMPARE AND WRITE: " << caw_good << " matched, " << caw_miscompare << " miscompared");
  CHECK(caw_good > 0);
  CHECK(caw_miscompare > 0);
}

// ---------------------------------------------------------------------------
// WRITE ATOMIC(16)

TEST_CASE("scsi write atomic: the block limits promise only what survives a power cut",
          "[target][scsi][atomic]") {
  // Defect 8: MAXIMUM ATOMIC TRANSFER LENGTH was one device request (1 MiB),
  // which is atomic against other commands but can tear across stripes,
  // extents or a member's write at a power cut. What survives one is one
  // aligned 4096-byte block (unit_identity::atomic_write_bytes,
  // docs/atomic-writes.md): on a 4096-byte unit, one block.
  rig r(between::faults);
  auto limits = r.run(inquiry_cdb(true, 0xb0, 64));
  require_good(*limits);
  const auto d = limits->data();
  REQUIRE(d.size() == 64);
  const std::uint32_t longest = 1;
  CHECK(r.unit->max_atomic_transfer_blocks() == longest);
  CHECK(get(d, 44, 4) == longest);  // MAXIMUM ATOMIC TRANSFER LENGTH
  CHECK(get(d, 48, 4) == 1);        // ATOMIC ALIGNMENT: any block
  CHECK(get(d, 52, 4) == 1);        // ATOMIC TRANSFER LENGTH GRANULARITY
  CHECK(get(d, 56, 4) == 0);        // no atomic boundaries
  CHECK(get(d, 60, 4) == 0);

  // One block at the start and at the end of the volume lands byte for byte.
  for (const std::uint64_t lba : {std::uint64_t{0}, volume_blocks - 1}) {
    INFO("1 block at " << lba);
    const auto data = pattern(block_size, test_seed() + lba);
    require_good(*r.run(write_atomic_cdb(lba, 1), data));
    CHECK((r.read(lba, 1) == data));
  }
  const std::vector<std::byte> zeros(8 * std::size_t{block_size});
  r.write(1000, zeros);
  // More than the limit, 2 blocks or the 256 that were advertised before:
  // INVALID FIELD IN CDB (SBC-4 5.48), nothing written.
  for (const std::uint16_t n : {std::uint16_t{2}, std::uint16_t{256}}) {
    INFO(n << " blocks");
    require_sense(*r.run(write_atomic_cdb(1000, n), pattern(std::size_t{n} * block_size, 3)),
                  sense_key::illegal_request, asc::invalid_field_in_cdb);
  }
  CHECK(all_zero(r.read(1000, 8)));
  // The range is checked before the length: libiscsi's BeyondEol sends 2n
  // blocks n blocks before the end, up to 512, and expects LBA OUT OF RANGE.
  for (const std::uint32_t n : {1u, 256u}) {
    const std::vector<std::byte> two_n(2 * std::size_t{n} * block_size);
    const auto cdb = write_atomic_cdb(volume_blocks - n, static_cast<std::uint16_t>(2 * n));
    require_sense(*r.run(cdb, two_n), sense_key::illegal_request, asc::lba_out_of_range);
  }
  const std::vector<std::byte> block(block_size);
  for (const std::uint64_t lba : {std::uint64_t{1} << 63, ~std::uint64_t{0}}) {
    require_sense(*r.run(write_atomic_cdb(lba, 1), block), sense_key::illegal_request,
                  asc::lba_out_of_range);
    require_sense(*r.run(write_atomic_cdb(lba, 0)), sense_key::illegal_request,
                  asc::lba_out_of_range);
  }
  // 0 blocks: GOOD, nothing done; one past the end still out of range.
  require_good(*r.run(write_atomic_cdb(0, 0)));
  require_sense(*r.run(write_atomic_cdb(volume_blocks + 1, 0)), sense_key::illegal_request,
                asc::lba_out_of_range);
  // WRPROTECT (no protection information) and ATOMIC BOUNDARY (no
  // boundaries) are refused.
  require_sense(*r.run(write_atomic_cdb(0, 1, 0x20), block), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  require_sense(*r.run(write_atomic_cdb(0, 1, 0, 1), block), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  // Less Data-Out than the CDB describes: nothing written.
  const auto one = pattern(block_size, 9);
  require_sense(*r.run(write_atomic_cdb(1000, 1), std::span(one).first(block_size / 2)),
                sense_key::illegal_request, asc::invalid_field_in_command_iu);
  CHECK(all_zero(r.read(1000, 1)));

  // DPO is accepted; FUA leaves nothing in the write cache (libiscsi's DpoFua).
  require_good(*r.run(cdb10(0x35, 0, 0)));
  REQUIRE(r.faults->dirty_blocks() == 0);
  require_good(*r.run(write_atomic_cdb(1000, 1, 0x10), one));
  CHECK(r.faults->dirty_blocks() == 1);
  const auto again = pattern(block_size, 10);
  require_good(*r.run(write_atomic_cdb(1000, 1, 0x18), again));
  CHECK(r.faults->dirty_blocks() == 0);
  CHECK(r.read(1000, 1) == again);

  // A write-protected unit refuses it.
  unit_identity id;
  id.serial = "ARRAY1-VOL0043";
  id.write_protected = true;
  logical_unit protected_unit(*r.faults, id);
  command c;
  c.t.cdb = write_atomic_cdb(1000, 1);
  c.set_data_out(block);
  protected_unit.execute(c.t);
  finish(r.loop, c);
  require_sense(c, sense_key::data_protect, asc::write_protected);
  CHECK(r.read(1000, 1) == again);
}

TEST_CASE("scsi write atomic: on 512-byte blocks, one aligned 4 KiB block and nothing else",
          "[target][scsi][atomic]") {
  // 512e: eight 512-byte blocks make the 4 KiB that survives a power cut
  // whole; the atomic fields say so, and WRITE ATOMIC holds to them.
  test_loop loop;
  auto m = memory_device::create(loop.context.get_executor(), {512, 8 * 1024});
  REQUIRE(m);
  unit_identity id;
  id.serial = "ARRAY1-VOL0512";
  id.physical_block_bytes = 4096;
  logical_unit unit(**m, id);
  auto run = [&](const cdb_bytes& cdb, std::span<const std::byte> data_out = {}) {
    auto c = std::make_unique<command>();
    c->t.cdb = cdb;
    c->set_data_out(data_out);
    unit.execute(c->t);
    finish(loop, *c);
    return c;
  };
  auto limits = run(inquiry_cdb(true, 0xb0, 64));
  require_good(*limits);
  const auto d = limits->data();
  CHECK(get(d, 44, 4) == 8);  // MAXIMUM ATOMIC TRANSFER LENGTH
  CHECK(get(d, 48, 4) == 8);  // ATOMIC ALIGNMENT
  CHECK(get(d, 52, 4) == 8);  // ATOMIC TRANSFER LENGTH GRANULARITY
  CHECK(get(d, 6, 2) == 8);   // OPTIMAL TRANSFER LENGTH GRANULARITY
  CHECK(get(d, 28, 4) == 8);  // OPTIMAL UNMAP GRANULARITY
  const auto four_k = pattern(4096, 21);
  require_good(*run(write_atomic_cdb(16, 8), four_k));
  require_good(*run(write_atomic_cdb(16, 0)));  // 0 blocks: nothing, not an error
  // Not aligned, not a whole 4 KiB, or more than one: INVALID FIELD IN CDB.
  require_sense(*run(write_atomic_cdb(17, 8), four_k), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  require_sense(*run(write_atomic_cdb(16, 4), std::span(four_k).first(2048)),
                sense_key::illegal_request, asc::invalid_field_in_cdb);
  require_sense(*run(write_atomic_cdb(16, 16), pattern(8192, 22)), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  // READ CAPACITY(16): LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT 3.
  auto capacity = run(cdb16(0x9e, 0, 32, 0x10));
  require_good(*capacity);
  CHECK(get(capacity->data(), 8, 4) == 512);
  CHECK((get(capacity->data(), 13, 1) & 0x0f) == 3);
  loop.settle();
}

// The interlock, step by step (the gate shows which requests the unit has
// issued): a WRITE ATOMIC goes down as one request, and while it runs no
// overlapping read or write does; it waits for overlapping reads and
// writes already running; and commands arriving while it waits queue
// behind it.
TEST_CASE("scsi write atomic: one device request, and nothing overlapping runs with it",
          "[target][scsi][atomic]") {
  rig r(between::gate);
  const std::uint32_t longest = r.unit->max_atomic_transfer_blocks();
  const auto data = pattern(std::size_t{longest} * block_size, test_seed());
  const auto x = pattern(block_size, 11);
  const auto y = pattern(block_size, 12);
  auto held = [&](op operation, std::uint64_t lba, std::uint64_t blocks) {
    return std::count_if(r.gate->held().begin(), r.gate->held().end(), [&](const request* q) {
      return q->operation == operation && q->lba == lba && q->block_count == blocks;
    });
  };
  auto let_through = [&] {
    r.gate->release_all();
    r.loop.settle();
  };
  r.gate->close();

  // A: WRITE ATOMIC of [100, 100 + longest): all of it in one request.
  const std::uint64_t end = 100 + longest;
  auto a = r.send(write_atomic_cdb(100, static_cast<std::uint16_t>(longest)), data);
  r.loop.settle();
  REQUIRE(r.gate->held().size() == 1);
  CHECK(held(op::write, 100, longest) == 1);
  // Overlapping it: a write of its last block, a read across its first;
  // beside it: a write just after, a read just before. Only those beside go.
  auto write_in = r.send(cdb16(0x8a, end - 1, 1), x);
  auto read_in = r.send(cdb16(0x88, 99, 2));
  auto write_beside = r.send(cdb16(0x8a, end, 1), y);
  auto read_beside = r.send(cdb16(0x88, 99, 1));
  r.loop.settle();
  CHECK(r.gate->held().size() == 3);
  CHECK(held(op::write, end, 1) == 1);
  CHECK(held(op::read, 99, 1) == 1);
  // A lands; the two beside it complete; then the two held back go.
  let_through();
  require_good(*write_beside);
  require_good(*read_beside);
  require_good(*a);
  CHECK(write_in->completions == 0);
  CHECK(read_in->completions == 0);
  REQUIRE(r.gate->held().size() == 2);
  CHECK(held(op::write, end - 1, 1) == 1);
  CHECK(held(op::read, 99, 2) == 1);
  let_through();
  require_good(*write_in);
  require_good(*read_in);
  // The read saw A (A is one block, the one write_in overwrites: released
  // together, they may land in either order), never what was there before.
  const auto seen = read_in->data_bytes();
  CHECK(all_zero(std::span(seen).first(block_size)));
  CHECK((std::equal(seen.begin() + block_size, seen.end(), data.begin()) ||
         std::equal(seen.begin() + block_size, seen.end(), x.begin())));

  // The other way round: a read and a write in flight hold back a WRITE
  // ATOMIC of their range; a read arriving while it waits queues behind it;
  // one elsewhere goes.
  auto reader = r.send(cdb16(0x88, 600, 4));
  auto writer = r.send(cdb16(0x8a, 603, 1), x);
  r.loop.settle();
  REQUIRE(r.gate->held().size() == 2);
  const auto b_data = pattern(block_size, 13);
  auto b = r.send(write_atomic_cdb(603, 1), b_data);
  r.loop.settle();
  CHECK(r.gate->held().size() == 2);
  auto late_reader = r.send(cdb16(0x88, 603, 1));
  auto elsewhere = r.send(cdb16(0x88, 700, 1));
  r.loop.settle();
  CHECK(r.gate->held().size() == 3);
  CHECK(held(op::read, 700, 1) == 1);
  let_through();  // the first read, the write and the read elsewhere are done: B goes
  require_good(*reader);
  require_good(*writer);
  require_good(*elsewhere);
  CHECK(all_zero(
      std::span<const std::byte>(reader->data_bytes()).first(3 * block_size)));  // it ran before B
  REQUIRE(r.gate->held().size() == 1);
  CHECK(held(op::write, 603, 1) == 1);
  CHECK(late_reader->completions == 0);
  let_through();
  require_good(*b);
  REQUIRE(r.gate->held().size() == 1);
  CHECK(held(op::read, 603, 1) == 1);
  let_through();
  require_good(*late_reader);
  CHECK(late_reader->data_bytes() == b_data);

  // Plain writes still hold back no read, and no read a write.
  auto w = r.send(cdb16(0x8a, 800, 1), x);
  auto rd = r.send(cdb16(0x88, 800, 1));
  r.loop.settle();
  CHECK(r.gate->held().size() == 2);
  r.gate->open();
  r.loop.settle();
  require_good(*w);
  require_good(*rd);
}

// ---------------------------------------------------------------------------
// ORWRITE

TEST_CASE("scsi orwrite: ORs the Data-Out into the blocks", "[target][scsi][orwrite]") {
  rig r(between::faults);
  for (const std::uint64_t lba : {std::uint64_t{0}, volume_blocks - 5}) {
    INFO("lba " << lba);
    auto filled = [](std::uint8_t v) {
      return std::vector<std::byte>(5 * block_size, std::byte{v});
    };
    r.write(lba, filled(0x00));
    require_good(*r.run(cdb16(0x8b, lba, 5), filled(0xa5)));
    CHECK(r.read(lba, 5) == filled(0xa5));
    require_good(*r.run(cdb16(0x8b, lba, 5), filled(0x5a)));
    CHECK(r.read(lba, 5) == filled(0xff));
  }
  // Larger than one device request: read, merged and written piece by piece.
  const std::uint32_t blocks = logical_unit::piece_bytes / block_size + 3;
  const auto a = pattern(std::size_t{blocks} * block_size, test_seed());
  const auto b = pattern(std::size_t{blocks} * block_size, test_seed() + 1);
  r.write(100, a);
  require_good(*r.run(cdb16(0x8b, 100, blocks), b));
  auto expected = a;
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] |= b[i];
  CHECK(r.read(100, blocks) == expected);

  // FUA: written through the cache.
  require_good(*r.run(cdb10(0x35, 0, 0)));
  require_good(*r.run(cdb16(0x8b, 7, 1, 0x18), std::vector<std::byte>(block_size, std::byte{1})));
  CHECK(r.faults->dirty_blocks() == 0);
  // No blocks, past the end, ORPROTECT, too little data.
  require_good(*r.run(cdb16(0x8b, 7, 0)));
  require_sense(*r.run(cdb16(0x8b, volume_blocks - 1, 2), std::vector<std::byte>(2 * block_size)),
                sense_key::illegal_request, asc::lba_out_of_range);
  require_sense(*r.run(cdb16(0x8b, 7, 1, 0x20), std::vector<std::byte>(block_size)),
                sense_key::illegal_request, asc::invalid_field_in_cdb);
  require_sense(*r.run(cdb16(0x8b, 7, 2), std::vector<std::byte>(block_size)),
                sense_key::illegal_request, asc::invalid_field_in_command_iu);
  require_sense(*r.run(cdb16(0x8b, 0, logical_unit::max_transfer_bytes / block_size + 1)),
                sense_key::illegal_request, asc::invalid_field_in_cdb);
}

// ---------------------------------------------------------------------------
// PRE-FETCH

TEST_CASE("scsi pre-fetch: the range is checked, the answer is GOOD", "[target][scsi]") {
  rig r;
  for (const std::uint8_t immed : {std::uint8_t{0}, std::uint8_t{0x02}}) {
    INFO("byte 1 " << int{immed});
    require_good(*r.run(cdb10(0x34, 0, 256, immed)));
    require_good(*r.run(cdb16(0x90, volume_blocks - 256, 256, immed)));
    require_good(*r.run(cdb16(0x90, 5, 0, immed)));  // 0: to the last LBA
    require_good(*r.run(cdb10(0x34, volume_blocks - 1, 0, immed)));
    require_sense(*r.run(cdb10(0x34, volume_blocks - 1, 2, immed)), sense_key::illegal_request,
                  asc::lba_out_of_range);
    require_sense(*r.run(cdb16(0x90, volume_blocks, 0, immed)), sense_key::illegal_request,
                  asc::lba_out_of_range);
    require_sense(*r.run(cdb16(0x90, ~0ull, 1, immed)), sense_key::illegal_request,
                  asc::lba_out_of_range);
  }
  auto grouped = cdb10(0x34, 0, 1);
  grouped[6] = 3;  // GROUP NUMBER: ignored
  require_good(*r.run(grouped));
}

// ---------------------------------------------------------------------------
// GET LBA STATUS

struct lba_status {
  std::uint64_t lba;
  std::uint32_t blocks;
  std::uint8_t status;
  bool operator==(const lba_status&) const = default;
};
std::vector<lba_status> descriptors(const command& c) {
  const auto d = c.data();
  REQUIRE(d.size() >= 8);
  REQUIRE(get(d, 0, 4) == d.size() - 4);  // PARAMETER DATA LENGTH
  REQUIRE((d.size() - 8) % 16 == 0);
  std::vector<lba_status> out;
  for (std::size_t at = 8; at < d.size(); at += 16) {
    out.push_back({get(d, at, 8), static_cast<std::uint32_t>(get(d, at + 8, 4)),
                   static_cast<std::uint8_t>(d[at + 12] & 0x0f)});
  }
  return out;
}

TEST_CASE("scsi get lba status: mapped and deallocated runs from the volume",
          "[target][scsi][lba_status]") {
  rig r(between::thin);
  // Mapped: [100, 300) and [350, 351); the rest was never written or is unmapped.
  r.write(100, pattern(200 * block_size, test_seed()));
  r.write(350, pattern(block_size, 1));
  require_good(*r.run(cdb16(0x93, 150, 10, 0x08), std::vector<std::byte>(block_size)));

  auto c = r.run(get_lba_status_cdb(0, 4096));
  require_good(*c);
  const auto d = descriptors(*c);
  const auto rest = static_cast<std::uint32_t>(volume_blocks - 351);
  const std::vector<lba_status> expected = {{0, 100, 1},   {100, 50, 0}, {150, 10, 1},
                                            {160, 140, 0}, {300, 50, 1}, {350, 1, 0},
                                            {351, rest, 1}};
  CHECK(d == expected);  // runs that the device reports extent by extent are joined

  // From the middle of a run: the first descriptor starts at STARTING LBA.
  auto mid = r.run(get_lba_status_cdb(120, 4096));
  require_good(*mid);
  CHECK(descriptors(*mid).front() == lba_status{120, 30, 0});

  // An allocation length of 24 holds one descriptor; the length field says how much there is.
  auto one = r.run(get_lba_status_cdb(0, 24));
  require_good(*one);
  CHECK(one->t.data_in_bytes == 24);
  CHECK(descriptors(*one) == std::vector<lba_status>{{0, 100, 1}});
  // Shorter than one: cut, as every allocation length cuts, but the header is whole.
  auto cut = r.run(get_lba_status_cdb(0, 4));
  require_good(*cut);
  REQUIRE(cut->t.data_in_bytes == 4);
  CHECK(get(cut->data(), 0, 4) == 20);
  require_good(*r.run(get_lba_status_cdb(0, 0)));

  // The last block, and past it.
  auto last = r.run(get_lba_status_cdb(volume_blocks - 1, 24));
  require_good(*last);
  CHECK(descriptors(*last) == std::vector<lba_status>{{volume_blocks - 1, 1, 1}});
  for (const std::uint64_t lba :
       {volume_blocks, volume_blocks + 1, std::uint64_t{1} << 63, ~std::uint64_t{0}}) {
    INFO("lba " << lba);
    require_sense(*r.run(get_lba_status_cdb(lba, 24)), sense_key::illegal_request,
                  asc::lba_out_of_range);
  }
}

TEST_CASE("scsi get lba status: the descriptor count and the scan are bounded",
          "[target][scsi][lba_status]") {
  rig r(between::thin);
  // Every other block mapped: one descriptor per block.
  for (std::uint64_t b = 0; b < 2 * logical_unit::max_lba_status_descriptors + 10; b += 2)
    r.write(b, pattern(block_size, b));
  auto c = r.run(get_lba_status_cdb(0, 1u << 20));
  require_good(*c);
  const auto d = descriptors(*c);
  REQUIRE(d.size() == logical_unit::max_lba_status_descriptors);
  for (std::size_t i = 0; i < d.size(); ++i) {
    INFO("descriptor " << i);
    CHECK(d[i] == lba_status{i, 1, static_cast<std::uint8_t>(i % 2)});
  }
}

TEST_CASE("scsi get lba status: a device answering block by block costs a bounded scan",
          "[target][scsi][lba_status]") {
  const std::uint64_t budget = 32 * logical_unit::max_lba_status_descriptors;
  rig r(between::thin, true, 1, 4 * budget);
  r.thin->map_all();
  r.thin->extent_blocks = 1;
  auto c = r.run(get_lba_status_cdb(0, 1024));
  require_good(*c);
  // The queries ran out inside the first run: one descriptor, true as far as it goes.
  CHECK(descriptors(*c) == std::vector<lba_status>{{0, static_cast<std::uint32_t>(budget), 0}});
  CHECK(r.thin->queries == budget);
}

TEST_CASE("scsi get lba status: a volume that does not track allocation, a fully provisioned unit",
          "[target][scsi][lba_status]") {
  {
    rig r;  // a memory device: allocation_at keeps its default
    auto c = r.run(get_lba_status_cdb(10, 1024));
    require_good(*c);
    CHECK(descriptors(*c) ==
          std::vector<lba_status>{{10, static_cast<std::uint32_t>(volume_blocks - 10), 0}});
  }
  {
    rig r(between::thin, false);  // the volume is thin, the unit says it is not
    auto c = r.run(get_lba_status_cdb(0, 1024));
    require_good(*c);
    CHECK(descriptors(*c) ==
          std::vector<lba_status>{{0, static_cast<std::uint32_t>(volume_blocks), 0}});
  }
}

// ---------------------------------------------------------------------------
// WRITE AND VERIFY(12), READ DEFECT DATA, START STOP UNIT, WRITE SAME

TEST_CASE("scsi write and verify(12): writes and reads back", "[target][scsi]") {
  rig r;
  const auto data = pattern(3 * block_size, test_seed());
  require_good(*r.run(cdb12(0xae, 60, 3), data));
  CHECK(r.read(60, 3) == data);
  const auto other = pattern(3 * block_size, test_seed() + 1);
  require_good(*r.run(cdb12(0xae, 60, 3, 0x02 | 0x10), other));  // BYTCHK 01b, DPO
  CHECK(r.read(60, 3) == other);
  require_good(*r.run(cdb12(0xae, 60, 0)));
  require_sense(*r.run(cdb12(0xae, volume_blocks - 1, 2), data), sense_key::illegal_request,
                asc::lba_out_of_range);
  require_sense(*r.run(cdb12(0xae, 60, 3, 0x06), data), sense_key::illegal_request,
                asc::invalid_field_in_cdb);  // BYTCHK 11b is VERIFY's only
  require_sense(*r.run(cdb12(0xae, 60, 3, 0x20), data), sense_key::illegal_request,
                asc::invalid_field_in_cdb);  // WRPROTECT
  // The initiator expects to send one block of three: that block is written
  // and verified, the rest is residual overflow.
  const auto first = r.run(cdb12(0xae, 60, 3), std::span(data).first(block_size));
  require_good(*first);
  CHECK(first->t.data_out_described_bytes == 3 * block_size);
  CHECK(r.read(60, 1) == std::vector<std::byte>(data.begin(), data.begin() + block_size));
}

TEST_CASE("scsi read defect data: an empty list in the format asked", "[target][scsi]") {
  rig r;
  auto rdd10 = [](std::uint8_t request, std::uint16_t allocation_length) {
    cdb_bytes c{};
    c[0] = 0x37;
    c[2] = request;
    put(c, 7, allocation_length, 2);
    return c;
  };
  auto rdd12 = [](std::uint8_t request, std::uint32_t allocation_length) {
    cdb_bytes c{};
    c[0] = 0xb7;
    c[1] = request;
    put(c, 6, allocation_length, 4);
    return c;
  };
  for (std::uint8_t format = 0; format <= 5; ++format) {
    for (const std::uint8_t lists :
         {std::uint8_t{0x00}, std::uint8_t{0x10}, std::uint8_t{0x08}, std::uint8_t{0x18}}) {
      INFO("format " << int{format} << " lists " << int{lists});
      auto ten = r.run(rdd10(lists | format, 32));
      require_good(*ten);
      CHECK(std::vector(ten->data().begin(), ten->data().end()) ==
            std::vector<std::uint8_t>{0, static_cast<std::uint8_t>(lists | format), 0, 0});
      auto twelve = r.run(rdd12(lists | format, 32));
      require_good(*twelve);
      CHECK(std::vector(twelve->data().begin(), twelve->data().end()) ==
            std::vector<std::uint8_t>{0, static_cast<std::uint8_t>(lists | format), 0, 0, 0, 0, 0,
                                      0});
    }
  }
  // Vendor-specific and reserved formats: the list in short block format,
  // then RECOVERED ERROR, DEFECT LIST NOT FOUND.
  for (const std::uint8_t format : {std::uint8_t{6}, std::uint8_t{7}}) {
    auto c = r.run(rdd10(0x08 | format, 32));
    require_sense(*c, sense_key::recovered_error, asc::defect_list_not_found);
    CHECK(std::vector(c->data().begin(), c->data().end()) ==
          std::vector<std::uint8_t>{0, 0x08, 0, 0});
  }
  // The allocation length cuts the header.
  auto cut = r.run(rdd12(0x18, 2));
  require_good(*cut);
  CHECK(cut->t.data_in_bytes == 2);
}

TEST_CASE("scsi start stop unit: start and stop do nothing, an eject is refused",
          "[target][scsi]") {
  rig r;
  auto ssu = [](std::uint8_t byte1, std::uint8_t byte4) {
    cdb_bytes c{};
    c[0] = 0x1b;
    c[1] = byte1;
    c[4] = byte4;
    return c;
  };
  for (const std::uint8_t immed : {std::uint8_t{0}, std::uint8_t{1}}) {
    require_good(*r.run(ssu(immed, 0x00)));  // stop
    require_good(*r.run(ssu(immed, 0x01)));  // start
    require_good(*r.run(ssu(immed, 0x04)));  // NO_FLUSH
    require_sense(*r.run(ssu(immed, 0x02)), sense_key::illegal_request, asc::invalid_field_in_cdb);
    require_sense(*r.run(ssu(immed, 0x03)), sense_key::illegal_request, asc::invalid_field_in_cdb);
    // With a power condition, LOEJ is not looked at.
    for (std::uint8_t pc = 1; pc < 16; ++pc) require_good(*r.run(ssu(immed, (pc << 4) | 0x02)));
  }
  require_good(*r.run(cdb_bytes{}));  // and the unit is still ready
}

TEST_CASE("scsi write same: Data-Out of other than one block is refused", "[target][scsi]") {
  rig r;
  const auto block = pattern(block_size, test_seed());
  r.write(5, std::vector<std::byte>(2 * block_size));
  require_sense(*r.run(cdb16(0x93, 5, 1, 0x08), std::span(block).first(block_size / 2)),
                sense_key::illegal_request, asc::invalid_field_in_command_iu);
  require_sense(*r.run(cdb16(0x93, 5, 1, 0x08), concat(block, block)), sense_key::illegal_request,
                asc::invalid_field_in_command_iu);
  require_sense(*r.run(cdb10(0x41, 5, 2), concat(block, block)), sense_key::illegal_request,
                asc::invalid_field_in_command_iu);
  CHECK(all_zero(r.read(5, 2)));
  require_good(*r.run(cdb10(0x41, 5, 2), block));
  CHECK(r.read(5, 2) == concat(block, block));
}

TEST_CASE("scsi write same: 0 blocks writes to the last LBA, within MAXIMUM WRITE SAME LENGTH",
          "[target][scsi]") {
  rig r;
  auto limits = r.run(inquiry_cdb(true, 0xb0, 64));
  require_good(*limits);
  CHECK((limits->data()[4] & 0x01) == 0);  // WSNZ 0: 0 blocks is allowed
  const std::uint64_t longest = logical_unit::max_write_same_bytes / block_size;
  CHECK(get(limits->data(), 36, 8) == longest);
  REQUIRE(volume_blocks > longest + 1);
  auto blocks_of = [](std::span<const std::byte> range, std::span<const std::byte> block) {
    for (std::size_t at = 0; at < range.size(); at += block.size()) {
      if (!std::equal(block.begin(), block.end(), range.begin() + at)) return false;
    }
    return true;
  };

  // Ten blocks before the end: those ten, and not the one before them.
  const auto block = pattern(block_size, test_seed());
  require_good(*r.run(cdb16(0x93, volume_blocks - 10, 0), block));
  auto got = r.read(volume_blocks - 11, 11);
  CHECK(all_zero(std::span(got).first(block_size)));
  CHECK(blocks_of(std::span(got).subspan(block_size), block));
  // WRITE SAME(10) too.
  const auto block2 = pattern(block_size, test_seed() + 1);
  require_good(*r.run(cdb10(0x41, volume_blocks - 3, 0), block2));
  CHECK(blocks_of(r.read(volume_blocks - 3, 3), block2));
  CHECK(blocks_of(r.read(volume_blocks - 10, 7), block));

  // Exactly MAXIMUM WRITE SAME LENGTH to the end: GOOD. One block more, or
  // the whole volume: INVALID FIELD IN CDB, and nothing written (libiscsi's
  // WriteSame10/16 0blocks tests).
  const auto block3 = pattern(block_size, test_seed() + 2);
  require_good(*r.run(cdb16(0x93, volume_blocks - longest, 0), block3));
  CHECK(blocks_of(r.read(volume_blocks - longest, static_cast<std::uint32_t>(longest)), block3));
  const auto block4 = pattern(block_size, test_seed() + 3);
  require_sense(*r.run(cdb16(0x93, volume_blocks - longest - 1, 0), block4),
                sense_key::illegal_request, asc::invalid_field_in_cdb);
  require_sense(*r.run(cdb10(0x41, volume_blocks - longest - 1, 0), block4),
                sense_key::illegal_request, asc::invalid_field_in_cdb);
  require_sense(*r.run(cdb16(0x93, 0, 0), block4), sense_key::illegal_request,
                asc::invalid_field_in_cdb);
  CHECK(all_zero(r.read(volume_blocks - longest - 1, 1)));
  CHECK(blocks_of(r.read(volume_blocks - longest, 1), block3));

  // The LBA must exist: at the end, past it, 2^31, 2^63, -1.
  for (const std::uint64_t lba :
       {volume_blocks, volume_blocks + 1, std::uint64_t{1} << 63, ~std::uint64_t{0}}) {
    INFO("lba " << lba);
    require_sense(*r.run(cdb16(0x93, lba, 0), block4), sense_key::illegal_request,
                  asc::lba_out_of_range);
  }
  for (const std::uint64_t lba :
       {volume_blocks, std::uint64_t{0x80000000}, std::uint64_t{0xffffffff}}) {
    INFO("WRITE SAME(10) lba " << lba);
    require_sense(*r.run(cdb10(0x41, lba, 0), block4), sense_key::illegal_request,
                  asc::lba_out_of_range);
  }

  // With UNMAP and a zero block (libiscsi's UnmapUntilEnd, with zeros):
  // the blocks to the end read as zeros.
  require_good(*r.run(cdb16(0x93, volume_blocks - 4, 0, 0x08), std::vector<std::byte>(block_size)));
  CHECK(all_zero(r.read(volume_blocks - 4, 4)));
  CHECK(blocks_of(r.read(volume_blocks - 5, 1), block3));
}

// ---------------------------------------------------------------------------
// REPORT SUPPORTED OPERATION CODES

TEST_CASE("scsi report supported operation codes: the new commands and their CDB usage",
          "[target][scsi]") {
  rig r;
  auto all = r.run(rsoc(0, 0, 0));
  require_good(*all);
  const auto d = all->data();
  std::map<std::pair<std::uint8_t, std::uint16_t>, std::uint16_t> listed;  // -> CDB length
  for (std::size_t at = 4; at + 8 <= d.size(); at += 8)
    listed[{d[at], static_cast<std::uint16_t>(get(d, at + 2, 2))}] =
        static_cast<std::uint16_t>(get(d, at + 6, 2));
  struct expected_usage {
    std::uint8_t opcode;
    std::optional<std::uint16_t> service_action;
    std::vector<std::uint8_t> usage;
  };
  const expected_usage table[] = {
      {0x89, {}, {0x89, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0xff, 0, 0}},
      {0x8b,
       {},
       {0x8b, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}},
      {0x34, {}, {0x34, 0x02, 0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0}},
      {0x90,
       {},
       {0x90, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}},
      {0x9e,
       0x12,
       {0x9e, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}},
      {0xae, {}, {0xae, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}},
      {0x37, {}, {0x37, 0, 0x1f, 0, 0, 0, 0, 0xff, 0xff, 0}},
      {0xb7, {}, {0xb7, 0x1f, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}},
      {0x1b, {}, {0x1b, 0, 0, 0, 0xf2, 0}},
      // WRITE ATOMIC(16): DPO and FUA among the bits looked at (libiscsi's DpoFua checks).
      {0x9c,
       {},
       {0x9c, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}},
      {0x83, 0x00, {0x83, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}},
      {0x84, 0x00, {0x84, 0x00, 0xff, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}},
      {0x84, 0x01, {0x84, 0x01, 0xff, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}},
      {0x84, 0x03, {0x84, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}},
      {0x84, 0x04, {0x84, 0x04, 0xff, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}},
  };
  for (const expected_usage& e : table) {
    INFO("opcode " << int{e.opcode});
    const auto key = std::pair{e.opcode, e.service_action.value_or(0)};
    REQUIRE(listed.contains(key));
    CHECK(listed[key] == e.usage.size());
    auto one =
        r.run(e.service_action ? rsoc(2, e.opcode, *e.service_action) : rsoc(1, e.opcode, 0));
    require_good(*one);
    const auto u = one->data();
    CHECK((u[1] & 0x07) == 0x03);  // supported as the standard says
    REQUIRE(get(u, 2, 2) == e.usage.size());
    CHECK(std::vector(u.begin() + 4, u.end()) == e.usage);
  }
}

}  // namespace
}  // namespace strata::scsi
