// The pool's metadata in RocksDB: one database per pool, a column family per
// kind of record (docs/tiering-keys.md).
//
// RocksDB blocks, so it runs on a thread of its own: write() queues a batch
// for that thread and the outcome comes back to the owning loop through
// post(). Reads are for start-up only (open, scan), before the loop serves
// I/O: the loop keeps in memory everything the data path needs.
//
// As leveldb does after a failed sync, once a write fails every later write
// fails too, with the first error: its outcome on disk is unknown, so the
// pool must stop changing its metadata rather than guess.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "raid/device/status.h"

namespace rocksdb {
class DB;
class Env;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace strata::tiering::detail {
class background_errors;
}  // namespace strata::tiering::detail

namespace strata::tiering {

enum class column : std::uint8_t {
  pool,          // the pool's record, its groups, its volumes
  extent_map,    // volume extent -> physical extent (authoritative)
  heat,          // per-extent heat, batched (advisory)
  heat_history,  // bounded snapshots of heat for the diagnostics
  cache_index,   // the read cache's lines
};
constexpr std::size_t column_count = 5;
std::string_view column_name(column c) noexcept;

// Puts and deletes applied together or not at all.
class metadata_batch {
 public:
  void put(column c, std::string_view key, std::string_view value);
  void erase(column c, std::string_view key);
  // Every key in [begin, end).
  void erase_range(column c, std::string_view begin, std::string_view end);
  bool empty() const noexcept { return ops_.empty(); }
  std::size_t size() const noexcept { return ops_.size(); }
  // Its bytes, for a copy of the store kept elsewhere (metadata_copy):
  // docs/partner-link.md, "Mirrored pool metadata". decode() of bytes it
  // did not make: nullopt.
  std::string encode() const;
  static std::optional<metadata_batch> decode(std::string_view bytes);

 private:
  friend class metadata_store;
  enum class kind : std::uint8_t { put, erase, erase_range };
  struct entry {
    column where;
    kind what;
    std::string key;
    std::string value;  // erase_range: the end key
  };
  std::vector<entry> ops_;
};

class metadata_store;

// A copy of a store kept elsewhere: the partner controller's, so that it
// can take the pool over with the metadata of every write acknowledged
// (controller/metadata_mirror.h). The store's thread feeds it, in the
// order the batches are applied here: each batch as it is applied, and
// the whole store when the copy asks for it (it is new, or it missed
// batches). Called on the store's thread only; each call may block.
class metadata_copy {
 public:
  virtual ~metadata_copy() = default;
  // Whether the copy must be made anew before the next batch: asked before
  // each batch, and when the store is poked.
  virtual bool wants_everything() = 0;
  // Sends the whole store (`store`'s scan(): nothing else writes it
  // meanwhile), and returns once the copy holds it or could not take it.
  virtual void send_everything(const metadata_store& store) = 0;
  // Starts sending `batch`, the next after those sent before; the answer
  // is a ticket for wait().
  virtual std::uint64_t send(const metadata_batch& batch, bool sync) = 0;
  // Returns once the copy holds batch `ticket` (durably for a synced one),
  // or it is recorded, where a controller taking the pool over looks, that
  // the copy is behind. An error: neither could be done (this controller
  // was fenced off the pool's drives); the write then fails.
  virtual std::error_code wait(std::uint64_t ticket) = 0;
};

class metadata_store {
 public:
  // Opens the database at `directory`, creating it and its column families
  // if missing. Blocking: call at start-up. Outcomes of write() are posted
  // to `loop`.
  // `env`: the environment RocksDB's files go through, or nullptr for the
  // default; tests pass one whose file system fails syncs. It must outlive
  // the store.
  static std::expected<std::unique_ptr<metadata_store>, error> open(
      const std::string& directory, boost::asio::any_io_executor loop, rocksdb::Env* env = nullptr);
  // Opens the database at `directory` read-only, as it was when opened:
  // for the diagnostics, on a copy a customer sent in or beside the running
  // array's own store (RocksDB lets a read-only instance share it). No
  // write() or write_now(); scan(), get() and checkpoint() work. Blocking,
  // safe on any thread.
  static std::expected<std::unique_ptr<metadata_store>, error> open_read_only(
      const std::string& directory);
  metadata_store(const metadata_store&) = delete;
  metadata_store& operator=(const metadata_store&) = delete;
  // close(), if it was not called.
  ~metadata_store();

