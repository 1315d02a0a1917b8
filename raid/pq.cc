#include "raid/pq.h"

#include <isa-l/erasure_code.h>
#include <isa-l/gf_vect_mul.h>
#include <isa-l/raid.h>

#include <cassert>
#include <cstring>
#include <string>

namespace strata::raid {
namespace {

constexpr std::size_t simd_bytes = 32;  // ISA-L's alignment and length unit

}  // namespace

std::expected<pq_codec, error> pq_codec::create(unsigned data_strips) {
  if (data_strips < min_data_strips || data_strips > max_data_strips) {
    return std::unexpected(make_error(errc::invalid_argument,
                                      "RAID-6 needs 2 to 253 data strips (4 to 255 members), not " +
                                          std::to_string(data_strips)));
  }
  return pq_codec(data_strips);
}

pq_codec::pq_codec(unsigned data_strips) : data_strips_(data_strips) {
  std::uint8_t x = 1;
  for (unsigned k = 0; k < 255; ++k) {
    exp_[k] = x;
    log_[x] = static_cast<std::uint8_t>(k);
    x = gf_mul(x, 2);
  }
  q_tables_.resize(32 * data_strips);
  for (unsigned i = 0; i < data_strips; ++i) gf_vect_mul_init(exp_[i], &q_tables_[32 * i]);
}

std::error_code pq_codec::update(unsigned data_index, const std::byte* delta, std::byte* p,
                                 std::byte* q, std::size_t length_bytes) {
  for (const std::byte* b :
       {delta, static_cast<const std::byte*>(p), static_cast<const std::byte*>(q)}) {
    if (b == nullptr || reinterpret_cast<std::uintptr_t>(b) % simd_bytes != 0)
      return errc::misaligned;
  }
  if (data_index >= data_strips_ || length_bytes == 0 || length_bytes % simd_bytes != 0 ||
      length_bytes > static_cast<std::size_t>(INT32_MAX)) {
    return errc::invalid_argument;
  }
  auto* p_words = reinterpret_cast<std::uint64_t*>(p);
  const auto* delta_words = reinterpret_cast<const std::uint64_t*>(delta);
  for (std::size_t i = 0; i < length_bytes / 8; ++i) p_words[i] ^= delta_words[i];
  // Q += g^i * delta: one multiply-and-add pass.
  gf_vect_mad(static_cast<int>(length_bytes), 1, 0, &q_tables_[32 * data_index],
              const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(delta)),
              reinterpret_cast<unsigned char*>(q));
  return {};
}

std::uint8_t pq_codec::generator(unsigned strip, unsigned column) const noexcept {
  if (strip < data_strips_) return strip == column ? 1 : 0;
  if (strip == p_index()) return 1;
  return exp_[column];
}

std::error_code pq_codec::check_buffers(std::span<std::byte* const> strips,
                                        std::size_t length_bytes) const noexcept {
  if (strips.size() != data_strips_ + 2 || length_bytes == 0 || length_bytes % simd_bytes != 0 ||
      length_bytes > static_cast<std::size_t>(INT32_MAX)) {
    return errc::invalid_argument;
  }
  for (std::byte* strip : strips) {
    if (strip == nullptr || reinterpret_cast<std::uintptr_t>(strip) % simd_bytes != 0) {
      return errc::misaligned;
    }
  }
  return {};
}

std::error_code pq_codec::encode(std::span<std::byte* const> strips,
                                 std::size_t length_bytes) const {
  if (auto ec = check_buffers(strips, length_bytes)) return ec;
  // pq_gen takes void** but only writes through the last two (P and Q).
  std::vector<void*> pointers(strips.begin(), strips.end());
  if (pq_gen(static_cast<int>(pointers.size()), static_cast<int>(length_bytes), pointers.data()) !=
      0) {
    return errc::invalid_argument;
  }
  return {};
}

