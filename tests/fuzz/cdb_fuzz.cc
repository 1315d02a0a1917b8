// libFuzzer target for the SCSI layer's CDB parsing and command execution:
// a scsi::lun_map in front of two scsi::logical_units over small memory
// volumes, on a loop of its own. Each input is a script of commands from
// several I_T nexuses, some issued while others are still in flight, so
// that their interactions are fuzzed too (data_in reuse, bounce buffers,
// the piece engine, the commands' state pool, the range interlock,
// reservations and unit attentions).
//
// Input, repeated until it runs out (at most max_commands); fields past
// the end read as zeros:
//   byte    control
//             bits 0-1  LUN: 0 -> LUN 0 (4096-byte blocks, thin, with a
//                       state store for persistent reservations),
//                       1 -> LUN 1 (512-byte blocks, fully provisioned),
//                       2 -> LUN 9 (absent), 3 -> two more bytes name it
//             bits 2-3  before issuing it: 0 nothing, 1 run one handler,
//                       2 run up to 8 handlers, 3 run until idle
//             bit 4     reuse the task (and its data_in) of a completed command
//             bit 5     data_out starts 1 byte into its buffer (not aligned)
//             bits 6-7  nexus: initiator port A or B through target port 1,
//                       A through port 2, or the empty nexus
//   byte    bits 0-4: CDB length n (at most 16), then n CDB bytes; the
//           rest of the 16 are 0. Bits 5-7: what happens to the unit
//           first: 1 the nexus is announced, 2 it is lost, 3 LOGICAL UNIT
//           RESET from it, 4 capacity changed, 5 ALUA state changed; and 6:
//           the command is issued from outside the loop, as by a transport
//           on another loop (the map posts it to the unit), where otherwise
//           it is issued in a handler on the loop (the unit runs it inline)
//   4 bytes expected transfer length, big-endian
//   3 bytes data-out length in bytes (at most max_data_out_bytes)
//   2 bytes pattern length p, then p bytes: data-out is the pattern
//           repeated (zeros when p is 0), so that large writes fit a small input
//
// Properties, from task.h, logical_unit.h and reservations.h: on_complete
// is called once per command, never inside execute(); data_in_bytes fits
// data_in; the status is GOOD, CHECK CONDITION, BUSY or RESERVATION
// CONFLICT; sense data only with CHECK CONDITION, with a sense key SPC-4
// defines; data_in_bytes only with GOOD, a read's MEDIUM ERROR, or READ
// DEFECT DATA's RECOVERED ERROR;
// once the loop is idle, no command is left in flight in either unit or
// the map; and the persistent reservation state saved in the store is the
// unit's, which a new unit over the same store restores.
// STRATA_FUZZ_TRACE=1 prints each command's outcome.
//
// Threads: libFuzzer's one thread, which also runs the loop. Every input
// builds its own volumes, units and map, so inputs do not depend on each
// other and a crash reproduces from its input alone.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <span>

#include "raid/device/aligned_buffer.h"
#include "raid/device/memory_device.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/lun_map.h"
#include "target/scsi/task.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace strata;

// Enough to make commands overlap and to reuse the units' command state;
// few enough that an input runs in milliseconds.
constexpr std::size_t max_commands = 24;
// The unit refuses transfers above 8 MiB before it looks at the data; a
// little more than that reaches every data-out length check.
constexpr std::uint32_t max_data_out_bytes = scsi::logical_unit::max_transfer_bytes + 4096;
// 4 MiB volumes: large enough for multi-piece transfers (1 MiB pieces),
// small enough that a sparse memory volume stays cheap.
constexpr std::uint64_t volume_bytes = 4u << 20;

// Set while the map's execute() runs: a completion then breaks the contract.
bool inside_execute = false;
// STRATA_FUZZ_TRACE: print each command's outcome.
const bool trace = std::getenv("STRATA_FUZZ_TRACE") != nullptr;

struct command {
  scsi::task t;
  device::aligned_buffer out;
  int completions = 0;
};

bool defined_sense_key(scsi::sense_key k) {
  switch (k) {
    case scsi::sense_key::recovered_error:
    case scsi::sense_key::not_ready:
    case scsi::sense_key::medium_error:
    case scsi::sense_key::hardware_error:
    case scsi::sense_key::illegal_request:
    case scsi::sense_key::unit_attention:
    case scsi::sense_key::data_protect:
    case scsi::sense_key::blank_check:
    case scsi::sense_key::vendor_specific:
    case scsi::sense_key::copy_aborted:
    case scsi::sense_key::aborted_command:
    case scsi::sense_key::volume_overflow:
    case scsi::sense_key::miscompare:
      return true;
    case scsi::sense_key::no_sense:  // CHECK CONDITION with nothing to say
      return false;
  }
  return false;
}

