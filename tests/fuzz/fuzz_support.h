// What the fuzz targets share: FUZZ_REQUIRE, the assertion of a property
// that must hold for every input, and `input`, which reads a fuzzer's bytes
// as fields.
//
// A violated property prints what broke and aborts; libFuzzer reports it
// as a crash and saves the input. It stays on in every build (unlike
// assert(), which NDEBUG removes): a fuzz target that stops checking when
// optimized finds nothing.
// Threads: any. An `input` borrows the fuzzer's bytes for one call of
// LLVMFuzzerTestOneInput.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

namespace strata::fuzz {

[[noreturn]] inline void fail(const char* file, int line, const char* what) noexcept {
  std::fprintf(stderr, "\n==fuzz== property violated at %s:%d: %s\n", file, line, what);
  std::fflush(stderr);
  std::abort();
}

// The fuzzer's bytes, read front to back. Past the end every field reads
// as zero and every span as empty: any input is a valid sequence of
// fields, so that no mutation is wasted on a format error.
class input {
 public:
  explicit input(std::span<const std::uint8_t> bytes) noexcept : rest_(bytes) {}

  bool empty() const noexcept { return rest_.empty(); }
  std::size_t size_bytes() const noexcept { return rest_.size(); }

  std::uint8_t u8() noexcept {
    if (rest_.empty()) return 0;
    const std::uint8_t v = rest_.front();
    rest_ = rest_.subspan(1);
    return v;
  }
  // A big-endian field of `length_bytes` (at most 8).
  std::uint64_t be(int length_bytes) noexcept {
    std::uint64_t v = 0;
    for (int i = 0; i < length_bytes; ++i) v = (v << 8) | u8();
    return v;
  }
  // The next `length_bytes`, or what is left if fewer.
  std::span<const std::uint8_t> take(std::size_t length_bytes) noexcept {
    const std::size_t n = std::min(length_bytes, rest_.size());
    const auto out = rest_.first(n);
    rest_ = rest_.subspan(n);
    return out;
  }
  std::span<const std::uint8_t> rest() noexcept { return take(rest_.size()); }

 private:
  std::span<const std::uint8_t> rest_;
};

}  // namespace strata::fuzz

// `what` says the property in words, for whoever reads the crash report.
#define FUZZ_REQUIRE(condition, what)                                   \
  do {                                                                  \
    if (!(condition)) ::strata::fuzz::fail(__FILE__, __LINE__, (what)); \
  } while (false)
