// An owned, zero-filled, aligned I/O buffer: what a request's segments point
// at. Aligned to 4096 bytes by default, which satisfies every Strata device
// (they require the logical block size, 512 or 4096).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>

namespace strata::device {

class aligned_buffer {
 public:
  aligned_buffer() = default;
  explicit aligned_buffer(std::size_t size_bytes, std::size_t alignment_bytes = 4096)
      : size_bytes_(size_bytes) {
    const std::size_t rounded =
        (size_bytes + alignment_bytes - 1) / alignment_bytes * alignment_bytes;
    void* p = std::aligned_alloc(alignment_bytes, rounded == 0 ? alignment_bytes : rounded);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    data_.reset(static_cast<std::byte*>(p));
  }

  std::byte* data() noexcept { return data_.get(); }
  const std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_bytes_; }
  std::span<std::byte> bytes() noexcept { return {data_.get(), size_bytes_}; }
  std::span<const std::byte> bytes() const noexcept { return {data_.get(), size_bytes_}; }
  // One segment covering [offset_bytes, offset_bytes + length_bytes).
  iovec segment(std::size_t offset_bytes, std::size_t length_bytes) noexcept {
    return {data_.get() + offset_bytes, length_bytes};
  }
  iovec segment() noexcept { return segment(0, size_bytes_); }

 private:
  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte[], free_deleter> data_;
  std::size_t size_bytes_ = 0;
};

}  // namespace strata::device
