// strata-nvme-perf: a small NVMe/TCP initiator that measures, in the spirit
// of SPDK's perf: it connects to a subsystem (ICReq, the admin queue's
// Connect and enable, Number of Queues, an I/O queue per --queues), keeps
// --depth commands in flight on each queue, and reports IOPS, bandwidth
// and latency percentiles. This host's kernel has no nvme-tcp, and the
// guest's runs under emulation: this is the initiator that runs at native
// speed here, against Strata's target and against the kernel's nvmet-tcp
// (in the guest, through a port forward) alike.
//
//   strata-nvme-perf --address ADDR --port PORT --nqn NQN [--nsid N]
//                    [--queues Q] [--depth D] [--seconds S] [--bs BYTES]
//                    [--rw randread|randwrite|randrw] [--read-percent P]
//                    [--region-mib M] [--digests] [--verify] [--seed N]
//
// --verify proves the data path instead of measuring it: every block of
// the region is written with a pattern naming its LBA and the seed, over
// all queues at full depth, then read back in random order and checked.
// Writes of up to the in-capsule limit (IOCCSZ) go in the capsule, longer
// ones by R2T and H2CData. One thread per queue, blocking sockets:
// simple, and one core per queue at most, as a host's queue has.
//
// Output, one line: "nvme-perf rw=... qd=... queues=... iops=... mib_s=...
// lat_us_p50=... p99=... p999=... errors=...". Exit status 0 unless a
// command failed, a block did not verify, or the connection broke.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "target/crc32c.h"
#include "target/nvme/little_endian.h"
#include "tools/cli.h"

namespace {

using namespace strata;
using nvme::get16;
using nvme::get32;
using nvme::put16;
using nvme::put32;
using nvme::put64;
using clock_type = std::chrono::steady_clock;

struct options {
  std::string address = "127.0.0.1";
  int port = 4420;
  std::string nqn;
  std::string host_nqn = "nqn.2014-08.io.strata:nvme-perf";
  std::uint32_t nsid = 1;
  unsigned queues = 1;
  unsigned depth = 32;
  double seconds = 5;
  std::uint32_t bs = 4096;
  int read_percent = 100;
  std::uint64_t region_mib = 0;  // 0: the whole namespace
  bool digests = false;
  bool verify = false;
  std::uint64_t seed = 1;
};

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "strata-nvme-perf: %s\n", why.c_str());
  std::exit(1);
}

