#include "raid/device/reservations.h"

#include <fcntl.h>
#include <linux/pr.h>
#include <scsi/sg.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace strata::device {

namespace {

// A SCSI status the sd driver hands back from a PR ioctl (a positive
// return), and the NVMe driver's answer for the same refusal.
constexpr int scsi_reservation_conflict = 0x18;
constexpr int scsi_check_condition = 0x02;

class block final : public reservations {
 public:
  block(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~block() override { ::close(fd_); }

  std::error_code register_key(std::uint64_t key) override {
    pr_registration r{};
    r.old_key = 0;
    r.new_key = key;
    r.flags = PR_FL_IGNORE_KEY;
    const int status = ioctl_status(IOC_PR_REGISTER, &r);
    // Linux's SCSI disk driver registers with APTPL set (persist through
    // power loss), which some targets refuse (tgt: ILLEGAL REQUEST, INVALID
    // FIELD IN PARAMETER LIST): then the same REGISTER AND IGNORE EXISTING
    // KEY without it, through SG_IO, as fence_scsi's sg_persist sends it.
    // The controllers register again at every start anyway.
    if (status == scsi_check_condition) return register_by_sg_io(key);
    return from_status(status);
  }
  std::error_code reserve(std::uint64_t key) override {
    pr_reservation r{};
    r.key = key;
    r.type = PR_WRITE_EXCLUSIVE_REG_ONLY;
    return call(IOC_PR_RESERVE, &r);
  }
  std::error_code preempt(std::uint64_t key, std::uint64_t victim) override {
    pr_preempt p{};
    p.old_key = key;     // PERSISTENT RESERVE OUT's RESERVATION KEY: ours
    p.new_key = victim;  // its SERVICE ACTION RESERVATION KEY: the one removed
    p.type = PR_WRITE_EXCLUSIVE_REG_ONLY;
    int status = ioctl_status(IOC_PR_PREEMPT_ABORT, &p);
    // A target without PREEMPT AND ABORT (tgt answers ILLEGAL REQUEST):
    // PREEMPT. The key is gone all the same, and every later command of
    // the old owner refused; what it had queued in the target runs, as on
    // the simulated drives (the lease and the taker's wait cover it).
    if (status == scsi_check_condition) status = ioctl_status(IOC_PR_PREEMPT, &p);
    const std::error_code e = from_status(status);
    // The drive refuses a preempt of a key it does not hold with the same
    // status as any other refusal; this host registered itself first (the
    // takeover's order), so that refusal means the victim's key is gone.
    if (e == errc::reservation_conflict) return {};
    return e;
  }
  const char* kind() const noexcept override { return "block (SCSI/NVMe)"; }

 private:
  // The ioctl's answer: 0, a SCSI status (positive), or -errno. The SCSI
  // disk driver returns its whole result word: the status is its low
  // byte, a transport failure its host byte (bits 16-23).
  int ioctl_status(unsigned long what, void* argument) {
    const int r = ::ioctl(fd_, what, argument);
    if (r < 0) return -errno;
    if ((r >> 16 & 0xff) != 0) return -EIO;
    return r & 0xff;
  }
  static std::error_code from_status(int status) {
    if (status == 0) return {};
    if (status < 0) {
      if (status == -ENOTTY || status == -EOPNOTSUPP) return errc::not_supported;
      return errc_from_errno(-status);
    }
    return status == scsi_reservation_conflict ? make_error_code(errc::reservation_conflict)
                                               : make_error_code(errc::io_error);
  }
  std::error_code call(unsigned long what, void* argument) {
    return from_status(ioctl_status(what, argument));
  }
  std::error_code register_by_sg_io(std::uint64_t key) {
    // PERSISTENT RESERVE OUT, REGISTER AND IGNORE EXISTING KEY (SPC-4
    // 6.16): a 24-byte parameter list with the new key at bytes 8-15 and
    // every flag (APTPL among them) clear.
    std::uint8_t cdb[10] = {0x5f, 0x06, 0, 0, 0, 0, 0, 0, 24, 0};
    std::uint8_t parameters[24] = {};
    for (int i = 0; i < 8; ++i) parameters[8 + i] = static_cast<std::uint8_t>(key >> (56 - 8 * i));
    std::uint8_t sense[32] = {};
    sg_io_hdr_t io{};
    io.interface_id = 'S';
    io.dxfer_direction = SG_DXFER_TO_DEV;
    io.cmd_len = sizeof cdb;
    io.cmdp = cdb;
    io.dxfer_len = sizeof parameters;
    io.dxferp = parameters;
    io.mx_sb_len = sizeof sense;
    io.sbp = sense;
    io.timeout = 30000;  // ms
    if (::ioctl(fd_, SG_IO, &io) != 0) return errc_from_errno(errno);
    if (io.host_status != 0 || (io.driver_status & 0x0f) != 0) return errc::io_error;
    return from_status(io.status);
  }
  int fd_;
  std::string path_;
};

}  // namespace

std::expected<std::unique_ptr<reservations>, error> block_reservations(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return std::unexpected(
        make_error(errc_from_errno(e), "cannot open " + path + ": " + std::strerror(e)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISBLK(st.st_mode)) {
    ::close(fd);
    return std::unexpected(
        make_error(errc::not_supported, path + " is not a block device: no reservations"));
  }
  return std::make_unique<block>(fd, path);
}

// docs/reservations.md: every field 8 bytes, little-endian, at its offset;
// the rest of the 4 KiB zero.
struct file_reservations::layout {
  std::uint64_t magic;       // 0: "STRATAPR"
  std::uint64_t version;     // 8: 1
  std::uint64_t holder;      // 16: the reservation's key; 0: none
  std::uint64_t type;        // 24: linux/pr.h's type (3, Write Exclusive Registrants Only)
  std::uint64_t generation;  // 32: bumped by every change
  std::uint64_t reserved[3];
  std::uint64_t registrants[8];  // 64: registered keys; 0: a free slot
};

namespace {
constexpr std::uint64_t magic = 0x5250415441525453ull;  // "STRATAPR", little-endian
constexpr std::size_t file_bytes = 4096;

std::atomic_ref<std::uint64_t> at(std::uint64_t& field) noexcept {
  return std::atomic_ref<std::uint64_t>(field);
}
std::uint64_t load(const std::uint64_t& field) noexcept {
  return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(field)).load();
}
}  // namespace

std::expected<std::unique_ptr<file_reservations>, error> file_reservations::open(
    const std::filesystem::path& path) {
  static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free,
                "shared between processes: only lock-free atomics are");
  auto failed = [&](const char* what) {
    const int e = errno;
    return std::unexpected(make_error(
        errc_from_errno(e), std::string(what) + " " + path.string() + ": " + std::strerror(e)));
  };
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return failed("cannot open");
  // Every opener sizes it; a file of zeros is "no reservation, no keys".
  if (::ftruncate(fd, file_bytes) != 0) {
    auto e = failed("cannot size");
    ::close(fd);
    return e;
  }
  void* m = ::mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    auto e = failed("cannot map");
    ::close(fd);
    return e;
  }
  ::close(fd);  // the mapping keeps the file
  auto* l = static_cast<layout*>(m);
  std::uint64_t none = 0;
  if (at(l->magic).compare_exchange_strong(none, magic)) at(l->version).store(1);
  if (load(l->magic) != magic) {
    ::munmap(m, file_bytes);
    return std::unexpected(
        make_error(errc::invalid_argument, path.string() + " is not a reservations file"));
  }
  return std::unique_ptr<file_reservations>(new file_reservations(l));
}