const pq_codec::decoder& pq_codec::decoder_for(unsigned lost_a, unsigned lost_b) {
  const unsigned none = data_strips_ + 2;
  auto [it, inserted] = decoders_.try_emplace({lost_a, lost_b});
  decoder& d = it->second;
  if (!inserted) return d;

  // The first n survivors, data before parity: their generator rows form an
  // invertible n x n matrix M (any n rows of an MDS code do), and data =
  // M^-1 * survivors; a lost strip's row is its generator row times M^-1.
  const unsigned n = data_strips_;
  for (unsigned strip = 0; strip < n + 2 && d.sources.size() < n; ++strip) {
    if (strip != lost_a && strip != lost_b) d.sources.push_back(strip);
  }
  for (unsigned lost : {lost_a, lost_b}) {
    if (lost != none) d.outputs.push_back(lost);
  }
  std::vector<unsigned char> m(n * n), inverse(n * n);
  for (unsigned row = 0; row < n; ++row) {
    for (unsigned column = 0; column < n; ++column) {
      m[row * n + column] = generator(d.sources[row], column);
    }
  }
  [[maybe_unused]] const int singular =
      gf_invert_matrix(m.data(), inverse.data(), static_cast<int>(n));
  assert(singular == 0 && "any n rows of the P+Q generator are independent");

  std::vector<unsigned char> coefficients(d.outputs.size() * n);
  for (std::size_t r = 0; r < d.outputs.size(); ++r) {
    for (unsigned column = 0; column < n; ++column) {
      unsigned char c = 0;
      for (unsigned k = 0; k < n; ++k) {
        c ^= gf_mul(generator(d.outputs[r], k), inverse[k * n + column]);
      }
      coefficients[r * n + column] = c;
    }
  }
  d.tables.resize(32 * n * d.outputs.size());
  ec_init_tables(static_cast<int>(n), static_cast<int>(d.outputs.size()), coefficients.data(),
                 d.tables.data());
  return d;
}

std::error_code pq_codec::rebuild(std::span<std::byte* const> strips,
                                  std::span<const unsigned> lost, std::size_t length_bytes) {
  if (auto ec = check_buffers(strips, length_bytes)) return ec;
  const unsigned total = data_strips_ + 2;
  if (lost.empty()) return {};
  if (lost.size() > 2 || lost[0] >= total ||
      (lost.size() == 2 && (lost[1] >= total || lost[0] == lost[1]))) {
    return errc::invalid_argument;
  }
  const unsigned a = lost.size() == 2 ? std::min(lost[0], lost[1]) : lost[0];
  const unsigned b = lost.size() == 2 ? std::max(lost[0], lost[1]) : total;
  const decoder& d = decoder_for(a, b);

  std::vector<unsigned char*> sources, outputs;
  sources.reserve(d.sources.size());
  for (unsigned s : d.sources) sources.push_back(reinterpret_cast<unsigned char*>(strips[s]));
  for (unsigned o : d.outputs) outputs.push_back(reinterpret_cast<unsigned char*>(strips[o]));
  ec_encode_data(static_cast<int>(length_bytes), static_cast<int>(data_strips_),
                 static_cast<int>(outputs.size()), const_cast<unsigned char*>(d.tables.data()),
                 sources.data(), outputs.data());
  return {};
}

pq_check_result pq_codec::check(std::span<std::byte* const> strips, std::size_t length_bytes) {
  pq_check_result result;
  if (check_buffers(strips, length_bytes)) {
    result.verdict = pq_check_result::kind::several_wrong;
    return result;
  }
  if (scratch_.size() < 2 * length_bytes) scratch_ = device::aligned_buffer(2 * length_bytes);
  std::vector<void*> pointers(strips.begin(), strips.begin() + data_strips_);
  pointers.push_back(scratch_.data());
  pointers.push_back(scratch_.data() + length_bytes);
  pq_gen(static_cast<int>(pointers.size()), static_cast<int>(length_bytes), pointers.data());

  const auto* p = reinterpret_cast<const std::uint8_t*>(strips[p_index()]);
  const auto* q = reinterpret_cast<const std::uint8_t*>(strips[q_index()]);
  const auto* p_computed = reinterpret_cast<const std::uint8_t*>(scratch_.data());
  const auto* q_computed = p_computed + length_bytes;
  if (std::memcmp(p, p_computed, length_bytes) == 0 &&
      std::memcmp(q, q_computed, length_bytes) == 0) {
    return result;
  }
  // Each byte that disagrees names a culprit; one strip is wrong only if
  // every such byte names the same one.
  bool found = false;
  for (std::size_t i = 0; i < length_bytes; ++i) {
    const std::uint8_t sp = p[i] ^ p_computed[i];
    const std::uint8_t sq = q[i] ^ q_computed[i];
    if (sp == 0 && sq == 0) continue;
    unsigned culprit;
    if (sq == 0) {
      culprit = p_index();
    } else if (sp == 0) {
      culprit = q_index();
    } else {
      culprit = (log_[sq] + 255u - log_[sp]) % 255u;  // g^z = Sq / Sp
      if (culprit >= data_strips_) {
        result.verdict = pq_check_result::kind::several_wrong;
        return result;
      }
    }
    if (found && culprit != result.strip) {
      result.verdict = pq_check_result::kind::several_wrong;
      return result;
    }
    found = true;
    result.strip = culprit;
  }
  result.verdict = pq_check_result::kind::one_strip_wrong;
  return result;
}

}  // namespace strata::raid
