// CHAP for iSCSI logins (chap.h): the digests against vectors computed
// independently (Python's hashlib), binary values, and the target's side of
// the exchange, one-way and mutual, with each way it must refuse.
#include <catch2/catch.hpp>
#include <numeric>
#include <string>

#include "target/iscsi/chap.h"

namespace strata::iscsi {
namespace {

std::string value_of(const key_values& kv, std::string_view key) {
  for (const auto& [k, v] : kv) {
    if (k == key) return v;
  }
  return "(absent)";
}

std::vector<std::uint8_t> iota_bytes(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  std::iota(v.begin(), v.end(), std::uint8_t{0});
  return v;
}

const chap_credentials alice{"alice", "alicesecret12"};
const chap_credentials array{"array", "arraysecret12"};

// The initiator's side, as a real initiator computes it.
key_values answer(const key_values& challenge, const chap_credentials& who) {
  const auto algorithm = static_cast<chap_algorithm>(std::stoi(value_of(challenge, "CHAP_A")));
  const auto id = static_cast<std::uint8_t>(std::stoi(value_of(challenge, "CHAP_I")));
  const auto c = decode_binary(value_of(challenge, "CHAP_C"));
  REQUIRE(c);
  return {{"CHAP_N", who.user},
          {"CHAP_R", encode_hex(chap_response(algorithm, id, who.secret, *c))}};
}

TEST_CASE("chap: responses match independently computed digests", "[target][iscsi][chap]") {
  CHECK(encode_hex(chap_response(chap_algorithm::md5, 7, "alicesecret12", iota_bytes(16))) ==
        "0x12d1b6a5d2644d6c54e5fd724cc21d44");
  CHECK(encode_hex(chap_response(chap_algorithm::sha256, 200, "alicesecret12", iota_bytes(32))) ==
        "0xe9dee3d3ebd6c064bc1f0d62a120919597cb3920abadea8305935d50ed49bb25");
  CHECK(chap_response(chap_algorithm::sha1, 1, "x", iota_bytes(20)).size() == 20);
}

TEST_CASE("chap: binary values in hex and base64", "[target][iscsi][chap]") {
  CHECK(*decode_binary("0xDEADbeef01") == std::vector<std::uint8_t>{0xde, 0xad, 0xbe, 0xef, 0x01});
  CHECK(*decode_binary("0xabc") == std::vector<std::uint8_t>{0x0a, 0xbc});  // leading zero dropped
  CHECK(*decode_binary("0b3q2+7wE=") == std::vector<std::uint8_t>{0xde, 0xad, 0xbe, 0xef, 0x01});
  CHECK_FALSE(decode_binary("deadbeef"));
  CHECK_FALSE(decode_binary("0x"));
  CHECK_FALSE(decode_binary("0xzz"));
  CHECK_FALSE(decode_binary("0b!!"));
  CHECK(encode_hex(std::vector<std::uint8_t>{0x00, 0xff}) == "0x00ff");
}

TEST_CASE("chap: secrets are checked when configured", "[target][iscsi][chap]") {
  CHECK_FALSE(check_chap_secrets(alice, array));
  CHECK(check_chap_secrets({"alice", "short"}, std::nullopt)->find("12 to 255") !=
        std::string::npos);
  CHECK(check_chap_secrets({"", "alicesecret12"}, std::nullopt));
  CHECK(check_chap_secrets(alice, chap_credentials{"array", alice.secret})->find("differ") !=
        std::string::npos);
}

TEST_CASE("chap: one-way exchange, with each algorithm", "[target][iscsi][chap]") {
  const auto [offer, chosen] = GENERATE(table<std::string, std::string>(
      {{"5", "5"}, {"6", "6"}, {"7", "7"}, {"8,7,5", "7"}, {"99,6,5", "6"}}));
  chap_target t(alice, std::nullopt);
  const auto c = t.challenge({{"CHAP_A", offer}});
  REQUIRE(c);
  CHECK(value_of(*c, "CHAP_A") == chosen);
  CHECK(decode_binary(value_of(*c, "CHAP_C"))->size() >= 16);
  const auto done = t.verify(answer(*c, alice));
  REQUIRE(done);
  CHECK(done->empty());  // nothing more to say without mutual CHAP
}

TEST_CASE("chap: each refusal says why", "[target][iscsi][chap]") {
  chap_target t(alice, std::nullopt);
  SECTION("no algorithm in common") {
    const auto c = t.challenge({{"CHAP_A", "8,9"}});
    REQUIRE_FALSE(c);
    CHECK_FALSE(c.error().initiator_error);
    CHECK(c.error().reason.find("no CHAP algorithm in common") != std::string::npos);
  }
  SECTION("CHAP_A missing") {
    const auto c = t.challenge({{"CHAP_X", "5"}});
    REQUIRE_FALSE(c);
    CHECK(c.error().initiator_error);
  }
  SECTION("a wrong secret") {
    const auto c = t.challenge({{"CHAP_A", "5"}});
    const auto v = t.verify(answer(*c, {"alice", "notthesecret1"}));
    REQUIRE_FALSE(v);
    CHECK_FALSE(v.error().initiator_error);
    CHECK(v.error().reason.find("wrong response") != std::string::npos);
  }
  SECTION("a wrong user") {
    const auto c = t.challenge({{"CHAP_A", "5"}});
    const auto v = t.verify(answer(*c, {"mallory", alice.secret}));
    REQUIRE_FALSE(v);
    CHECK(v.error().reason.find("unknown user name") != std::string::npos);
  }
  SECTION("a malformed response") {
    t.challenge({{"CHAP_A", "5"}});
    const auto v = t.verify({{"CHAP_N", "alice"}, {"CHAP_R", "12345"}});
    REQUIRE_FALSE(v);
    CHECK(v.error().initiator_error);
  }
  SECTION("a response to another identifier") {
    auto c = t.challenge({{"CHAP_A", "5"}});
    const auto id = std::stoi(value_of(*c, "CHAP_I"));
    for (auto& [k, v] : *c) {
      if (k == "CHAP_I") v = std::to_string((id + 1) % 256);
    }
    CHECK_FALSE(t.verify(answer(*c, alice)));
  }
  SECTION("mutual CHAP asked for where none is configured") {
    const auto c = t.challenge({{"CHAP_A", "5"}});
    auto a = answer(*c, alice);
    a.emplace_back("CHAP_I", "1");
    a.emplace_back("CHAP_C", encode_hex(iota_bytes(16)));
    const auto v = t.verify(a);
    REQUIRE_FALSE(v);
    CHECK(v.error().reason.find("none is configured") != std::string::npos);
  }
}

TEST_CASE("chap: mutual exchange answers the initiator's challenge", "[target][iscsi][chap]") {
  chap_target t(alice, array);
  const auto c = t.challenge({{"CHAP_A", "7"}});
  REQUIRE(c);
  const auto mine = iota_bytes(32);
  auto a = answer(*c, alice);
  a.emplace_back("CHAP_I", "42");
  a.emplace_back("CHAP_C", encode_hex(mine));
  const auto v = t.verify(a);
  REQUIRE(v);
  CHECK(value_of(*v, "CHAP_N") == "array");
  CHECK(value_of(*v, "CHAP_R") ==
        encode_hex(chap_response(chap_algorithm::sha256, 42, array.secret, mine)));

  SECTION("a reflected challenge is refused") {
    chap_target r(alice, array);
    const auto rc = r.challenge({{"CHAP_A", "5"}});
    auto ra = answer(*rc, alice);
    ra.emplace_back("CHAP_I", "1");
    ra.emplace_back("CHAP_C", value_of(*rc, "CHAP_C"));  // the target's own challenge back
    const auto rv = r.verify(ra);
    REQUIRE_FALSE(rv);
    CHECK(rv.error().reason.find("reflection") != std::string::npos);
  }
  SECTION("a short challenge is refused") {
    chap_target s(alice, array);
    const auto sc = s.challenge({{"CHAP_A", "5"}});
    auto sa = answer(*sc, alice);
    sa.emplace_back("CHAP_I", "1");
    sa.emplace_back("CHAP_C", "0x0102");
    CHECK_FALSE(s.verify(sa));
  }
  SECTION("CHAP_I without CHAP_C is malformed") {
    chap_target m(alice, array);
    const auto mc = m.challenge({{"CHAP_A", "5"}});
    auto ma = answer(*mc, alice);
    ma.emplace_back("CHAP_I", "1");
    const auto mv = m.verify(ma);
    REQUIRE_FALSE(mv);
    CHECK(mv.error().initiator_error);
  }
}

}  // namespace
}  // namespace strata::iscsi
