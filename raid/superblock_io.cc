#include "raid/superblock_io.h"

#include <cstring>
#include <memory>

#include "raid/device/aligned_buffer.h"

namespace strata::raid {
namespace {

using device::op;
using device::request;

// One superblock read or write in progress; owns itself until done.
struct superblock_io {
  device::block_device& member;
  device::aligned_buffer buffer{2 * superblock::size_bytes};
  iovec segment{};
  request req;
  int step = 0;

  explicit superblock_io(device::block_device& m) : member(m) {}

  std::uint64_t blocks_per_copy() const {
    return superblock::size_bytes / member.geometry().logical_block_size_bytes;
  }
  void submit(op operation, std::uint64_t copy_offset_bytes, std::byte* data,
              void (*done)(request&) noexcept) {
    req = request{};
    req.operation = operation;
    if (operation != op::flush) {
      const std::uint32_t block_size = member.geometry().logical_block_size_bytes;
      req.lba = copy_offset_bytes / block_size;
      req.block_count = blocks_per_copy();
      segment = {data, superblock::size_bytes};
      req.buffers = {&segment, 1};
    }
    req.context = this;
    req.on_complete = done;
    member.submit(req);
  }
};

struct reader : superblock_io {
  std::function<void(std::expected<superblock, std::error_code>)> done;
  std::expected<superblock, std::error_code> copy_a =
      std::unexpected(make_error_code(errc::not_found));
  using superblock_io::superblock_io;
};

struct writer : superblock_io {
  std::function<void(std::error_code)> done;
  using superblock_io::superblock_io;
};

std::expected<superblock, std::error_code> decode_copy(const request& r, const std::byte* data) {
  if (r.result) return std::unexpected(r.result);
  return superblock::decode(
      std::span<const std::byte, superblock::size_bytes>(data, superblock::size_bytes));
}

// Each copy is read on its own, so a bad sector under one cannot hide the other.
void on_read_b(request& r) noexcept {
  std::unique_ptr<reader> self(static_cast<reader*>(r.context));
  auto a = std::move(self->copy_a);
  auto b = decode_copy(r, self->buffer.data() + superblock::size_bytes);
  if (a && b) {
    self->done(a->events >= b->events ? *a : *b);
  } else if (a || b) {
    self->done(a ? *a : *b);
  } else {
    self->done(std::unexpected(a.error()));
  }
}

void on_read_a(request& r) noexcept {
  auto* self = static_cast<reader*>(r.context);
  self->copy_a = decode_copy(r, self->buffer.data());
  self->submit(op::read, superblock::copy_b_offset_bytes,
               self->buffer.data() + superblock::size_bytes, &on_read_b);
}

void on_write_step(request& r) noexcept {
  auto* self = static_cast<writer*>(r.context);
  if (r.result || self->step == 3) {
    std::unique_ptr<writer> owned(self);
    owned->done(r.result);
    return;
  }
  ++self->step;
  switch (self->step) {
    case 1:
    case 3:
      self->submit(op::flush, 0, nullptr, &on_write_step);
      break;
    case 2:
      self->submit(op::write, superblock::copy_b_offset_bytes,
                   self->buffer.data() + superblock::size_bytes, &on_write_step);
      break;
  }
}

// A write and its flush, or a read, of whole blocks; owns itself until done.
struct reserved_io {
  device::block_device& member;
  device::aligned_buffer buffer;
  iovec segment{};
  request req;
  std::function<void(std::error_code)> written;
  std::function<void(std::expected<std::vector<std::byte>, std::error_code>)> read;

  reserved_io(device::block_device& m, std::size_t bytes) : member(m), buffer(bytes) {}

  void submit(op operation, std::uint64_t lba, void (*done)(request&) noexcept) {
    req = request{};
    req.operation = operation;
    if (operation != op::flush) {
      req.lba = lba;
      req.block_count = buffer.size() / member.geometry().logical_block_size_bytes;
      segment = {buffer.data(), buffer.size()};
      req.buffers = {&segment, 1};
    }
    req.context = this;
    req.on_complete = done;
    member.submit(req);
  }
};

void on_reserved_flushed(request& r) noexcept {
  std::unique_ptr<reserved_io> self(static_cast<reserved_io*>(r.context));
  self->written(r.result);
}

void on_reserved_written(request& r) noexcept {
  auto* self = static_cast<reserved_io*>(r.context);
  if (r.result) {
    std::unique_ptr<reserved_io> owned(self);
    owned->written(r.result);
    return;
  }
  self->submit(op::flush, 0, &on_reserved_flushed);
}

void on_reserved_read(request& r) noexcept {
  std::unique_ptr<reserved_io> self(static_cast<reserved_io*>(r.context));
  if (r.result) {
    self->read(std::unexpected(r.result));
    return;
  }
  self->read(
      std::vector<std::byte>(self->buffer.data(), self->buffer.data() + self->buffer.size()));
}

}  // namespace

void write_reserved(device::block_device& member, std::uint64_t lba,
                    std::span<const std::byte> data, std::function<void(std::error_code)> done) {
  auto* w = new reserved_io(member, data.size());
  std::memcpy(w->buffer.data(), data.data(), data.size());
  w->written = std::move(done);
  w->submit(op::write, lba, &on_reserved_written);
}

void read_reserved(
    device::block_device& member, std::uint64_t lba, std::size_t bytes,
    std::function<void(std::expected<std::vector<std::byte>, std::error_code>)> done) {
  auto* r = new reserved_io(member, bytes);
  r->read = std::move(done);
  r->submit(op::read, lba, &on_reserved_read);
}

void read_superblock(device::block_device& member,
                     std::function<void(std::expected<superblock, std::error_code>)> done) {
  auto* r = new reader(member);
  r->done = std::move(done);
  r->submit(op::read, superblock::copy_a_offset_bytes, r->buffer.data(), &on_read_a);
}

void write_superblock(device::block_device& member, const superblock& sb,
                      std::function<void(std::error_code)> done) {
  auto* w = new writer(member);
  w->done = std::move(done);
  sb.encode(std::span<std::byte, superblock::size_bytes>(w->buffer.data(), superblock::size_bytes));
  std::memcpy(w->buffer.data() + superblock::size_bytes, w->buffer.data(), superblock::size_bytes);
  w->submit(op::write, superblock::copy_a_offset_bytes, w->buffer.data(), &on_write_step);
}

}  // namespace strata::raid
