// libFuzzer target for the NVMe/TCP connection, its controllers and the
// command set: an in-process nvme::server (its public API only, server.h)
// on 127.0.0.1, port 0, over two memory units (namespace 1: 4096-byte
// blocks, thin; namespace 2: 512-byte blocks). Each input is the byte
// stream of one TCP connection.
//
// Input:
//   byte 0  mode
//             bits 0-1  0 raw: bytes 1.. as they are, from the ICReq on;
//                       1 a canned ICReq and admin queue Connect (a new
//                       controller, enabled), then records (below);
//                       2 a canned ICReq and I/O queue Connect, to a
//                       controller the harness makes for it on another
//                       connection first, then records;
//                       3 as 1, with header and data digests
//             bit 2     the harness answers R2Ts with H2CData (a pattern),
//                       so that writes by R2T run
//             bit 3     mode 2 with header and data digests
//   records, until the input runs out:
//           byte     flags: bit 0 corrupt the header digest, bit 1 the
//                    data digest (when digests are on); bit 2 a raw
//                    record: a 16-bit length, then that many bytes as
//                    they are; bit 3 (mode 2) the capsule goes on a
//                    second I/O queue of the same controller instead,
//                    without digests (a fused pair split over two
//                    queues); nothing on it is checked but the counts
//           64 bytes a submission queue entry (its command ID, SGL and
//                    fields as the fuzzer wrote them)
//           2 bytes  in-capsule data length (at most 9000), then the data
//
// The harness frames each record as a capsule (PLEN, PDO, digests right
// unless corrupted), writes the stream, lets the target answer until the
// loop is idle, half-closes, and reads until the target closes.
// Properties:
//   - every PDU the target sends is one a controller sends (ICResp first
//     and once, response capsules, C2HData, R2T, C2HTermReq last), with
//     the header length of its type, and right digests once negotiated;
//   - the target closes the connection within 3 s of the host's FIN; its
//     connection and controller counts and the units' commands in flight
//     go back to what they were (no hang, no leaked command, connection
//     or controller);
//   - other controllers are not affected: a bystander controller, with an
//     I/O queue, made at start-up, answers Identify and a read after the
//     first input and every check_every inputs (STRATA_FUZZ_CHECK_EVERY,
//     default 16).
// STRATA_FUZZ_TRACE=1 prints each PDU the target sends.
//
// Threads: libFuzzer's thread runs the server's loop; every wait is
// bounded. The world is built on the first input and never destroyed.
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "raid/device/memory_device.h"
#include "target/crc32c.h"
#include "target/nvme/little_endian.h"
#include "target/nvme/server.h"
#include "target/scsi/logical_unit.h"
#include "tests/fuzz/fuzz_net.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace strata;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using asio::ip::tcp;
using bytes = std::vector<std::uint8_t>;

using fuzz::idle;
using fuzz::run_until;
using fuzz::wait_bound;
const std::string subsystem_nqn = "nqn.2026-11.io.strata:fuzz";

// One PDU from the target: its whole bytes, and whether its digests held.
struct pdu {
  bytes whole;
  bool digests_ok = true;
  std::uint8_t type() const { return whole[0]; }
  std::uint8_t hlen() const { return whole[2]; }
};

// The host's side of one connection (fuzz_net.h), framing NVMe/TCP PDUs by
// PLEN and handing each to on_pdu.
class client : public fuzz::stream_client {
 public:
  using fuzz::stream_client::stream_client;
  std::function<void(const pdu&)> on_pdu;
  bool header_digest = false, data_digest = false;

 private:
  std::size_t frame(std::span<const std::uint8_t> received) override {
    std::size_t at = 0;
    while (received.size() - at >= 8) {
      const std::uint32_t plen = nvme::get32(received.subspan(at), 4);
      FUZZ_REQUIRE(plen >= 8 && plen <= (16u << 20), "a PDU from the target has a sane PLEN");
      if (received.size() - at < plen) break;
      pdu p;
      p.whole.assign(received.begin() + static_cast<std::ptrdiff_t>(at),
                     received.begin() + static_cast<std::ptrdiff_t>(at + plen));
      const std::uint8_t flags = p.whole[1], hlen = p.whole[2], pdo = p.whole[3];
      if ((flags & 0x01) != 0 && p.whole.size() >= hlen + 4u) {
        p.digests_ok = get_digest(p.whole.data() + hlen) == crc32c({p.whole.data(), hlen});
      }
      if ((flags & 0x02) != 0 && pdo > 0 && p.whole.size() >= pdo + 4u) {
        const std::span<const std::uint8_t> d(p.whole.data() + pdo, p.whole.size() - pdo - 4);
        p.digests_ok = p.digests_ok && get_digest(p.whole.data() + p.whole.size() - 4) == crc32c(d);
      }
      at += plen;
      if (on_pdu) on_pdu(p);
    }
    return at;
  }
};