// One TCP connection: one queue of the controller.
class queue_connection {
 public:
  queue_connection(const options& o, bool digests) : digests_(digests) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(o.port));
    if (::inet_pton(AF_INET, o.address.c_str(), &a.sin_addr) != 1)
      fail("bad --address " + o.address);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      fail("cannot connect to " + o.address + ":" + std::to_string(o.port));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // ICReq: PFV 0, HPDA 0, digests, MAXR2T 0.
    std::array<std::uint8_t, 128> ic{};
    ic[0] = 0x00;
    ic[2] = 128;
    put32(ic.data() + 4, 128);
    ic[11] = digests ? 0x03 : 0x00;
    send_all(ic.data(), ic.size());
    std::array<std::uint8_t, 128> resp{};
    recv_all(resp.data(), resp.size());
    if (resp[0] != 0x01) fail("no ICResp");
    cpda_ = resp[10];
    max_h2c_ = get32(resp, 12);
  }
  ~queue_connection() { ::close(fd_); }

  // What is sent waits in out_ until this side would block on a receive
  // (or out_ is large): the commands a burst of completions frees go in
  // one send, as a kernel host's do. Receives take what the socket holds,
  // up to in_'s size, and PDUs are read from there.
  void send_all(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
    if (out_.size() >= 256 * 1024) flush();
  }
  void flush() {
    const std::uint8_t* b = out_.data();
    std::size_t n = out_.size();
    while (n > 0) {
      const ssize_t k = ::send(fd_, b, n, MSG_NOSIGNAL);
      if (k <= 0) fail("the connection broke while sending");
      b += k;
      n -= static_cast<std::size_t>(k);
    }
    out_.clear();
  }
  void recv_all(void* p, std::size_t n) {
    auto* b = static_cast<std::uint8_t*>(p);
    while (n > 0) {
      if (in_begin_ < in_end_) {
        const std::size_t k = std::min(n, in_end_ - in_begin_);
        std::memcpy(b, in_.data() + in_begin_, k);
        in_begin_ += k;
        b += k;
        n -= k;
        continue;
      }
      flush();  // before waiting: the commands queued so far go first
      const ssize_t k = ::recv(fd_, in_.data(), in_.size(), 0);
      if (k <= 0) fail("the connection broke while receiving");
      in_begin_ = 0;
      in_end_ = static_cast<std::size_t>(k);
    }
  }

  // A command capsule, with `data` in the capsule if given.
  void send_capsule(const std::array<std::uint8_t, 64>& sqe,
                    std::span<const std::uint8_t> data = {}) {
    std::array<std::uint8_t, 72 + 4 + 128> h{};
    const std::size_t header_end = 72 + (digests_ ? 4 : 0);
    const std::size_t alignment = (cpda_ + 1u) * 4u;
    const std::size_t pdo = data.empty() ? 0 : (header_end + alignment - 1) / alignment * alignment;
    h[0] = 0x04;
    h[1] =
        static_cast<std::uint8_t>((digests_ ? 0x01 : 0) | (digests_ && !data.empty() ? 0x02 : 0));
    h[2] = 72;
    h[3] = static_cast<std::uint8_t>(pdo);
    const std::size_t plen = data.empty() ? header_end : pdo + data.size() + (digests_ ? 4 : 0);
    put32(h.data() + 4, static_cast<std::uint32_t>(plen));
    std::memcpy(h.data() + 8, sqe.data(), 64);
    if (digests_) put_digest(crc32c({h.data(), 72}), h.data() + 72);
    send_all(h.data(), data.empty() ? header_end : pdo);
    if (!data.empty()) {
      send_all(data.data(), data.size());
      if (digests_) {
        std::uint8_t d[4];
        put_digest(crc32c(data), d);
        send_all(d, 4);
      }
    }
  }

  // H2CData PDUs for an R2T: `bytes` of `data` from `offset`.
  void send_h2c(std::uint16_t cid, std::uint16_t ttag, std::span<const std::uint8_t> data,
                std::uint32_t offset, std::uint32_t bytes) {
    for (std::uint32_t done = 0; done < bytes;) {
      const std::uint32_t n = std::min(bytes - done, max_h2c_);
      std::array<std::uint8_t, 24 + 4 + 128> h{};
      const std::size_t header_end = 24 + (digests_ ? 4 : 0);
      const std::size_t alignment = (cpda_ + 1u) * 4u;
      const std::size_t pdo = (header_end + alignment - 1) / alignment * alignment;
      h[0] = 0x06;
      h[1] = static_cast<std::uint8_t>((digests_ ? 0x03 : 0) | (done + n == bytes ? 0x04 : 0));
      h[2] = 24;
      h[3] = static_cast<std::uint8_t>(pdo);
      put32(h.data() + 4, static_cast<std::uint32_t>(pdo + n + (digests_ ? 4 : 0)));
      put16(h.data() + 8, cid);
      put16(h.data() + 10, ttag);
      put32(h.data() + 12, offset + done);
      put32(h.data() + 16, n);
      if (digests_) put_digest(crc32c({h.data(), 24}), h.data() + 24);
      send_all(h.data(), pdo);
      send_all(data.data() + offset + done, n);
      if (digests_) {
        std::uint8_t d[4];
        put_digest(crc32c(data.subspan(offset + done, n)), d);
        send_all(d, 4);
      }
      done += n;
    }
  }

  // One PDU from the controller: its header (HLEN bytes), and its data
  // read into `data_for(cid, offset, bytes)` for C2HData.
  struct pdu {
    std::uint8_t type = 0;
    std::array<std::uint8_t, 128> header{};
  };
  template <typename DataFor>
  pdu receive(DataFor data_for) {
    pdu p;
    recv_all(p.header.data(), 8);
    p.type = p.header[0];
    const std::uint8_t hlen = p.header[2];
    const std::uint8_t pdo = p.header[3];
    const std::uint32_t plen = get32(p.header, 4);
    const bool hd = (p.header[1] & 0x01) != 0, dd = (p.header[1] & 0x02) != 0;
    recv_all(p.header.data() + 8, hlen - 8u);
    std::uint8_t digest[4];
    if (hd) {
      recv_all(digest, 4);
      if (get_digest(digest) != crc32c({p.header.data(), hlen}))
        fail("a header digest from the controller does not match");
    }
    if (p.type == 0x03)
      fail("the controller ended the connection (C2HTermReq, status " +
           std::to_string(get16(p.header, 8)) + ")");
    if (p.type == 0x07) {  // C2HData
      const std::uint32_t header_end = hlen + (hd ? 4u : 0u);
      std::uint8_t pad[256];
      if (pdo > header_end) recv_all(pad, pdo - header_end);
      const std::uint32_t bytes = get32(p.header, 16);
      std::uint8_t* into = data_for(get16(p.header, 8), get32(p.header, 12), bytes);
      recv_all(into, bytes);
      if (dd) {
        recv_all(digest, 4);
        if (get_digest(digest) != crc32c({into, bytes}))
          fail("a data digest from the controller does not match");
      }
      (void)plen;
    }
    return p;
  }

  // A command and its completion, one at a time (set-up only).
  std::pair<std::uint16_t, std::uint64_t> command(std::array<std::uint8_t, 64> sqe,
                                                  std::span<const std::uint8_t> data = {},
                                                  std::vector<std::uint8_t>* into = nullptr) {
    put16(sqe.data() + 2, 0x7ffe);
    send_capsule(sqe, data);
    for (;;) {
      pdu p = receive([&](std::uint16_t, std::uint32_t offset, std::uint32_t bytes) {
        if (into == nullptr) fail("unexpected data");
        into->resize(std::max<std::size_t>(into->size(), offset + bytes));
        return into->data() + offset;
      });
      if (p.type == 0x05)
        return {static_cast<std::uint16_t>(get16(p.header, 8 + 14) >> 1), nvme::get64(p.header, 8)};
    }
  }

  bool digests_;
  int fd_ = -1;
  std::vector<std::uint8_t> out_;
  std::vector<std::uint8_t> in_ = std::vector<std::uint8_t>(64 * 1024);
  std::size_t in_begin_ = 0;
  std::size_t in_end_ = 0;
  std::uint8_t cpda_ = 0;
  std::uint32_t max_h2c_ = 4096;
};

