// The pool's metadata store on a file system that fills (issue 47): the
// write that finds no room fails, RocksDB stops in its background-error
// state, and the store closes without its last flush and says so, with no
// abort (RocksDB 7.8's own info log asserted on the next line after a failed
// write of LOG: tiering/rocksdb_log.h); the next open finds every write the
// store acknowledged.
#include "tiering/metadata_store.h"

#include <optional>
#include <string>

#include "tests/raid/device/harness.h"
#include "tests/tiering/fault_fs.h"

namespace strata::tiering {
namespace {
using namespace testing;
using device::testing::temp_dir;
using device::testing::test_loop;

bool says(const std::optional<std::string>& words, const std::string& what) {
  return words.has_value() && words->find(what) != std::string::npos;
}

struct full_store {
  test_loop loop;
  temp_dir dir;
  faulty_metadata metadata;
  std::unique_ptr<metadata_store> store;

  std::string path() const { return (dir.path() / "metadata").string(); }
  void open() {
    auto s = metadata_store::open(path(), loop.context.get_executor(), metadata.env.get());
    INFO((s ? std::string() : s.error().message));
    REQUIRE(s);
    store = std::move(*s);
  }
  std::error_code put(std::string key, std::string value) {
    metadata_batch b;
    b.put(column::pool, key, value);
    return store->write_now(b);  // synced
  }
};

TEST_CASE(
    "metadata store: on a full file system the write fails, and the store closes cleanly in its "
    "background-error state, its acknowledged writes kept",
    "[tiering][metadata]") {
  full_store f;
  f.open();
  REQUIRE_FALSE(f.put("acknowledged", "before the file system filled"));
  CHECK_FALSE(f.store->background_error());
  f.metadata.fs->fail_no_space();
  // The WAL's append finds no room: refused, never acknowledged. RocksDB
  // logs its background error and, its free space polled (none), that it
  // cannot clear it: LOG lines with the file system full.
  CHECK(f.put("refused", std::string(8192, 'x')) == make_error_code(errc::io_error));
  CHECK(says(f.store->background_error(), "No space"));
  CHECK(f.put("after", "refused too") == make_error_code(errc::io_error));
  const std::optional<std::string> how = f.store->close();
  INFO(how.value_or("a clean close"));
  CHECK(says(how, "the metadata store is in its background-error state ("));
  CHECK(says(how, "No space"));
  CHECK(says(how, "closed without its last flush"));
  CHECK_FALSE(f.store->close());  // once only
  f.store.reset();

  // Room again: the next open replays the log.
  f.metadata.fs->fail_no_space(false);
  f.open();
  CHECK(f.store->get(column::pool, "acknowledged") == "before the file system filled");
  CHECK_FALSE(f.store->get(column::pool, "after"));
  CHECK_FALSE(f.store->background_error());
  CHECK_FALSE(f.store->close());  // a clean close: flushed
}

TEST_CASE(
    "metadata store: a stop with the file system full: the last flush fails, and the close says "
    "so; nothing acknowledged is lost",
    "[tiering][metadata]") {
  full_store f;
  f.open();
  for (int i = 0; i < 100; ++i)
    REQUIRE_FALSE(f.put("key " + std::to_string(i), "value " + std::to_string(i)));
  f.metadata.fs->fail_no_space();
  const std::optional<std::string> how = f.store->close();
  INFO(how.value_or("a clean close"));
  CHECK(says(how, "the metadata store is in its background-error state ("));
  CHECK(says(how, "No space"));
  f.store.reset();

  f.metadata.fs->fail_no_space(false);
  f.open();
  for (int i = 0; i < 100; ++i)
    CHECK(f.store->get(column::pool, "key " + std::to_string(i)) == "value " + std::to_string(i));
  CHECK_FALSE(f.store->close());
}

TEST_CASE("metadata store: a clean close flushes, and says nothing", "[tiering][metadata]") {
  full_store f;
  f.open();
  REQUIRE_FALSE(f.put("a", "1"));
  CHECK_FALSE(f.store->close());
  f.store.reset();
  f.open();
  CHECK(f.store->get(column::pool, "a") == "1");
}

}  // namespace
}  // namespace strata::tiering