bytes ic_req(bool digests) {
  bytes b(128, 0);
  b[2] = 128;
  nvme::put32(b.data() + 4, 128);
  b[11] = digests ? 0x03 : 0x00;
  return b;
}

// A capsule PDU around `sqe` and in-capsule `data`.
bytes capsule(std::span<const std::uint8_t, 64> sqe, std::span<const std::uint8_t> data,
              bool digests, unsigned corrupt = 0) {
  const std::size_t header_end = 72 + (digests ? 4 : 0);
  bytes b(header_end, 0);
  b[0] = 0x04;
  b[1] = static_cast<std::uint8_t>((digests ? 0x01 : 0) | (digests && !data.empty() ? 0x02 : 0));
  b[2] = 72;
  b[3] = data.empty() ? 0 : static_cast<std::uint8_t>(header_end);
  nvme::put32(b.data() + 4, static_cast<std::uint32_t>(header_end + data.size() +
                                                       (digests && !data.empty() ? 4 : 0)));
  std::memcpy(b.data() + 8, sqe.data(), 64);
  if (digests) put_digest(crc32c({b.data(), 72}) ^ ((corrupt & 1) != 0 ? 1u : 0u), b.data() + 72);
  b.insert(b.end(), data.begin(), data.end());
  if (digests && !data.empty()) {
    std::uint8_t d[4];
    put_digest(crc32c(data) ^ ((corrupt & 2) != 0 ? 1u : 0u), d);
    b.insert(b.end(), d, d + 4);
  }
  return b;
}

std::array<std::uint8_t, 64> connect_sqe(std::uint16_t qid) {
  std::array<std::uint8_t, 64> s{};
  s[0] = 0x7f;
  s[1] = 0x40;
  nvme::put16(s.data() + 2, 0xfff0);
  s[4] = 0x01;
  nvme::put16(s.data() + 42, qid);
  nvme::put16(s.data() + 44, 31);
  nvme::put32(s.data() + 32, 1024);
  s[39] = 0x01;
  return s;
}
bytes connect_data(const std::string& host, std::uint16_t cntlid) {
  bytes d(1024, 0);
  d[0] = 0x42;
  nvme::put16(d.data() + 16, cntlid);
  std::memcpy(d.data() + 256, subsystem_nqn.data(), subsystem_nqn.size());
  std::memcpy(d.data() + 512, host.data(), host.size());
  return d;
}
std::array<std::uint8_t, 64> property_set_enable() {
  std::array<std::uint8_t, 64> s{};
  s[0] = 0x7f;
  s[1] = 0x40;
  nvme::put16(s.data() + 2, 0xfff1);
  s[4] = 0x00;
  nvme::put32(s.data() + 44, 0x14);
  nvme::put64(s.data() + 48, 1 | 6 << 16 | 4 << 20);
  s[39] = 0x5a;
  return s;
}
std::array<std::uint8_t, 64> number_of_queues() {
  std::array<std::uint8_t, 64> s{};
  s[0] = 0x09;
  s[1] = 0x40;
  nvme::put16(s.data() + 2, 0xfff2);
  nvme::put32(s.data() + 40, 0x07);
  nvme::put32(s.data() + 44, 0x00030003);
  s[39] = 0x5a;
  return s;
}

bool controller_type(std::uint8_t t) {
  return t == 0x01 || t == 0x03 || t == 0x05 || t == 0x07 || t == 0x09;
}
std::uint8_t hlen_of(std::uint8_t t) {
  return t == 0x01 ? 128 : t == 0x05 ? 24 : 24;
}

