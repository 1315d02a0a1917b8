// RAID-6 arithmetic: P and Q as Linux md defines them (checked against a
// byte-at-a-time reference), every single and pair of lost strips rebuilt
// for 4- to 8-member stripes, and single corrupted strips located.
#include "raid/pq.h"

#include <cstring>
#include <random>

#include "tests/raid/device/harness.h"

namespace strata::raid {
namespace {

using device::testing::test_seed;

// Multiplication by g = 2 in GF(2^8) with md's polynomial 0x11d.
std::uint8_t times_g(std::uint8_t x) {
  return static_cast<std::uint8_t>((x << 1) ^ ((x & 0x80) ? 0x1d : 0));
}

// A stripe of n data strips plus P and Q, with random data.
struct stripe {
  unsigned n;
  std::size_t length;
  std::vector<device::aligned_buffer> buffers;
  std::vector<std::byte*> strips;

  stripe(unsigned data_strips, std::size_t length_bytes, std::mt19937_64& random)
      : n(data_strips), length(length_bytes) {
    for (unsigned i = 0; i < n + 2; ++i) {
      buffers.emplace_back(length);
      strips.push_back(buffers.back().data());
    }
    for (unsigned i = 0; i < n; ++i) {
      for (std::size_t b = 0; b < length; ++b) strips[i][b] = static_cast<std::byte>(random());
    }
  }
  std::vector<std::byte> copy(unsigned strip) const {
    return {strips[strip], strips[strip] + length};
  }
};

}  // namespace

TEST_CASE("pq: P and Q are md's, byte for byte", "[raid][pq]") {
  std::mt19937_64 random(test_seed());
  for (unsigned n = 2; n <= 12; ++n) {
    auto codec = pq_codec::create(n);
    REQUIRE(codec);
    stripe s(n, 4096, random);
    REQUIRE_FALSE(codec->encode(s.strips, s.length));
    for (std::size_t b = 0; b < s.length; ++b) {
      // Horner's rule, as md's reference code: Q = ((D_{n-1} g + D_{n-2}) g + ...) + D_0.
      std::uint8_t p = 0, q = 0;
      for (unsigned i = n; i-- > 0;) {
        const auto d = static_cast<std::uint8_t>(s.strips[i][b]);
        p ^= d;
        q = static_cast<std::uint8_t>(times_g(q) ^ d);
      }
      INFO("n " << n << ", byte " << b);
      REQUIRE(static_cast<std::uint8_t>(s.strips[n][b]) == p);
      REQUIRE(static_cast<std::uint8_t>(s.strips[n + 1][b]) == q);
    }
  }
}

TEST_CASE("pq: every single and every pair of lost strips is rebuilt (4 to 8 members)",
          "[raid][pq]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937_64 random(seed);
  for (unsigned members = 4; members <= 8; ++members) {
    const unsigned n = members - 2;
    auto codec = pq_codec::create(n);
    REQUIRE(codec);
    stripe s(n, 512, random);
    REQUIRE_FALSE(codec->encode(s.strips, s.length));
    std::vector<std::vector<std::byte>> good;
    for (unsigned i = 0; i < members; ++i) good.push_back(s.copy(i));

    auto lose_and_rebuild = [&](std::vector<unsigned> lost) {
      for (unsigned l : lost) std::memset(s.strips[l], 0xa5, s.length);  // garbage, not zeros
      REQUIRE_FALSE(codec->rebuild(s.strips, lost, s.length));
      for (unsigned i = 0; i < members; ++i) {
        INFO(members << " members, lost " << lost[0]
                     << (lost.size() > 1 ? "," + std::to_string(lost[1]) : "") << ", strip " << i);
        REQUIRE(s.copy(i) == good[i]);
      }
    };
    for (unsigned a = 0; a < members; ++a) {
      lose_and_rebuild({a});
      for (unsigned b = a + 1; b < members; ++b) {
        lose_and_rebuild({a, b});
        lose_and_rebuild({b, a});  // order does not matter
      }
    }
  }
}

TEST_CASE("pq: a single corrupted strip is located; two are reported as such", "[raid][pq]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937_64 random(seed);
  for (unsigned n : {2u, 4u, 10u}) {
    auto codec = pq_codec::create(n);
    REQUIRE(codec);
    stripe s(n, 4096, random);
    REQUIRE_FALSE(codec->encode(s.strips, s.length));
    CHECK(codec->check(s.strips, s.length).verdict == pq_check_result::kind::consistent);

    for (unsigned victim = 0; victim < n + 2; ++victim) {
      const auto original = s.copy(victim);
      // A few flipped bytes anywhere in the strip.
      for (int k = 0; k < 3; ++k) {
        const std::size_t at = random() % s.length;
        s.strips[victim][at] ^= static_cast<std::byte>(1 + random() % 255);
      }
      const pq_check_result r = codec->check(s.strips, s.length);
      INFO("n " << n << ", corrupted strip " << victim);
      REQUIRE(r.verdict == pq_check_result::kind::one_strip_wrong);
      CHECK(r.strip == victim);
      // Rebuilding the named strip repairs the stripe.
      const unsigned lost[] = {r.strip};
      REQUIRE_FALSE(codec->rebuild(s.strips, lost, s.length));
      CHECK(s.copy(victim) == original);
      CHECK(codec->check(s.strips, s.length).verdict == pq_check_result::kind::consistent);
    }

    // Two data strips wrong in different bytes: no single culprit explains
    // both. (Two errors in the same byte can alias one: D0 and D1 off by 1
    // give Sp = 0, Sq = 3, exactly Q off by 3. Two parities cannot tell.)
    s.strips[0][100] ^= std::byte{1};
    s.strips[1][200] ^= std::byte{1};
    CHECK(codec->check(s.strips, s.length).verdict == pq_check_result::kind::several_wrong);
  }
}

TEST_CASE("pq: read-modify-write updates give the same parity as encoding afresh", "[raid][pq]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937_64 random(seed);
  for (unsigned n : {2u, 5u, 10u}) {
    auto codec = pq_codec::create(n);
    REQUIRE(codec);
    stripe s(n, 4096, random);
    REQUIRE_FALSE(codec->encode(s.strips, s.length));
    for (unsigned i = 0; i < n; ++i) {
      // Change data strip i; fold old XOR new into P and Q.
      device::aligned_buffer delta(s.length);
      for (std::size_t b = 0; b < s.length; ++b) {
        const auto fresh = static_cast<std::byte>(random());
        delta.data()[b] = s.strips[i][b] ^ fresh;
        s.strips[i][b] = fresh;
      }
      REQUIRE_FALSE(codec->update(i, delta.data(), s.strips[n], s.strips[n + 1], s.length));
      INFO("n " << n << ", strip " << i);
      CHECK(codec->check(s.strips, s.length).verdict == pq_check_result::kind::consistent);
    }
  }
}

TEST_CASE("pq: bad geometry and bad buffers are refused", "[raid][pq]") {
  CHECK_FALSE(pq_codec::create(1));
  CHECK_FALSE(pq_codec::create(254));
  auto one = pq_codec::create(1);
  REQUIRE_FALSE(one);
  CHECK(one.error().message.find("2 to 253") != std::string::npos);

  std::mt19937_64 random(1);
  auto codec = pq_codec::create(4);
  REQUIRE(codec);
  stripe s(4, 4096, random);
  CHECK(codec->encode(s.strips, 100) == make_error_code(errc::invalid_argument));  // not x32
  std::vector<std::byte*> short_list(s.strips.begin(), s.strips.begin() + 5);
  CHECK(codec->encode(short_list, s.length) == make_error_code(errc::invalid_argument));
  std::vector<std::byte*> shifted = s.strips;
  shifted[2] += 1;
  CHECK(codec->encode(shifted, s.length) == make_error_code(errc::misaligned));
  const unsigned three[] = {0, 1, 2};
  CHECK(codec->rebuild(s.strips, three, s.length) == make_error_code(errc::invalid_argument));
  const unsigned twice[] = {3, 3};
  CHECK(codec->rebuild(s.strips, twice, s.length) == make_error_code(errc::invalid_argument));
  const unsigned beyond[] = {6};
  CHECK(codec->rebuild(s.strips, beyond, s.length) == make_error_code(errc::invalid_argument));
}

}  // namespace strata::raid
