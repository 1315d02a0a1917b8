// libFuzzer target for the iSCSI connection state machine: an in-process
// iscsi::server (its public API only, server.h) on 127.0.0.1, port 0, over
// two memory LUNs. Each input is the byte stream of one TCP connection.
//
// Input:
//   byte 0  mode
//             bits 0-1  0 raw: the stream is bytes 1.. as they are, from
//                       the first login PDU on;
//                       1 a canned login to the target (no authentication),
//                       then bytes 1..;
//                       2 a canned discovery login, then bytes 1..;
//                       3 a canned login with HeaderDigest and DataDigest
//                       CRC32C, then bytes 1.. as records (below) that get
//                       their digests from this harness
//             bit 2     the canned login declares MaxRecvDataSegmentLength
//                       512 instead of 8192 (Data-In in many PDUs)
//             bit 3     the canned login asks InitialR2T=Yes and
//                       ImmediateData=No (every write solicited by R2T)
//   mode 3 records, until the input runs out:
//           byte     bit 0: corrupt the header digest; bit 1: corrupt the data digest
//           48 bytes the BHS; then the AHS and the data segment it declares
//                    (as much of them as the input still holds), padded
//
// The harness writes the stream, lets the target answer until the loop is
// idle, half-closes, and reads until the target closes. Properties:
//   - the target closes the connection within 3 s of the initiator's FIN,
//     and its connections() count and every unit's commands in flight go
//     back to what they were (no hang, no leaked task or connection);
//   - after a canned login, each PDU from the target is well formed: a
//     target opcode, no AHS, correct digests, a data segment no longer
//     than the MaxRecvDataSegmentLength the initiator declared, a Reject
//     carrying the 48-byte header it rejects, a SCSI Response with CHECK
//     CONDITION carrying its sense data;
//   - other sessions are not affected: a session logged in with mutual
//     CHAP at start-up to another target (the bystander) answers a NOP-Out
//     and an INQUIRY, and a fresh connection logs in and out, after the
//     first input and every check_every inputs (STRATA_FUZZ_CHECK_EVERY,
//     default 16).
// STRATA_FUZZ_TRACE=1 prints each PDU the target sends on the fuzzed
// connection: what an input does, when reading a crash or writing a seed.
// Wrong CHAP responses, unknown targets and malformed PDUs need no oracle
// of their own: whatever the target answers, the properties above hold.
//
// Threads: libFuzzer's one thread runs the server's loop too; every wait
// is bounded (run_until). The server, its units and the bystander are
// built on the first input and live until the process exits (never
// destroyed: the process ends with connections open). What inputs do to
// the LUNs (data, reservations, unit attentions) carries over to the next
// input; connections do not.
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "raid/device/memory_device.h"
#include "target/crc32c.h"
#include "target/iscsi/chap.h"
#include "target/iscsi/pdu.h"
#include "target/iscsi/server.h"
#include "target/iscsi/text.h"
#include "target/scsi/logical_unit.h"
#include "target/scsi/lun_map.h"
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

const std::string fuzz_target = "iqn.2026-11.io.strata:fuzz";
const std::string chap_target = "iqn.2026-11.io.strata:chap";
const std::string fuzz_initiator = "iqn.2026-11.io.strata:fuzzer";
const std::string bystander_initiator = "iqn.2026-11.io.strata:bystander";
const iscsi::chap_credentials bystander_chap{"bystander", "bystander-secret"};
const iscsi::chap_credentials target_chap{"target", "target-secret-42"};

// One PDU from the target, with whether its digests (if any) were right.
struct pdu {
  iscsi::bhs header;
  bytes data;
  bool digests_ok = true;
};

// The initiator's side of one TCP connection (fuzz_net.h), framing iSCSI
// PDUs as they arrive and handing each to on_pdu.
class client : public fuzz::stream_client {
 public:
  using fuzz::stream_client::stream_client;
  // Called for each whole PDU, in order; may send, and may turn digests on
  // for the PDUs after it.
  std::function<void(const pdu&)> on_pdu;
  bool digests = false;

