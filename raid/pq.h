// RAID-6 P+Q arithmetic: the same code as Linux md's raid6, so a stripe
// written by either reads back with the other.
//
// Over GF(2^8) with polynomial 0x11d and generator g = 2, a stripe of n data
// strips D_0..D_{n-1} has
//   P = D_0 + D_1 + ... + D_{n-1}            (+ is XOR)
//   Q = g^0*D_0 + g^1*D_1 + ... + g^{n-1}*D_{n-1}
// Any two strips of the n + 2 can be lost and rebuilt from the rest; a
// single corrupted strip can be located (scrub): with syndromes
// Sp = P + P' and Sq = Q + Q' (P', Q' recomputed from the data), a byte with
// only Sp set blames P, only Sq blames Q, and both blames data strip z where
// g^z = Sq / Sp. A strip is blamed only if every disagreeing byte names
// it. Two strips wrong in the same byte can look like one (D0 and D1 off by
// 1 give exactly the syndrome of Q off by 3): no P+Q scheme can tell.
//
// Computation is ISA-L's: pq_gen for encoding; ec_encode_data with an
// inverted generator matrix for rebuilding, one pass over the survivors
// whatever was lost. Strips are indexed 0..n-1 for data, n for P, n+1 for Q.
//
// Buffers: every strip pointer aligned to 32 bytes, lengths a multiple of
// 32 bytes (ISA-L's SIMD requirement; strips are whole blocks anyway).
// A codec is not thread-safe (it caches decoding tables); one per loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <map>
#include <span>
#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/status.h"

namespace strata::raid {

// What a consistency check found in one stripe.
struct pq_check_result {
  enum class kind {
    consistent,
    one_strip_wrong,  // `strip` is the only one that disagrees; rebuild it
    several_wrong,    // more than one strip disagrees: cannot say which
  };
  kind verdict = kind::consistent;
  unsigned strip = 0;  // for one_strip_wrong: 0..n-1 data, n = P, n+1 = Q
};

class pq_codec {
 public:
  static constexpr unsigned min_data_strips = 2;
  static constexpr unsigned max_data_strips = 253;  // md's limit: g^i must stay distinct

  static std::expected<pq_codec, error> create(unsigned data_strips);

  unsigned data_strips() const noexcept { return data_strips_; }
  unsigned p_index() const noexcept { return data_strips_; }
  unsigned q_index() const noexcept { return data_strips_ + 1; }

  // Computes P and Q from the data. strips: n data pointers, then P, Q.
  // invalid_argument for a wrong strip count, a length that is not a
  // positive multiple of 32, or a pointer not aligned to 32 bytes.
  std::error_code encode(std::span<std::byte* const> strips, std::size_t length_bytes) const;

  // Rebuilds the strips listed in `lost` (at most two, distinct, in range)
  // from all the others, in place. invalid_argument for a bad list.
  std::error_code rebuild(std::span<std::byte* const> strips, std::span<const unsigned> lost,
                          std::size_t length_bytes);

  // Read-modify-write: folds a change of data strip `data_index` into P and
  // Q without the other strips. `delta` holds old XOR new data (it is read
  // only); P ^= delta, Q ^= g^data_index * delta. Same buffer rules.
  std::error_code update(unsigned data_index, const std::byte* delta, std::byte* p, std::byte* q,
                         std::size_t length_bytes);

  // Checks P and Q against the data and, if they disagree, locates a single
  // wrong strip. Reads only; the caller rebuilds the strip it names.
  pq_check_result check(std::span<std::byte* const> strips, std::size_t length_bytes);

 private:
  explicit pq_codec(unsigned data_strips);
  // Decoding tables for one loss pattern: which survivors feed the pass, and
  // the ISA-L tables that turn them into the lost strips.
  struct decoder {
    std::vector<unsigned> sources;  // n surviving strip indexes
    std::vector<unsigned> outputs;  // the lost strips, in the order of the tables
    std::vector<unsigned char> tables;
  };
  const decoder& decoder_for(unsigned lost_a, unsigned lost_b);
  std::error_code check_buffers(std::span<std::byte* const> strips,
                                std::size_t length_bytes) const noexcept;
  // Entry (strip, column) of the generator matrix: identity for data, all
  // ones for P, g^column for Q.
  std::uint8_t generator(unsigned strip, unsigned column) const noexcept;

  unsigned data_strips_;
  std::map<std::pair<unsigned, unsigned>, decoder> decoders_;
  std::vector<unsigned char> q_tables_;  // 32 bytes per data strip: multiply by g^i
  device::aligned_buffer scratch_;       // P' and Q' for check()
  std::uint8_t log_[256] = {};           // log base g, for locating a wrong data strip
  std::uint8_t exp_[256] = {};           // g^k
};

}  // namespace strata::raid
