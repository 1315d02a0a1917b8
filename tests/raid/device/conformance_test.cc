// One conformance suite, run unchanged against every block-device
// implementation (and some stacks of them), at 512- and 4096-byte blocks:
// ranges, alignment, write-then-read, discard, flush and restart, one
// completion per request and none inside submit, queue depths beyond a
// device's own, clear errors for malformed requests.
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "raid/device/emulated_512e.h"
#include "raid/device/fault_device.h"
#include "raid/device/file_device.h"
#include "raid/device/gate_device.h"
#include "raid/device/hdd_model.h"
#include "raid/device/io_scheduler.h"
#include "raid/device/memory_device.h"
#include "raid/device/ssd_model.h"
#include "raid/raid1_group.h"
#include "raid/raid6_group.h"
#include "tests/raid/device/ceph_harness.h"
#include "tests/raid/device/harness.h"
#include "tiering/metadata_store.h"
#include "tiering/pool.h"
#include "tiering/volume.h"

namespace strata::device::testing {
namespace {

constexpr std::uint64_t device_blocks = 2048;

// A device under test, with what survives a crash below it.
struct stack {
  // Removes a backing file outside the test's temporary directory (on
  // /dev/shm) once the layers over it are gone: declared first, so
  // destroyed last. Before, each test process left an 8 MiB file there.
  std::shared_ptr<void> remove_backing;
  std::vector<std::unique_ptr<block_device>> layers;  // bottom first
  // Loses power and starts again; afterwards top() is a fresh device over
  // what survived: everything flushed, maybe more.
  std::function<void(stack&, test_loop&)> restart;
  block_device& top() { return *layers.back(); }
};

// A thin volume of a pool over two memory groups (a performance and a
// capacity tier), its store in `dir`: the suite's device. The pool and store
// live here, so the stack holds one device; a restart closes them once
// idle and opens them again over the same groups, as stratad does.
class volume_device final : public block_device {
 public:
  volume_device(test_loop& loop, std::filesystem::path dir, std::vector<tiering::pool_group> groups,
                std::uint32_t block_size, bool create)
      : loop_(loop), dir_(std::move(dir)), groups_(std::move(groups)) {
    auto s = tiering::metadata_store::open(dir_.string(), loop.context.get_executor());
    REQUIRE(s);
    store_ = std::move(*s);
    loop_.elsewhere = [this] { return store_->in_flight(); };
    tiering::pool_options options;
    options.extent_size_bytes = 64 * 1024;
    options.clock = &loop.clock;
    auto p = tiering::pool::open(loop.context.get_executor(), *store_, groups_, options);
    INFO((p ? "" : p.error().message));
    REQUIRE(p);
    pool_ = std::move(*p);
    if (create) {
      std::optional<std::expected<tiering::volume*, error>> made;
      pool_->create_volume({"lun", block_size, device_blocks},
                           [&](std::expected<tiering::volume*, error> v) { made = std::move(v); });
      loop.run_until([&] { return made.has_value(); });
      INFO((*made ? "" : made->error().message));
      REQUIRE(*made);
    }
    volume_ = pool_->find_volume("lun");
    REQUIRE(volume_ != nullptr);
  }
  ~volume_device() override {
    loop_.run_until([&] { return store_->in_flight() == 0 && volume_->idle(); });
    pool_.reset();
    store_.reset();
    loop_.elsewhere = nullptr;
  }
  const block_geometry& geometry() const noexcept override { return volume_->geometry(); }
  boost::asio::any_io_executor executor() const noexcept override { return volume_->executor(); }
  void submit(request& req) noexcept override { volume_->submit(req); }