 private:
  std::size_t frame(std::span<const std::uint8_t> received) override {
    std::size_t at = 0;
    while (received.size() - at >= iscsi::bhs_bytes) {
      pdu p{iscsi::bhs(std::span<const std::uint8_t, iscsi::bhs_bytes>(received.data() + at,
                                                                       iscsi::bhs_bytes)),
            {},
            true};
      const std::uint32_t n = p.header.data_segment_bytes();
      const std::size_t header_end = at + iscsi::bhs_bytes + p.header.ahs_bytes();
      const std::size_t data_at = header_end + (digests ? 4 : 0);
      const std::size_t end = data_at + iscsi::padded(n) + (digests && n > 0 ? 4 : 0);
      if (received.size() < end) break;
      if (digests) {
        const std::uint32_t want = crc32c({received.data() + at, header_end - at});
        p.digests_ok = get_digest(received.data() + header_end) == want;
        if (n > 0) {
          const std::uint32_t data_want = crc32c({received.data() + data_at, iscsi::padded(n)});
          p.digests_ok =
              p.digests_ok && get_digest(received.data() + data_at + iscsi::padded(n)) == data_want;
        }
      }
      p.data.assign(received.begin() + static_cast<std::ptrdiff_t>(data_at),
                    received.begin() + static_cast<std::ptrdiff_t>(data_at + n));
      at = end;
      if (on_pdu) on_pdu(p);
    }
    return at;
  }
};

// A PDU as an initiator sends it: header, data segment, padding; with
// digests when `digests` (corrupted as `corrupt` says: bit 0 header, bit 1 data).
bytes wire(const iscsi::bhs& h, std::span<const std::uint8_t> ahs,
           std::span<const std::uint8_t> data, bool digests, unsigned corrupt = 0) {
  bytes out(h.wire().begin(), h.wire().end());
  out.insert(out.end(), ahs.begin(), ahs.end());
  std::uint8_t d[4];
  if (digests) {
    put_digest(crc32c(out) ^ ((corrupt & 1) != 0 ? 1u : 0u), d);
    out.insert(out.end(), d, d + 4);
  }
  const std::size_t data_at = out.size();
  out.insert(out.end(), data.begin(), data.end());
  out.resize(data_at + iscsi::padded(static_cast<std::uint32_t>(data.size())), 0);
  if (digests && !data.empty()) {
    put_digest(
        crc32c({out.data() + data_at, out.size() - data_at}) ^ ((corrupt & 2) != 0 ? 1u : 0u), d);
    out.insert(out.end(), d, d + 4);
  }
  return out;
}

constexpr std::array<std::uint8_t, 6> fuzz_isid{0x80, 0x00, 0x00, 0x00, 0x00, 0x01};
constexpr std::array<std::uint8_t, 6> bystander_isid{0x80, 0x00, 0x00, 0x00, 0x00, 0x02};

bytes login_request(unsigned csg, unsigned nsg, bool transit, const iscsi::key_values& keys,
                    std::span<const std::uint8_t, 6> isid, std::uint32_t cmd_sn,
                    std::uint32_t exp_stat_sn) {
  iscsi::bhs h;
  h.set_opcode(iscsi::opcode::login_request);
  h.set_byte(0, h.byte(0) | 0x40);  // Login Requests are immediate
  h.set_flags(iscsi::login_flags::make(transit, csg, nsg));
  std::memcpy(h.wire().data() + iscsi::field::isid, isid.data(), isid.size());
  h.set_initiator_task_tag(1);
  h.set_u32(iscsi::field::cmd_sn, cmd_sn);
  h.set_u32(iscsi::field::exp_stat_sn, exp_stat_sn);
  const bytes data = iscsi::format_text(keys);
  h.set_data_segment_bytes(static_cast<std::uint32_t>(data.size()));
  return wire(h, {}, data, false);
}

// What the canned login asks for; the checker holds the target to it.
struct canned {
  bool discovery = false;
  bool digests = false;
  std::uint32_t max_recv_bytes = 8192;
  bool solicited_only = false;
};

