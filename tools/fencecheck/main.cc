// strata-fence-check: the array's fence on a real shared drive, proven
// against a real target through a real kernel initiator. Two block devices
// that are two paths to one logical unit, each its own I_T nexus (two
// iSCSI sessions under two initiator names), stand for the two
// controllers; the code is stratad's own: raid/device/reservations.h's
// Linux ioctls, the file device's io_uring path with its fence, and the
// bottom gate that holds a write the drive refused (controller/shelf.h).
//
//   strata-fence-check OWNER_DEVICE TAKER_DEVICE [LBA]
//
// The owner registers its key and reserves (Write Exclusive, Registrants
// Only); the taker registers; both write. The taker preempts the owner
// (PREEMPT AND ABORT), as a takeover does before it writes its epoch; the
// owner's next write must be refused by the drive (RESERVATION CONFLICT,
// EBADE), held at its gate and never land, while the taker's land and the
// owner still reads. Registered again (a controller that stepped down), the
// owner writes again. Prints "ok: ..." or "FAIL: ..." per check; exit
// status 0 only if every check passed. Used by
// tests/controller/guest_reservations_test.sh, inside the test guest.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/file_device.h"
#include "raid/device/gate_device.h"
#include "raid/device/io_ring.h"
#include "raid/device/reservations.h"

using namespace strata;
using namespace strata::device;

namespace {

constexpr std::uint32_t block_bytes = 4096;
constexpr std::uint64_t owner_key = 0x5354524154410061ull;  // "STRATA", 0, 'a'
constexpr std::uint64_t taker_key = 0x5354524154410062ull;

int failures = 0;
void check(bool ok, const std::string& what, const std::string& detail = {}) {
  std::printf("%s: %s%s\n", ok ? "ok" : "FAIL", what.c_str(),
              detail.empty() ? "" : (" (" + detail + ")").c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

struct block_io {
  request req;
  aligned_buffer buffer{block_bytes, block_bytes};
  iovec segment{};
  bool done = false;
  block_io(op operation, std::uint64_t lba, char fill) {
    std::memset(buffer.data(), fill, block_bytes);
    segment = {buffer.data(), block_bytes};
    req.operation = operation;
    req.lba = lba;
    req.block_count = 1;
    req.buffers = {&segment, 1};
    req.bind<&block_io::on_done>(this);
  }
  void on_done(request&) noexcept { done = true; }
  char first() const { return static_cast<char>(buffer.data()[0]); }
};

struct world {
  boost::asio::io_context context;
  std::unique_ptr<io_ring> ring;
  // Runs the loop until `done` or `seconds` pass; whether `done` held.
  bool run_until(const std::function<bool()>& done, double seconds = 10) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done() && std::chrono::steady_clock::now() < until) {
      context.restart();
      context.run_for(std::chrono::milliseconds(20));
    }
    return done();
  }
  std::error_code io(block_device& device, op operation, std::uint64_t lba, char fill,
                     char* seen = nullptr) {
    block_io x(operation, lba, fill);
    device.submit(x.req);
    if (!run_until([&] { return x.done; })) return errc::timed_out;
    if (seen != nullptr) *seen = x.first();
    return x.req.result;
  }
};

std::string text(std::error_code e) {
  return e ? e.message() : "success";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OWNER_DEVICE TAKER_DEVICE [LBA]\n", argv[0]);
    return 2;
  }
  const std::string owner_path = argv[1], taker_path = argv[2];
  const std::uint64_t lba = argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 2048;
  world w;
  auto ring = io_ring::create(w.context);
  if (!ring) {
    std::fprintf(stderr, "io_uring: %s\n", ring.error().message.c_str());
    return 2;
  }
  w.ring = std::move(*ring);
  file_options options;
  options.logical_block_size_bytes = block_bytes;
  auto owner = file_device::open(*w.ring, owner_path, options);
  auto taker = file_device::open(*w.ring, taker_path, options);
  auto owner_pr = block_reservations(owner_path);
  auto taker_pr = block_reservations(taker_path);
  if (!owner || !taker || !owner_pr || !taker_pr) {
    for (const auto* e :
         {owner ? nullptr : &owner.error(), taker ? nullptr : &taker.error(),
          owner_pr ? nullptr : &owner_pr.error(), taker_pr ? nullptr : &taker_pr.error()}) {
      if (e != nullptr) std::fprintf(stderr, "%s\n", e->message.c_str());
    }
    return 2;
  }
  std::printf("owner %s (%s direct I/O), taker %s, LBA %llu (4 KiB blocks)\n", owner_path.c_str(),
              (*owner)->uses_direct_io() ? "with" : "without", taker_path.c_str(),
              static_cast<unsigned long long>(lba));
  // The owner's stack, as the shelf builds it: the bottom gate over the
  // file, the file's fence handing a refused request to the gate.
  int holds = 0;
  gate_device gate(**owner, {}, [&] { ++holds; });
  file_device::fence_checks checks;
  checks.refused = [&](request& r) { gate.refused(r); };
  (*owner)->fence(checks);

