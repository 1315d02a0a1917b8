// Pool metadata mirrored over a real partner link on loopback: controller
// a's pool store feeding its pool_mirror, controller b's metadata_replicas
// writing the copy, each controller on its own loop thread. The copy
// holds every synced batch before a's write is acknowledged; a link that
// goes down makes the next synced write wait until the drives are told
// the copy is behind; a link back makes the whole copy anew.
#include "controller/metadata_mirror.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "tests/controller/within.h"

using namespace strata;
using strata::test::within;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using asio::ip::tcp;
using tiering::column;

namespace {

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    path = std::filesystem::temp_directory_path() /
           ("strata-mirror-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
};

struct loop_thread {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::thread thread{[this] { io.run(); }};
  ~loop_thread() {
    work.reset();
    thread.join();
  }
  template <class F>
  std::invoke_result_t<F> run(F f) {
    std::packaged_task<std::invoke_result_t<F>()> task(std::move(f));
    auto done = task.get_future();
    asio::post(io, [&task] { task(); });
    return done.get();
  }
};

std::map<std::string, std::string> contents(const tiering::metadata_store& s, column c) {
  std::map<std::string, std::string> out;
  REQUIRE(!s.scan(c, [&](std::string_view k, std::string_view v) { out.emplace(k, v); }));
  return out;
}

// A metadata frame for pools/p1 as the owner sends it
// (docs/partner-link.md): a begin (no flags), or a batch putting KEY =
// VALUE in the extent map, with FLAGS.
controller::link_bytes frame(std::optional<std::uint8_t> flags, const std::string& key = "v1/0",
                             const std::string& value = "x") {
  const std::string pool = "pools/p1";
  controller::link_bytes out{static_cast<std::uint8_t>(pool.size())};
  out.insert(out.end(), pool.begin(), pool.end());
  if (!flags) return out;
  out.push_back(*flags);
  tiering::metadata_batch batch;
  batch.put(column::extent_map, key, value);
  const std::string bytes = batch.encode();
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

}  // namespace

TEST_CASE("metadata batches encode and decode; bytes they did not make are refused") {
  tiering::metadata_batch b;
  b.put(column::extent_map, "v1/0", std::string("\0\1\2", 3));
  b.erase(column::cache_index, "line/7");
  b.erase_range(column::heat, "a", "z");
  const std::string bytes = b.encode();
  auto back = tiering::metadata_batch::decode(bytes);
  REQUIRE(back);
  CHECK(back->size() == 3);
  CHECK(back->encode() == bytes);
  CHECK_FALSE(tiering::metadata_batch::decode(bytes.substr(0, bytes.size() - 1)));
  CHECK_FALSE(tiering::metadata_batch::decode(bytes + "x"));
  std::string bad_column = bytes;
  bad_column[4] = 9;
  CHECK_FALSE(tiering::metadata_batch::decode(bad_column));
  CHECK(controller::pool_directory("pools/p1") == "p1");
  CHECK_FALSE(controller::pool_directory("pools/../x"));
  CHECK_FALSE(controller::pool_directory("hosts/h1"));
}

TEST_CASE(
    "a pool's metadata mirrored over the partner link: every synced batch before its write is "
    "acknowledged") {
  temp_dir dir;
  loop_thread a, b;
  controller::partner_link_options o;
  o.listen_at = tcp::endpoint(asio::ip::make_address("127.0.0.2"), 0);
  o.key.fill(7);
  o.self = "b";
  o.partner = "a";
  controller::partner_link link_b(b.io.get_executor(), o);
  REQUIRE(b.run([&] { return link_b.start(); }));
  o.listen_at = b.run([&] { return link_b.listen_endpoint(); });
  o.self = "a";
  o.partner = "b";
  auto link_a = std::make_unique<controller::partner_link>(a.io.get_executor(), o);
  auto replicas =
      std::make_unique<controller::metadata_replicas>(b.io.get_executor(), dir.path / "b", link_b);

  std::mutex m;
  std::vector<bool> records;  // what a's drives were told, in order
  std::function<void(bool, std::function<void(std::error_code)>)> record =
      [&](bool current, std::function<void(std::error_code)> done) {
        {
          std::lock_guard hold(m);
          records.push_back(current);
        }
        done({});
      };
  auto records_now = [&] {
    std::lock_guard hold(m);
    return records;
  };
  controller::pool_mirror mirror(
      a.io.get_executor(), "pools/p1",
      [&](std::uint16_t type, controller::link_bytes payload, controller::link_reply done) {
        link_a->call(type, std::move(payload), std::move(done));
      },
      record);
  auto store = tiering::metadata_store::open((dir.path / "a").string(), a.io.get_executor());
  REQUIRE(store);
  // Something in the store before the copy exists: the whole-store copy brings it.
  tiering::metadata_batch before;
  for (int i = 0; i < 3000; ++i)
    before.put(column::extent_map, "v1/" + std::to_string(i), std::string(300, char('a' + i % 26)));
  REQUIRE(!(*store)->write_now(before));
  (*store)->set_copy(&mirror);
  // Starts a's link; at each link-up, as the array does, a whole copy.
  // The mirror turns current before it tells the drives so (a synced write
  // in between is mirrored all the same): wait for both.
  auto link_up = [&](std::size_t records_after) {
    a.run([&] {
      link_a->on_state = [&](bool up, const std::string&) {
        if (!up) return;
        mirror.link_up();
        (*store)->poke();
      };
      return link_a->start();
    });
    REQUIRE(within(5s, [&] { return mirror.current() && records_now().size() == records_after; }));
  };
  link_up(1);
  CHECK(records_now() == std::vector<bool>{true});

  // write WHAT SYNC: a batch through the store on a's loop; its outcome.
  auto write = [&](tiering::metadata_batch batch, bool sync) {
    std::promise<std::error_code> done;
    auto got = done.get_future();
    asio::post(a.io, [&] {
      (*store)->write(std::move(batch), sync, [&](std::error_code e) { done.set_value(e); });
    });
    return got.get();
  };
  for (int i = 0; i < 50; ++i) {
    tiering::metadata_batch w;
    w.put(column::extent_map, "v2/" + std::to_string(i), "x" + std::to_string(i));
    if (i % 7 == 0) w.erase(column::extent_map, "v1/" + std::to_string(i));
    w.put(column::heat, "h" + std::to_string(i), "1");
    CHECK(!write(std::move(w), i % 2 == 0));
  }
  // Closes b's copy (as a takeover does) and compares it with a's store, column by column.
  auto check_copy = [&](std::initializer_list<column> columns) {
    std::promise<bool> taken;
    auto got = taken.get_future();
    asio::post(b.io,
               [&] { replicas->take("pools/p1", [&](bool copied) { taken.set_value(copied); }); });
    REQUIRE(got.get());
    auto copy =
        tiering::metadata_store::open((dir.path / "b" / "p1").string(), b.io.get_executor());
    REQUIRE(copy);
    for (column c : columns) CHECK(contents(**copy, c) == contents(**store, c));
    replicas->release("pools/p1");  // not opened as the pool's store: copies go on
  };
  // A synced batch is in the copy before its write is acknowledged.
  tiering::metadata_batch last;
  last.put(column::cache_index, "line/1", "slot 5");
  REQUIRE(!write(std::move(last), true));
  check_copy({column::extent_map, column::heat, column::cache_index});

  // The link goes down: the next synced write waits until the drives say the copy is behind.
  a.run([&] { link_a->stop(); });
  tiering::metadata_batch lonely;
  lonely.put(column::extent_map, "v3/0", "alone");
  CHECK(!write(std::move(lonely), true));
  CHECK(records_now() == std::vector<bool>{true, false});
  CHECK_FALSE(mirror.current());
  tiering::metadata_batch again;
  again.put(column::extent_map, "v3/1", "alone too");
  CHECK(!write(std::move(again), true));
  CHECK(records_now().size() == 2);  // said once

  // Back: the whole store again, and the drives say so.
  link_a = std::make_unique<controller::partner_link>(a.io.get_executor(), o);
  link_up(3);
  CHECK(records_now() == std::vector<bool>{true, false, true});
  check_copy({column::extent_map});
  // A pool open on the partner is never overwritten by a copy of it.
  replicas->hold("pools/p1");
  mirror.link_up();
  (*store)->poke();
  std::this_thread::sleep_for(500ms);
  CHECK_FALSE(mirror.current());
  CHECK(records_now().size() == 3);  // no "current" said for a copy refused
  {
    auto copy =
        tiering::metadata_store::open((dir.path / "b" / "p1").string(), b.io.get_executor());
    REQUIRE(copy);
    CHECK(contents(**copy, column::extent_map) ==
          contents(**store, column::extent_map));  // left as it was
  }
  mirror.stop();
  a.run([&] { link_a->stop(); });
  b.run([&] { link_b.stop(); });
  a.run([&] { store->reset(); });
  replicas.reset();
  a.run([&] { link_a.reset(); });
}

TEST_CASE(
    "a copy begun anew counts only once its whole-store copy ended: a takeover never opens half of "
    "one") {
  temp_dir dir;
  loop_thread b;
  controller::metadata_replicas replicas(b.io.get_executor(), dir.path / "b");
  using controller::link_type::metadata_batch;
  using controller::link_type::metadata_begin;
  REQUIRE(replicas.answer(metadata_begin, frame(std::nullopt)));
  REQUIRE(replicas.answer(metadata_batch, frame(0)));
  REQUIRE(replicas.answer(metadata_batch, frame(1)));
  CHECK_FALSE(replicas.take_now("pools/p1"));  // its owner died before the last batch: half a copy
  REQUIRE(replicas.answer(metadata_begin, frame(std::nullopt)));
  REQUIRE(replicas.answer(metadata_batch, frame(0)));
  REQUIRE(replicas.answer(metadata_batch, frame(3)));  // synced, and the whole store's last
  REQUIRE(replicas.answer(metadata_batch, frame(1)));  // and a batch after it
  CHECK(replicas.take_now("pools/p1"));
  // Taken, it is held: its owner's copy begun anew is refused until the
  // takeover gives up (a thawed owner must not reopen the directory the
  // pool opens in).
  CHECK_FALSE(replicas.answer(metadata_begin, frame(std::nullopt)));
  replicas.release("pools/p1");
  // Begun anew: not whole again until its last batch.
  REQUIRE(replicas.answer(metadata_begin, frame(std::nullopt)));
  CHECK_FALSE(replicas.take_now("pools/p1"));
}

TEST_CASE(
    "a copy begun anew keeps the last whole one until it ends: a takeover opens that one, never "
    "half of the new") {
  temp_dir dir;
  loop_thread b;
  controller::metadata_replicas replicas(b.io.get_executor(), dir.path / "b");
  auto taken = [&] {  // the pool's store as a takeover opens it
    auto store =
        tiering::metadata_store::open((dir.path / "b" / "p1").string(), b.io.get_executor());
    REQUIRE(store);
    auto out = contents(**store, column::extent_map);
    b.run([&] { store->reset(); });
    return out;
  };
  using controller::link_type::metadata_batch;
  using controller::link_type::metadata_begin;
  using kv = std::map<std::string, std::string>;
  REQUIRE(replicas.answer(metadata_begin, frame(std::nullopt)));
  REQUIRE(replicas.answer(metadata_batch, frame(3, "v1/0", "old")));    // whole
  REQUIRE(replicas.answer(metadata_batch, frame(1, "v1/1", "later")));  // mirrored after
  REQUIRE(replicas.answer(metadata_begin, frame(std::nullopt)));        // a reconnect: made anew
  REQUIRE(replicas.answer(metadata_batch, frame(0, "v1/0", "new")));
  // Its owner died midway: the last whole copy is taken, whole, and the half one is gone.
  CHECK(replicas.take_now("pools/p1"));
  CHECK(taken() == kv{{"v1/0", "old"}, {"v1/1", "later"}});
  CHECK_FALSE(std::filesystem::exists(dir.path / "b" / "p1.next"));
  replicas.release("pools/p1");  // the takeover gave up: copies are made here again

  // Made anew to its end: the new copy replaces the kept one, and takes the batches after it.
  REQUIRE(replicas.answer(metadata_begin, frame(std::nullopt)));
  REQUIRE(replicas.answer(metadata_batch, frame(3, "v1/0", "old")));
  REQUIRE(replicas.answer(metadata_begin, frame(std::nullopt)));
  REQUIRE(replicas.answer(metadata_batch, frame(0, "v1/2", "new")));
  REQUIRE(replicas.answer(metadata_batch, frame(3, "v1/3", "new")));
  REQUIRE(replicas.answer(metadata_batch, frame(1, "v1/4", "after")));
  CHECK(replicas.take_now("pools/p1"));
  CHECK(taken() == kv{{"v1/2", "new"}, {"v1/3", "new"}, {"v1/4", "after"}});
  CHECK_FALSE(std::filesystem::exists(dir.path / "b" / "p1.next"));
  replicas.release("pools/p1");

  // Taken, nothing is kept: half a copy made after it is no copy.
  REQUIRE(replicas.answer(metadata_begin, frame(std::nullopt)));
  REQUIRE(replicas.answer(metadata_batch, frame(0, "v1/5", "half")));
  CHECK_FALSE(replicas.take_now("pools/p1"));
}