// A connection the harness drives itself: a controller's admin queue, or
// an I/O queue; it waits for each response in turn.
struct driven {
  std::shared_ptr<client> c;
  std::shared_ptr<std::deque<pdu>> inbox = std::make_shared<std::deque<pdu>>();
  void listen() {
    c->on_pdu = [in = inbox](const pdu& p) { in->push_back(p); };
  }
};
std::optional<pdu> await_response(asio::io_context& loop, driven& d, std::uint16_t cid) {
  std::optional<pdu> found;
  run_until(loop, wait_bound, [&] {
    while (!d.inbox->empty()) {
      pdu p = std::move(d.inbox->front());
      d.inbox->pop_front();
      if (p.type() == 0x05 && nvme::get16(p.whole, 8 + 12) == cid) {
        found = std::move(p);
        return true;
      }
    }
    return d.c->ended();
  });
  return found;
}
std::uint16_t status_of(const pdu& p) {
  return static_cast<std::uint16_t>(nvme::get16(p.whole, 8 + 14) >> 1);
}

// A controller of `host`: its admin queue connected and enabled, three I/O queues granted.
driven make_controller(asio::io_context& loop, const tcp::endpoint& at, const std::string& host,
                       std::uint16_t& cntlid) {
  driven d{std::make_shared<client>(loop)};
  FUZZ_REQUIRE(d.c->connect(loop, at), "the harness connects");
  d.listen();
  d.c->send(ic_req(false));
  d.c->send(capsule(connect_sqe(0), connect_data(host, 0xffff), false));
  auto r = await_response(loop, d, 0xfff0);
  FUZZ_REQUIRE(r && status_of(*r) == 0, "the harness's admin Connect succeeds");
  cntlid = nvme::get16(r->whole, 8);
  d.c->send(capsule(property_set_enable(), {}, false));
  r = await_response(loop, d, 0xfff1);
  FUZZ_REQUIRE(r && status_of(*r) == 0, "the harness enables its controller");
  d.c->send(capsule(number_of_queues(), {}, false));
  r = await_response(loop, d, 0xfff2);
  FUZZ_REQUIRE(r && status_of(*r) == 0, "the harness gets its I/O queues");
  return d;
}

struct world {
  asio::io_context loop;
  std::unique_ptr<device::memory_device> volume0, volume1;
  std::unique_ptr<scsi::logical_unit> unit0, unit1;
  std::unique_ptr<nvme::server> server;
  tcp::endpoint at;
  driven bystander_admin, bystander_io;
  std::uint64_t inputs = 0;
  std::uint64_t check_every = 16;
  bool trace = false;
};

std::unique_ptr<device::memory_device> volume(world& w, std::uint32_t block_bytes) {
  auto d =
      device::memory_device::create(w.loop.get_executor(), {block_bytes, (8u << 20) / block_bytes});
  FUZZ_REQUIRE(d.has_value(), "a memory volume can be created");
  return std::move(*d);
}

world& the_world() {
  static world* w = [] {
    auto* nw = new world;  // never destroyed
    if (const char* every = std::getenv("STRATA_FUZZ_CHECK_EVERY"))
      nw->check_every = std::max(1ul, std::strtoul(every, nullptr, 10));
    nw->trace = std::getenv("STRATA_FUZZ_TRACE") != nullptr;
    nw->volume0 = volume(*nw, 4096);
    nw->volume1 = volume(*nw, 512);
    scsi::unit_identity id0;
    id0.serial = "FUZZ0";
    scsi::unit_identity id1;
    id1.serial = "FUZZ1";
    id1.thin_provisioned = false;
    nw->unit0 = std::make_unique<scsi::logical_unit>(*nw->volume0, id0);
    nw->unit1 = std::make_unique<scsi::logical_unit>(*nw->volume1, id1);
    nvme::subsystem s;
    s.nqn = subsystem_nqn;
    s.anyone = std::vector<nvme::namespace_config>{{1, nw->unit0.get(), 4096, "FUZZ0", 1},
                                                   {2, nw->unit1.get(), 512, "FUZZ1", 1}};
    nvme::server_options options;
    options.ana_groups = 1;
    nw->server =
        std::make_unique<nvme::server>(nw->loop.get_executor(), std::vector{std::move(s)}, options);
    FUZZ_REQUIRE(nw->server->listen({asio::ip::make_address("127.0.0.1"), 0}).has_value(),
                 "the server listens");
    nw->at = nw->server->local_endpoint();
    std::uint16_t cntlid = 0;
    nw->bystander_admin =
        make_controller(nw->loop, nw->at, "nqn.2026-11.io.strata:bystander", cntlid);
    nw->bystander_io = driven{std::make_shared<client>(nw->loop)};
    FUZZ_REQUIRE(nw->bystander_io.c->connect(nw->loop, nw->at),
                 "the bystander's I/O queue connects");
    nw->bystander_io.listen();
    nw->bystander_io.c->send(ic_req(false));
    nw->bystander_io.c->send(
        capsule(connect_sqe(1), connect_data("nqn.2026-11.io.strata:bystander", cntlid), false));
    auto r = await_response(nw->loop, nw->bystander_io, 0xfff0);
    FUZZ_REQUIRE(r && status_of(*r) == 0, "the bystander's I/O queue Connect succeeds");
    return nw;
  }();
  return *w;
}

