#include "controller/identity.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "raid/superblock.h"

namespace strata::controller {

std::expected<array_identity, error> make_identity() {
  array_identity a;
  if (RAND_bytes(a.id.data(), static_cast<int>(a.id.size())) != 1 ||
      RAND_bytes(a.link_key.data(), static_cast<int>(a.link_key.size())) != 1) {
    return std::unexpected(
        make_error(errc::io_error,
                   "OpenSSL's RAND_bytes gave no random bytes for the array's id and link key"));
  }
  a.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return a;
}

std::string id_text(const array_identity& a) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (std::uint8_t b : a.id) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

void read_areas(const std::vector<device::block_device*>& drives,
                std::function<void(std::vector<drive_area>)> done) {
  struct state {
    std::vector<drive_area> found;
    std::size_t left;
    std::function<void(std::vector<drive_area>)> done;
    void one_less() {
      if (--left > 0) return;
      std::ranges::sort(found, {}, &drive_area::drive);
      done(std::move(found));
    }
  };
  auto s = std::make_shared<state>(state{{}, drives.size(), std::move(done)});
  if (drives.empty()) {
    s->left = 1;
    s->one_less();
    return;
  }
  for (std::size_t i = 0; i < drives.size(); ++i) {
    device::block_device* d = drives[i];
    area::locate(*d, [s, d, i](std::expected<std::uint64_t, std::error_code> at) {
      if (!at) return s->one_less();  // no superblock, or no room for an area
      area::read(*d, *at, [s, i, at = *at](std::expected<area_contents, std::error_code> c) {
        if (c) {
          s->found.push_back({i, at, std::move(*c)});
        } else if (c.error() == errc::not_found) {
          s->found.push_back({i, at, {}});  // an area with nothing in it yet
        }
        s->one_less();
      });
    });
  }
}

void write_stamps(std::vector<area_stamp> stamps, std::function<void(std::error_code)> done) {
  struct state {
    std::size_t left;
    std::error_code first;
    std::function<void(std::error_code)> done;
    void one_less(std::error_code e) {
      if (e && !first) first = e;
      if (--left == 0) done(first);
    }
  };
  std::size_t writes = 0;
  for (const area_stamp& s : stamps) writes += (s.identity ? 1 : 0) + (s.ownership ? 1 : 0);
  auto s = std::make_shared<state>(state{writes, {}, std::move(done)});
  if (writes == 0) {
    s->left = 1;
    s->one_less({});
    return;
  }
  for (const area_stamp& stamp : stamps) {
    // The two records of one drive one after the other: each is two writes
    // with flushes between, and a drive needs no more at once.
    auto ownership = stamp.ownership;
    auto drive = stamp.drive;
    auto at = stamp.offset_bytes;
    auto then = [s, drive, at, ownership](std::error_code e) {
      s->one_less(e);
      if (ownership)
        area::write_both(*drive, at, area::ownership_slot,
                         area::encode(*ownership, ownership->sequence()),
                         [s](std::error_code e2) { s->one_less(e2); });
    };
    if (stamp.identity) {
      area::write_both(*drive, at, area::array_slot, area::encode(*stamp.identity, 1),
                       std::move(then));
    } else if (ownership) {
      area::write_both(*drive, at, area::ownership_slot,
                       area::encode(*ownership, ownership->sequence()),
                       [s](std::error_code e2) { s->one_less(e2); });
    }
  }
}

std::expected<array_identity, error> identity_in_files(const std::filesystem::path& directory) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory, ec)) {
    if (entry.path().extension() == ".img") files.push_back(entry.path());
  }
  if (ec) {
    return std::unexpected(
        make_error(errc::not_found, "no shelf at " + directory.string() + " (" + ec.message() +
                                        "): no array to join (start controller a first)"));
  }
  std::ranges::sort(files);
  for (const auto& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::vector<std::byte> block(raid::superblock::size_bytes);
    std::optional<array_identity> found;
    if (::pread(fd, block.data(), block.size(), 0) == static_cast<ssize_t>(block.size())) {
      auto sb = raid::superblock::decode(
          std::span<const std::byte, raid::superblock::size_bytes>(block.data(), block.size()));
      const auto at = sb ? raid::controller_area::offset_bytes(sb->data_offset_blocks *
                                                               sb->logical_block_size_bytes)
                         : std::nullopt;
      if (at) {
        std::vector<std::byte> bytes(area::slots * area::slot_bytes);
        if (::pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(*at)) ==
            static_cast<ssize_t>(bytes.size())) {
          if (auto c = area::decode(bytes); c && c->array) found = c->array;
        }
      }
    }
    ::close(fd);
    if (found) return *found;
  }
  return std::unexpected(make_error(
      errc::not_found,
      "no drive in " + directory.string() + " holds an array (start controller a first)"));
}

}  // namespace strata::controller