  // Finishes the queued writes, then closes the database. At a clean stop
  // its memtables are flushed into table files first, so that the next
  // open need not replay the log. Not in RocksDB's background-error state
  // (a write or a flush failed: a full file system, an I/O error), where
  // no flush can succeed and none is tried. Nothing acknowledged depends on
  // that flush: a write() whose outcome was success is in a table file or
  // in the write-ahead log (synced there if `sync`; written there before
  // its outcome in any case), and the next open replays the log. A write
  // that failed was not acknowledged. The answer: nullopt after a clean
  // close; else, for the log, how the store closed and why. Blocking; once
  // only (later calls: nullopt); after it, nothing but the destructor.
  // REQUIRES: in_flight() == 0 (every outcome has reached the loop).
  std::optional<std::string> close();
  // RocksDB's background error, while it is in that state (it stops taking
  // writes then, and may clear it once the file system has room again).
  std::optional<std::string> background_error() const;

  // Applies `batch` atomically on the store's thread. `sync`: durable (the
  // WAL synced) before `done` is called. `done` runs on the loop.
  void write(metadata_batch batch, bool sync, std::function<void(std::error_code)> done);

  // Applies `batch` at once on the caller's thread, synced (or not, for a
  // copy's batches that were not synced where they were made). For
  // start-up, before the loop runs, and for a copy no loop writes: a
  // blocking call on a running loop is a bug.
  // REQUIRES: no write() queued or running.
  std::error_code write_now(const metadata_batch& batch, bool sync = true);

  // From now on, every batch write() applies goes to `copy` too (before
  // its outcome reaches the loop), and poke() makes the store's thread
  // send it everything when it asks. Null: none. Set before the first
  // write(), or with none in flight; `copy` outlives the store.
  void set_copy(metadata_copy* copy);
  // Wakes the store's thread to ask the copy whether it wants everything
  // (the partner link came up), even with no batch queued.
  void poke();

  // Blocking reads, for start-up: every record of a column in key order, or one.
  std::error_code scan(
      column c, const std::function<void(std::string_view key, std::string_view value)>& fn) const;
  std::optional<std::string> get(column c, std::string_view key) const;
  // The smallest and the largest key of a column, if it has any.
  std::optional<std::string> first_key(column c) const { return edge_key(c, false); }
  std::optional<std::string> last_key(column c) const { return edge_key(c, true); }

  // Writes queued or running whose outcome the loop has not yet seen.
  // Loop thread only. Virtual-time loops wait for these before moving time.
  std::size_t in_flight() const noexcept { return in_flight_; }
  // The first failed write's error, once one failed (loop thread view).
  std::error_code failure() const noexcept { return failure_; }
  // Blocks until the store's thread has applied every queued write (their
  // outcomes may still be on their way to the loop). For shutdown and tests.
  void drain();
  // Step mode, for simulations: the store's thread applies writes only
  // inside drain(), so their outcomes reach the loop at points the caller
  // chooses (between two steps of a virtual-time loop), never while a
  // handler runs, and a seeded run replays exactly.
  void set_step_mode(bool on);
  // Writes a consistent copy of the database, as of the writes applied so
  // far, into `directory` (which must not exist yet): a point-in-time image
  // for support bundles, and the disk image of a crash in the crash tests.
  std::expected<void, error> checkpoint(const std::string& directory) const;

 private:
  metadata_store(std::unique_ptr<rocksdb::DB> db, std::vector<rocksdb::ColumnFamilyHandle*> handles,
                 std::shared_ptr<detail::background_errors> errors,
                 boost::asio::any_io_executor loop);
  struct job {
    metadata_batch batch;
    bool sync;
    std::function<void(std::error_code)> done;
  };
  void run();
  std::optional<std::string> edge_key(column c, bool last) const;
  std::error_code apply(const metadata_batch& batch, bool sync);

  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  // RocksDB's listener (DBOptions::listeners) for its background errors;
  // null for a read-only store.
  std::shared_ptr<detail::background_errors> errors_;
  boost::asio::any_io_executor loop_;
  std::size_t in_flight_ = 0;
  std::error_code failure_;
  bool read_only_ = false;  // open_read_only's
  bool closed_ = false;

  // Shared with the store's thread.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable drained_;
  std::deque<job> queue_;
  bool running_job_ = false;
  bool stopping_ = false;
  bool step_mode_ = false;
  bool draining_ = false;  // step mode: drain() lets the thread apply the queue
  bool poked_ = false;
  metadata_copy* copy_ = nullptr;
  std::error_code thread_failure_;  // the store thread's copy of failure_
  std::thread thread_;
};

}  // namespace strata::tiering
