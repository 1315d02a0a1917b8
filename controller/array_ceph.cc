// The array's Ceph groups (ceph_group.h, docs/ceph-tier.md): made from the
// plan or through the API, opened again at start-up, and watched, so that
// a pool stops placing extents in a cluster that is out of reach or full.
#include <atomic>
#include <boost/asio/post.hpp>
#include <random>
#include <thread>

#include "controller/array.h"
#include "controller/array_records.h"

namespace strata::controller {

using namespace records;

namespace {

// Below this much room in its RADOS pool a Ceph group takes no new
// extents: a migrator's batch of moves (16 extents of 4 MiB).
constexpr std::uint64_t cold_reserve_bytes = 16ull * (4 << 20);

group_id random_group_id() {
  std::random_device seed;
  group_id id{};
  for (auto& b : id) b = static_cast<std::uint8_t>(seed() & 0xff);
  return id;
}

ceph_group_spec spec_of(const v1::CephImage& c) {
  ceph_group_spec spec;
  spec.connection.monitors = c.monitors();
  spec.connection.user = c.user().empty() ? "admin" : c.user();
  spec.connection.keyring_path = c.keyring_path();
  spec.rados_pool = c.rados_pool();
  spec.image = c.image();
  spec.size_bytes = c.size_bytes();
  spec.fsid = c.fsid();
  return spec;
}

// What the record keeps: how to reach the image, and the cluster's fsid.
// Never a key: the keyring stays in its file.
v1::CephImage record_of(const ceph_group_spec& spec) {
  v1::CephImage c;
  c.set_monitors(spec.connection.monitors);
  c.set_user(spec.connection.user);
  c.set_keyring_path(spec.connection.keyring_path);
  c.set_rados_pool(spec.rados_pool);
  c.set_image(spec.image);
  c.set_size_bytes(spec.size_bytes);
  c.set_fsid(spec.fsid);
  return c;
}

}  // namespace

std::unique_ptr<disk_group> array::open_ceph_group(const std::string& key,
                                                   const v1::DiskGroup& record) {
  group_id id{};
  std::copy(record.group_id().begin(), record.group_id().end(), id.begin());
  const ceph_group_spec spec = spec_of(record.ceph());
  log(key + ": opening the Ceph image " + spec.name() + " of cluster " + spec.fsid +
      " (in the background)");
  return ceph_disk_group(id, ceph_image::open_later(loop_, spec, {}));
}

std::expected<std::unique_ptr<disk_group>, error> array::connect_planned_ceph(
    const group_plan& planned, v1::DiskGroup& record) {
  v1::CephImage wanted;
  wanted.set_monitors(planned.ceph.monitors);
  wanted.set_user(planned.ceph.user);
  wanted.set_keyring_path(planned.ceph.keyring_path);
  wanted.set_rados_pool(planned.ceph.rados_pool);
  wanted.set_image(planned.ceph.image);
  wanted.set_size_bytes(planned.ceph.size_bytes);
  // Connecting blocks for the monitors: on a thread of its own, while the
  // loop goes on (as a pool's store opens).
  std::expected<std::unique_ptr<ceph_image>, error> made = std::unexpected(error{});
  std::atomic<bool> done = false;
  std::thread connecting([&] {
    made = ceph_image::connect(loop_, spec_of(wanted), planned.ceph.create, {});
    done = true;
    boost::asio::post(loop_, [] {});  // wakes the wait
  });
  wait([&] { return done.load(); });
  connecting.join();
  if (!made)
    return std::unexpected(error{made.error().code, record.name() + ": " + made.error().message});
  const group_id id = random_group_id();
  record.set_group_id(std::string(id.begin(), id.end()));
  *record.mutable_ceph() = record_of((*made)->spec());
  log(record.name() + ": CEPH image " + (*made)->spec().name() + " of " +
      std::to_string(planned.ceph.size_bytes) + " bytes in cluster " + (*made)->spec().fsid +
      ", id " + to_hex(id));
  return ceph_disk_group(id, std::move(*made));
}

void array::adopt_ceph_group(const std::string& name, std::unique_ptr<ceph_image> image,
                             std::function<void(std::expected<v1::DiskGroup, error>)> done) {
  if (std::ranges::find(group_names_, name) != group_names_.end()) {
    return done(std::unexpected(make_error(errc::invalid_argument, name + " exists")));
  }
  v1::DiskGroup record;
  record.set_name(name);
  record.set_kind(v1::CEPH);
  const group_id id = random_group_id();
  record.set_group_id(std::string(id.begin(), id.end()));
  *record.mutable_ceph() = record_of(image->spec());
  log(name + ": CEPH image " + image->spec().name() + " in cluster " + image->spec().fsid +
      ", id " + to_hex(id));
  groups_.push_back(ceph_disk_group(id, std::move(image)));
  group_names_.push_back(name);
  if (bay_) bay_->group_added(groups_.size() - 1);
  done(record);
}

void array::describe_pause(v1::DiskGroup& group) const {
  if (group.kind() != v1::CEPH) return;
  for (const auto& [pool_name, p] : pools_) {
    const auto at = std::ranges::find(p.groups, group.name());
    if (at == p.groups.end()) continue;
    const std::string& why = p.pool->group_pause(static_cast<std::uint16_t>(at - p.groups.begin()));
    if (why.empty()) continue;
    group.set_state(v1::GROUP_UNAVAILABLE);
    v1::CephImage& c = *group.mutable_ceph();
    c.set_status(c.status().empty() ? why : c.status() + "; " + why);
  }
}

void array::watch_cold_groups() {
  for (auto& [pool_name, p] : pools_) {
    for (std::size_t i = 0; i < p.groups.size(); ++i) {
      const disk_group* g = group_named(p.groups[i]);
      const ceph_image* image = g != nullptr ? g->ceph() : nullptr;
      if (image == nullptr) continue;
      const ceph_status s = image->status();
      const auto index = static_cast<std::uint16_t>(i);
      const auto key = std::pair{pool_name, index};
      if (!s.connected) {
        p.pool->pause_group(index,
                            "the Ceph image " + image->spec().name() + " is not open: " + s.status);
        cold_paused_.insert(key);
      } else if (s.full) {
        p.pool->pause_group(index, "the Ceph cluster is (nearly) full: no more extents go there");
        cold_paused_.insert(key);
      } else if (s.pool_available_bytes && *s.pool_available_bytes < cold_reserve_bytes) {
        // A cluster shared with other images: they may have taken what the
        // image's size promised. Below a batch of moves, none start.
        p.pool->pause_group(index, "the RADOS pool " + image->spec().rados_pool + " has " +
                                       std::to_string(*s.pool_available_bytes >> 20) +
                                       " MiB left (ceph df): no more extents go there");
        cold_paused_.insert(key);
      } else if (cold_paused_.erase(key) > 0) {
        // Paused for what this watch saw, which is over. A pause an I/O
        // failure made ends by itself, once I/O has stopped failing.
        p.pool->resume_group(index);
      }
    }
  }
}

}  // namespace strata::controller
