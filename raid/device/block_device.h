// The block-device interface: the one seam every device in Strata implements.
//
// Files and disks (io_uring), memory, HDD/SSD timing models, fault
// decorators, and later RAID groups and the read cache's SSD are all
// `block_device`s, the way every leveldb backend implements `Env` and every
// SPDK module implements the bdev function table. Everything above sees this
// interface and nothing else.
//
// The contract
// ------------
// Threads: a device lives on one event loop (its executor()). submit() is
//   called on that loop's thread only, and every completion is delivered on
//   that thread. Devices are not thread-safe; other threads reach a device by
//   posting to its loop.
// Asynchrony: submit() starts a request and returns. The request's
//   on_complete is called exactly once, later -- never inside submit(), even
//   for a request rejected on sight. The caller may submit more requests from
//   inside a completion.
// Ownership: the caller owns the request and its buffers. Both must stay
//   valid, and the buffers untouched, from submit() until on_complete is
//   called; the device does not copy them. A device allocates nothing per
//   request on its hot path.
// Ordering: requests in flight at the same time may execute in any order. A
//   flush completes only after every write that completed before the flush
//   was submitted is durable; writes still in flight when it is submitted may
//   or may not be covered.
// Lifetime: a device must not be destroyed while requests are in flight.
//
// Errors are values: request::result holds a strata::errc (status.h) --
// out_of_range, misaligned, invalid_argument for requests that break the
// preconditions below; media_error, device_failed, ... for what the device
// could not do.
#pragma once

#include <sys/uio.h>

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <span>
#include <system_error>

#include "raid/device/status.h"

namespace strata::device {

enum class op : std::uint8_t {
  read,     // fill buffers from [lba, lba + block_count)
  write,    // store buffers at [lba, lba + block_count)
  flush,    // make completed writes durable; lba, block_count and buffers unused (0, empty)
  discard,  // the range's contents are no longer needed; reads of it return zeros; no buffers
};

// Whose I/O this is: a host's, or work that must not wait (foreground:
// rebuilds and resyncs too, which end a degraded window); or the array's
// deferrable work (background: scrub, extent moves, cache fills). Groups
// pass it on to their members; io_scheduler.h puts background I/O behind
// foreground on each drive. Other devices ignore it.
enum class io_class : std::uint8_t { foreground, background };

// Whether blocks have storage of their own (thin devices; what SCSI GET LBA
// STATUS reports): mapped blocks do; deallocated blocks have none and read
// as zeros, as a discarded range does on a device that tracks this.
enum class allocation : std::uint8_t { mapped, deallocated };
struct allocation_run {
  allocation state = allocation::mapped;
  std::uint64_t block_count = 0;  // blocks from the lba asked about that are in `state`
};

// What a device is; constant for its life.
struct block_geometry {
  std::uint32_t logical_block_size_bytes = 4096;  // 512 or 4096
  std::uint64_t block_count = 0;
  // Each buffer segment must start at a multiple of this. Strata devices use
  // the logical block size, so code that works on a memory device also works
  // on a file opened with O_DIRECT.
  std::uint32_t buffer_alignment_bytes = 4096;
  // Most buffer segments one request may carry.
  std::uint32_t max_segments = 64;

  std::uint64_t size_bytes() const noexcept { return block_count * logical_block_size_bytes; }
};

struct request;
using completion_fn = void (*)(request&) noexcept;

// One I/O: the request type that every layer from the targets down speaks.
// Caller-owned and reusable: fill it in, submit it, read `result` in the
// completion, submit it again.
struct request {
  op operation = op::read;
  io_class priority = io_class::foreground;
  // A write its volume wants on the backing store before it completes
  // (the volume's write_cache is write-through): a write-back cache passes
  // it on rather than logging it, unless the blocks are in its log already
  // (raid/write_back.h). Other devices ignore it.
  bool write_through = false;
  // The controller's own records on a shared drive (its drive heartbeat,
  // the ownership areas read at a confirm): they renew or consult the
  // lease that fences the rest, so no fence holds them
  // (gate_device.h, controller/shelf.h). Set by the layer that sends them.
  bool fence_exempt = false;
  std::uint64_t lba = 0;
  std::uint64_t block_count = 0;
  // Scatter-gather list: each segment aligned to buffer_alignment_bytes and a
  // whole number of logical blocks long; together exactly block_count blocks.
  std::span<const iovec> buffers;

