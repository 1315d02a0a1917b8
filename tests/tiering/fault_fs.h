// A RocksDB file system that fails syncs on demand, for tests of what the
// pool does after a metadata write whose outcome is unknown (leveldb's
// fault_injection_test does the same below its Env). It wraps the real
// file system: the store's files are real files in a temporary directory.
//
// fail_syncs(): every Sync/Fsync/RangeSync of a writable file (the WAL, the
// manifest, table files) fails from now on, with an IOError, as a failed
// fsync does; RocksDB then fails the write that needed it and every later
// one. The data may or may not be in the file: exactly the unknown outcome.
//
// fail_no_space(): every write to a writable file fails with ENOSPC from
// now on (IOStatus::NoSpace), as on a full file system, and the file
// system says it has no free space left (RocksDB's SstFileManager polls
// that before it tries to recover). RocksDB's own info log, were the store
// to let RocksDB make one, goes through this file system too: RocksDB 7.8's
// aborts on a full one (tiering/rocksdb_log.h).
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <memory>
#include <string>

namespace strata::tiering::testing {

class fault_fs final : public rocksdb::FileSystemWrapper {
 public:
  fault_fs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  static const char* kClassName() { return "StrataFaultFS"; }
  const char* Name() const override { return kClassName(); }

  void fail_syncs(bool on = true) noexcept { failing_.store(on); }
  bool failing() const noexcept { return failing_.load(); }
  std::uint64_t syncs_failed() const noexcept { return failed_.load(); }
  void fail_no_space(bool on = true) noexcept { full_.store(on); }
  bool full() const noexcept { return full_.load(); }

  rocksdb::IOStatus GetFreeSpace(const std::string& path, const rocksdb::IOOptions& options,
                                 std::uint64_t* bytes, rocksdb::IODebugContext* dbg) override {
    if (!full()) return target()->GetFreeSpace(path, options, bytes, dbg);
    *bytes = 0;
    return rocksdb::IOStatus::OK();
  }
  // FileSystem's own, which opens the file through this file system (the
  // wrapper's asks the wrapped one, which would open it past us).
  rocksdb::IOStatus NewLogger(const std::string& name, const rocksdb::IOOptions& options,
                              std::shared_ptr<rocksdb::Logger>* result,
                              rocksdb::IODebugContext* dbg) override {
    return rocksdb::FileSystem::NewLogger(name, options, result, dbg);
  }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    return wrap(target()->NewWritableFile(name, options, result, dbg), result);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override {
    return wrap(target()->ReopenWritableFile(name, options, result, dbg), result);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override {
    return wrap(target()->ReuseWritableFile(name, old_name, options, result, dbg), result);
  }

 private:
  class file final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    file(std::unique_ptr<rocksdb::FSWritableFile> f, fault_fs& fs)
        : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      return fs_.failing() ? fs_.injected() : target()->Sync(o, d);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      return fs_.failing() ? fs_.injected() : target()->Fsync(o, d);
    }
    rocksdb::IOStatus RangeSync(std::uint64_t offset, std::uint64_t n, const rocksdb::IOOptions& o,
                                rocksdb::IODebugContext* d) override {
      return fs_.failing() ? fs_.injected() : target()->RangeSync(offset, n, o, d);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
      return fs_.full() ? no_space() : target()->Append(data, o, d);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v,
                             rocksdb::IODebugContext* d) override {
      return fs_.full() ? no_space() : target()->Append(data, o, v, d);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, std::uint64_t offset,
                                       const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* d) override {
      return fs_.full() ? no_space() : target()->PositionedAppend(data, offset, o, d);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, std::uint64_t offset,
                                       const rocksdb::IOOptions& o,
                                       const rocksdb::DataVerificationInfo& v,
                                       rocksdb::IODebugContext* d) override {
      return fs_.full() ? no_space() : target()->PositionedAppend(data, offset, o, v, d);
    }

   private:
    static rocksdb::IOStatus no_space() {
      return rocksdb::IOStatus::NoSpace("fault_fs: injected", "No space left on device");
    }
    fault_fs& fs_;
  };

  rocksdb::IOStatus wrap(rocksdb::IOStatus s, std::unique_ptr<rocksdb::FSWritableFile>* result) {
    if (s.ok()) *result = std::make_unique<file>(std::move(*result), *this);
    return s;
  }
  rocksdb::IOStatus injected() {
    ++failed_;
    return rocksdb::IOStatus::IOError("fault_fs: injected sync failure");
  }

  std::atomic<bool> failing_{false};
  std::atomic<bool> full_{false};
  std::atomic<std::uint64_t> failed_{0};
};

// An Env for metadata_store::open whose files go through `fs`.
struct faulty_metadata {
  std::shared_ptr<fault_fs> fs = std::make_shared<fault_fs>();
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
};

}  // namespace strata::tiering::testing