file_reservations::~file_reservations() {
  ::munmap(mapped_, file_bytes);
}

void file_reservations::changed() noexcept {
  at(mapped_->generation).fetch_add(1);
}

bool file_reservations::registered(std::uint64_t key) const noexcept {
  if (key == 0) return false;
  for (const std::uint64_t& slot : mapped_->registrants) {
    if (load(slot) == key) return true;
  }
  return false;
}

std::uint64_t file_reservations::holder() const noexcept {
  return load(mapped_->holder);
}

std::uint64_t file_reservations::generation() const noexcept {
  return load(mapped_->generation);
}

bool file_reservations::admits_write(std::uint64_t key) const noexcept {
  return holder() == 0 || registered(key);
}

std::error_code file_reservations::register_key(std::uint64_t key) {
  if (key == 0) return errc::invalid_argument;
  if (registered(key)) return {};
  for (std::uint64_t& slot : mapped_->registrants) {
    std::uint64_t free = 0;
    if (at(slot).compare_exchange_strong(free, key)) {
      changed();
      return {};
    }
    if (free == key) return {};  // registered meanwhile by the same host
  }
  return errc::no_space;  // a real drive's "insufficient registration resources"
}

std::error_code file_reservations::reserve(std::uint64_t key) {
  if (!registered(key)) return errc::reservation_conflict;
  std::uint64_t none = 0;
  if (at(mapped_->holder).compare_exchange_strong(none, key)) {
    at(mapped_->type).store(PR_WRITE_EXCLUSIVE_REG_ONLY);
    changed();
    return {};
  }
  return none == key ? std::error_code{} : make_error_code(errc::reservation_conflict);
}

std::error_code file_reservations::preempt(std::uint64_t key, std::uint64_t victim) {
  if (!registered(key) || victim == 0 || victim == key) return errc::reservation_conflict;
  bool removed = false;
  for (std::uint64_t& slot : mapped_->registrants) {
    std::uint64_t v = victim;
    removed |= at(slot).compare_exchange_strong(v, 0);
  }
  std::uint64_t held = victim;
  if (at(mapped_->holder).compare_exchange_strong(held, key)) removed = true;
  if (removed) changed();
  return {};
}

std::uint64_t reservation_key(std::span<const std::uint8_t> array_id, char controller) noexcept {
  std::uint64_t key = 0;
  for (std::size_t i = 0; i < 7 && i < array_id.size(); ++i) key = key << 8 | array_id[i];
  key = key << 8 | static_cast<std::uint8_t>(controller);
  return key;
}

}  // namespace strata::device