 private:
  test_loop& loop_;
  std::filesystem::path dir_;
  std::vector<tiering::pool_group> groups_;
  std::unique_ptr<tiering::metadata_store> store_;
  std::unique_ptr<tiering::pool> pool_;
  tiering::volume* volume_ = nullptr;
};

struct implementation {
  std::string name;
  std::function<stack(test_loop&, std::uint32_t block_size, const temp_dir& dir)> make;
  // The logical block sizes it presents (512e presents only 512).
  std::vector<std::uint32_t> block_sizes = {512, 4096};
};

std::unique_ptr<memory_device> memory(test_loop& loop, std::uint32_t block_size) {
  auto m = memory_device::create(loop.context.get_executor(), {block_size, device_blocks});
  REQUIRE(m);
  return std::move(*m);
}

std::unique_ptr<file_device> file(test_loop& loop, const std::filesystem::path& path,
                                  std::uint32_t block_size, direct_io direct,
                                  std::uint32_t queue_depth = 128) {
  file_options options;
  options.logical_block_size_bytes = block_size;
  options.block_count = device_blocks;
  options.create = true;
  options.direct = direct;
  options.queue_depth = queue_depth;
  auto f = file_device::open(*loop.ring, path.string(), options);
  INFO((f ? "" : f.error().message));
  REQUIRE(f);
  return std::move(*f);
}

// Replaces every layer above the bottom one (the persistent store) with
// fresh ones built by `rebuild`.
template <class Rebuild>
std::function<void(stack&, test_loop&)> rebuild_above_bottom(Rebuild rebuild) {
  return [rebuild](stack& s, test_loop& loop) {
    s.layers.resize(1);
    rebuild(s, loop);
  };
}

std::vector<implementation> implementations() {
  std::vector<implementation> all;
  all.push_back({"memory", [](test_loop& loop, std::uint32_t bs, const temp_dir&) {
                   stack s;
                   s.layers.push_back(memory(loop, bs));
                   s.restart = [](stack&, test_loop&) {};
                   return s;
                 }});
  auto file_kind = [](std::string name, std::filesystem::path parent, direct_io direct,
                      std::uint32_t queue_depth) {
    return implementation{name, [=](test_loop& loop, std::uint32_t bs, const temp_dir& dir) {
                            const auto path =
                                (parent.empty() ? dir.path() : parent) /
                                ("conformance-" + std::to_string(::getpid()) + ".img");
                            std::filesystem::remove(path);
                            stack s;
                            if (!parent.empty()) {
                              s.remove_backing = std::shared_ptr<void>(nullptr, [path](void*) {
                                std::error_code ignored;
                                std::filesystem::remove(path, ignored);
                              });
                            }
                            s.layers.push_back(file(loop, path, bs, direct, queue_depth));
                            s.restart = [=](stack& st, test_loop& l) {
                              st.layers.clear();
                              st.layers.push_back(file(l, path, bs, direct, queue_depth));
                            };
                            return s;
                          }};
  };
  all.push_back(file_kind("file on /tmp, O_DIRECT", {}, direct_io::when_possible, 128));
  all.push_back(file_kind("file on /tmp, buffered", {}, direct_io::never, 128));
  all.push_back(
      file_kind("file on /dev/shm, queue depth 4", "/dev/shm", direct_io::when_possible, 4));
  all.push_back(
      {"hdd model (10K) over memory", [](test_loop& loop, std::uint32_t bs, const temp_dir&) {
         auto add = [](stack& st, test_loop& l) {
           st.layers.push_back(
               std::make_unique<hdd_model>(*st.layers[0], l.clock, hdd_profile::sas_10k()));
         };
         stack s;
         s.layers.push_back(memory(loop, bs));
         add(s, loop);
         s.restart = rebuild_above_bottom(add);
         return s;
       }});
  all.push_back({"ssd model over memory", [](test_loop& loop, std::uint32_t bs, const temp_dir&) {
                   auto add = [](stack& st, test_loop& l) {
                     st.layers.push_back(std::make_unique<ssd_model>(*st.layers[0], l.clock,
                                                                     ssd_profile::sas_12g()));
                   };
                   stack s;
                   s.layers.push_back(memory(loop, bs));
                   add(s, loop);
                   s.restart = rebuild_above_bottom(add);
                   return s;
                 }});
  all.push_back({"io scheduler over hdd model (10K) over memory",
                 [](test_loop& loop, std::uint32_t bs, const temp_dir&) {
                   auto add = [](stack& st, test_loop& l) {
                     st.layers.push_back(std::make_unique<hdd_model>(*st.layers[0], l.clock,
                                                                     hdd_profile::sas_10k()));
                     st.layers.push_back(std::make_unique<io_scheduler>(*st.layers[1], l.clock));
                   };
                   stack s;
                   s.layers.push_back(memory(loop, bs));
                   add(s, loop);
                   s.restart = rebuild_above_bottom(add);
                   return s;
                 }});
  // A gate held at random (a lease check that fails a quarter of the time)
  // and opened again from the loop: the suite's overlapping requests wait
  // and go on in arrival order.
  all.push_back({"gate device (held and reopened at random) over memory",
                 [](test_loop& loop, std::uint32_t bs, const temp_dir&) {
                   auto add = [](stack& st, test_loop& l) {
                     // The gate owns its check, and the check owns the token the
                     // posted reopening looks at: no reopening of a gate gone.
                     auto token = std::make_shared<gate_device*>(nullptr);
                     auto rng = std::make_shared<std::mt19937_64>(test_seed());
                     auto executor = l.context.get_executor();
                     std::weak_ptr<gate_device*> weak = token;
                     auto gate = std::make_unique<gate_device>(
                         *st.layers[0], [token, rng] { return (*rng)() % 4 != 0; },
                         [weak, executor] {
                           boost::asio::post(executor, [weak] {
                             if (auto t = weak.lock()) (*t)->open();
                           });
                         });
                     *token = gate.get();
                     st.layers.push_back(std::move(gate));
                   };
                   stack s;
                   s.layers.push_back(memory(loop, bs));
                   add(s, loop);
                   s.restart = rebuild_above_bottom(add);
                   return s;
                 }});
  all.push_back({"fault device (pass-through) over memory",
                 [](test_loop& loop, std::uint32_t bs, const temp_dir&) {
                   auto add = [](stack& st, test_loop& l) {
                     st.layers.push_back(
                         std::make_unique<fault_device>(*st.layers[0], l.clock, fault_options{}));
                   };
                   stack s;
                   s.layers.push_back(memory(loop, bs));
                   add(s, loop);
                   s.restart = rebuild_above_bottom(add);
                   return s;
                 }});
  // A RAID-6 group of 6 memory members with 4-block strips: 128 stripes of
  // 16 data blocks make the suite's 2048 blocks. A restart builds the group
  // again over the same members.
  all.push_back({"raid6 (4+2) over memory", [](test_loop& loop, std::uint32_t bs, const temp_dir&) {
                   auto add = [bs](stack& st, test_loop&) {
                     std::vector<block_device*> members;
                     for (std::size_t i = 0; i + 1 < st.layers.size() && i < 6; ++i) {
                       members.push_back(st.layers[i].get());
                     }
                     raid::raid6_options options;
                     options.strip_size_bytes = 4 * bs;
                     auto g = raid::raid6_group::create(members, options);
                     INFO((g ? "" : g.error().message));
                     REQUIRE(g);
                     st.layers.back() = std::move(*g);
                   };
                   stack s;
                   const std::uint64_t reserved_blocks = (1 << 20) / bs;
                   for (int i = 0; i < 6; ++i) {
                     auto m = memory_device::create(loop.context.get_executor(),
                                                    {bs, reserved_blocks + device_blocks / 4});
                     REQUIRE(m);
                     s.layers.push_back(std::move(*m));
                   }
                   s.layers.emplace_back();  // the group, on top
                   add(s, loop);
                   s.restart = add;
                   return s;
                 }});
  // RAID-1 mirrors of 2 members and a single-disk group, each member the
  // suite's size plus the reserved area.
  for (unsigned mirrors : {2u, 1u}) {
    all.push_back({mirrors == 2 ? "raid1 (2-way) over memory" : "single-disk group over memory",
                   [mirrors](test_loop& loop, std::uint32_t bs, const temp_dir&) {
                     auto add = [mirrors](stack& st, test_loop&) {
                       std::vector<block_device*> members;
                       for (unsigned i = 0; i < mirrors; ++i) members.push_back(st.layers[i].get());
                       auto g = raid::raid1_group::create(members, {});
                       INFO((g ? "" : g.error().message));
                       REQUIRE(g);
                       st.layers.back() = std::move(*g);
                     };
                     stack s;
                     for (unsigned i = 0; i < mirrors; ++i) {
                       auto m = memory_device::create(loop.context.get_executor(),
                                                      {bs, (1 << 20) / bs + device_blocks});
                       REQUIRE(m);
                       s.layers.push_back(std::move(*m));
                     }
                     s.layers.emplace_back();
                     add(s, loop);
                     s.restart = add;
                     return s;
                   }});
  }
  // The deepest stack: a drive model over a volatile-cache drive over a
  // file; a restart is a real power cut (unflushed writes dropped).
  all.push_back(
      {"hdd model over fault device (volatile cache) over file",
       [](test_loop& loop, std::uint32_t bs, const temp_dir& dir) {
         auto add = [](stack& st, test_loop& l) {
           fault_options options;
           options.seed = test_seed();
           options.volatile_write_cache = true;
           st.layers.push_back(std::make_unique<fault_device>(*st.layers[0], l.clock, options));
           st.layers.push_back(
               std::make_unique<hdd_model>(*st.layers[1], l.clock, hdd_profile::nl_sas_7k2()));
         };
         stack s;
         s.layers.push_back(file(loop, dir.path() / "deep.img", bs, direct_io::when_possible));
         add(s, loop);
         s.restart = [add](stack& st, test_loop& l) {
           auto& fault = static_cast<fault_device&>(*st.layers[1]);
           bool settled = false;
           fault.power_cut(power_loss::drop, [&] { settled = true; });
           l.run_until([&] { return settled; });
           st.layers.resize(1);
           add(st, l);
         };
         return s;
       }});
  // 512e over a 4096-byte device: partial 4 KiB blocks are read, modified
  // and written back. Over a volatile-cache drive that completes a seeded
  // fraction of requests late, so the suite's many overlapping requests
  // complete out of order; a restart is a power cut.
  all.push_back(
      {"512e over fault device (volatile cache, delays) over memory",
       [](test_loop& loop, std::uint32_t, const temp_dir&) {
         auto add = [](stack& st, test_loop& l) {
           fault_options options;
           options.seed = test_seed();
           options.volatile_write_cache = true;
           auto fault = std::make_unique<fault_device>(*st.layers[0], l.clock, options);
           fault->set_delay(std::chrono::microseconds(200), 0.3);
           st.layers.push_back(std::move(fault));
           st.layers.push_back(std::make_unique<emulated_512e>(*st.layers[1]));
         };
         stack s;
         // The suite's device_blocks of 512 bytes: an eighth as many below.
         auto m = memory_device::create(loop.context.get_executor(), {4096, device_blocks / 8});
         REQUIRE(m);
         s.layers.push_back(std::move(*m));
         add(s, loop);
         s.restart = [add](stack& st, test_loop& l) {
           auto& fault = static_cast<fault_device&>(*st.layers[1]);
           bool settled = false;
           fault.power_cut(power_loss::drop, [&] { settled = true; });
           l.run_until([&] { return settled; });
           st.layers.resize(1);
           add(st, l);
         };
         return s;
       },
       {512}});
  // A thin volume over the tiers: the pool maps extents on first write
  // (performance tier first, then capacity), unmaps whole-extent discards;
  // a restart reopens the pool from its store.
  all.push_back(
      {"thin volume over a pool of memory groups",
       [](test_loop& loop, std::uint32_t bs, const temp_dir& dir) {
         stack s;
         // The capacity tier holds the whole volume, the performance tier a quarter.
         for (int i = 0; i < 2; ++i) {
           auto m = memory_device::create(loop.context.get_executor(),
                                          {bs, i == 0 ? device_blocks / 4 : device_blocks});
           REQUIRE(m);
           s.layers.push_back(std::move(*m));
         }
         auto groups = [&s] {
           return std::vector<tiering::pool_group>{{s.layers[0].get(), tiering::tier::performance},
                                                   {s.layers[1].get(), tiering::tier::capacity}};
         };
         const auto where = dir.path() / "metadata";
         s.layers.push_back(std::make_unique<volume_device>(loop, where, groups(), bs, true));
         s.restart = [where, groups](stack& st, test_loop& l) {
           st.layers.back().reset();  // closed once idle
           st.layers.back() = std::make_unique<volume_device>(l, where, groups(), 0, false);
         };
         return s;
       }});
  // An RBD image in a real Ceph cluster, when the run names one
  // (STRATA_TEST_CEPH; ctest's rbd_conformance starts a single-node
  // cluster). librbd completes on its own threads: the loop waits for them
  // as work elsewhere. A restart closes the image and opens it again; Ceph
  // has every write that completed (no client cache), flushed or not.
  if (ceph_test_cluster()) {
    all.push_back(
        {"rbd image in a single-node Ceph", [](test_loop& loop, std::uint32_t bs, const temp_dir&) {
           const std::string name = make_test_image(device_blocks * bs);
           auto open = [name, bs](stack& st, test_loop& l) {
             auto d = rbd_device::open(l.context, ceph_test_connection(), ceph_test_pool, name,
                                       {bs, device_blocks, 16});
             INFO((d ? "" : d.error().message));
             REQUIRE(d);
             rbd_device* raw = d->get();
             l.elsewhere = [raw] { return raw->in_flight(); };
             st.layers.clear();
             st.layers.push_back(std::move(*d));
           };
           stack s;
           s.remove_backing =
               std::shared_ptr<void>(nullptr, [name](void*) { remove_test_image(name); });
           open(s, loop);
           s.restart = [open](stack& st, test_loop& l) {
             l.elsewhere = nullptr;
             open(st, l);
           };
           return s;
         }});
  }
  return all;
}

// Runs `body` once per implementation and block size, each in its own section.
template <class Body>
void for_each_device(Body body) {
  for (const implementation& impl : implementations()) {
    for (std::uint32_t block_size : impl.block_sizes) {
      DYNAMIC_SECTION(impl.name << ", " << block_size << "-byte blocks") {
        temp_dir dir;
        test_loop loop;
        stack s = impl.make(loop, block_size, dir);
        body(loop, s, block_size);
      }
    }
  }
}

}  // namespace

TEST_CASE("conformance: geometry is what was asked for", "[device][conformance]") {
  for_each_device([](test_loop&, stack& s, std::uint32_t block_size) {
    const block_geometry& g = s.top().geometry();
    CHECK(g.logical_block_size_bytes == block_size);
    CHECK(g.block_count == device_blocks);
    CHECK(g.buffer_alignment_bytes == block_size);
    CHECK(g.max_segments >= 1);
    CHECK(g.size_bytes() == device_blocks * block_size);
  });
}

TEST_CASE("conformance: never-written blocks read as zeros", "[device][conformance]") {
  for_each_device([](test_loop& loop, stack& s, std::uint32_t) {
    for (std::uint64_t lba : {std::uint64_t{0}, device_blocks / 2, device_blocks - 8}) {
      const auto data = read_blocks(loop, s.top(), lba, 8);
      CHECK(std::all_of(data.begin(), data.end(), [](std::byte b) { return b == std::byte{0}; }));
    }
  });
}

TEST_CASE("conformance: what is written reads back, at the edges and across segments",
          "[device][conformance]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  for_each_device([seed](test_loop& loop, stack& s, std::uint32_t block_size) {
    block_device& d = s.top();
    const auto first = pattern(3 * block_size, seed);
    const auto last = pattern(5 * block_size, seed + 1);
    write_blocks(loop, d, 0, first);
    write_blocks(loop, d, device_blocks - 5, last);
    CHECK(read_blocks(loop, d, 0, 3) == first);
    CHECK(read_blocks(loop, d, device_blocks - 5, 5) == last);

    // A four-segment write read back by a three-segment read over a wider range.
    const auto middle = pattern(8 * block_size, seed + 2);
    aligned_buffer out(8 * block_size);
    std::memcpy(out.data(), middle.data(), middle.size());
    const iovec out_segments[] = {
        out.segment(0, block_size), out.segment(block_size, 3 * block_size),
        out.segment(4 * block_size, block_size), out.segment(5 * block_size, 3 * block_size)};
    io w;
    w.req.operation = op::write;
    w.req.lba = 100;
    w.req.block_count = 8;
    w.req.buffers = out_segments;
    REQUIRE(!run(loop, d, w));

    aligned_buffer in(10 * block_size);
    const iovec in_segments[] = {in.segment(0, 2 * block_size),
                                 in.segment(2 * block_size, 7 * block_size),
                                 in.segment(9 * block_size, block_size)};
    io r;
    r.req.operation = op::read;
    r.req.lba = 99;
    r.req.block_count = 10;
    r.req.buffers = in_segments;
    REQUIRE(!run(loop, d, r));
    CHECK(std::memcmp(in.data() + block_size, middle.data(), middle.size()) == 0);
    CHECK(std::all_of(in.data(), in.data() + block_size,
                      [](std::byte b) { return b == std::byte{0}; }));
  });
}