void on_complete(scsi::task& t) noexcept {
  auto& c = *static_cast<command*>(t.context);
  if (trace) {  // first: a violation below is then explained
    std::fprintf(stderr, "opcode %02x LUN %llu: status %02x sense %x/%02x/%02x data_in %u bytes\n",
                 t.cdb[0], static_cast<unsigned long long>(t.lun), static_cast<unsigned>(t.result),
                 static_cast<unsigned>(t.sense_data.key), t.sense_data.asc, t.sense_data.ascq,
                 t.data_in_bytes);
  }
  FUZZ_REQUIRE(!inside_execute, "a task never completes inside execute()");
  FUZZ_REQUIRE(++c.completions == 1, "on_complete is called once per command");
  FUZZ_REQUIRE(t.data_in_bytes <= t.data_in.size(), "data_in_bytes lies within data_in");
  FUZZ_REQUIRE(t.result == scsi::status::good || t.result == scsi::status::check_condition ||
                   t.result == scsi::status::busy || t.result == scsi::status::reservation_conflict,
               "the status is GOOD, CHECK CONDITION, BUSY or RESERVATION CONFLICT");
  if (t.result == scsi::status::check_condition) {
    FUZZ_REQUIRE(defined_sense_key(t.sense_data.key),
                 "CHECK CONDITION carries a defined sense key");
    // A read failed part-way returns the good blocks before the bad one;
    // READ DEFECT DATA returns a list header with RECOVERED ERROR 1C/00.
    FUZZ_REQUIRE(t.data_in_bytes == 0 || t.sense_data.key == scsi::sense_key::medium_error ||
                     t.sense_data.key == scsi::sense_key::recovered_error,
                 "only MEDIUM ERROR and RECOVERED ERROR return data with CHECK CONDITION");
  } else {
    const scsi::sense none{};
    FUZZ_REQUIRE(t.sense_data.key == none.key && t.sense_data.asc == none.asc &&
                     t.sense_data.ascq == none.ascq && !t.sense_data.information &&
                     !t.sense_data.key_specific,
                 "sense data only with CHECK CONDITION");
  }
  if (t.result == scsi::status::busy || t.result == scsi::status::reservation_conflict)
    FUZZ_REQUIRE(t.data_in_bytes == 0, "BUSY and RESERVATION CONFLICT return no data");
}

std::unique_ptr<device::memory_device> volume(boost::asio::io_context& loop,
                                              std::uint32_t block_bytes) {
  auto d =
      device::memory_device::create(loop.get_executor(), {block_bytes, volume_bytes / block_bytes});
  FUZZ_REQUIRE(d.has_value(), "a memory volume can be created");
  return std::move(*d);
}

// The I_T nexuses commands come through (the names as iSCSI makes them).
const scsi::i_t_nexus nexuses[] = {
    {"iqn.2026-11.io.strata:a,i,0x800000000001", 1},
    {"iqn.2026-11.io.strata:b,i,0x800000000002", 1},
    {"iqn.2026-11.io.strata:a,i,0x800000000001", 2},
    {},
};

// What a transport or the array may do to a unit between commands.
void unit_event(scsi::logical_unit& unit, unsigned event, const scsi::i_t_nexus& n) {
  switch (event) {
    case 1:
      return unit.nexus_created(n);
    case 2:
      return unit.nexus_lost(n);
    case 3:
      return unit.reset(n);
    case 4:
      return unit.capacity_changed();
    case 5:
      return unit.set_port_groups({{1, scsi::alua_state::active_optimized, {1}},
                                   {2, scsi::alua_state::active_non_optimized, {2}}});
    default:
      return;
  }
}

// Runs map.execute(t) as a transport does, in a handler on the loop: the
// map then hands t to the unit inline (asio::dispatch), so that the unit's
// execute() is inside `inside_execute` too.
void execute_on_loop(boost::asio::io_context& loop, scsi::lun_map& map, scsi::task& t) {
  bool ran = false;
  boost::asio::post(loop, [&] {
    inside_execute = true;
    map.execute(t);
    inside_execute = false;
    ran = true;
  });
  while (!ran) {
    loop.restart();
    loop.run_one();  // handlers ready before it run first, as on a busy loop
  }
}

