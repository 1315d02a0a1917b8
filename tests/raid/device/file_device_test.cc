// The file device's own behaviour beyond the conformance suite: bad input at
// open gets a clear error naming the path, and a file that shrinks under a
// running device gives an I/O error, not a hang or garbage.
#include "raid/device/file_device.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "tests/raid/device/harness.h"

namespace strata::device::testing {
namespace {

std::expected<std::unique_ptr<file_device>, error> open_at(test_loop& loop,
                                                           const std::filesystem::path& path,
                                                           file_options options = {}) {
  return file_device::open(*loop.ring, path.string(), options);
}

void make_file(const std::filesystem::path& path, std::uint64_t size_bytes) {
  std::ofstream(path).close();
  std::filesystem::resize_file(path, size_bytes);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("file device: a missing path is not_found, naming the path", "[device][file]") {
  test_loop loop;
  temp_dir dir;
  const auto path = dir.path() / "no-such-disk.img";
  auto d = open_at(loop, path);
  REQUIRE_FALSE(d);
  CHECK(d.error().code == make_error_code(errc::not_found));
  CHECK(contains(d.error().message, path.string()));
  CHECK(contains(d.error().message, "No such file"));
}

TEST_CASE("file device: a directory or a character device is refused", "[device][file]") {
  test_loop loop;
  temp_dir dir;
  auto d = open_at(loop, dir.path());
  REQUIRE_FALSE(d);
  CHECK(contains(d.error().message, dir.path().string()));

  file_options buffered;
  buffered.direct = direct_io::never;
  auto null = open_at(loop, "/dev/null", buffered);
  REQUIRE_FALSE(null);
  CHECK(null.error().code == make_error_code(errc::invalid_argument));
  CHECK(contains(null.error().message, "not a regular file or a block device"));
}

TEST_CASE("file device: a file smaller than its geometry is too_small, with the sizes",
          "[device][file]") {
  test_loop loop;
  temp_dir dir;
  const auto path = dir.path() / "small.img";
  make_file(path, 10 * 4096);
  file_options options;
  options.block_count = 11;
  auto d = open_at(loop, path, options);
  REQUIRE_FALSE(d);
  CHECK(d.error().code == make_error_code(errc::too_small));
  CHECK(contains(d.error().message, path.string()));
  CHECK(contains(d.error().message, "40960 bytes"));
  CHECK(contains(d.error().message, "45056"));

  make_file(path, 100);  // not even one block
  auto empty = open_at(loop, path);
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code == make_error_code(errc::too_small));
}

TEST_CASE("file device: nonsense options are invalid_argument", "[device][file]") {
  test_loop loop;
  temp_dir dir;
  const auto path = dir.path() / "disk.img";
  make_file(path, 1 << 20);
  file_options options;
  options.logical_block_size_bytes = 1000;
  auto bad_block = open_at(loop, path, options);
  REQUIRE_FALSE(bad_block);
  CHECK(bad_block.error().code == make_error_code(errc::invalid_argument));
  CHECK(contains(bad_block.error().message, "512 or 4096"));

  options = {};
  options.queue_depth = 0;
  CHECK_FALSE(open_at(loop, path, options));

  options = {};
  options.create = true;  // with no block count: what size?
  auto no_size = open_at(loop, dir.path() / "new.img", options);
  REQUIRE_FALSE(no_size);
  CHECK(contains(no_size.error().message, "block count"));
}

TEST_CASE("file device: the whole file by default, a sparse file when created", "[device][file]") {
  test_loop loop;
  temp_dir dir;
  const auto path = dir.path() / "disk.img";
  make_file(path, 10 * 4096 + 100);  // a partial block at the end is not used
  auto d = open_at(loop, path);
  REQUIRE(d);
  CHECK((*d)->geometry().block_count == 10);
  CHECK((*d)->path() == path.string());

  file_options options;
  options.create = true;
  options.block_count = 1 << 20;  // 4 GiB, sparse
  auto created = open_at(loop, dir.path() / "big.img", options);
  REQUIRE(created);
  CHECK(std::filesystem::file_size(dir.path() / "big.img") == (std::uint64_t{1} << 32));
  struct stat st {};
  REQUIRE(::stat((dir.path() / "big.img").c_str(), &st) == 0);
  CHECK(st.st_blocks == 0);  // nothing allocated
  // Opening again finds it and keeps its contents.
  auto again = open_at(loop, dir.path() / "big.img", options);
  REQUIRE(again);
  CHECK((*again)->geometry().block_count == options.block_count);
  WARN("O_DIRECT on " << dir.path() << ": " << ((*again)->uses_direct_io() ? "yes" : "no"));
}

TEST_CASE("file device: a file that shrinks under the device gives io_error", "[device][file]") {
  test_loop loop;
  temp_dir dir;
  const auto path = dir.path() / "shrinking.img";
  make_file(path, 8 * 4096);
  auto d = open_at(loop, path);
  REQUIRE(d);
  std::filesystem::resize_file(path, 4 * 4096);

  auto beyond = io::make(op::read, 6, 1, 4096);
  CHECK(run(loop, **d, *beyond) == make_error_code(errc::io_error));
  // Straddling the new end: the first part is read, then the transfer comes
  // up short and the device says so rather than returning half a buffer.
  auto straddling = io::make(op::read, 3, 3, 4096);
  CHECK(run(loop, **d, *straddling) == make_error_code(errc::io_error));
  auto inside = io::make(op::read, 0, 4, 4096);
  CHECK_FALSE(run(loop, **d, *inside));
}

}  // namespace strata::device::testing
