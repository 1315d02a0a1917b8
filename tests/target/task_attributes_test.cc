// SAM-5 task attributes in a logical unit's task set (defect 7: VPD 86h
// advertised ORDERED and HEAD OF QUEUE while every task ran as SIMPLE):
// an ORDERED task waits for every older task and holds back every newer
// one; HEAD OF QUEUE runs at once; SIMPLE tasks run together. Scripted over
// a gate that shows which device requests the unit has issued, then many
// tasks at once over a device that completes out of order, checked against
// the order SAM-5 allows.
#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "raid/device/fault_device.h"
#include "raid/device/memory_device.h"
#include "target/scsi/logical_unit.h"
#include "tests/raid/device/harness.h"
#include "tests/target/scsi_harness.h"

namespace strata::scsi {
namespace {

using namespace device;
using namespace device::testing;
using namespace strata::scsi::testing;

constexpr std::uint32_t block_size = 4096;

struct gated_unit {
  test_loop loop;
  std::unique_ptr<memory_device> memory;
  std::unique_ptr<gate_device> gate;
  std::unique_ptr<logical_unit> unit;

  gated_unit() {
    auto m = memory_device::create(loop.context.get_executor(), {block_size, 1024});
    REQUIRE(m);
    memory = std::move(*m);
    gate = std::make_unique<gate_device>(*memory);
    unit_identity id;
    id.serial = "ARRAY1-VOL0086";
    unit = std::make_unique<logical_unit>(*gate, id);
  }
  ~gated_unit() {
    gate->open();
    loop.settle();
    CHECK(unit->commands_in_flight() == 0);
  }
  std::unique_ptr<command> send(task_attribute attribute, const cdb_bytes& cdb,
                                std::span<const std::byte> data_out = {}) {
    auto c = std::make_unique<command>();
    c->t.cdb = cdb;
    c->t.attribute = attribute;
    c->set_data_out(data_out);
    unit->execute(c->t);
    return c;
  }
  bool issued(op operation, std::uint64_t lba) const {
    return std::ranges::any_of(
        gate->held(), [&](const request* r) { return r->operation == operation && r->lba == lba; });
  }
  void let_through() {
    gate->release_all();
    loop.settle();
  }
};

}  // namespace

TEST_CASE("scsi task attributes: VPD 86h advertises SIMPLE, ORDERED and HEAD OF QUEUE",
          "[target][scsi][task_attributes]") {
  gated_unit g;
  auto c = g.send(task_attribute::simple, inquiry_cdb(true, 0x86, 64));
  finish(g.loop, *c);
  require_good(*c);
  CHECK((c->data()[5] & 0x07) == 0x07);  // HEADSUP, ORDSUP, SIMPSUP
}

TEST_CASE(
    "scsi task attributes: ORDERED waits for the older tasks and holds back the newer; HEAD OF "
    "QUEUE goes at once",
    "[target][scsi][task_attributes]") {
  gated_unit g;
  g.gate->close();
  const auto block = pattern(block_size, 1);
  auto a = g.send(task_attribute::simple, cdb16(0x8a, 10, 1), block);   // older SIMPLE write
  auto b = g.send(task_attribute::ordered, cdb16(0x8a, 20, 1), block);  // ORDERED write
  auto c = g.send(task_attribute::simple, cdb16(0x88, 30, 1));          // newer SIMPLE read
  auto tur = g.send(task_attribute::simple, cdb10(0x00, 0, 0));         // newer, no I/O
  auto d = g.send(task_attribute::head_of_queue, cdb16(0x88, 40, 1));   // HEAD OF QUEUE read
  g.loop.settle();
  CHECK(g.issued(op::write, 10));
  CHECK_FALSE(g.issued(op::write, 20));  // B waits for A
  CHECK_FALSE(g.issued(op::read, 30));   // C waits for B
  CHECK(g.issued(op::read, 40));         // D does not wait
  CHECK(tur->completions == 0);          // nor does a command without I/O pass B
  CHECK(g.gate->held().size() == 2);

  g.let_through();  // A and D done: B goes, alone
  require_good(*a);
  require_good(*d);
  CHECK(b->completions == 0);
  CHECK(g.issued(op::write, 20));
  CHECK(g.gate->held().size() == 1);
  CHECK(c->completions == 0);
  CHECK(tur->completions == 0);

  g.let_through();  // B done: C and the TEST UNIT READY go
  require_good(*b);
  CHECK(g.issued(op::read, 30));
  g.loop.settle();
  require_good(*tur);
  g.let_through();
  require_good(*c);
  // An ORDERED task with nothing older runs at once.
  auto e = g.send(task_attribute::ordered, cdb16(0x88, 50, 1));
  g.loop.settle();
  CHECK(g.issued(op::read, 50));
  g.let_through();
  require_good(*e);
}

TEST_CASE(
    "scsi task attributes: two ORDERED tasks run one after the other, HEAD OF QUEUE between them",
    "[target][scsi][task_attributes]") {
  gated_unit g;
  g.gate->close();
  const auto x = pattern(block_size, 2);
  const auto y = pattern(block_size, 3);
  auto first = g.send(task_attribute::ordered, cdb16(0x8a, 7, 1), x);
  auto second = g.send(task_attribute::ordered, cdb16(0x8a, 7, 1), y);
  g.loop.settle();
  CHECK(g.gate->held().size() == 1);
  auto urgent = g.send(task_attribute::head_of_queue, cdb16(0x88, 100, 1));
  g.loop.settle();
  CHECK(g.gate->held().size() == 2);
  g.let_through();
  require_good(*first);
  require_good(*urgent);
  CHECK(g.gate->held().size() == 1);
  g.let_through();
  require_good(*second);
  auto check = g.send(task_attribute::simple, cdb16(0x88, 7, 1));
  g.gate->open();
  finish(g.loop, *check);
  CHECK(check->data_bytes() == y);  // the writes landed in order
}

// Many tasks with random attributes in flight at once over a device that
// completes a seeded fraction of requests late (out of order), checked
// against what SAM-5 allows (below).
TEST_CASE("scsi task attributes: many tasks out of order keep SAM-5's order",
          "[target][scsi][task_attributes]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  test_loop loop;
  auto m = memory_device::create(loop.context.get_executor(), {block_size, 1024});
  REQUIRE(m);
  fault_device faults(**m, loop.clock, fault_options{seed, false});
  faults.set_delay(std::chrono::microseconds(500), 0.5);
  unit_identity id;
  id.serial = "ARRAY1-VOL0087";
  logical_unit unit(faults, id);
  std::mt19937_64 random(seed);

  struct sent {
    std::unique_ptr<command> c;
    task_attribute attribute;
    std::uint64_t completed_at = 0;  // the order of completion, from 1
  };
  std::vector<sent> tasks;
  std::uint64_t completions = 0;
  const auto block = pattern(block_size, 4);
  for (int i = 0; i < 200; ++i) {
    const unsigned r = random() % 10;
    const task_attribute a = r < 6   ? task_attribute::simple
                             : r < 9 ? task_attribute::ordered
                                     : task_attribute::head_of_queue;
    auto c = std::make_unique<command>();
    c->t.cdb = random() % 2 ? cdb16(0x8a, random() % 1024, 1) : cdb16(0x88, random() % 1024, 1);
    if (c->t.cdb[0] == 0x8a) c->set_data_out(block);
    c->t.attribute = a;
    tasks.push_back({std::move(c), a});
  }
  // The harness's command counts completions; watch them from the loop.
  for (auto& s : tasks) unit.execute(s.c->t);
  while (completions < tasks.size()) {
    REQUIRE(loop.step());
    for (auto& s : tasks) {
      if (s.completed_at == 0 && s.c->completions > 0) s.completed_at = ++completions;
    }
  }
  // An ORDERED task completes after every older task; every newer SIMPLE or
  // ORDERED task completes after it. (Completion order, as seen from here,
  // is what an initiator sees.)
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].attribute != task_attribute::ordered) continue;
    INFO("ORDERED task " << i);
    for (std::size_t j = 0; j < i; ++j) {
      if (tasks[j].attribute == task_attribute::head_of_queue)
        continue;  // may have run before anything older
      REQUIRE(tasks[j].completed_at < tasks[i].completed_at);
    }
    for (std::size_t j = i + 1; j < tasks.size(); ++j) {
      if (tasks[j].attribute == task_attribute::head_of_queue) continue;
      REQUIRE(tasks[j].completed_at > tasks[i].completed_at);
    }
  }
  loop.settle();
  CHECK(unit.commands_in_flight() == 0);
}

}  // namespace strata::scsi
