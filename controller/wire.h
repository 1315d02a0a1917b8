// Little-endian u32 counts and length-prefixed byte strings: how the
// partner link's configuration and management payloads are written
// (config_sync.h, remote_management.h), and read back with every length
// checked against what arrived.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::controller::wire {

inline void put32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

inline void put_text(std::vector<std::uint8_t>& out, std::string_view s) {
  put32(out, static_cast<std::uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

// Reads off the front; once a read runs past the end, ok() is false and
// every later read gives nothing.
class reader {
 public:
  explicit reader(std::span<const std::uint8_t> in) : in_(in) {}
  std::optional<std::uint8_t> byte() {
    if (!ok_ || at_ + 1 > in_.size()) return fail<std::uint8_t>();
    return in_[at_++];
  }
  std::optional<std::uint32_t> u32() {
    if (!ok_ || at_ + 4 > in_.size()) return fail<std::uint32_t>();
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | in_[at_ + static_cast<std::size_t>(i)];
    at_ += 4;
    return v;
  }
  std::optional<std::string> text() {
    const auto n = u32();
    if (!n || in_.size() - at_ < *n) return fail<std::string>();
    std::string s(reinterpret_cast<const char*>(in_.data() + at_), *n);
    at_ += *n;
    return s;
  }
  bool ok() const noexcept { return ok_; }
  // Everything read, and nothing left over.
  bool done() const noexcept { return ok_ && at_ == in_.size(); }

 private:
  template <class T>
  std::optional<T> fail() {
    ok_ = false;
    return std::nullopt;
  }
  std::span<const std::uint8_t> in_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace strata::controller::wire
