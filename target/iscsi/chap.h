// CHAP (RFC 1994, as iSCSI uses it: RFC 7143 12.1.3) for a login's
// security stage: the target challenges the initiator, and with mutual
// CHAP answers the initiator's challenge in turn.
//
// The exchange, as keys (text.h):
//   initiator: AuthMethod=CHAP,...       target: AuthMethod=CHAP    (server.cc)
//   initiator: CHAP_A=<algorithms>       target: CHAP_A, CHAP_I, CHAP_C     challenge()
//   initiator: CHAP_N, CHAP_R [, CHAP_I, CHAP_C]
//                                        target: [CHAP_N, CHAP_R]           verify()
// Algorithms: MD5 (5), SHA-1 (6) and SHA-256 (7), the initiator's first
// choice of them. Binary values are accepted in hex (0x) or base64 (0b) and
// sent in hex.
//
// What makes a login fail, each with its reason: no common algorithm, a
// malformed or missing key, a wrong user name or response, a challenge from
// the initiator that repeats the target's (a reflection attack, RFC 7143
// 12.1.3), or one too short to be safe, or mutual CHAP asked for where none
// is configured.
//
// Pure computation over keys, plus random challenges: no I/O, no threads.
// One object serves one login.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "target/iscsi/text.h"

namespace strata::iscsi {

// A CHAP identity: a user name and its secret.
struct chap_credentials {
  std::string user;
  std::string secret;
};

// RFC 7143 12.1.3 asks for secrets of at least 96 bits; CHAP digests carry
// at most 255 bytes.
inline constexpr std::size_t min_chap_secret_bytes = 12;
inline constexpr std::size_t max_chap_secret_bytes = 255;
// Checks a configured secret: its length, and (for a target's own secret)
// that it differs from the initiator's, which RFC 7143 12.1.3 requires.
// Empty when it is fine; else what is wrong.
std::optional<std::string> check_chap_secrets(const chap_credentials& initiator,
                                              const std::optional<chap_credentials>& target);

// CHAP_A values (IANA "iSCSI CHAP algorithm" registry).
enum class chap_algorithm : std::uint8_t { md5 = 5, sha1 = 6, sha256 = 7 };

// RFC 1994's response: H(identifier || secret || challenge).
std::vector<std::uint8_t> chap_response(chap_algorithm algorithm, std::uint8_t identifier,
                                        std::string_view secret,
                                        std::span<const std::uint8_t> challenge);

// A binary value (RFC 7143 6.1): "0x" and hex digits, or "0b" and base64.
std::expected<std::vector<std::uint8_t>, std::string> decode_binary(std::string_view value);
std::string encode_hex(std::span<const std::uint8_t> bytes);

// Why an exchange failed: the message names what the initiator got wrong.
struct chap_failure {
  bool initiator_error =
      false;  // a malformed exchange (login status 02/00); else authentication failed (02/01)
  std::string reason;
};

class chap_target {
 public:
  // `initiator`: what the initiator must prove. `target`: what the target
  // proves to an initiator that asks (mutual CHAP); none: such a request fails.
  chap_target(chap_credentials initiator, std::optional<chap_credentials> target);

  // The answer to CHAP_A: the algorithm chosen, an identifier and a challenge.
  std::expected<key_values, chap_failure> challenge(const key_values& offered);
  // Checks CHAP_N and CHAP_R, and answers a mutual challenge if there is one.
  // REQUIRES: challenge() succeeded.
  std::expected<key_values, chap_failure> verify(const key_values& offered);

 private:
  chap_credentials initiator_;
  std::optional<chap_credentials> target_;
  chap_algorithm algorithm_ = chap_algorithm::md5;
  std::uint8_t identifier_ = 0;
  std::vector<std::uint8_t> challenge_;
};

}  // namespace strata::iscsi