std::array<std::uint8_t, 64> sqe_of(std::uint8_t opcode, std::uint32_t nsid = 0) {
  std::array<std::uint8_t, 64> s{};
  s[0] = opcode;
  s[1] = 0x40;  // PSDT 01b: SGLs
  put32(s.data() + 4, nsid);
  return s;
}
void sgl(std::array<std::uint8_t, 64>& s, std::uint32_t bytes, bool in_capsule) {
  put64(s.data() + 24, 0);
  put32(s.data() + 32, bytes);
  s[39] = in_capsule ? 0x01 : 0x5a;
}
void cdw(std::array<std::uint8_t, 64>& s, int n, std::uint32_t v) {
  put32(s.data() + 40 + 4 * (n - 10), v);
}

std::array<std::uint8_t, 64> connect_sqe(std::uint16_t qid, std::uint16_t sqsize) {
  auto s = sqe_of(0x7f);
  s[4] = 0x01;
  put16(s.data() + 42, qid);
  put16(s.data() + 44, sqsize);
  put32(s.data() + 48, qid == 0 ? 30000 : 0);
  sgl(s, 1024, true);
  return s;
}
std::vector<std::uint8_t> connect_data(const options& o, std::uint16_t cntlid) {
  std::vector<std::uint8_t> d(1024, 0);
  for (int i = 0; i < 16; ++i) d[i] = static_cast<std::uint8_t>(0x5a ^ i);
  put16(d.data() + 16, cntlid);
  std::memcpy(d.data() + 256, o.nqn.data(), std::min<std::size_t>(o.nqn.size(), 255));
  std::memcpy(d.data() + 512, o.host_nqn.data(), std::min<std::size_t>(o.host_nqn.size(), 255));
  return d;
}

// What a --verify block holds: its LBA and the seed, through the block.
void pattern(std::uint8_t* p, std::uint32_t bytes, std::uint64_t lba, std::uint64_t seed) {
  for (std::uint32_t at = 0; at + 16 <= bytes; at += 16) {
    put64(p + at, lba);
    put64(p + at + 8, seed ^ (at * 0x9e3779b97f4a7c15ull));
  }
}

struct queue_result {
  std::uint64_t ios = 0;
  std::uint64_t errors = 0;
  std::uint64_t mismatches = 0;
  std::vector<std::uint32_t> latency_ns;
};