bytes canned_login(const canned& c) {
  iscsi::key_values keys{{"InitiatorName", fuzz_initiator}};
  if (c.discovery) {
    keys.emplace_back("SessionType", "Discovery");
  } else {
    keys.emplace_back("TargetName", fuzz_target);
    keys.emplace_back("SessionType", "Normal");
  }
  const char* digest = c.digests ? "CRC32C" : "None";
  keys.insert(keys.end(), {{"HeaderDigest", digest},
                           {"DataDigest", digest},
                           {"MaxRecvDataSegmentLength", std::to_string(c.max_recv_bytes)},
                           {"InitialR2T", c.solicited_only ? "Yes" : "No"},
                           {"ImmediateData", c.solicited_only ? "No" : "Yes"},
                           {"MaxBurstLength", "262144"},
                           {"FirstBurstLength", "65536"},
                           {"ErrorRecoveryLevel", "0"}});
  // Straight to the operational stage: this target asks for no authentication.
  return login_request(iscsi::operational_negotiation, iscsi::full_feature_phase, true, keys,
                       fuzz_isid, 1, 0);
}

std::uint16_t login_status(const iscsi::bhs& h) {
  return static_cast<std::uint16_t>(h.byte(iscsi::field::status_class) << 8 |
                                    h.byte(iscsi::field::status_detail));
}
bool logged_in(const iscsi::bhs& h) {
  return h.opcode() == iscsi::opcode::login_response && login_status(h) == 0 &&
         (h.flags() & iscsi::login_flags::transit) != 0 &&
         iscsi::login_flags::nsg(h.flags()) == iscsi::full_feature_phase;
}

bool target_opcode(iscsi::opcode o) {
  switch (o) {
    case iscsi::opcode::nop_in:
    case iscsi::opcode::scsi_response:
    case iscsi::opcode::task_management_response:
    case iscsi::opcode::login_response:
    case iscsi::opcode::text_response:
    case iscsi::opcode::data_in:
    case iscsi::opcode::logout_response:
    case iscsi::opcode::r2t:
    case iscsi::opcode::async_message:
    case iscsi::opcode::reject:
      return true;
    default:
      return false;
  }
}

// Holds the target to the canned login's parameters, PDU by PDU.
void check_after_canned_login(client& c, const canned& asked, bool& first, const pdu& p) {
  const iscsi::bhs& h = p.header;
  if (first) {
    // The target may close before sending it (the stream broke the
    // protocol at once), but if it answers, the canned login succeeds.
    first = false;
    FUZZ_REQUIRE(logged_in(h), "the canned login succeeds");
    c.digests = asked.digests;
    return;
  }
  FUZZ_REQUIRE(target_opcode(h.opcode()), "the target sends only target opcodes");
  FUZZ_REQUIRE(h.ahs_bytes() == 0, "the target sends no AHS");
  FUZZ_REQUIRE(p.digests_ok, "the target's header and data digests are right");
  FUZZ_REQUIRE(h.data_segment_bytes() <= asked.max_recv_bytes,
               "no data segment longer than the initiator's MaxRecvDataSegmentLength");
  if (h.opcode() == iscsi::opcode::reject) {
    FUZZ_REQUIRE(p.data.size() == iscsi::bhs_bytes, "a Reject carries the header it rejects");
  }
  if (h.opcode() == iscsi::opcode::scsi_response && h.byte(2) == 0 &&
      h.byte(3) == static_cast<std::uint8_t>(scsi::status::check_condition)) {
    FUZZ_REQUIRE(
        p.data.size() >= 2 && 2u + (p.data[0] << 8 | p.data[1]) <= p.data.size() && p.data[1] > 0,
        "CHECK CONDITION comes with its sense data");
  }
}

// The bystander: a session logged in with mutual CHAP at start-up to
// another target, which inputs must not disturb. It answers the target's
// pings, as an initiator does, and keeps what else arrives for the checks.
struct bystander {
  std::shared_ptr<client> c;
  std::deque<pdu> inbox;
  std::uint32_t exp_cmd_sn = 1;  // the target's, from its last PDU: the next command's CmdSN
  std::uint32_t exp_stat_sn = 0;
  std::uint32_t next_itt = 100;
};