// The bystander's controller answers Identify, and its I/O queue a read.
void check_bystander(world& w) {
  FUZZ_REQUIRE(!w.bystander_admin.c->ended() && !w.bystander_io.c->ended(),
               "no input ends another controller's queues");
  std::array<std::uint8_t, 64> ident{};
  ident[0] = 0x06;
  ident[1] = 0x40;
  nvme::put16(ident.data() + 2, 0x0101);
  nvme::put32(ident.data() + 40, 1);
  nvme::put32(ident.data() + 32, 4096);
  ident[39] = 0x5a;
  w.bystander_admin.c->send(capsule(ident, {}, false));
  const auto a = await_response(w.loop, w.bystander_admin, 0x0101);
  FUZZ_REQUIRE(a && status_of(*a) == 0, "the bystander's Identify succeeds");
  std::array<std::uint8_t, 64> read{};
  read[0] = 0x02;
  read[1] = 0x40;
  nvme::put16(read.data() + 2, 0x0202);
  nvme::put32(read.data() + 4, 1);
  nvme::put32(read.data() + 32, 4096);
  read[39] = 0x5a;
  w.bystander_io.c->send(capsule(read, {}, false));
  const auto r = await_response(w.loop, w.bystander_io, 0x0202);
  // A reservation an input left may refuse it: that is no fault.
  FUZZ_REQUIRE(r && (status_of(*r) == 0 || status_of(*r) == 0x83),
               "the bystander's read completes");
}

