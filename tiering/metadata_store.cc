#include "tiering/metadata_store.h"

#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <filesystem>

#include "tiering/rocksdb_log.h"

namespace strata::tiering {

namespace detail {

// RocksDB's background error while it stands: set when RocksDB reports one
// (a failed WAL write, flush, compaction or MANIFEST write; it stops taking
// writes for the severe ones), cleared when its recovery ends well (the
// SstFileManager retries every 5 s once the file system has room again).
// Called on RocksDB's threads.
class background_errors final : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason, rocksdb::Status* error) override {
    if (error == nullptr || error->ok()) return;
    std::lock_guard lock(mutex_);
    if (!error_) error_ = error->ToString();
  }
  void OnErrorRecoveryEnd(const rocksdb::BackgroundErrorRecoveryInfo& info) override {
    std::lock_guard lock(mutex_);
    if (info.new_bg_error.ok()) {
      error_.reset();
    } else {
      error_ = info.new_bg_error.ToString();
    }
  }
  std::optional<std::string> current() const {
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  mutable std::mutex mutex_;
  std::optional<std::string> error_;
};

}  // namespace detail

std::string_view column_name(column c) noexcept {
  switch (c) {
    case column::pool:
      return "pool";
    case column::extent_map:
      return "extent_map";
    case column::heat:
      return "heat";
    case column::heat_history:
      return "heat_history";
    case column::cache_index:
      return "cache_index";
  }
  return "unknown";
}

void metadata_batch::put(column c, std::string_view key, std::string_view value) {
  ops_.push_back({c, kind::put, std::string(key), std::string(value)});
}

void metadata_batch::erase(column c, std::string_view key) {
  ops_.push_back({c, kind::erase, std::string(key), {}});
}

void metadata_batch::erase_range(column c, std::string_view begin, std::string_view end) {
  ops_.push_back({c, kind::erase_range, std::string(begin), std::string(end)});
}

namespace {

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

std::optional<std::uint32_t> take_u32(std::string_view& in) {
  if (in.size() < 4) return std::nullopt;
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | static_cast<std::uint8_t>(in[static_cast<std::size_t>(i)]);
  in.remove_prefix(4);
  return v;
}

std::optional<std::string> take_bytes(std::string_view& in) {
  const auto n = take_u32(in);
  if (!n || in.size() < *n) return std::nullopt;
  std::string s(in.substr(0, *n));
  in.remove_prefix(*n);
  return s;
}

}  // namespace

std::string metadata_batch::encode() const {
  std::string out;
  put_u32(out, static_cast<std::uint32_t>(ops_.size()));
  for (const entry& e : ops_) {
    out.push_back(static_cast<char>(e.where));
    out.push_back(static_cast<char>(e.what));
    put_u32(out, static_cast<std::uint32_t>(e.key.size()));
    out += e.key;
    put_u32(out, static_cast<std::uint32_t>(e.value.size()));
    out += e.value;
  }
  return out;
}

std::optional<metadata_batch> metadata_batch::decode(std::string_view in) {
  const auto count = take_u32(in);
  if (!count) return std::nullopt;
  metadata_batch b;
  for (std::uint32_t i = 0; i < *count; ++i) {
    if (in.size() < 2) return std::nullopt;
    const auto where = static_cast<std::uint8_t>(in[0]);
    const auto what = static_cast<std::uint8_t>(in[1]);
    in.remove_prefix(2);
    if (where >= column_count || what > static_cast<std::uint8_t>(kind::erase_range))
      return std::nullopt;
    auto key = take_bytes(in);
    if (!key) return std::nullopt;
    auto value = take_bytes(in);
    if (!value) return std::nullopt;
    b.ops_.push_back(
        {static_cast<column>(where), static_cast<kind>(what), std::move(*key), std::move(*value)});
  }
  if (!in.empty()) return std::nullopt;
  return b;
}

namespace {

// RocksDB's default family, then one per column, in column order (the
// handles are indexed by column + 1).
std::vector<rocksdb::ColumnFamilyDescriptor> column_families() {
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  families.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (std::size_t i = 0; i < column_count; ++i) {
    families.emplace_back(std::string(column_name(static_cast<column>(i))),
                          rocksdb::ColumnFamilyOptions());
  }
  return families;
}

}  // namespace