// Waits for the next PDU in `inbox` that `wanted` accepts; pings are
// answered by on_pdu and never wanted.
std::optional<pdu> await_pdu(asio::io_context& loop, std::deque<pdu>& inbox,
                             const std::function<bool(const pdu&)>& wanted, const client& c) {
  std::optional<pdu> found;
  run_until(loop, wait_bound, [&] {
    while (!inbox.empty()) {
      pdu p = std::move(inbox.front());
      inbox.pop_front();
      if (wanted(p)) {
        found = std::move(p);
        return true;
      }
    }
    return c.ended();
  });
  return found;
}

std::optional<std::string> value_of(const iscsi::key_values& kv, std::string_view key) {
  for (const auto& [k, v] : kv) {
    if (k == key) return v;
  }
  return std::nullopt;
}

struct world {
  asio::io_context loop;
  std::unique_ptr<device::memory_device> volume0;
  std::unique_ptr<device::memory_device> volume1;
  std::unique_ptr<scsi::logical_unit> unit0;
  std::unique_ptr<scsi::logical_unit> unit1;
  std::unique_ptr<scsi::lun_map>
      fuzz_luns;  // LUN 0: unit0 (4096-byte blocks), LUN 1: unit1 (512-byte blocks)
  std::unique_ptr<scsi::lun_map> chap_luns;  // LUN 0: unit1
  std::unique_ptr<iscsi::server> server;
  tcp::endpoint at;
  bystander by;
  std::uint64_t inputs = 0;
  std::uint64_t check_every = 16;
  bool trace =
      false;  // STRATA_FUZZ_TRACE: print each PDU the target sends on the fuzzed connection
};

void trace(const pdu& p) {
  const iscsi::bhs& h = p.header;
  std::fprintf(stderr,
               "target: opcode %02x flags %02x bytes 2-3 %02x %02x bytes 36-37 %02x %02x ITT %08x "
               "data %u bytes%s\n",
               static_cast<unsigned>(h.opcode()), h.flags(), h.byte(2), h.byte(3), h.byte(36),
               h.byte(37), h.initiator_task_tag(), h.data_segment_bytes(),
               p.digests_ok ? "" : " (bad digest)");
}