// Lets the commands in flight progress before the next is issued: not at
// all (0), by one handler (1), up to 8 (2), or until the loop is idle (3).
void run_handlers(boost::asio::io_context& loop, unsigned how) {
  loop.restart();
  if (how == 3) {
    loop.run();
    return;
  }
  const int handlers = how == 0 ? 0 : how == 1 ? 1 : 8;
  for (int i = 0; i < handlers; ++i) {
    if (loop.poll_one() == 0) return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in({data, size});
  boost::asio::io_context loop;
  auto thin_volume = volume(loop, 4096);
  auto thick_volume = volume(loop, 512);
  scsi::unit_identity thin_id;
  thin_id.serial = "FUZZ0";
  scsi::unit_identity thick_id;
  thick_id.serial = "FUZZ1";
  thick_id.thin_provisioned = false;
  thick_id.non_rotating = false;
  scsi::memory_unit_state_store store;
  scsi::logical_unit thin(*thin_volume, thin_id, &store);
  scsi::logical_unit thick(*thick_volume, thick_id);
  scsi::lun_map map(loop.get_executor());
  FUZZ_REQUIRE(!map.add(0, thin) && !map.add(1, thick), "the map takes two units");
  // As a transport does at login: every nexus but the empty one is announced.
  for (const auto& n : std::span(nexuses).first(3)) {
    thin.nexus_created(n);
    thick.nexus_created(n);
  }

  std::deque<command> commands;  // stable addresses: tasks are in flight by reference
  for (std::size_t n = 0; n < max_commands && !in.empty(); ++n) {
    const std::uint8_t control = in.u8();
    constexpr std::uint64_t lun_choices[] = {0, 1, 9};
    // Two bytes name any LUN, also one of 16384 and up, which no unit can have.
    const std::uint64_t lun = (control & 0x03) == 3 ? in.be(2) : lun_choices[control & 0x03];
    run_handlers(loop, (control >> 2) & 0x03);
    command* c = nullptr;
    if ((control & 0x10) != 0) {
      for (command& done : commands) {
        if (done.completions == 1) {
          c = &done;
          break;
        }
      }
    }
    if (c == nullptr) c = &commands.emplace_back();
    c->completions = 0;
    c->t.cdb.fill(0);
    const std::uint8_t cdb_control = in.u8();
    const auto cdb = in.take(std::min(cdb_control & 0x1f, 16));
    std::memcpy(c->t.cdb.data(), cdb.data(), cdb.size());
    c->t.lun = lun;
    c->t.nexus = nexuses[control >> 6];
    if (auto* unit = dynamic_cast<scsi::logical_unit*>(map.find(lun)))
      unit_event(*unit, cdb_control >> 5, c->t.nexus);
    c->t.expected_transfer_bytes = static_cast<std::uint32_t>(in.be(4));
    const auto out_bytes =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(in.be(3), max_data_out_bytes));
    const auto pattern = in.take(in.be(2));
    const std::size_t skew_bytes = (control & 0x20) != 0 ? 1 : 0;
    c->out = device::aligned_buffer(out_bytes + skew_bytes);
    auto* out = reinterpret_cast<std::uint8_t*>(c->out.data()) + skew_bytes;
    if (!pattern.empty()) {
      for (std::size_t at = 0; at < out_bytes; at += pattern.size())
        std::memcpy(out + at, pattern.data(),
                    std::min<std::size_t>(pattern.size(), out_bytes - at));
    }
    c->t.data_out = c->out.bytes().subspan(skew_bytes, out_bytes);
    c->t.on_complete = &on_complete;
    c->t.context = c;
    if (cdb_control >> 5 == 6) {
      // As a transport on another loop: the map posts the task to the unit.
      inside_execute = true;
      map.execute(c->t);
      inside_execute = false;
    } else {
      execute_on_loop(loop, map, c->t);
    }
  }
  loop.restart();
  loop.run();
  for (const command& c : commands) FUZZ_REQUIRE(c.completions == 1, "every command completes");
  FUZZ_REQUIRE(thin.commands_in_flight() == 0 && thick.commands_in_flight() == 0,
               "no command left in flight in a unit once the loop is idle");
  FUZZ_REQUIRE(map.answers_in_flight() == 0, "no answer left in flight in the map");

  // What PERSISTENT RESERVE OUT saved is the unit's state, and a unit that
  // takes the volume over restores it.
  const scsi::reservation_state& live = thin.persistent_reservations().state();
  if (!store.bytes().empty()) {
    const auto saved = scsi::decode_reservation_state(store.bytes());
    FUZZ_REQUIRE(saved.has_value(), "the saved reservation state decodes");
    FUZZ_REQUIRE(*saved == live, "the saved reservation state is the unit's");
  }
  FUZZ_REQUIRE(scsi::decode_reservation_state(scsi::encode_reservation_state(live)) == live,
               "the reservation state encodes and decodes to itself");
  scsi::logical_unit successor(*thin_volume, thin_id, &store);
  FUZZ_REQUIRE(successor.restore_state(scsi::state_origin::failover).has_value(),
               "a successor restores the state");
  FUZZ_REQUIRE(successor.persistent_reservations().state() == live,
               "a successor has the reservations the unit had");
  loop.restart();
  loop.run();  // what the restore may have posted (a save)
  FUZZ_REQUIRE(successor.commands_in_flight() == 0, "a restore leaves nothing in flight");
  return 0;
}