TEST_CASE("conformance: discard makes a range read as zeros", "[device][conformance]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  for_each_device([seed](test_loop& loop, stack& s, std::uint32_t block_size) {
    block_device& d = s.top();
    const auto data = pattern(16 * block_size, seed);
    write_blocks(loop, d, 32, data);
    auto x = io::discard(36, 8);
    REQUIRE(!run(loop, d, *x));
    const auto after = read_blocks(loop, d, 32, 16);
    CHECK(std::memcmp(after.data(), data.data(), 4 * block_size) == 0);
    CHECK(std::all_of(after.begin() + 4 * block_size, after.begin() + 12 * block_size,
                      [](std::byte b) { return b == std::byte{0}; }));
    CHECK(std::memcmp(after.data() + 12 * block_size, data.data() + 12 * block_size,
                      4 * block_size) == 0);
  });
}

TEST_CASE("conformance: flushed writes survive a restart", "[device][conformance]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  for_each_device([seed](test_loop& loop, stack& s, std::uint32_t block_size) {
    const auto a = pattern(4 * block_size, seed);
    write_blocks(loop, s.top(), 10, a);
    flush(loop, s.top());
    s.restart(s, loop);
    CHECK(read_blocks(loop, s.top(), 10, 4) == a);
  });
}

TEST_CASE("conformance: malformed requests get clear errors, later, once",
          "[device][conformance]") {
  for_each_device([](test_loop& loop, stack& s, std::uint32_t block_size) {
    block_device& d = s.top();
    auto expect = [&](io& x, errc expected) {
      const std::error_code ec = run(loop, d, x);
      CHECK(ec == make_error_code(expected));
      CHECK(ec.category() == strata_category());
    };
    {
      auto x = io::make(op::read, device_blocks, 1, block_size);  // one past the end
      expect(*x, errc::out_of_range);
    }
    {
      auto x = io::make(op::write, device_blocks - 2, 4, block_size);  // runs off the end
      expect(*x, errc::out_of_range);
    }
    {
      auto x = io::make(op::read, UINT64_MAX - 1, 4, block_size);  // would overflow
      expect(*x, errc::out_of_range);
    }
    {
      auto x = io::discard(device_blocks - 1, 2);
      expect(*x, errc::out_of_range);
    }
    {
      auto x = io::make(op::read, 0, 2, block_size);
      x->segment.iov_base = x->buffer.data() + 1;  // misaligned address
      x->segment.iov_len = block_size;
      x->req.block_count = 1;
      expect(*x, errc::misaligned);
    }
    {
      auto x = io::make(op::write, 0, 2, block_size);
      x->segment.iov_len = block_size + block_size / 2;  // not whole blocks
      expect(*x, errc::misaligned);
    }
    {
      auto x = io::make(op::read, 0, 2, block_size);
      x->req.block_count = 3;  // buffers hold 2 blocks
      expect(*x, errc::invalid_argument);
    }
    {
      auto x = io::make(op::read, 0, 1, block_size);
      x->req.block_count = 0;
      expect(*x, errc::invalid_argument);
    }
    {
      auto x = io::flush();
      x->req.lba = 5;
      expect(*x, errc::invalid_argument);
    }
    {
      auto x = io::make(op::read, 0, 1, block_size);
      std::vector<iovec> too_many(d.geometry().max_segments + 1, x->segment);
      x->req.buffers = too_many;
      expect(*x, errc::invalid_argument);
    }
    {
      auto x = io::make(op::read, 0, 1, block_size);
      x->req.operation = static_cast<op>(42);
      expect(*x, errc::invalid_argument);
    }
    {
      // Segment lengths whose sum wraps to exactly one block.
      auto x = io::make(op::read, 0, 1, block_size);
      const iovec wrapping[] = {{x->buffer.data(), std::size_t{1} << 63},
                                {x->buffer.data(), std::size_t{1} << 63},
                                {x->buffer.data(), block_size}};
      x->req.buffers = wrapping;
      expect(*x, errc::invalid_argument);
    }
  });
}