// The bystander's login: security stage with mutual CHAP (MD5), then the
// operational stage. Every step must succeed: the harness is broken otherwise.
void log_in_bystander(world& w) {
  bystander& b = w.by;
  b.c = std::make_shared<client>(w.loop);
  FUZZ_REQUIRE(b.c->connect(w.loop, w.at), "the bystander connects");
  b.c->on_pdu = [&b, c = b.c.get()](const pdu& p) {
    b.exp_cmd_sn = p.header.u32(iscsi::field::exp_cmd_sn);
    if (p.header.opcode() != iscsi::opcode::data_in ||
        (p.header.flags() & iscsi::data_in_flags::status) != 0)
      b.exp_stat_sn = p.header.u32(iscsi::field::stat_sn) + 1;
    if (p.header.opcode() == iscsi::opcode::nop_in &&
        p.header.u32(iscsi::field::target_transfer_tag) != iscsi::reserved_tag) {
      // A ping from the target: answer it, or the session is taken for dead.
      iscsi::bhs h;
      h.set_opcode(iscsi::opcode::nop_out);
      h.set_byte(0, h.byte(0) | 0x40);
      h.set_final(true);
      h.set_lun_field(p.header.lun_field());
      h.set_initiator_task_tag(iscsi::reserved_tag);
      h.set_u32(iscsi::field::target_transfer_tag, p.header.u32(iscsi::field::target_transfer_tag));
      h.set_u32(iscsi::field::cmd_sn, b.exp_cmd_sn);
      h.set_u32(iscsi::field::exp_stat_sn, b.exp_stat_sn);
      c->send(wire(h, {}, {}, false));
      return;
    }
    b.inbox.push_back(p);
  };
  auto step = [&](unsigned csg, unsigned nsg, bool transit, const iscsi::key_values& keys,
                  const char* what) {
    b.c->send(login_request(csg, nsg, transit, keys, bystander_isid, 1, b.exp_stat_sn));
    auto r = await_pdu(
        w.loop, b.inbox,
        [](const pdu& p) { return p.header.opcode() == iscsi::opcode::login_response; }, *b.c);
    FUZZ_REQUIRE(r && login_status(r->header) == 0, what);
    auto kv = iscsi::parse_text(r->data);
    FUZZ_REQUIRE(kv.has_value(), "a login response's keys parse");
    return std::make_pair(r->header, *kv);
  };
  step(iscsi::security_negotiation, 0, false,
       {{"InitiatorName", bystander_initiator},
        {"TargetName", chap_target},
        {"SessionType", "Normal"},
        {"AuthMethod", "CHAP,None"}},
       "the bystander's AuthMethod=CHAP is accepted");
  const auto [h2, challenge] = step(iscsi::security_negotiation, 0, false, {{"CHAP_A", "5"}},
                                    "the target sends a CHAP challenge");
  const auto id = value_of(challenge, "CHAP_I");
  const auto c_value = value_of(challenge, "CHAP_C");
  FUZZ_REQUIRE(id && c_value && value_of(challenge, "CHAP_A") == "5",
               "the challenge has CHAP_A=5, CHAP_I, CHAP_C");
  const auto target_challenge = iscsi::decode_binary(*c_value);
  FUZZ_REQUIRE(target_challenge.has_value(), "the target's CHAP_C decodes");
  const auto identifier = static_cast<std::uint8_t>(std::stoul(*id));
  const bytes response = iscsi::chap_response(iscsi::chap_algorithm::md5, identifier,
                                              bystander_chap.secret, *target_challenge);
  const bytes my_challenge{0x5a, 0x17, 0x93, 0x0c, 0xe1, 0x42, 0x7b, 0x88,
                           0x2d, 0xf0, 0x61, 0x39, 0xa4, 0x0e, 0xc7, 0x55};
  const std::uint8_t my_id = 77;
  const auto [h3, proof] = step(iscsi::security_negotiation, iscsi::operational_negotiation, true,
                                {{"CHAP_N", bystander_chap.user},
                                 {"CHAP_R", iscsi::encode_hex(response)},
                                 {"CHAP_I", std::to_string(my_id)},
                                 {"CHAP_C", iscsi::encode_hex(my_challenge)}},
                                "the bystander's CHAP response is accepted");
  const bytes expected =
      iscsi::chap_response(iscsi::chap_algorithm::md5, my_id, target_chap.secret, my_challenge);
  FUZZ_REQUIRE(value_of(proof, "CHAP_N") == target_chap.user &&
                   value_of(proof, "CHAP_R") == iscsi::encode_hex(expected),
               "the target proves its mutual CHAP secret");
  const auto [h4, answers] =
      step(iscsi::operational_negotiation, iscsi::full_feature_phase, true,
           {{"HeaderDigest", "None"}, {"DataDigest", "None"}, {"MaxRecvDataSegmentLength", "8192"}},
           "the bystander reaches the full feature phase");
  FUZZ_REQUIRE(logged_in(h4),
               "the bystander's last login response moves to the full feature phase");
}