// A bad command line exits 1, as every other failure of this tool does.
options parse(int argc, char** argv) {
  options o;
  CLI::App app{
      "An NVMe/TCP initiator in the spirit of SPDK's perf: keeps --depth commands in flight on "
      "each of "
      "--queues I/O queues and prints one line: IOPS, MiB/s, latency percentiles, errors. With "
      "--verify, "
      "writes a pattern over the region and reads it all back instead.",
      "strata-nvme-perf"};
  tools::use_conventions(app);
  app.add_option("--address", o.address, "The target's address")->type_name("ADDR");
  app.add_option("--port", o.port, "The target's NVMe/TCP port")->type_name("PORT");
  app.add_option("--nqn", o.nqn, "The subsystem to connect to")->type_name("NQN")->required();
  app.add_option("--host-nqn", o.host_nqn, "This host's NQN")->type_name("HOSTNQN");
  app.add_option("--nsid", o.nsid, "The namespace to use")->type_name("N");
  app.add_option("--queues", o.queues, "I/O queues, one connection and one thread each")
      ->type_name("Q")
      ->check(CLI::Range(1u, 64u));
  app.add_option("--depth", o.depth, "Commands in flight on each queue")
      ->type_name("D")
      ->check(CLI::Range(1u, 127u));
  app.add_option("--seconds", o.seconds, "Length of the run, in seconds")->type_name("S");
  app.add_option("--bs", o.bs,
                 "Size of each I/O, in bytes (a multiple of the namespace's block size)")
      ->type_name("BYTES");
  auto* rw =
      app.add_option("--rw", "The mix: randread (100% reads), randwrite (0%) or randrw (50%)")
          ->type_name("MIX")
          ->check(CLI::IsMember({"randread", "randwrite", "randrw"}));
  auto* read_percent =
      app.add_option("--read-percent", o.read_percent, "Reads among the I/Os, in percent")
          ->type_name("P");
  app.add_option("--region-mib", o.region_mib,
                 "Region of the namespace used, from its start, in MiB (0: all of it)")
      ->type_name("M");
  app.add_flag("--digests", o.digests, "Header and data digests (CRC32C) on every connection");
  app.add_flag(
      "--verify", o.verify,
      "Write every block of the region with a pattern, then read it all back and check it");
  app.add_option("--seed", o.seed, "Seed of the random offsets and of --verify's pattern")
      ->type_name("N");
  tools::parse_or_exit(app, argc, argv, 1);
  // --rw sets the read percentage as --read-percent does: the later of the two wins.
  const auto& order = app.parse_order();
  const auto last = std::find_if(order.rbegin(), order.rend(), [&](const CLI::Option* opt) {
    return opt == rw || opt == read_percent;
  });
  if (last != order.rend() && *last == rw) {
    const std::string mix = rw->as<std::string>();
    o.read_percent = mix == "randread" ? 100 : mix == "randwrite" ? 0 : 50;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);

  // The admin queue: Connect, enable, Number of Queues, the namespace's size.
  queue_connection admin(o, o.digests);
  const auto cd = connect_data(o, 0xffff);
  auto [st, result] = admin.command(connect_sqe(0, 31), cd);
  if (st != 0) fail("admin Connect refused, status " + std::to_string(st));
  const auto cntlid = static_cast<std::uint16_t>(result);
  auto prop_set = sqe_of(0x7f);
  prop_set[4] = 0x00;
  put32(prop_set.data() + 44, 0x14);
  put64(prop_set.data() + 48, 1 | 6 << 16 | 4 << 20);
  sgl(prop_set, 0, false);
  admin.command(prop_set);
  for (int i = 0;; ++i) {
    auto prop_get = sqe_of(0x7f);
    prop_get[4] = 0x04;
    put32(prop_get.data() + 44, 0x1c);
    sgl(prop_get, 0, false);
    const auto [s2, csts] = admin.command(prop_get);
    if (s2 == 0 && (csts & 1) != 0) break;
    if (i > 100) fail("the controller never became ready");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto queues_sqe = sqe_of(0x09);
  cdw(queues_sqe, 10, 0x07);
  cdw(queues_sqe, 11, (o.queues - 1) * 0x10001u);
  sgl(queues_sqe, 0, false);
  if (admin.command(queues_sqe).first != 0) fail("Set Features Number of Queues refused");
  std::vector<std::uint8_t> ident;
  auto id_ctrl = sqe_of(0x06);
  cdw(id_ctrl, 10, 1);
  sgl(id_ctrl, 4096, false);
  admin.command(id_ctrl, {}, &ident);
  const std::uint32_t in_capsule_bytes = ident.size() >= 1796 ? get32(ident, 1792) * 16 - 64 : 0;
  auto id_ns = sqe_of(0x06, o.nsid);
  cdw(id_ns, 10, 0);
  sgl(id_ns, 4096, false);
  ident.clear();
  if (admin.command(id_ns, {}, &ident).first != 0 || ident.size() < 4096)
    fail("Identify Namespace failed");
  const std::uint64_t ns_blocks = nvme::get64(ident, 0);
  const std::uint32_t block_bytes = 1u << ident[130];
  if (ns_blocks == 0) fail("namespace " + std::to_string(o.nsid) + " is not there");
  if (o.bs % block_bytes != 0)
    fail("--bs is not a multiple of the namespace's " + std::to_string(block_bytes) +
         "-byte blocks");
  const std::uint32_t io_blocks = o.bs / block_bytes;
  const std::uint64_t region_blocks =
      o.region_mib == 0 ? ns_blocks : std::min(ns_blocks, (o.region_mib << 20) / block_bytes);
  const std::uint64_t slots = region_blocks / io_blocks;  // places an I/O may go
  if (slots == 0) fail("the region is smaller than one I/O");
  if (slots >= 1ull << 40) fail("the region is too large (2^40 I/Os)");

  std::atomic<bool> stop{false};
  std::vector<queue_result> results(o.queues);
  // --verify: write every slot (phase 0), then read them all back (phase 1).
  std::atomic<std::uint64_t> next_slot{0};
  // Phase 1 reads the slots in a scrambled order: a stride prime to their number.
  std::uint64_t stride = 1000003;
  while (std::gcd(stride, slots) != 1) stride += 2;
  const int phases = o.verify ? 2 : 1;
  std::barrier between_phases(static_cast<std::ptrdiff_t>(o.queues),
                              [&]() noexcept { next_slot = 0; });
  auto run_queue = [&](unsigned q) {
    queue_connection c(o, o.digests);
    auto [cs, cr] =
        c.command(connect_sqe(static_cast<std::uint16_t>(q + 1), 127), connect_data(o, cntlid));
    if (cs != 0) fail("I/O queue Connect refused, status " + std::to_string(cs));
    (void)cr;
    for (int phase = 0; phase < phases; ++phase) {
      if (phase > 0) between_phases.arrive_and_wait();
      queue_result& r = results[q];
      std::mt19937_64 rng(o.seed * 1000003 + q + static_cast<std::uint64_t>(phase) * 7919);
      struct slot_state {
        bool busy = false;
        bool read = false;
        std::uint64_t lba = 0;
        clock_type::time_point issued;
        std::vector<std::uint8_t> buf;
      };
      std::vector<slot_state> s(o.depth);
      for (auto& x : s) x.buf.resize(o.bs);
      const auto deadline = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                                    std::chrono::duration<double>(o.seconds));
      unsigned busy = 0;
      auto issue = [&](std::uint16_t cid) -> bool {
        slot_state& x = s[cid];
        std::uint64_t place;
        if (o.verify) {
          place = next_slot.fetch_add(1);
          if (place >= slots) return false;
          if (phase == 1)
            place = place * stride % slots;  // no overflow: slots < 2^40, stride < 2^21
          x.read = phase == 1;
        } else {
          if (stop.load(std::memory_order_relaxed) || clock_type::now() >= deadline) return false;
          place = rng() % slots;
          x.read = static_cast<int>(rng() % 100) < o.read_percent;
        }
        x.lba = place * io_blocks;
        auto e = sqe_of(x.read ? 0x02 : 0x01, o.nsid);
        put16(e.data() + 2, cid);
        cdw(e, 10, static_cast<std::uint32_t>(x.lba));
        cdw(e, 11, static_cast<std::uint32_t>(x.lba >> 32));
        cdw(e, 12, io_blocks - 1);
        x.busy = true;
        ++busy;
        x.issued = clock_type::now();
        if (x.read) {
          sgl(e, o.bs, false);
          c.send_capsule(e);
        } else {
          if (o.verify) pattern(x.buf.data(), o.bs, x.lba, o.seed);
          const bool inline_data = o.bs <= in_capsule_bytes;
          sgl(e, o.bs, inline_data);
          c.send_capsule(e, inline_data ? std::span<const std::uint8_t>(x.buf)
                                        : std::span<const std::uint8_t>{});
        }
        return true;
      };
      for (unsigned i = 0; i < o.depth; ++i) {
        if (!issue(static_cast<std::uint16_t>(i))) break;
      }
      std::vector<std::uint8_t> expected(o.bs);
      while (busy > 0) {
        auto p = c.receive(
            [&](std::uint16_t cid, std::uint32_t offset, std::uint32_t bytes) -> std::uint8_t* {
              if (cid >= s.size() || !s[cid].busy || offset + bytes > o.bs)
                fail("C2HData for no command of ours");
              return s[cid].buf.data() + offset;
            });
        if (p.type == 0x09) {  // R2T
          const std::uint16_t cid = get16(p.header, 8);
          if (cid >= s.size() || !s[cid].busy) fail("R2T for no command of ours");
          c.send_h2c(cid, get16(p.header, 10), s[cid].buf, get32(p.header, 12),
                     get32(p.header, 16));
          continue;
        }
        bool done = false;
        std::uint16_t cid = 0;
        std::uint16_t status_field = 0;
        if (p.type == 0x05) {
          cid = get16(p.header, 8 + 12);
          status_field = static_cast<std::uint16_t>(get16(p.header, 8 + 14) >> 1);
          done = true;
        } else if (p.type == 0x07 &&
                   (p.header[1] & 0x08) != 0) {  // C2HData with SUCCESS: no response follows
          cid = get16(p.header, 8);
          done = true;
        }
        if (!done) continue;
        if (cid >= s.size() || !s[cid].busy) fail("a completion for no command of ours");
        slot_state& x = s[cid];
        x.busy = false;
        --busy;
        ++r.ios;
        r.latency_ns.push_back(static_cast<std::uint32_t>(std::min<std::int64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - x.issued)
                .count(),
            UINT32_MAX)));
        if (status_field != 0) {
          if (r.errors++ < 5)
            std::fprintf(stderr, "strata-nvme-perf: LBA %llu: status %#x\n",
                         static_cast<unsigned long long>(x.lba), status_field);
        } else if (o.verify && x.read) {
          pattern(expected.data(), o.bs, x.lba, o.seed);
          if (std::memcmp(expected.data(), x.buf.data(), o.bs) != 0 && r.mismatches++ < 5) {
            std::fprintf(stderr, "strata-nvme-perf: LBA %llu does not hold what was written\n",
                         static_cast<unsigned long long>(x.lba));
          }
        }
        issue(cid);
      }
    }
  };
  const auto started = clock_type::now();
  std::vector<std::thread> threads;
  for (unsigned q = 0; q < o.queues; ++q) threads.emplace_back(run_queue, q);
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(clock_type::now() - started).count();
  std::vector<std::uint32_t> all;
  std::uint64_t ios = 0, errors = 0, mismatches = 0;
  for (auto& r : results) {
    ios += r.ios;
    errors += r.errors;
    mismatches += r.mismatches;
    all.insert(all.end(), r.latency_ns.begin(), r.latency_ns.end());
  }
  std::sort(all.begin(), all.end());
  const auto pct = [&](double p) {
    return all.empty()
               ? 0.0
               : all[std::min(all.size() - 1, static_cast<std::size_t>(p * all.size()))] / 1000.0;
  };
  const char* rw = o.verify                ? "verify"
                   : o.read_percent == 100 ? "randread"
                   : o.read_percent == 0   ? "randwrite"
                                           : "randrw";
  std::printf(
      "nvme-perf rw=%s bs=%u qd=%u queues=%u seconds=%.2f ios=%llu iops=%.0f mib_s=%.1f "
      "lat_us_p50=%.1f p99=%.1f p999=%.1f errors=%llu mismatches=%llu\n",
      rw, o.bs, o.depth, o.queues, elapsed, static_cast<unsigned long long>(ios), ios / elapsed,
      ios * static_cast<double>(o.bs) / elapsed / (1 << 20), pct(0.5), pct(0.99), pct(0.999),
      static_cast<unsigned long long>(errors), static_cast<unsigned long long>(mismatches));
  if (o.verify) {
    std::printf("verify: %llu blocks of %u bytes written and read back, %llu did not match\n",
                static_cast<unsigned long long>(slots), o.bs,
                static_cast<unsigned long long>(mismatches));
  }
  return errors == 0 && mismatches == 0 ? 0 : 1;
}
