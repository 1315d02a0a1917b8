#include "target/iscsi/chap.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <stdexcept>

namespace strata::iscsi {

namespace {

// A challenge shorter than this gives a replayed response too good a chance.
constexpr std::size_t min_challenge_bytes = 16;
constexpr std::size_t max_challenge_bytes = 1024;

std::size_t digest_bytes(chap_algorithm a) {
  switch (a) {
    case chap_algorithm::md5:
      return 16;
    case chap_algorithm::sha1:
      return 20;
    case chap_algorithm::sha256:
      return 32;
  }
  return 16;
}

const EVP_MD* evp(chap_algorithm a) {
  switch (a) {
    case chap_algorithm::md5:
      return EVP_md5();
    case chap_algorithm::sha1:
      return EVP_sha1();
    case chap_algorithm::sha256:
      return EVP_sha256();
  }
  return EVP_md5();
}

std::optional<std::string_view> find(const key_values& keys, std::string_view name) {
  for (const auto& [k, v] : keys) {
    if (k == name) return v;
  }
  return std::nullopt;
}

std::unexpected<chap_failure> auth_failed(std::string reason) {
  return std::unexpected(chap_failure{false, std::move(reason)});
}
std::unexpected<chap_failure> malformed(std::string reason) {
  return std::unexpected(chap_failure{true, std::move(reason)});
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int base64_digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::optional<std::string> check_chap_secrets(const chap_credentials& initiator,
                                              const std::optional<chap_credentials>& target) {
  auto check = [](const chap_credentials& c, std::string_view whose) -> std::optional<std::string> {
    if (c.user.empty()) return std::string(whose) + " CHAP user name is empty";
    if (c.secret.size() < min_chap_secret_bytes || c.secret.size() > max_chap_secret_bytes) {
      return std::string(whose) + " CHAP secret has " + std::to_string(c.secret.size()) +
             " bytes; 12 to 255 are allowed";
    }
    return std::nullopt;
  };
  if (auto bad = check(initiator, "the initiator's")) return bad;
  if (target) {
    if (auto bad = check(*target, "the target's (mutual)")) return bad;
    if (target->secret == initiator.secret)
      return "the mutual CHAP secret must differ from the initiator's (RFC 7143 12.1.3)";
  }
  return std::nullopt;
}

std::vector<std::uint8_t> chap_response(chap_algorithm algorithm, std::uint8_t identifier,
                                        std::string_view secret,
                                        std::span<const std::uint8_t> challenge) {
  std::vector<std::uint8_t> out(digest_bytes(algorithm));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned n = 0;
  const bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, evp(algorithm), nullptr) == 1 &&
                  EVP_DigestUpdate(ctx, &identifier, 1) == 1 &&
                  EVP_DigestUpdate(ctx, secret.data(), secret.size()) == 1 &&
                  EVP_DigestUpdate(ctx, challenge.data(), challenge.size()) == 1 &&
                  EVP_DigestFinal_ex(ctx, out.data(), &n) == 1 && n == out.size();
  EVP_MD_CTX_free(ctx);
  // Only an OpenSSL without MD5/SHA (a FIPS build) fails here: no login could succeed.
  if (!ok) throw std::runtime_error("OpenSSL cannot compute the CHAP digest");
  return out;
}

std::expected<std::vector<std::uint8_t>, std::string> decode_binary(std::string_view value) {
  std::vector<std::uint8_t> out;
  if (value.starts_with("0x") || value.starts_with("0X")) {
    value.remove_prefix(2);
    // An odd number of digits: the first stands alone (RFC 7143 6.1: leading zeros may be dropped).
    std::size_t at = 0;
    if (value.size() % 2 == 1) {
      const int d = hex_digit(value[0]);
      if (d < 0) return std::unexpected("not a hex digit: '" + std::string(1, value[0]) + "'");
      out.push_back(static_cast<std::uint8_t>(d));
      at = 1;
    }
    for (; at < value.size(); at += 2) {
      const int hi = hex_digit(value[at]);
      const int lo = hex_digit(value[at + 1]);
      if (hi < 0 || lo < 0)
        return std::unexpected("not a hex number: '" + std::string(value.substr(0, 64)) + "'");
      out.push_back(static_cast<std::uint8_t>(hi << 4 | lo));
    }
  } else if (value.starts_with("0b") || value.starts_with("0B")) {
    value.remove_prefix(2);
    while (value.ends_with('=')) value.remove_suffix(1);
    std::uint32_t bits = 0;
    int held = 0;
    for (const char c : value) {
      const int d = base64_digit(c);
      if (d < 0) return std::unexpected("not a base64 digit: '" + std::string(1, c) + "'");
      bits = bits << 6 | static_cast<std::uint32_t>(d);
      held += 6;
      if (held >= 8) {
        held -= 8;
        out.push_back(static_cast<std::uint8_t>(bits >> held));
      }
    }
  } else {
    return std::unexpected("a binary value must start with 0x or 0b: '" +
                           std::string(value.substr(0, 64)) + "'");
  }
  if (out.empty()) return std::unexpected("an empty binary value");
  return out;
}

std::string encode_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out = "0x";
  for (const std::uint8_t b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

chap_target::chap_target(chap_credentials initiator, std::optional<chap_credentials> target)
    : initiator_(std::move(initiator)), target_(std::move(target)) {}

std::expected<key_values, chap_failure> chap_target::challenge(const key_values& offered) {
  const auto list = find(offered, "CHAP_A");
  if (!list) return malformed("CHAP_A missing after AuthMethod=CHAP");
  std::optional<chap_algorithm> chosen;
  for (std::string_view rest = *list; !chosen;) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (item == "5") chosen = chap_algorithm::md5;
    if (item == "6") chosen = chap_algorithm::sha1;
    if (item == "7") chosen = chap_algorithm::sha256;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (!chosen)
    return auth_failed("no CHAP algorithm in common: the initiator offers CHAP_A=" +
                       std::string(*list) + ", Strata has 5 (MD5), 6 (SHA-1), 7 (SHA-256)");
  algorithm_ = *chosen;
  challenge_.resize(std::max(digest_bytes(algorithm_), min_challenge_bytes));
  if (RAND_bytes(&identifier_, 1) != 1 ||
      RAND_bytes(challenge_.data(), static_cast<int>(challenge_.size())) != 1) {
    throw std::runtime_error("OpenSSL has no random bytes for a CHAP challenge");
  }
  return key_values{{"CHAP_A", std::to_string(static_cast<int>(algorithm_))},
                    {"CHAP_I", std::to_string(identifier_)},
                    {"CHAP_C", encode_hex(challenge_)}};
}

std::expected<key_values, chap_failure> chap_target::verify(const key_values& offered) {
  const auto name = find(offered, "CHAP_N");
  const auto response = find(offered, "CHAP_R");
  if (!name || !response) return malformed("CHAP_N or CHAP_R missing");
  const auto got = decode_binary(*response);
  if (!got) return malformed("CHAP_R: " + got.error());
  // Both checks run, so that timing does not tell a wrong name from a wrong secret.
  const bool user_ok = *name == initiator_.user;
  const auto expected = chap_response(algorithm_, identifier_, initiator_.secret, challenge_);
  const bool response_ok = got->size() == expected.size() &&
                           CRYPTO_memcmp(got->data(), expected.data(), expected.size()) == 0;
  if (!user_ok || !response_ok) {
    return auth_failed("CHAP failed for user '" + std::string(name->substr(0, 255)) +
                       "': " + (user_ok ? "wrong response (a wrong secret)" : "unknown user name"));
  }

  const auto mutual_id = find(offered, "CHAP_I");
  const auto mutual_challenge = find(offered, "CHAP_C");
  if (!mutual_id && !mutual_challenge) return key_values{};
  if (!mutual_id || !mutual_challenge) return malformed("mutual CHAP needs both CHAP_I and CHAP_C");
  if (!target_) return auth_failed("the initiator asks for mutual CHAP; none is configured for it");
  const auto id = [&]() -> std::optional<std::uint8_t> {
    unsigned v = 0;
    if (mutual_id->empty() || mutual_id->size() > 3) return std::nullopt;
    for (const char c : *mutual_id) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + static_cast<unsigned>(c - '0');
    }
    if (v > 255) return std::nullopt;
    return static_cast<std::uint8_t>(v);
  }();
  if (!id)
    return malformed("CHAP_I is not a number 0..255: '" + std::string(mutual_id->substr(0, 16)) +
                     "'");
  const auto theirs = decode_binary(*mutual_challenge);
  if (!theirs) return malformed("CHAP_C: " + theirs.error());
  if (theirs->size() < min_challenge_bytes || theirs->size() > max_challenge_bytes) {
    return auth_failed("the initiator's CHAP challenge has " + std::to_string(theirs->size()) +
                       " bytes; 16 to 1024 are accepted");
  }
  if (*theirs == challenge_)
    return auth_failed("the initiator's CHAP challenge repeats the target's (a reflection attack)");
  return key_values{
      {"CHAP_N", target_->user},
      {"CHAP_R", encode_hex(chap_response(algorithm_, *id, target_->secret, *theirs))}};
}

}  // namespace strata::iscsi
