// The write-back cache's own records (raid/write_back.h): what its two
// files, write_back.cc (requests, the index, destage) and
// write_back_log.cc (reclaim, format, replay), share. Not an interface.
#pragma once

#include <sys/uio.h>

#include <vector>

#include "raid/device/aligned_buffer.h"
#include "raid/device/block_device.h"
#include "raid/write_back.h"

namespace strata::raid {

// One log record: in flight, or in the log until the checkpoint passes it.
struct write_back_device::record : lock_user {
  write_back_device* dev = nullptr;
  host_io* owner =
      nullptr;  // the write it logs; null once acknowledged, and for replayed records and markers
  std::uint64_t seq = 0;
  std::uint64_t next_seq = 0;
  std::uint64_t position = 0;
  std::uint64_t lba = 0;
  std::uint32_t blocks = 0;        // 0: a marker
  std::uint64_t dirty_blocks = 0;  // index blocks still dirty that point here
  std::uint32_t pins = 0;          // reads of its data from the log in flight
  bool in_log_io = false;          // its log write is in flight
  bool written = false;            // its log write succeeded
  std::uint64_t written_epoch = 0;
  bool acked = false;  // durable and in the index (or, after a log failure, written direct)
  bool redo = false;   // the log failed first: written to the group directly
  bool orphan =
      false;  // out of records_ (the log failed before it was durable): freed once its I/O ends
  // A redo's outcome, kept for the host until the record's log write, which
  // still reads the host's buffers, has ended too.
  std::error_code redo_result;
  device::time_point acked_at{};
  device::aligned_buffer header{wlog::block_bytes};
  std::vector<iovec> segments;  // the header, then the data
  device::request req;          // to the log
  device::request direct;       // redo: to the group
};

// A request from above.
struct write_back_device::host_io : lock_user {
  write_back_device* dev = nullptr;
  device::request* outer = nullptr;
  unsigned pending = 0;
  std::error_code result;
  std::uint64_t next_block = 0;   // a logged write: the first block not yet in a record
  std::uint64_t direct_from = 0;  // a direct write: its first block
  struct piece {
    host_io* owner = nullptr;
    record* pinned = nullptr;  // a read from the log: the record it reads
    device::request req;
    std::vector<iovec> segments;
  };
  std::vector<piece> pieces;  // a read's
  std::vector<iovec> direct_segments;
  device::request direct;
};

// One stripe being destaged.
struct write_back_device::destage_job : lock_user {
  write_back_device* dev = nullptr;
  bool busy = false;
  std::uint64_t stripe = 0;
  std::uint64_t begin = 0;  // the stripe's blocks [begin, end)
  std::uint64_t end = 0;
  struct part {
    std::uint64_t lba = 0;
    std::uint64_t blocks = 0;
    std::uint64_t log_block = 0;
    record* rec = nullptr;
  };
  std::vector<part> parts;
  std::vector<device::request> ios;
  std::vector<iovec> segments;    // one per request
  std::uint64_t write_begin = 0;  // the one range written to the group
  std::uint64_t write_end = 0;
  unsigned pending = 0;
  std::error_code error;
  device::aligned_buffer buffer;
};

// The superblock write of a checkpoint, and the flushes around it.
struct write_back_device::checkpoint_io {
  enum class step : std::uint8_t { group_flush, superblock, log_flush } at = step::group_flush;
  bool retire = false;      // the last one of a failed log
  std::size_t records = 0;  // the oldest records it frees
  std::uint64_t tail = 0;
  std::uint64_t tail_seq = 0;
  device::aligned_buffer block{wlog::block_bytes};
  iovec segment{};
  device::request req;
};

}  // namespace strata::raid
