#include "controller/shelf.h"

#include <cstdio>

#include "raid/device/file_device.h"
#include "raid/device/hdd_model.h"
#include "raid/device/ssd_model.h"

namespace strata::controller {

namespace {
constexpr std::uint32_t drive_block_bytes = 4096;
constexpr std::uint64_t read_cache_bytes = 32ull << 30;

std::string slot(const char* kind, int i) {
  char name[16];
  std::snprintf(name, sizeof name, "%s-%02d", kind, i);
  return name;
}
}  // namespace

std::vector<drive_spec> default_shelf() {
  std::vector<drive_spec> drives;
  const std::uint64_t hdd_bytes = device::hdd_profile::nl_sas_7k2().capacity_bytes / drive_block_bytes * drive_block_bytes;
  const std::uint64_t ssd_bytes = device::ssd_profile::sas_12g().capacity_bytes / drive_block_bytes * drive_block_bytes;
  for (int i = 0; i < 20; ++i) drives.push_back({slot("hdd", i), drive_kind::hdd, hdd_bytes});
  for (int i = 0; i < 2; ++i) drives.push_back({slot("ssd", i), drive_kind::ssd, ssd_bytes});
  drives.push_back({slot("ssd", 2), drive_kind::ssd, read_cache_bytes});
  return drives;
}

std::expected<std::unique_ptr<shelf>, error> shelf::open(device::io_ring& ring, device::clock& clock,
                                                         const std::filesystem::path& directory,
                                                         const std::vector<drive_spec>& drives) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) return std::unexpected(make_error(errc::io_error, "shelf: cannot create " + directory.string() + ": " + ec.message()));
  std::unique_ptr<shelf> s(new shelf());
  for (const drive_spec& d : drives) {
    if (d.bytes == 0 || d.bytes % drive_block_bytes != 0) {
      return std::unexpected(make_error(errc::invalid_argument, "shelf: drive " + d.name + ": " + std::to_string(d.bytes) +
                                                                    " bytes is not a whole number of 4 KiB blocks"));
    }
    device::file_options options;
    options.logical_block_size_bytes = drive_block_bytes;
    options.block_count = d.bytes / drive_block_bytes;
    options.create = true;
    auto file = device::file_device::open(ring, (directory / (d.name + ".img")).string(), options);
    if (!file) return std::unexpected(error{file.error().code, "shelf: drive " + d.name + ": " + file.error().message});
    std::unique_ptr<device::block_device> model;
    if (d.kind == drive_kind::hdd) {
      model = std::make_unique<device::hdd_model>(**file, clock, device::hdd_profile::nl_sas_7k2());
    } else {
      model = std::make_unique<device::ssd_model>(**file, clock, device::ssd_profile::sas_12g());
    }
    s->specs_.push_back(d);
    s->files_.push_back(std::move(*file));
    s->drives_.push_back(std::move(model));
  }
  return s;
}

shelf::~shelf() {
  drives_.clear();  // the models before the files they sit on
  files_.clear();
}

}  // namespace strata::controller