// The bystander answers a NOP-Out and an INQUIRY. INQUIRY, because no unit
// attention or reservation holds it back: an input may reset the unit the
// bystander shares, or reserve it, and that is no fault.
void check_bystander(world& w) {
  bystander& b = w.by;
  FUZZ_REQUIRE(!b.c->ended(), "no input ends another target's session");
  const std::uint32_t ping_itt = b.next_itt++;
  const std::uint32_t inquiry_itt = b.next_itt++;
  iscsi::bhs nop;
  nop.set_opcode(iscsi::opcode::nop_out);
  nop.set_byte(0, nop.byte(0) | 0x40);
  nop.set_final(true);
  nop.set_initiator_task_tag(ping_itt);
  nop.set_u32(iscsi::field::target_transfer_tag, iscsi::reserved_tag);
  nop.set_u32(iscsi::field::cmd_sn, b.exp_cmd_sn);
  nop.set_u32(iscsi::field::exp_stat_sn, b.exp_stat_sn);
  const bytes ping_data{'p', 'i', 'n', 'g'};
  nop.set_data_segment_bytes(4);
  b.c->send(wire(nop, {}, ping_data, false));
  iscsi::bhs inq;
  inq.set_opcode(iscsi::opcode::scsi_command);
  inq.set_flags(0x80 | iscsi::command_flags::read | 0x01);  // F, R, SIMPLE
  inq.set_initiator_task_tag(inquiry_itt);
  inq.set_u32(iscsi::field::expected_transfer_length, 96);
  inq.set_u32(iscsi::field::cmd_sn, b.exp_cmd_sn);
  inq.set_u32(iscsi::field::exp_stat_sn, b.exp_stat_sn);
  const std::uint8_t cdb[6] = {0x12, 0, 0, 0, 96, 0};
  std::memcpy(inq.wire().data() + iscsi::field::cdb, cdb, sizeof cdb);
  b.c->send(wire(inq, {}, {}, false));
  const auto pong = await_pdu(
      w.loop, b.inbox,
      [&](const pdu& p) {
        return p.header.opcode() == iscsi::opcode::nop_in &&
               p.header.initiator_task_tag() == ping_itt;
      },
      *b.c);
  FUZZ_REQUIRE(pong && pong->data == ping_data,
               "the bystander's NOP-Out is answered with its data");
  const auto status = await_pdu(
      w.loop, b.inbox,
      [&](const pdu& p) {
        const auto o = p.header.opcode();
        return p.header.initiator_task_tag() == inquiry_itt &&
               (o == iscsi::opcode::scsi_response ||
                (o == iscsi::opcode::data_in &&
                 (p.header.flags() & iscsi::data_in_flags::status) != 0));
      },
      *b.c);
  FUZZ_REQUIRE(status && status->header.byte(3) == static_cast<std::uint8_t>(scsi::status::good),
               "the bystander's INQUIRY ends in GOOD");
}

// A fresh connection logs in to the fuzzed target and out again.
void check_fresh_login(world& w) {
  auto c = std::make_shared<client>(w.loop);
  FUZZ_REQUIRE(c->connect(w.loop, w.at), "a fresh connection is accepted");
  std::deque<pdu> inbox;
  c->on_pdu = [&inbox](const pdu& p) { inbox.push_back(p); };
  c->send(canned_login({}));
  const auto login = await_pdu(
      w.loop, inbox, [](const pdu&) { return true; }, *c);
  FUZZ_REQUIRE(login && logged_in(login->header), "a fresh connection logs in");
  iscsi::bhs logout;
  logout.set_opcode(iscsi::opcode::logout_request);
  logout.set_byte(0, logout.byte(0) | 0x40);
  logout.set_final(true);  // reason 0: close the session
  logout.set_initiator_task_tag(2);
  logout.set_u32(iscsi::field::cmd_sn, login->header.u32(iscsi::field::exp_cmd_sn));
  logout.set_u32(iscsi::field::exp_stat_sn, login->header.u32(iscsi::field::stat_sn) + 1);
  c->send(wire(logout, {}, {}, false));
  const auto bye = await_pdu(
      w.loop, inbox, [](const pdu&) { return true; }, *c);
  FUZZ_REQUIRE(
      bye && bye->header.opcode() == iscsi::opcode::logout_response && bye->header.byte(2) == 0,
      "the fresh connection logs out");
  FUZZ_REQUIRE(run_until(w.loop, wait_bound, [&] { return c->ended(); }),
               "the target closes after a logout");
  c->close();
  c->on_pdu = nullptr;  // it refers to `inbox`; the client lives on until its handlers have run
}

std::unique_ptr<device::memory_device> volume(world& w, std::uint32_t block_bytes) {
  auto d =
      device::memory_device::create(w.loop.get_executor(), {block_bytes, (8u << 20) / block_bytes});
  FUZZ_REQUIRE(d.has_value(), "a memory volume can be created");
  return std::move(*d);
}

