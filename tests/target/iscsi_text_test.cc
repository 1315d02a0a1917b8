// iSCSI text keys and negotiation (RFC 7143 sections 6 and 13), the
// CRC32C digest, and SendTargets discovery through a running server.
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <expected>
#include <string>
#include <thread>

#include "target/crc32c.h"
#include "target/iscsi/pdu.h"
#include "target/iscsi/server.h"
#include "target/iscsi/text.h"
#include "target/scsi/lun_map.h"

namespace strata::iscsi {
namespace {

std::vector<std::uint8_t> bytes(std::string_view s) {
  return {s.begin(), s.end()};
}

std::string value_of(const key_values& kv, std::string_view key) {
  for (const auto& [k, v] : kv) {
    if (k == key) return v;
  }
  return "(absent)";
}

TEST_CASE("iscsi text: pairs parse and format back", "[target][iscsi]") {
  const auto data = bytes(std::string("InitiatorName=iqn.x\0SessionType=Normal\0\0\0", 42));
  const auto kv = parse_text(data);
  REQUIRE(kv);
  REQUIRE(kv->size() == 2);
  CHECK((*kv)[0] == std::pair<std::string, std::string>{"InitiatorName", "iqn.x"});
  CHECK((*kv)[1].second == "Normal");
  const auto again = format_text(*kv);
  CHECK(again == bytes(std::string("InitiatorName=iqn.x\0SessionType=Normal\0", 39)));
}

TEST_CASE("iscsi text: malformed pairs are refused with the reason", "[target][iscsi]") {
  auto no_eq = parse_text(bytes(std::string("NoEquals\0", 9)));
  REQUIRE_FALSE(no_eq);
  CHECK(no_eq.error().find("without '='") != std::string::npos);
  auto long_key = parse_text(bytes(std::string(64, 'K') + "=1"));
  REQUIRE_FALSE(long_key);
  CHECK(long_key.error().find("64 bytes") != std::string::npos);
  CHECK_FALSE(parse_text(bytes("=value")));
}

TEST_CASE("iscsi negotiation: each key by its RFC rule", "[target][iscsi]") {
  session_params p;
  target_offer offer;
  const key_values offered = {
      {"InitiatorName", "iqn.1994-05.com.redhat:host"},
      {"SessionType", "Normal"},
      {"TargetName", "iqn.2026-11.io.strata:t"},
      {"HeaderDigest", "CRC32C,None"},
      {"DataDigest", "None"},
      {"MaxRecvDataSegmentLength", "65536"},
      {"MaxBurstLength", "16776192"},  // more than Strata allows: the minimum
      {"FirstBurstLength", "262144"},
      {"InitialR2T", "No"},
      {"ImmediateData", "Yes"},
      {"MaxOutstandingR2T", "8"},
      {"ErrorRecoveryLevel", "2"},
      {"MaxConnections", "16"},
      {"DefaultTime2Wait", "5"},
      {"DefaultTime2Retain", "0"},
      {"IFMarker", "Yes"},
      {"X-com.example.Private", "1"},
      {"MaxBurstLength", "huge"},
  };
  const key_values answers = negotiate(offered, offer, p);
  CHECK(p.initiator_name == "iqn.1994-05.com.redhat:host");
  CHECK(p.target_name == "iqn.2026-11.io.strata:t");
  CHECK(value_of(answers, "HeaderDigest") == "CRC32C");
  CHECK(p.header_digest);
  CHECK_FALSE(p.data_digest);
  CHECK(value_of(answers, "MaxRecvDataSegmentLength") ==
        std::to_string(offer.max_recv_data_segment_bytes));
  CHECK(p.initiator_max_recv_data_segment_bytes == 65536);
  CHECK(p.max_burst_bytes == offer.max_burst_bytes);
  CHECK(p.first_burst_bytes == offer.first_burst_bytes);
  CHECK(value_of(answers, "InitialR2T") == "No");  // OR of No and Strata's No
  CHECK(value_of(answers, "ImmediateData") == "Yes");
  CHECK(value_of(answers, "MaxOutstandingR2T") == "1");
  CHECK(value_of(answers, "ErrorRecoveryLevel") == "0");
  CHECK(value_of(answers, "MaxConnections") ==
        std::to_string(offer.max_connections));  // the minimum
  CHECK(value_of(answers, "DefaultTime2Wait") == "5");
  CHECK(value_of(answers, "DefaultTime2Retain") == "0");
  CHECK(value_of(answers, "IFMarker") == "No");
  CHECK(value_of(answers, "X-com.example.Private") == "NotUnderstood");
  // The second, malformed MaxBurstLength is rejected, the first stands.
  CHECK(answers.back() == std::pair<std::string, std::string>{"MaxBurstLength", "Reject"});
  CHECK(value_of(answers, "InitiatorName") == "(absent)");  // declarative: no answer
}

TEST_CASE("iscsi negotiation: a digest Strata cannot do is rejected", "[target][iscsi]") {
  session_params p;
  const auto answers =
      negotiate({{"HeaderDigest", "MD5"}, {"SessionType", "Bogus"}}, target_offer{}, p);
  CHECK(value_of(answers, "HeaderDigest") == "Reject");
  CHECK(value_of(answers, "SessionType") == "Reject");
}

TEST_CASE("iscsi negotiation: the keys only a session's first connection negotiates",
          "[target][iscsi]") {
  for (const char* key :
       {"MaxConnections", "ImmediateData", "MaxBurstLength", "ErrorRecoveryLevel", "SessionType"}) {
    CHECK(is_leading_only_key(key));
  }
  for (const char* key :
       {"HeaderDigest", "DataDigest", "MaxRecvDataSegmentLength", "InitiatorName", "TargetName"}) {
    CHECK_FALSE(is_leading_only_key(key));
  }
}

TEST_CASE("iscsi digest: CRC32C of the RFC 3720 test vectors", "[target][iscsi]") {
  const auto check = bytes("123456789");
  CHECK(crc32c(check) == 0xe3069283);
  // 32 bytes of zeros (RFC 3720 B.4): aa 36 91 8a on the wire.
  std::vector<std::uint8_t> zeros(32, 0);
  std::uint8_t wire[4];
  put_digest(crc32c(zeros), wire);
  CHECK(wire[0] == 0xaa);
  CHECK(wire[1] == 0x36);
  CHECK(wire[2] == 0x91);
  CHECK(wire[3] == 0x8a);
  // Chained over two pieces, the same as over the whole.
  CHECK(crc32c(std::span(zeros).subspan(7), crc32c(std::span(zeros).first(7))) == crc32c(zeros));
}

TEST_CASE("iscsi pdu: fields land where RFC 7143 puts them", "[target][iscsi]") {
  bhs h;
  h.set_opcode(opcode::scsi_response);
  h.set_final(true);
  h.set_data_segment_bytes(0x012345);
  h.set_initiator_task_tag(0xdeadbeef);
  h.set_u32(field::stat_sn, 7);
  const auto w = h.wire();
  CHECK(w[0] == 0x21);
  CHECK(w[1] == 0x80);
  CHECK(w[5] == 0x01);
  CHECK(w[6] == 0x23);
  CHECK(w[7] == 0x45);
  CHECK(w[16] == 0xde);
  CHECK(w[19] == 0xef);
  CHECK(w[27] == 7);
  CHECK(h.data_segment_bytes() == 0x012345);
  CHECK(padded(5) == 8);
  CHECK(sn_less(0xffffffff, 0));  // serial number arithmetic wraps
  CHECK_FALSE(sn_less(0, 0xffffffff));
}

// A discovery session over a blocking socket, on the test's own thread:
// logs in with SessionType=Discovery, asks SendTargets=All, and returns
// the answer's keys, or what went wrong (Catch2's assertions belong to the
// main thread, so none here).
std::expected<key_values, std::string> send_targets(std::uint16_t port) {
  try {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    auto exchange = [&](bhs request, const key_values& keys) {
      const std::vector<std::uint8_t> data = format_text(keys);
      request.set_data_segment_bytes(static_cast<std::uint32_t>(data.size()));
      std::vector<std::uint8_t> wire(request.wire().begin(), request.wire().end());
      wire.insert(wire.end(), data.begin(), data.end());
      wire.resize(bhs_bytes + padded(static_cast<std::uint32_t>(data.size())));
      boost::asio::write(socket, boost::asio::buffer(wire));
      std::array<std::uint8_t, bhs_bytes> header{};
      boost::asio::read(socket, boost::asio::buffer(header));
      const bhs response{header};
      std::vector<std::uint8_t> body(padded(response.data_segment_bytes()));
      boost::asio::read(socket, boost::asio::buffer(body));
      body.resize(response.data_segment_bytes());
      return std::pair{response, parse_text(body).value_or(key_values{})};
    };
    std::uint32_t stat_sn = 0;
    auto login = [&](unsigned current, unsigned next, const key_values& keys) {
      bhs h;
      h.set_byte(0, 0x40 | static_cast<std::uint8_t>(opcode::login_request));  // immediate
      h.set_flags(static_cast<std::uint8_t>(0x80 | (current << 2) | next));    // transit
      const std::uint8_t isid[6] = {0x80, 0, 0, 0, 0, 1};
      for (std::size_t i = 0; i < 6; ++i) h.set_byte(field::isid + i, isid[i]);
      h.set_initiator_task_tag(1);
      h.set_u32(field::cmd_sn, 1);
      auto [response, answer] = exchange(h, keys);
      stat_sn = response.u32(field::stat_sn);
      return response.byte(field::status_class) == 0;
    };
    if (!login(
            0, 1,
            {{"InitiatorName", "iqn.x:i"}, {"SessionType", "Discovery"}, {"AuthMethod", "None"}})) {
      return std::unexpected("the security stage was refused");
    }
    if (!login(1, 3, {})) return std::unexpected("the operational stage was refused");
    bhs text;
    text.set_opcode(opcode::text_request);
    text.set_final(true);
    text.set_initiator_task_tag(2);
    text.set_u32(field::target_transfer_tag, reserved_tag);
    text.set_u32(field::cmd_sn, 1);
    text.set_u32(field::exp_stat_sn, stat_sn + 1);
    auto [response, keys] = exchange(text, {{"SendTargets", "All"}});
    if (response.opcode() != opcode::text_response || !response.final())
      return std::unexpected("not one final Text Response");
    return keys;
  } catch (const boost::system::system_error& e) {
    return std::unexpected(std::string(e.what()));
  }
}

// Runs a server of one target open to anyone, advertising `portals`, and
// returns what SendTargets=All answers, and where the server listened.
std::pair<std::expected<key_values, std::string>, boost::asio::ip::tcp::endpoint> discover(
    std::vector<std::string> portals) {
  boost::asio::io_context loop;
  scsi::lun_map luns(loop.get_executor());
  server_options options;
  options.portals = std::move(portals);
  server target(loop.get_executor(),
                {target_node{"iqn.x:t", {}, initiator_access{&luns, std::nullopt, std::nullopt}}},
                options);
  REQUIRE(target.listen({boost::asio::ip::make_address("127.0.0.1"), 0}));
  const auto at = target.local_endpoint();
  std::atomic<bool> done = false;
  std::expected<key_values, std::string> keys;
  std::thread initiator([&, port = at.port()] {
    keys = send_targets(port);
    done = true;
  });
  // A server that never answers: stop() closes the connection, and the
  // initiator's read fails instead of hanging the test.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done && std::chrono::steady_clock::now() < deadline)
    loop.run_one_for(std::chrono::milliseconds(10));
  target.stop();
  while (!done) loop.run_one_for(std::chrono::milliseconds(10));
  initiator.join();
  loop.run_for(std::chrono::milliseconds(50));
  return {keys, at};
}

TEST_CASE("iscsi SendTargets: names the address the initiator came in on, unless portals are given",
          "[target][iscsi]") {
  const auto [plain, at] = discover({});
  REQUIRE(plain.has_value());
  CHECK(*plain == key_values{{"TargetName", "iqn.x:t"},
                             {"TargetAddress", "127.0.0.1:" + std::to_string(at.port()) + ",1"}});
  // Advertised portals (NAT, a service address, several interfaces): each
  // in portal group 1, in the order given, instead of the listening address.
  const auto [advertised, unused] = discover({"array1.example.com:3260", "[2001:db8::1]:3260"});
  REQUIRE(advertised.has_value());
  CHECK(*advertised == key_values{{"TargetName", "iqn.x:t"},
                                  {"TargetAddress", "array1.example.com:3260,1"},
                                  {"TargetAddress", "[2001:db8::1]:3260,1"}});
}

}  // namespace
}  // namespace strata::iscsi
