// RocksDB's info log (the LOG file in each database's directory), written
// so that a full file system cannot abort the daemon.
//
// RocksDB 7.8 (Debian 12's librocksdb-dev, whose static library keeps its
// assertions: it is built without NDEBUG) writes LOG through a
// WritableFileWriter. Once a write of it fails (ENOSPC: the file system is
// full), the writer remembers the error, and the next line logged appends
// to it again: WritableFileWriter::Append() then asserts
// `sync_without_flush_called_` (AssertFalseAndGetStatusForPrevError() in
// file/writable_file_writer.h, reached from EnvLogger::Logv() in
// logging/env_logger.h) and the process aborts. On a full file system that
// is the next log line after a failed flush of LOG: the database's flush at
// a clean stop logs several, and so does the SstFileManager's recovery
// thread every 5 s after a background error. RocksDB 8.1 lets its logger go
// on after an error (facebook/rocksdb#11314); until then, this logger stands
// in for RocksDB's: one write(2) per line, and a line the file system cannot
// take is dropped. The log is for people: no record of a database depends
// on it.
#pragma once

#include <memory>
#include <string>

namespace rocksdb {
class Logger;
}  // namespace rocksdb

namespace strata::tiering {

// The info log for the database in `directory` (DBOptions::info_log): its
// LOG, once the previous one is renamed LOG.old.MICROSECONDS as RocksDB
// does (RocksDB's keep_log_file_num still prunes those). The directory is
// made if missing (RocksDB makes it after the log). Never null: a LOG that
// cannot be opened logs nowhere (given none, RocksDB would make its own).
std::shared_ptr<rocksdb::Logger> rocksdb_info_log(const std::string& directory);

}  // namespace strata::tiering