world& the_world() {
  static world* w = [] {
    auto* nw = new world;  // never destroyed: see the header
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
    nw->fuzz_luns = std::make_unique<scsi::lun_map>(nw->loop.get_executor());
    nw->chap_luns = std::make_unique<scsi::lun_map>(nw->loop.get_executor());
    FUZZ_REQUIRE(!nw->fuzz_luns->add(0, *nw->unit0) && !nw->fuzz_luns->add(1, *nw->unit1) &&
                     !nw->chap_luns->add(0, *nw->unit1),
                 "the LUN maps take their units");
    iscsi::target_node open;
    open.name = fuzz_target;
    open.anyone = iscsi::initiator_access{nw->fuzz_luns.get(), std::nullopt, std::nullopt};
    iscsi::target_node guarded;
    guarded.name = chap_target;
    guarded.initiators[bystander_initiator] =
        iscsi::initiator_access{nw->chap_luns.get(), bystander_chap, target_chap};
    FUZZ_REQUIRE(!iscsi::check_target(open) && !iscsi::check_target(guarded),
                 "the targets are configured right");
    iscsi::server_options options;  // the defaults: what the daemon runs with
    nw->server = std::make_unique<iscsi::server>(nw->loop.get_executor(),
                                                 std::vector{open, guarded}, options);
    FUZZ_REQUIRE(nw->server->listen({asio::ip::make_address("127.0.0.1"), 0}).has_value(),
                 "the server listens");
    nw->at = nw->server->local_endpoint();
    log_in_bystander(*nw);
    return nw;
  }();
  return *w;
}

// Mode 3's records: each PDU gets its digests here, right or corrupted.
bytes with_digests(fuzz::input& in) {
  bytes out;
  while (!in.empty()) {
    const unsigned corrupt = in.u8();
    const auto header = in.take(iscsi::bhs_bytes);
    if (header.size() < iscsi::bhs_bytes) {
      out.insert(out.end(), header.begin(), header.end());  // a torn header ends the stream
      break;
    }
    const iscsi::bhs h(header.first<iscsi::bhs_bytes>());
    const auto ahs = in.take(h.ahs_bytes());
    const auto data = in.take(h.data_segment_bytes());
    auto pdu_bytes = wire(h, ahs, data, true, corrupt);
    out.insert(out.end(), pdu_bytes.begin(), pdu_bytes.end());
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  world& w = the_world();
  fuzz::input in({data, size});
  const std::uint8_t mode = in.u8();
  const unsigned login = mode & 0x03;
  const canned asked{login == 2, login == 3, (mode & 0x04) != 0 ? 512u : 8192u, (mode & 0x08) != 0};

  const std::size_t connections_before = w.server->connections();
  auto c = std::make_shared<client>(w.loop);
  FUZZ_REQUIRE(c->connect(w.loop, w.at), "the target accepts a connection");
  bytes stream = login == 0 ? bytes{} : canned_login(asked);
  if (login == 3) {
    const bytes records = with_digests(in);
    stream.insert(stream.end(), records.begin(), records.end());
  } else {
    const auto rest = in.rest();
    stream.insert(stream.end(), rest.begin(), rest.end());
  }
  bool first = true;
  c->on_pdu = [&, cl = c.get()](const pdu& p) {
    if (w.trace) trace(p);
    if (login != 0) check_after_canned_login(*cl, asked, first, p);
  };
  c->send(std::move(stream));
  // FIN once the target has answered what it can: it ends the connection
  // on FIN, and would drop the responses still to come (Data-In, status).
  run_until(w.loop, wait_bound, [&] { return c->ended() || (c->sent() && idle(w.loop)); });
  c->half_close_when_sent();
  FUZZ_REQUIRE(run_until(w.loop, wait_bound, [&] { return c->ended(); }),
               "the target closes the connection within 3 s of the initiator's FIN");
  c->close();
  c->on_pdu = nullptr;
  FUZZ_REQUIRE(
      run_until(w.loop, wait_bound, [&] { return w.server->connections() == connections_before; }),
      "the target's connection count goes back once the connection is closed");
  FUZZ_REQUIRE(run_until(w.loop, wait_bound,
                         [&] {
                           return w.unit0->commands_in_flight() == 0 &&
                                  w.unit1->commands_in_flight() == 0 &&
                                  w.fuzz_luns->answers_in_flight() == 0;
                         }),
               "every task of a closed connection finishes");
  if (w.inputs++ % w.check_every == 0) {
    check_bystander(w);
    check_fresh_login(w);
    FUZZ_REQUIRE(run_until(w.loop, wait_bound,
                           [&] { return w.server->connections() == connections_before; }),
                 "the fresh connection is gone once closed");
  }
  return 0;
}