  std::error_code e = (*owner_pr)->register_key(owner_key);
  check(!e, "the owner registers its key", text(e));
  e = (*owner_pr)->reserve(owner_key);
  check(!e, "the owner reserves (Write Exclusive, Registrants Only)", text(e));
  e = (*taker_pr)->register_key(taker_key);
  check(!e, "the taker registers its key", text(e));
  e = (*taker_pr)->reserve(taker_key);
  check(e == errc::reservation_conflict,
        "the taker's reserve is refused while the owner holds the reservation", text(e));
  e = w.io(gate, op::write, lba, 'A');
  check(!e, "the owner writes", text(e));
  e = w.io(**taker, op::write, lba + 1, 'B');
  check(!e, "the taker, registered, writes too", text(e));

  e = (*taker_pr)->preempt(taker_key, owner_key);
  check(!e,
        "the taker preempts the owner's key (PREEMPT AND ABORT; PREEMPT where the target has no "
        "abort, as tgt)",
        text(e));
  e = (*taker_pr)->preempt(taker_key, owner_key);
  check(!e, "a second preempt of the gone key is taken for done", text(e));

  block_io stale(op::write, lba, 'S');
  gate.submit(stale.req);
  const bool held = w.run_until([&] { return holds == 1 && gate.held() == 1; });
  check(held && !stale.done,
        "the preempted owner's write is refused by the drive and held at its gate",
        "holds " + std::to_string(holds) + ", held " + std::to_string(gate.held()));
  checks.refused = {};
  (*owner)->fence(checks);
  e = w.io(**owner, op::write, lba + 2, 'S');
  check(e == errc::reservation_conflict,
        "without a gate to hold it, the refused write fails with reservation_conflict", text(e));

  e = w.io(**taker, op::write, lba, 'T');
  check(!e, "the taker's write lands", text(e));
  char seen = 0;
  e = w.io(**taker, op::read, lba, 0, &seen);
  check(!e && seen == 'T', "the taker reads its own write back",
        text(e) + ", first byte '" + std::string(1, seen) + "'");
  e = w.io(**taker, op::read, lba + 2, 0, &seen);
  check(!e && seen != 'S', "the refused write never landed", text(e));
  e = w.io(**owner, op::read, lba, 0, &seen);
  check(!e && seen == 'T', "the preempted owner still reads (Registrants Only fences writes)",
        text(e) + ", first byte '" + std::string(1, seen) + "'");

  // Stepped down: what it held fails for good; registered again, it writes.
  gate.shut(make_error_code(errc::canceled));
  check(w.run_until([&] { return stale.done; }) && stale.req.result == errc::canceled,
        "stepped down, the held write fails and is never written", text(stale.req.result));
  e = (*owner_pr)->register_key(owner_key);
  check(!e, "the owner registers again", text(e));
  e = w.io(**owner, op::write, lba + 3, 'R');
  check(!e, "registered again, the owner writes", text(e));
  e = w.io(**taker, op::read, lba, 0, &seen);
  check(!e && seen == 'T', "the taker's write is still there", text(e));
  std::printf("%s: %d failed\n", failures == 0 ? "PASS" : "FAIL", failures);
  return failures == 0 ? 0 : 1;
}