std::expected<std::unique_ptr<metadata_store>, error> metadata_store::open(
    const std::string& directory, boost::asio::any_io_executor loop, rocksdb::Env* env) {
  rocksdb::DBOptions options;
  if (env != nullptr) options.env = env;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  // The pool's metadata is small and written in small batches: keep the
  // background threads few, as the loops own the cores.
  options.max_background_jobs = 2;
  // RocksDB 7.8's own LOG aborts the process on a full file system
  // (tiering/rocksdb_log.h).
  options.info_log = rocksdb_info_log(directory);
  auto errors = std::make_shared<detail::background_errors>();
  options.listeners.push_back(errors);
  const std::vector<rocksdb::ColumnFamilyDescriptor> families = column_families();
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, directory, families, &handles, &raw);
  if (!s.ok()) {
    return std::unexpected(make_error(
        errc::io_error, "metadata: cannot open RocksDB at " + directory + ": " + s.ToString()));
  }
  return std::unique_ptr<metadata_store>(new metadata_store(
      std::unique_ptr<rocksdb::DB>(raw), std::move(handles), std::move(errors), std::move(loop)));
}

std::expected<std::unique_ptr<metadata_store>, error> metadata_store::open_read_only(
    const std::string& directory) {
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec)) {
    return std::unexpected(
        make_error(errc::not_found, "metadata: " + directory + " is not a directory"));
  }
  rocksdb::DBOptions options;
  const std::vector<rocksdb::ColumnFamilyDescriptor> families = column_families();
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s =
      rocksdb::DB::OpenForReadOnly(options, directory, families, &handles, &raw);
  if (!s.ok()) {
    return std::unexpected(make_error(
        errc::io_error, "metadata: cannot open RocksDB at " + directory +
                            " read-only (is it a pool's metadata directory?): " + s.ToString()));
  }
  auto store = std::unique_ptr<metadata_store>(
      new metadata_store(std::unique_ptr<rocksdb::DB>(raw), std::move(handles), nullptr, {}));
  store->read_only_ = true;
  store->failure_ = make_error_code(errc::io_error);  // nothing is ever written through it
  return store;
}

metadata_store::metadata_store(std::unique_ptr<rocksdb::DB> db,
                               std::vector<rocksdb::ColumnFamilyHandle*> handles,
                               std::shared_ptr<detail::background_errors> errors,
                               boost::asio::any_io_executor loop)
    : db_(std::move(db)),
      handles_(std::move(handles)),
      errors_(std::move(errors)),
      loop_(std::move(loop)),
      thread_([this] { run(); }) {}

metadata_store::~metadata_store() {
  (void)close();
}

std::optional<std::string> metadata_store::background_error() const {
  if (errors_ == nullptr) return std::nullopt;
  return errors_->current();
}

std::optional<std::string> metadata_store::close() {
  if (closed_) return std::nullopt;
  closed_ = true;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  std::optional<std::string> outcome;
  if (!read_only_) {
    // Out of the log into table files now, at a clean stop: otherwise the
    // next open replays the whole memtable (seconds with a million extent
    // mappings in it). A crash still leaves the log to replay, as it must,
    // and so does a stop in the background-error state: RocksDB takes no
    // flush then (it would only fail again, with the same error).
    std::optional<std::string> stuck = background_error();
    std::optional<std::string> failed;
    if (!stuck) {
      const rocksdb::Status flushed = db_->Flush(rocksdb::FlushOptions{}, handles_);
      if (!flushed.ok()) {
        stuck = background_error();  // the flush's own failure, on a full file system
        if (!stuck) failed = flushed.ToString();
      }
    }
    const char* safe =
        "every write it acknowledged is in its table files or its write-ahead log, which the "
        "next start replays";
    if (stuck) {
      outcome = "the metadata store is in its background-error state (" + *stuck +
                "): closed without its last flush; " + safe;
    } else if (failed) {
      outcome = "the metadata store's last flush failed (" + *failed + "); " + safe;
    }
  }
  for (auto* h : handles_) (void)db_->DestroyColumnFamilyHandle(h);
  // In the background-error state RocksDB's close says so again (a log
  // writer that saw the error leaves its unwritten bytes: those of the
  // write that failed, which was never acknowledged).
  const rocksdb::Status closed = db_->Close();
  if (!closed.ok() && !outcome) outcome = "the metadata store's close failed: " + closed.ToString();
  return outcome;
}

void metadata_store::write(metadata_batch batch, bool sync,
                           std::function<void(std::error_code)> done) {
  ++in_flight_;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(job{std::move(batch), sync, std::move(done)});
  }
  wake_.notify_one();
}

void metadata_store::drain() {
  std::unique_lock lock(mutex_);
  draining_ = true;
  wake_.notify_all();
  drained_.wait(lock, [&] { return queue_.empty() && !running_job_; });
  draining_ = false;
}

void metadata_store::set_step_mode(bool on) {
  std::lock_guard lock(mutex_);
  step_mode_ = on;
  wake_.notify_all();
}

