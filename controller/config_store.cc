#include "controller/config_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "tiering/rocksdb_log.h"

namespace strata::controller {

std::expected<std::unique_ptr<config_store>, error> config_store::open(
    const std::string& directory) {
  rocksdb::Options options;
  options.create_if_missing = true;
  // A few kilobytes per resource, written a handful of times a minute at
  // most: one background job is plenty, and the loops keep the cores.
  options.max_background_jobs = 1;
  // RocksDB 7.8's own LOG aborts the process on a full file system
  // (tiering/rocksdb_log.h).
  options.info_log = tiering::rocksdb_info_log(directory);
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, directory, &raw);
  if (!s.ok()) {
    return std::unexpected(make_error(
        errc::io_error, "config: cannot open RocksDB at " + directory + ": " + s.ToString()));
  }
  return std::unique_ptr<config_store>(new config_store(std::unique_ptr<rocksdb::DB>(raw)));
}

config_store::config_store(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}

config_store::~config_store() = default;

std::optional<std::string> config_store::get(std::string_view key) const {
  std::string value;
  const rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), &value);
  if (!s.ok()) return std::nullopt;
  return value;
}

std::vector<std::pair<std::string, std::string>> config_store::list(std::string_view prefix,
                                                                    std::string_view after,
                                                                    std::size_t limit) const {
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string_view start = after.empty() || after < prefix ? prefix : after;
  for (it->Seek(rocksdb::Slice(start.data(), start.size())); it->Valid() && out.size() < limit;
       it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    if (!key.starts_with(prefix)) break;
    if (!after.empty() && key == after) continue;
    out.emplace_back(std::string(key), it->value().ToString());
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> config_store::list_backward(
    std::string_view prefix, std::string_view before, std::size_t limit) const {
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  // Past every key with the prefix: the prefix with its last byte raised
  // (the prefixes here end in '/', never 0xFF).
  std::string end(prefix);
  if (!end.empty()) end.back() = static_cast<char>(end.back() + 1);
  const std::string start = before.empty() ? end : std::string(before);
  if (start.empty()) {
    it->SeekToLast();
  } else {
    it->SeekForPrev(start);
  }
  for (; it->Valid() && out.size() < limit; it->Prev()) {
    const std::string_view key(it->key().data(), it->key().size());
    if (!key.starts_with(prefix)) break;
    if (key == start) continue;
    out.emplace_back(std::string(key), it->value().ToString());
  }
  return out;
}

bool config_store::empty() const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->SeekToFirst();
  return !it->Valid();
}

std::expected<void, error> config_store::commit(const config_batch& batch) {
  rocksdb::WriteBatch b;
  for (const auto& o : batch.ops_) {
    if (o.erase) {
      b.Delete(o.key);
    } else {
      b.Put(o.key, o.value);
    }
  }
  rocksdb::WriteOptions sync;
  sync.sync = true;
  const rocksdb::Status s = db_->Write(sync, &b);
  if (!s.ok())
    return std::unexpected(
        make_error(errc::io_error, "config: a synced write failed: " + s.ToString()));
  return {};
}

}  // namespace strata::controller