void trace(const pdu& p) {
  std::fprintf(stderr, "target: type %02x flags %02x hlen %u plen %zu%s\n", p.type(), p.whole[1],
               p.hlen(), p.whole.size(), p.digests_ok ? "" : " (bad digest)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  world& w = the_world();
  fuzz::input in({data, size});
  const std::uint8_t mode = in.u8();
  const unsigned setup = mode & 0x03;
  const bool digests = setup == 3 || (setup == 2 && (mode & 0x08) != 0);
  const bool answer_r2t = (mode & 0x04) != 0;
  const std::size_t connections_before = w.server->connections();
  const std::size_t controllers_before = w.server->controllers();

  // Mode 2's controller, made on a connection of the harness's own.
  std::optional<driven> owner;
  std::uint16_t cntlid = 0;
  const std::string host = "nqn.2026-11.io.strata:fuzzer";
  if (setup == 2) owner = make_controller(w.loop, w.at, host, cntlid);
  // Mode 2's second I/O queue, for the records flagged to go there.
  std::shared_ptr<client> side;
  bytes side_stream;

  auto c = std::make_shared<client>(w.loop);
  FUZZ_REQUIRE(c->connect(w.loop, w.at), "the target accepts a connection");
  bytes stream;
  if (setup != 0) {
    stream = ic_req(digests);
    const bytes cd = connect_data(host, setup == 2 ? cntlid : 0xffff);
    bytes con = capsule(connect_sqe(setup == 2 ? 1 : 0), cd, digests);
    stream.insert(stream.end(), con.begin(), con.end());
    if (setup != 2) {
      bytes en = capsule(property_set_enable(), {}, digests);
      stream.insert(stream.end(), en.begin(), en.end());
    }
    while (!in.empty()) {
      const std::uint8_t flags = in.u8();
      if ((flags & 0x04) != 0) {
        const auto raw = in.take(in.be(2));
        stream.insert(stream.end(), raw.begin(), raw.end());
        continue;
      }
      std::array<std::uint8_t, 64> sqe{};
      const auto s = in.take(64);
      std::copy(s.begin(), s.end(), sqe.begin());
      const auto d = in.take(std::min<std::uint64_t>(in.be(2), 9000));
      if (setup == 2 && (flags & 0x08) != 0) {
        if (side_stream.empty()) {
          side_stream = ic_req(false);
          const bytes side_connect = capsule(connect_sqe(2), connect_data(host, cntlid), false);
          side_stream.insert(side_stream.end(), side_connect.begin(), side_connect.end());
        }
        const bytes pdu_bytes = capsule(sqe, d, false);
        side_stream.insert(side_stream.end(), pdu_bytes.begin(), pdu_bytes.end());
        continue;
      }
      bytes pdu_bytes = capsule(sqe, d, digests, flags & 0x03);
      stream.insert(stream.end(), pdu_bytes.begin(), pdu_bytes.end());
    }
  } else {
    const auto rest = in.rest();
    stream.assign(rest.begin(), rest.end());
  }
  bool first = true;
  bool terminated = false;
  c->on_pdu = [&, cl = c.get()](const pdu& p) {
    if (w.trace) trace(p);
    FUZZ_REQUIRE(!terminated, "nothing follows a C2HTermReq");
    FUZZ_REQUIRE(controller_type(p.type()), "the target sends only the PDUs a controller sends");
    FUZZ_REQUIRE(p.type() != 0x01 || first, "the ICResp comes first, and once");
    FUZZ_REQUIRE(setup == 0 || !first || p.type() == 0x01,
                 "the canned ICReq is answered by an ICResp");
    FUZZ_REQUIRE(p.type() == 0x03 || p.hlen() == hlen_of(p.type()),
                 "each PDU has its type's header length");
    if (p.type() == 0x03) {
      terminated = true;
      FUZZ_REQUIRE(p.whole.size() <= 152, "a C2HTermReq is at most 152 bytes");
    }
    if (first && setup != 0) {
      cl->header_digest = cl->data_digest = digests;
    } else if (p.type() != 0x03) {
      FUZZ_REQUIRE(p.digests_ok, "the target's digests are right");
    }
    first = false;
    if (p.type() == 0x09 && answer_r2t) {
      // H2CData for all the R2T asks, in one PDU (at most 128 KiB: MAXH2CDATA).
      const std::uint32_t offset = nvme::get32(p.whole, 12),
                          length = std::min<std::uint32_t>(nvme::get32(p.whole, 16), 128u << 10);
      bytes h(24 + (digests ? 4 : 0), 0);
      h[0] = 0x06;
      h[1] = static_cast<std::uint8_t>((digests ? 0x03 : 0) | 0x04);
      h[2] = 24;
      h[3] = static_cast<std::uint8_t>(h.size());
      nvme::put32(h.data() + 4, static_cast<std::uint32_t>(h.size() + length + (digests ? 4 : 0)));
      std::memcpy(h.data() + 8, p.whole.data() + 8, 4);  // CCCID, TTAG
      nvme::put32(h.data() + 12, offset);
      nvme::put32(h.data() + 16, length);
      if (digests) put_digest(crc32c({h.data(), 24}), h.data() + 24);
      bytes payload(length, 0xa5);
      h.insert(h.end(), payload.begin(), payload.end());
      if (digests) {
        std::uint8_t dg[4];
        put_digest(crc32c(payload), dg);
        h.insert(h.end(), dg, dg + 4);
      }
      cl->send(std::move(h));
    }
  };
  c->send(std::move(stream));
  if (!side_stream.empty()) {
    side = std::make_shared<client>(w.loop);
    FUZZ_REQUIRE(side->connect(w.loop, w.at), "the target accepts the second I/O queue");
    side->send(std::move(side_stream));
  }
  run_until(w.loop, wait_bound, [&] {
    return (c->ended() || (c->sent() && idle(w.loop))) && (side == nullptr || side->sent());
  });
  if (side != nullptr) side->close();
  c->half_close_when_sent();
  FUZZ_REQUIRE(run_until(w.loop, wait_bound, [&] { return c->ended(); }),
               "the target closes the connection within 3 s of the host's FIN");
  c->close();
  c->on_pdu = nullptr;
  if (owner) {
    owner->c->close();
    owner->c->on_pdu = nullptr;
  }
  FUZZ_REQUIRE(
      run_until(w.loop, wait_bound, [&] { return w.server->connections() == connections_before; }),
      "the target's connection count goes back once the connection is closed");
  FUZZ_REQUIRE(
      run_until(w.loop, wait_bound, [&] { return w.server->controllers() == controllers_before; }),
      "a controller ends with its admin queue");
  FUZZ_REQUIRE(
      run_until(
          w.loop, wait_bound,
          [&] { return w.unit0->commands_in_flight() == 0 && w.unit1->commands_in_flight() == 0; }),
      "every command of a closed connection finishes");
  if (w.inputs++ % w.check_every == 0) check_bystander(w);
  return 0;
}