  // Called once when the device is done with the request and its buffers;
  // `result` is set by then (empty on success).
  completion_fn on_complete = nullptr;
  void* context = nullptr;  // the caller's; the device never touches it
  std::error_code result;

  // Link for the device that currently holds the request (its queues). The
  // caller leaves it alone.
  request* next_in_device = nullptr;
  // When a device that queues requests of its own (io_scheduler) passed
  // this one on towards the drive; untouched by the others. A group's
  // member watchdog times the drive from then, as a SCSI command's timer
  // starts at its dispatch (raid/watchdog.h).
  std::chrono::steady_clock::time_point dispatched_at{};

  // Binds the completion to a member function: req.bind<&T::on_done>(this)
  // calls this->on_done(req).
  template <auto Method, class T>
  void bind(T* object) noexcept {
    context = object;
    on_complete = [](request& r) noexcept { (static_cast<T*>(r.context)->*Method)(r); };
  }
};

class block_device {
 public:
  virtual ~block_device() = default;

  virtual const block_geometry& geometry() const noexcept = 0;

  // The loop this device lives on: submit from its thread; completions arrive on it.
  virtual boost::asio::any_io_executor executor() const noexcept = 0;

  // Starts `req`.
  // REQUIRES: on executor()'s thread; req.on_complete set; req not in flight.
  // ENSURES: req.on_complete(req) is called exactly once, after submit returns.
  virtual void submit(request& req) noexcept = 0;

  // Whether the blocks from `lba` are mapped or deallocated, and for how
  // many blocks from `lba` (1..max_blocks) that holds. A run may end before
  // the state changes (at an extent boundary, say); the caller asks again
  // from where it ends. Optional, and cheap: answered from what the device
  // keeps in memory, never with I/O, so a target may call it on the loop
  // while answering a command. The default, "mapped" throughout, is what a
  // device that does not track allocation says (and a decorator that does
  // not forward this); it is always safe, since a caller may skip only what
  // is reported deallocated.
  // REQUIRES: on executor()'s thread; lba < geometry().block_count;
  //           1 <= max_blocks <= geometry().block_count - lba.
  virtual allocation_run allocation_at(std::uint64_t /*lba*/,
                                       std::uint64_t max_blocks) const noexcept {
    return {allocation::mapped, max_blocks};
  }

  // `req`, submitted here as background I/O and not yet completed, is
  // waited on by foreground work now (a host write behind a rebuild's
  // stripe, say): a device that holds background requests back
  // (io_scheduler.h) lets it go at once. Only the device `req` was
  // submitted to can tell it; the default does nothing.
  // REQUIRES: on executor()'s thread.
  virtual void expedite(request& /*req*/) noexcept {}

  // Whether `req`, submitted here and not yet completed, still waits in
  // this device's own queue, not yet passed to the drive: a background
  // request an io_scheduler holds behind the hosts' I/O. A group's member
  // watchdog does not count that wait against the drive (raid/watchdog.h;
  // request::dispatched_at says when the wait ended). The default: no
  // queue of its own. A decorator that passes the
  // caller's own request object on asks the device below.
  // REQUIRES: on executor()'s thread.
  virtual bool holds(const request& /*req*/) const noexcept { return false; }
};

// Checks a request against a geometry: the preconditions every device
// enforces before doing anything. Returns empty when the request is well formed.
std::error_code validate(const block_geometry& geometry, const request& req) noexcept;

// Bytes a request moves: block_count * logical_block_size_bytes.
inline std::uint64_t transfer_bytes(const block_geometry& g, const request& req) noexcept {
  return req.block_count * g.logical_block_size_bytes;
}

// Copies the I/O itself (operation, priority, range, buffers) into a request
// of one's own, leaving its completion alone: how a decorator passes a
// caller's request on to the device below.
inline void copy_io(const request& from, request& to) noexcept {
  to.operation = from.operation;
  to.priority = from.priority;
  to.write_through = from.write_through;
  to.fence_exempt = from.fence_exempt;
  to.lba = from.lba;
  to.block_count = from.block_count;
  to.buffers = from.buffers;
}

// Sets the result and calls the completion. For devices, from a context that
// is not inside submit().
inline void complete(request& req, std::error_code result) noexcept {
  req.result = result;
  req.on_complete(req);
}

}  // namespace strata::device