void metadata_store::set_copy(metadata_copy* copy) {
  std::lock_guard lock(mutex_);
  copy_ = copy;
}

void metadata_store::poke() {
  {
    std::lock_guard lock(mutex_);
    poked_ = true;
  }
  wake_.notify_all();
}

void metadata_store::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] {
      return stopping_ || poked_ || (!queue_.empty() && (!step_mode_ || draining_));
    });
    metadata_copy* copy = copy_;
    if (poked_) {
      poked_ = false;
      if (copy != nullptr && !stopping_) {
        running_job_ = true;
        lock.unlock();
        if (copy->wants_everything()) copy->send_everything(*this);
        lock.lock();
        running_job_ = false;
        if (queue_.empty()) drained_.notify_all();
      }
      continue;
    }
    if (queue_.empty()) return;  // stopping, and nothing left
    job j = std::move(queue_.front());
    queue_.pop_front();
    running_job_ = true;
    lock.unlock();
    std::error_code result;
    if (copy != nullptr && !thread_failure_) {
      // Sent first, so that the copy's write and ours overlap; a batch the
      // copy holds and this store failed to take was never acknowledged.
      if (copy->wants_everything()) copy->send_everything(*this);
      const std::uint64_t ticket = copy->send(j.batch, j.sync);
      result = apply(j.batch, j.sync);
      if (!result) {
        if (const std::error_code fenced = copy->wait(ticket)) result = thread_failure_ = fenced;
      }
    } else {
      result = apply(j.batch, j.sync);
    }
    // The outcome travels to the loop; the guard keeps the loop's context
    // from running out of work while it does.
    boost::asio::post(loop_, [this, result, done = std::move(j.done),
                              guard = boost::asio::make_work_guard(loop_)]() mutable {
      --in_flight_;
      if (result && !failure_) failure_ = result;
      if (done) done(result);
    });
    lock.lock();
    running_job_ = false;
    if (queue_.empty()) drained_.notify_all();
  }
}

std::expected<void, error> metadata_store::checkpoint(const std::string& directory) const {
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(db_.get(), &raw);
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  if (s.ok()) s = cp->CreateCheckpoint(directory);
  if (!s.ok()) {
    return std::unexpected(make_error(
        errc::io_error, "metadata store: checkpoint into " + directory + ": " + s.ToString()));
  }
  return {};
}

std::error_code metadata_store::write_now(const metadata_batch& batch, bool sync) {
  // Start-up only: the store's thread has no job, so nothing else applies.
  std::lock_guard lock(mutex_);
  return apply(batch, sync);
}

std::error_code metadata_store::apply(const metadata_batch& j, bool sync) {
  if (thread_failure_) return thread_failure_;
  rocksdb::WriteBatch batch;
  for (const auto& op : j.ops_) {
    // Handle 0 is RocksDB's default family; ours follow in column order.
    rocksdb::ColumnFamilyHandle* h = handles_[static_cast<std::size_t>(op.where) + 1];
    rocksdb::Status s;
    switch (op.what) {
      case metadata_batch::kind::put:
        s = batch.Put(h, op.key, op.value);
        break;
      case metadata_batch::kind::erase:
        s = batch.Delete(h, op.key);
        break;
      case metadata_batch::kind::erase_range:
        s = batch.DeleteRange(h, op.key, op.value);
        break;
    }
    if (!s.ok()) return thread_failure_ = make_error_code(errc::io_error);
  }
  rocksdb::WriteOptions options;
  options.sync = sync;
  const rocksdb::Status s = db_->Write(options, &batch);
  if (!s.ok()) thread_failure_ = make_error_code(errc::io_error);
  return thread_failure_;
}

std::error_code metadata_store::scan(
    column c, const std::function<void(std::string_view, std::string_view)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), handles_[static_cast<std::size_t>(c) + 1]));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    fn(std::string_view(it->key().data(), it->key().size()),
       std::string_view(it->value().data(), it->value().size()));
  }
  return it->status().ok() ? std::error_code{} : make_error_code(errc::io_error);
}

std::optional<std::string> metadata_store::edge_key(column c, bool last) const {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), handles_[static_cast<std::size_t>(c) + 1]));
  if (last) {
    it->SeekToLast();
  } else {
    it->SeekToFirst();
  }
  if (!it->Valid()) return std::nullopt;
  return it->key().ToString();
}

std::optional<std::string> metadata_store::get(column c, std::string_view key) const {
  std::string value;
  const rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), handles_[static_cast<std::size_t>(c) + 1],
               rocksdb::Slice(key.data(), key.size()), &value);
  if (!s.ok()) return std::nullopt;
  return value;
}

}  // namespace strata::tiering
