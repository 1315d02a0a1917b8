// The array's own records (STATE/config, README.md): one value per resource
// name ("groups/g1", "pools/p1/volumes/v1", "hosts/h1"), in RocksDB.
//
// A change is a batch of puts and erases committed atomically and synced:
// after commit() returns, a crash (kill -9, power loss) keeps all of it;
// if it fails, none of it happened. Reads see every committed batch.
// Values are opaque bytes here (the controller encodes its records as
// protobuf messages).
//
// Threads: the calls block on RocksDB (a synced write is a disk flush), so
// they run on the controller's management or writer threads, or at
// start-up, never on a data-path loop. Any thread: the store keeps no state
// of its own, and RocksDB orders concurrent batches (each is atomic; a
// read-modify-write across calls needs the caller's own lock).
#pragma once

#include <cstddef>
#include <expected>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "raid/device/status.h"

namespace rocksdb {
class DB;
}

namespace strata::controller {

class config_batch {
 public:
  void put(std::string key, std::string value) {
    ops_.push_back({std::move(key), std::move(value), false});
  }
  void erase(std::string key) { ops_.push_back({std::move(key), {}, true}); }
  bool empty() const noexcept { return ops_.empty(); }
  // Each put (`value` set) and erase (`value` null), in order.
  template <class F>
  void visit(F f) const {
    for (const op& o : ops_) f(o.key, o.erase ? nullptr : &o.value);
  }

 private:
  friend class config_store;
  struct op {
    std::string key;
    std::string value;
    bool erase = false;
  };
  std::vector<op> ops_;
};

class config_store {
 public:
  // Opens (creating if missing) the database in `directory`. Fails with a
  // message naming the directory and RocksDB's reason (held by another
  // process, corrupt, not writable).
  static std::expected<std::unique_ptr<config_store>, error> open(const std::string& directory);
  ~config_store();
  config_store(const config_store&) = delete;
  config_store& operator=(const config_store&) = delete;

  std::optional<std::string> get(std::string_view key) const;
  // The records whose keys start with `prefix`, in key order: the first
  // `limit` of those after `after` (empty: from the first). Paging: pass
  // the last key of one page as `after` of the next.
  std::vector<std::pair<std::string, std::string>> list(
      std::string_view prefix, std::string_view after = {},
      std::size_t limit = std::numeric_limits<std::size_t>::max()) const;
  // The same, newest key first: the first `limit` before `before`
  // (empty: from the last).
  std::vector<std::pair<std::string, std::string>> list_backward(
      std::string_view prefix, std::string_view before = {},
      std::size_t limit = std::numeric_limits<std::size_t>::max()) const;
  bool empty() const;

  // Applies `batch` atomically and synced.
  std::expected<void, error> commit(const config_batch& batch);

 private:
  explicit config_store(std::unique_ptr<rocksdb::DB> db);
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace strata::controller
