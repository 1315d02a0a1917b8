#include "tiering/rocksdb_log.h"

#include <fcntl.h>
#include <rocksdb/env.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

namespace strata::tiering {

namespace {

class info_log final : public rocksdb::Logger {
 public:
  explicit info_log(int fd) : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), fd_(fd) {}
  ~info_log() override {
    if (fd_ >= 0) ::close(fd_);
  }

  using rocksdb::Logger::Logv;
  // RocksDB's Logv(level, ...) adds the level's name and calls this.
  void Logv(const char* format, va_list ap) override {
    if (fd_ < 0) return;
    // RocksDB's own line: local time to the microsecond, the thread, the words.
    timeval now{};
    ::gettimeofday(&now, nullptr);
    std::tm t{};
    ::localtime_r(&now.tv_sec, &t);
    char head[64];
    const int h =
        std::snprintf(head, sizeof(head), "%04d/%02d/%02d-%02d:%02d:%02d.%06ld %ld ",
                      t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                      static_cast<long>(now.tv_usec), static_cast<long>(::gettid()));
    if (h <= 0) return;
    std::string line(head, static_cast<std::size_t>(h));
    char small[512];
    va_list copy;
    va_copy(copy, ap);
    const int n = std::vsnprintf(small, sizeof(small), format, copy);
    va_end(copy);
    if (n < 0) return;
    if (static_cast<std::size_t>(n) < sizeof(small)) {
      line.append(small, static_cast<std::size_t>(n));
    } else {
      // A long one (the statistics dumps): cut at 64 KiB, as RocksDB does.
      std::vector<char> big(std::min<std::size_t>(static_cast<std::size_t>(n) + 1, 65536));
      va_copy(copy, ap);
      const int m = std::vsnprintf(big.data(), big.size(), format, copy);
      va_end(copy);
      if (m < 0) return;
      line.append(big.data(), std::min<std::size_t>(static_cast<std::size_t>(m), big.size() - 1));
    }
    if (line.back() != '\n') line.push_back('\n');
    // One write, appended: the lines of RocksDB's threads do not mix. Its
    // failure (ENOSPC, EIO) loses this line and no other.
    std::size_t done = 0;
    while (done < line.size()) {
      const ssize_t w = ::write(fd_, line.data() + done, line.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;
      done += static_cast<std::size_t>(w);
    }
  }

 private:
  const int fd_;
};

}  // namespace

std::shared_ptr<rocksdb::Logger> rocksdb_info_log(const std::string& directory) {
  (void)::mkdir(directory.c_str(), 0755);  // EEXIST is fine; RocksDB reports what else went wrong
  const std::string name = directory + "/LOG";
  if (::access(name.c_str(), F_OK) == 0) {
    timeval now{};
    ::gettimeofday(&now, nullptr);
    const unsigned long long micros = static_cast<unsigned long long>(now.tv_sec) * 1000000ull +
                                      static_cast<unsigned long long>(now.tv_usec);
    (void)std::rename(name.c_str(), (name + ".old." + std::to_string(micros)).c_str());
  }
  const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  return std::make_shared<info_log>(fd);
}

}  // namespace strata::tiering