TEST_CASE("conformance: many requests in flight each complete once, with the right data",
          "[device][conformance]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed);
  for_each_device([seed](test_loop& loop, stack& s, std::uint32_t block_size) {
    block_device& d = s.top();
    std::mt19937_64 random(seed);
    // 300 writes of 1..8 blocks to disjoint places (more than any queue
    // depth under test), all in flight at once, then all read back at once.
    constexpr int count = 300;
    std::vector<std::unique_ptr<io>> writes;
    std::vector<std::unique_ptr<io>> reads;
    std::vector<std::vector<std::byte>> expected;
    for (int i = 0; i < count; ++i) {
      const std::uint64_t blocks = 1 + random() % 6;
      const std::uint64_t lba = static_cast<std::uint64_t>(i) * 6 + random() % (6 - blocks + 1);
      auto w = io::make(op::write, lba, blocks, block_size);
      expected.push_back(pattern(blocks * block_size, seed + static_cast<std::uint64_t>(i)));
      std::memcpy(w->buffer.data(), expected.back().data(), expected.back().size());
      writes.push_back(std::move(w));
      reads.push_back(io::make(op::read, lba, blocks, block_size));
    }
    auto submit_all = [&](std::vector<std::unique_ptr<io>>& batch) {
      for (auto& x : batch) d.submit(x->req);
      for (auto& x : batch) REQUIRE(x->completions == 0);
      loop.run_until([&] {
        return std::all_of(batch.begin(), batch.end(), [](auto& x) { return x->completions > 0; });
      });
      loop.settle();
      for (auto& x : batch) {
        REQUIRE(x->completions == 1);
        REQUIRE(!x->req.result);
      }
    };
    submit_all(writes);
    submit_all(reads);
    for (int i = 0; i < count; ++i) {
      INFO("request " << i);
      CHECK(std::memcmp(reads[static_cast<std::size_t>(i)]->buffer.data(),
                        expected[static_cast<std::size_t>(i)].data(),
                        expected[static_cast<std::size_t>(i)].size()) == 0);
    }
  });
}

TEST_CASE("conformance: a completion may submit the next request", "[device][conformance]") {
  for_each_device([](test_loop& loop, stack& s, std::uint32_t block_size) {
    block_device& d = s.top();
    // A chain of 20 writes, each submitted from the previous one's completion.
    struct chain {
      block_device* device;
      std::unique_ptr<io> x;
      int remaining = 20;
      int inside_submit = 0;
      bool submitting = false;
      void on_done(request& r) noexcept {
        if (submitting) ++inside_submit;
        if (r.result || --remaining == 0) return;
        r.lba += 1;
        submitting = true;
        device->submit(r);
        submitting = false;
      }
    } c{&d, io::make(op::write, 0, 1, block_size)};
    c.x->req.bind<&chain::on_done>(&c);
    d.submit(c.x->req);
    loop.run_until([&] { return c.remaining == 0 || c.x->req.result; });
    CHECK(!c.x->req.result);
    CHECK(c.remaining == 0);
    CHECK(c.inside_submit == 0);
  });
}

}  // namespace strata::device::testing
