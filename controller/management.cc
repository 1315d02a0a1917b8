#include "controller/management.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cctype>
#include <future>
#include <map>
#include <memory>
#include <set>

#include "controller/array_records.h"
#include "controller/config_sync.h"
#include "controller/management_detail.h"
#include "controller/remote_management.h"
#include "target/iscsi/chap.h"

namespace strata::controller {

using namespace management_detail;

refusal refusal_of(const error& e, const std::string& field) {
  switch (static_cast<errc>(e.code.value())) {
    case errc::no_space:
      return {kind::no_space, field, e.message};
    case errc::invalid_argument:
      return {kind::invalid, field, e.message};
    case errc::not_found:
      return {kind::not_found, field, e.message};
    case errc::timed_out:
      return {kind::timed_out, field, e.message};
    case errc::busy:           // the resource's state does not allow it now
    case errc::not_supported:  // nor its make-up (a pool without a write log)
      return {kind::precondition, field, e.message};
    default:
      return {kind::internal, field, e.message};
  }
}

bool is_pool_name(std::string_view name) {
  return name.starts_with("pools/") && name.size() > 6 &&
         name.find('/', 6) == std::string_view::npos;
}

namespace {

// This thread makes a call the partner handed it (management::delegated_call).
thread_local bool delegated = false;

// "pools/p1" of "pools/p1/volumes/v1".
std::string pool_of_volume(const std::string& volume) {
  return volume.substr(0, volume.find("/volumes/"));
}

}  // namespace

management::delegated_call::delegated_call() {
  delegated = true;
}
management::delegated_call::~delegated_call() {
  delegated = false;
}

outcome<void> management::may_change(const std::string& to) const {
  if (array_ == nullptr) return no_array(to);
  if (array_->partner() == nullptr || delegated) return {};
  partner::liveness now = partner::liveness::down;
  (void)on_loop(*array_, [this, &now](auto done) {
    now = array_->partner()->state();
    done({});
  });
  const std::string other = array_->partner()->name();
  std::optional<std::uint64_t> theirs;
  (void)on_loop(*array_, [this, &theirs](auto done) {
    theirs = array_->partner()->beat_generation();
    done({});
  });
  if (const std::uint64_t mine = generation_of(config_); theirs && *theirs > mine) {
    // Started while the partner was away, after it made changes alone: a
    // change here would stand beside them under one generation.
    return refuse(kind::unavailable, "",
                  "this controller's configuration (generation " + std::to_string(mine) +
                      ") is older than controller " + other + "'s (generation " +
                      std::to_string(*theirs) +
                      ", its last drive beat): changes wait until it has caught up, over the link "
                      "to controller " +
                      other);
  }
  if (now == partner::liveness::unreachable) {
    // Both alive, each on its own: a change here would never reach the
    // partner's configuration, which may change meanwhile.
    return refuse(kind::unavailable, "",
                  "the partner link to controller " + other +
                      " is down while its drive heartbeat beats (a cut link): changes wait for the "
                      "link, so that "
                      "the two controllers' configurations never diverge");
  }
  if (now == partner::liveness::active && array_->controller_name() != "a") {
    // Reached only by a change forward() does not carry (mgmt forwards the rest).
    return refuse(kind::precondition, "",
                  "controller " + array_->controller_name() +
                      " does not make this change itself: make it through controller " + other +
                      "'s API (both show the whole array)");
  }
  return {};  // controller a; or b, with a DOWN: made here, and a catches up when it is back
}

bool management::forwards() const {
  if (array_ == nullptr || array_->partner() == nullptr || array_->controller_name() == "a" ||
      delegated)
    return false;
  // With controller a DOWN, b makes the array's changes itself.
  bool a_down = false;
  (void)on_loop(*array_, [this, &a_down](auto done) {
    a_down = array_->partner()->state() == partner::liveness::down;
    done({});
  });
  return !a_down;
}

outcome<std::string> management::call_partner(std::uint16_t type, std::string_view method,
                                              const google::protobuf::Message& request,
                                              const std::string& link_down) const {
  std::string answer;
  std::optional<refusal> refused_there;
  auto sent = on_loop(*array_, [this, type, call = encode_call(method, request), &answer,
                                &refused_there](auto done) mutable {
    array_->call_partner(type, std::move(call),
                         [&answer, &refused_there, done](std::expected<link_bytes, error> r) {
                           if (!r) return done(std::unexpected(r.error()));
                           auto decoded = decode_answer(*r);
                           if (decoded) {
                             answer = std::move(*decoded);
                           } else {
                             refused_there = decoded.error();
                           }
                           done({});
                         });
  });
  if (!sent) {
    return refuse(kind::unavailable, "",
                  (link_down.empty()
                       ? "the partner link to controller " + array_->partner()->name() + " is down"
                       : link_down) +
                      " (" + sent.error().message + ")" +
                      (link_down.empty() ? "" : ": try again, or through its API"));
  }
  if (refused_there) return std::unexpected(*refused_there);
  return answer;
}

outcome<std::string> management::forward(std::string_view method,
                                         const google::protobuf::Message& request) {
  if (array_ == nullptr || array_->partner() == nullptr)
    return refuse(kind::internal, "", "nothing to forward to");
  // No link, and a not DOWN: one controller changes the array at a time, so b makes no change of
  // its own.
  return call_partner(link_type::management_call, method, request,
                      "controller " + array_->partner()->name() +
                          " makes the array's changes, and the partner link to it is down");
}

std::optional<outcome<std::string>> management::elsewhere(
    const std::string& pool, std::string_view method,
    const google::protobuf::Message& request) const {
  if (array_ == nullptr || array_->partner() == nullptr || !is_pool_name(pool) ||
      !config_.get(pool))
    return std::nullopt;
  bool here = false;
  partner::liveness partner_now = partner::liveness::down;
  (void)on_loop(*array_, [this, &pool, &here, &partner_now](auto done) {
    here = array_->serves(pool);
    partner_now = array_->partner()->state();
    done({});
  });
  if (here) return std::nullopt;
  const std::string self = array_->controller_name();
  const std::string other = array_->partner()->name();
  if (delegated) {
    return refuse(kind::unavailable, "",
                  pool + " is not served by controller " + self +
                      " (it moved while the call came here): try again");
  }
  if (partner_now != partner::liveness::active) {
    return refuse(kind::unavailable, "",
                  pool + " is not served by controller " + self + ", and controller " + other +
                      " is " + partner::to_string(partner_now) +
                      ": no controller can do this now (the events say whether " + self +
                      " is taking the pool over)");
  }
  return call_partner(link_type::management_delegated, method, request);
}

std::optional<outcome<v1::Operation>> management::partner_operation(const std::string& name,
                                                                    std::string_view method) const {
  if (array_ == nullptr || array_->partner() == nullptr || delegated) return std::nullopt;
  if (operation_log::controller_of(name) != array_->partner()->name()) return std::nullopt;
  v1::GetRequest q;
  q.set_name(name);
  return parsed<v1::Operation>(call_partner(link_type::management_delegated, method, q));
}

std::string heat_token(bool hottest_first, std::uint64_t first) {
  return (hottest_first ? "rank:" : "extent:") + std::to_string(first);
}

std::optional<std::uint64_t> heat_token_start(const std::string& token, bool hottest_first) {
  const std::string_view prefix = hottest_first ? "rank:" : "extent:";
  if (!token.starts_with(prefix) || token.size() == prefix.size() ||
      token.size() > prefix.size() + 19)
    return std::nullopt;
  std::uint64_t first = 0;
  for (const char c : std::string_view(token).substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    first = first * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return first;
}

outcome<void> management::commit(config_batch b) {
  bool array_wide_change = false;
  b.visit([&](const std::string& key, const std::string*) {
    array_wide_change = array_wide_change || array_wide(key);
  });
  // Made without the partner (DOWN: may_change), a change skips a
  // generation: the partner may have committed the next one itself and
  // died before it reached here (never acknowledged). Its record then
  // stays behind this controller's, and is replaced when it catches up,
  // instead of standing beside a different change of the same number.
  bool alone = false;
  if (array_wide_change && array_ != nullptr && array_->partner() != nullptr) {
    (void)on_loop(*array_, [this, &alone](auto done) {
      alone = array_->partner()->state() != partner::liveness::active;
      done({});
    });
  }
  const std::uint64_t generation =
      generation_of(config_) + (array_wide_change ? (alone ? 2 : 1) : 0);
  if (array_wide_change) bump_generation(b, generation - 1);
  if (auto done = config_.commit(b); !done) return refused(done.error());
  if (!array_wide_change || array_ == nullptr || array_->partner() == nullptr) return {};
  // Then the partner, before the change is acknowledged. Without the link
  // it goes on (the partner is DOWN, may_change said: it catches up by
  // generation when it is back), and says so. The drive heartbeat names
  // the generation once the partner has it (or could not get it): a
  // partner that takes over refuses a configuration older than the one
  // this controller last beat, and must not be held up by a change that
  // was never acknowledged.
  // Its array-wide part: a controller's own records (an old reservation
  // record erased with its volume) stay its own.
  config_batch wide;
  b.visit([&](const std::string& key, const std::string* value) {
    if (!array_wide(key)) return;
    if (value != nullptr) {
      wide.put(key, *value);
    } else {
      wide.erase(key);
    }
  });
  auto copied =
      on_loop(*array_, [this, &wide](auto done) { array_->replicate(wide, std::move(done)); });
  boost::asio::post(array_->executor(),
                    [a = array_, generation] { a->note_generation(generation); });
  if (!copied) {
    array_->events().record(severity::warning, "",
                            "a configuration change was not copied to controller " +
                                array_->partner()->name() + " (" + copied.error().message +
                                "); it catches up when it links again");
  }
  return {};
}

// ---- volumes ----

outcome<v1::Volume> management::create_volume(const std::string& pool, const std::string& volume_id,
                                              const v1::Volume& want) {
  if (pool.empty()) return invalid("parent", "the pool to create the volume in, e.g. pools/p1");
  if (!valid_id(volume_id)) return bad_id("volume_id", volume_id);
  const std::uint64_t bytes = want.size_bytes();
  if (bytes == 0 || bytes % 4096 != 0)
    return invalid("volume.size_bytes",
                   std::to_string(bytes) + " is not a positive multiple of 4096");
  // 0 (unset) is the default, 512e: 512-byte logical blocks over the
  // pool's 4096-byte ones, which every initiator (qemu among them) takes.
  const std::uint32_t block_size_bytes =
      want.block_size_bytes() == 0 ? 512 : want.block_size_bytes();
  if (block_size_bytes != 512 && block_size_bytes != 4096) {
    return invalid("volume.block_size_bytes", std::to_string(block_size_bytes) +
                                                  " is not 512 (512e, the default) or 4096 (4Kn)");
  }
  std::lock_guard hold(changes_);
  if (!is_pool_name(pool) || !config_.get(pool))
    return refuse(kind::not_found, "parent", pool + " is not a pool");
  const std::string name = pool + "/volumes/" + volume_id;
  if (config_.get(name)) return refuse(kind::exists, "volume_id", name + " exists");
  const v1::WriteCache write_cache =
      want.write_cache() == v1::WRITE_CACHE_UNSPECIFIED ? v1::WRITE_BACK : want.write_cache();
  if (auto ok = check_volume_write_cache(pool, write_cache); !ok)
    return std::unexpected(ok.error());
  v1::CreateVolumeRequest request;
  request.set_parent(pool);
  request.set_volume_id(volume_id);
  *request.mutable_volume() = want;
  if (auto there = elsewhere(pool, "CreateVolume", request))
    return parsed<v1::Volume>(std::move(*there));
  if (auto allowed = may_change("to create the volume in"); !allowed)
    return std::unexpected(allowed.error());
  const v1::Affinity affinity =
      want.affinity() == v1::AFFINITY_UNSPECIFIED ? v1::AUTO : want.affinity();
  auto created =
      on_loop(*array_, [this, name, bytes, placement = placement_of(affinity)](auto done) {
        array_->create_volume(name, bytes, placement, std::move(done));
      });
  if (!created) return refused(created.error(), "volume.size_bytes");
  if (write_cache == v1::WRITE_THROUGH) {
    // Before any host sees it: the record below says the same.
    auto set = on_loop(*array_, [this, name](auto done) {
      done(array_->set_volume_write_cache(name, raid::cache_mode::write_through));
    });
    if (!set) return refused(set.error(), "volume.write_cache");
  }
  v1::Volume out;
  out.set_name(name);
  out.set_size_bytes(bytes);
  out.set_block_size_bytes(block_size_bytes);
  out.set_affinity(affinity);
  out.set_write_cache(write_cache);
  out.set_serial(new_volume_serial(volume_id));
  config_batch b;
  b.put(name, out.SerializeAsString());
  // A crash before this commit leaves a volume in the pool with no record:
  // the next start deletes it (array::reconcile_volumes).
  if (auto done = commit(b); !done) return std::unexpected(done.error());
  array_->events().record(severity::info, name, "created, " + std::to_string(bytes) + " bytes");
  return out;
}

outcome<v1::Volume> management::update_volume(const v1::Volume& want,
                                              const std::vector<std::string>& fields) {
  if (auto ok = check_fields(fields, {"size_bytes", "affinity", "write_cache"}); !ok)
    return std::unexpected(ok.error());
  const std::string& name = want.name();
  std::lock_guard hold(changes_);
  auto volume = is_volume_name(name) ? read<v1::Volume>(config_, name) : std::nullopt;
  if (!volume) return refuse(kind::not_found, "volume.name", name + " does not exist");
  v1::Volume updated = *volume;
  for (const std::string& f : fields) {
    if (f == "size_bytes") {
      const std::uint64_t bytes = want.size_bytes();
      if (bytes == 0 || bytes % 4096 != 0)
        return invalid("volume.size_bytes",
                       std::to_string(bytes) + " is not a positive multiple of 4096");
      if (bytes < volume->size_bytes()) {
        return invalid("volume.size_bytes", "shrinking from " +
                                                std::to_string(volume->size_bytes()) +
                                                " would lose data; volumes only grow");
      }
      updated.set_size_bytes(bytes);
    } else if (f == "write_cache") {
      const std::string pool = name.substr(0, name.find("/volumes/"));
      if (auto ok = check_volume_write_cache(pool, want.write_cache()); !ok)
        return std::unexpected(ok.error());
      updated.set_write_cache(want.write_cache());
    } else {
      if (want.affinity() == v1::AFFINITY_UNSPECIFIED)
        return invalid("volume.affinity", "AUTO, PERFORMANCE or CAPACITY");
      updated.set_affinity(want.affinity());
    }
  }
  v1::UpdateVolumeRequest request;
  *request.mutable_volume() = want;
  for (const std::string& f : fields) request.mutable_update_mask()->add_paths(f);
  if (auto there = elsewhere(pool_of_volume(name), "UpdateVolume", request))
    return parsed<v1::Volume>(std::move(*there));
  if (auto allowed = may_change("to change the volume in"); !allowed)
    return std::unexpected(allowed.error());
  if (updated.size_bytes() != volume->size_bytes()) {
    auto grown = on_loop(*array_, [this, name, bytes = updated.size_bytes()](auto done) {
      array_->resize_volume(name, bytes, std::move(done));
    });
    if (!grown) return refused(grown.error(), "volume.size_bytes");
  }
  if (updated.affinity() != volume->affinity()) {
    auto placed = on_loop(*array_, [this, name, p = placement_of(updated.affinity())](auto done) {
      array_->set_placement(name, p, std::move(done));
    });
    if (!placed) return refused(placed.error(), "volume.affinity");
  }
  config_batch b;
  b.put(name, updated.SerializeAsString());
  if (auto done = commit(b); !done) return std::unexpected(done.error());
  // After the record: a crash between the two leaves the next start in
  // the recorded mode, and either mode keeps every acknowledged write.
  const bool write_through = updated.write_cache() == v1::WRITE_THROUGH;
  if (write_through != (volume->write_cache() == v1::WRITE_THROUGH)) {
    auto set = on_loop(*array_, [this, name, write_through](auto done) {
      done(array_->set_volume_write_cache(
          name, write_through ? raid::cache_mode::write_through : raid::cache_mode::write_back));
    });
    if (!set) return refused(set.error(), "volume.write_cache");
    if (write_through) {
      v1::VolumeStatistics now;
      (void)on_loop(*array_,
                    [this, name, &now](auto done) { done(array_->volume_statistics(name, now)); });
      array_->events().record(severity::info, name,
                              "write cache: writing through; its " +
                                  std::to_string(now.dirty_bytes()) +
                                  " dirty bytes in the write log are destaged in the background");
    }
  }
  array_->events().record(
      severity::info, name,
      "changed: size " + std::to_string(updated.size_bytes()) + " bytes, affinity " +
          v1::Affinity_Name(updated.affinity()) + ", write cache " +
          v1::WriteCache_Name(updated.write_cache() == v1::WRITE_CACHE_UNSPECIFIED
                                  ? v1::WRITE_BACK
                                  : updated.write_cache()));
  return updated;
}

outcome<void> management::check_volume_write_cache(const std::string& pool_name,
                                                   v1::WriteCache mode) const {
  if (mode != v1::WRITE_BACK && mode != v1::WRITE_THROUGH)
    return invalid("volume.write_cache", "WRITE_BACK or WRITE_THROUGH");
  if (mode == v1::WRITE_BACK) return {};
  const auto pool = read<v1::Pool>(config_, pool_name);
  if (pool && pool->write_log_group().empty()) {
    return refuse(
        kind::precondition, "volume.write_cache",
        pool_name + " has no write log (its write_log_group): its volumes write through already");
  }
  return {};
}

outcome<void> management::set_affinity(v1::Volume& volume, v1::Affinity affinity) {
  auto placed =
      on_loop(*array_, [this, name = volume.name(), p = placement_of(affinity)](auto done) {
        array_->set_placement(name, p, std::move(done));
      });
  if (!placed) return refused(placed.error(), "volume.affinity");
  volume.set_affinity(affinity);
  config_batch b;
  b.put(volume.name(), volume.SerializeAsString());
  return commit(b);
}

outcome<v1::Operation> management::move_volume(const std::string& name, v1::Affinity to) {
  if (to != v1::CAPACITY && to != v1::PERFORMANCE)
    return invalid("affinity", "CAPACITY (off the SSD tier) or PERFORMANCE (onto it)");
  std::lock_guard hold(changes_);
  auto volume = is_volume_name(name) ? read<v1::Volume>(config_, name) : std::nullopt;
  if (!volume) return refuse(kind::not_found, "name", name + " does not exist");
  v1::MoveVolumeRequest request;
  request.set_name(name);
  request.set_affinity(to);
  if (auto there = elsewhere(pool_of_volume(name), "MoveVolume", request))
    return parsed<v1::Operation>(std::move(*there));
  if (auto allowed = may_change("to move the volume in"); !allowed)
    return std::unexpected(allowed.error());
  const v1::Affinity before = volume->affinity();
  if (auto set = set_affinity(*volume, to); !set) return std::unexpected(set.error());
  // Cancelled on the canceller's thread (a gRPC handler's): the affinity
  // goes back as it was, on the array and in the record, as one change.
  auto op = std::make_shared<std::string>();
  v1::Operation out = array_->operations().start("volume.move", name, [this, name, before, op] {
    std::lock_guard again(changes_);
    bool stopped = false;
    (void)on_loop(*array_, [this, op, &stopped](auto done) {
      stopped = array_->stop_following(*op);
      done({});
    });
    if (!stopped) return;  // it ended meanwhile: what it did stands
    if (auto back = read<v1::Volume>(config_, name)) {
      if (auto undone = set_affinity(*back, before); !undone) {
        array_->events().record(severity::error, name,
                                "its affinity could not be put back: " + undone.error().message);
      }
    }
  });
  *op = out.name();
  (void)on_loop(
      *array_,
      [this, name, tier = to == v1::CAPACITY ? tiering::tier::capacity : tiering::tier::performance,
       op = out.name()](auto done) {
        array_->follow_move(name, tier, op);
        done({});
      });
  array_->events().record(
      severity::info, name,
      std::string(to == v1::CAPACITY ? "drain off the SSD tier" : "move onto the SSD tier") +
          " started (" + out.name() + ")");
  return out;
}

outcome<v1::Operation> management::delete_volume(const std::string& name) {
  std::lock_guard hold(changes_);
  auto volume = is_volume_name(name) ? read<v1::Volume>(config_, name) : std::nullopt;
  if (!volume) return refuse(kind::not_found, "name", name + " does not exist");
  for (const auto& [key, bytes] : config_.list("mappings/")) {
    v1::Mapping m;
    if (m.ParseFromString(bytes) && m.volume() == name) {
      return refuse(kind::precondition, "name",
                    name + " is mapped (" + key + "); delete its mappings first");
    }
  }
  v1::DeleteRequest request;
  request.set_name(name);
  if (auto there = elsewhere(pool_of_volume(name), "DeleteVolume", request))
    return parsed<v1::Operation>(std::move(*there));
  if (auto allowed = may_change("to delete the volume from"); !allowed)
    return std::unexpected(allowed.error());
  // The record goes first: from now on the volume is gone for the API,
  // and a restart before the pool has let it go finishes the delete.
  config_batch b;
  b.erase(name);
  b.erase("reservations/" + name);
  if (auto done = commit(b); !done) return std::unexpected(done.error());
  v1::Operation out = array_->operations().start("volume.delete", name);
  boost::asio::post(array_->executor(), [array = array_, name, op = out.name()] {
    array->delete_volume(name, [array, name, op](std::expected<void, error> r) {
      array->operations().finish(op, r);
      if (r) {
        array->events().record(severity::info, name, "deleted");
      } else {
        array->events().record(severity::error, name, "its delete failed: " + r.error().message);
      }
    });
  });
  return out;
}

// ---- hosts and mappings ----

outcome<void> management::check_host(const v1::Host& h) const {
  if (h.iqns().empty() && h.nqns().empty() && !h.any_initiator()) {
    return invalid("host.iqns", "a host needs an initiator name (iqns or nqns), or any_initiator");
  }
  std::set<std::string> own;
  for (const std::string& iqn : h.iqns()) {
    if (!valid_iscsi_name(iqn))
      return invalid("host.iqns", "\"" + iqn + "\" is not an iSCSI name (iqn.…, eui.… or naa.…)");
    if (!own.insert(lower(iqn)).second) return invalid("host.iqns", iqn + " is listed twice");
  }
  std::set<std::string> own_nqns;
  for (const std::string& nqn : h.nqns()) {
    if (!valid_nvme_name(nqn))
      return invalid("host.nqns",
                     "\"" + nqn + "\" is not an NVMe qualified name (nqn.…, at most 223 bytes)");
    if (!own_nqns.insert(nqn).second) return invalid("host.nqns", nqn + " is listed twice");
  }
  if (h.chap_user().empty() != h.chap_secret().empty()) {
    return invalid(h.chap_user().empty() ? "host.chap_user" : "host.chap_secret",
                   "CHAP needs both a user and a secret");
  }
  if (h.mutual_chap_user().empty() != h.mutual_chap_secret().empty()) {
    return invalid(
        h.mutual_chap_user().empty() ? "host.mutual_chap_user" : "host.mutual_chap_secret",
        "mutual CHAP needs both a user and a secret");
  }
  if (!h.mutual_chap_user().empty() && h.chap_user().empty())
    return invalid("host.mutual_chap_user", "mutual CHAP needs CHAP");
  if (!h.chap_user().empty()) {
    const auto access = host_access_of(h);
    if (auto bad = iscsi::check_chap_secrets(*access.chap, std::nullopt))
      return invalid("host.chap_secret", *bad);
    if (auto bad = iscsi::check_chap_secrets(*access.chap, access.mutual_chap))
      return invalid("host.mutual_chap_secret", *bad);
  }
  for (const auto& [key, bytes] : config_.list("hosts/")) {
    v1::Host other;
    if (key == h.name() || !other.ParseFromString(bytes)) continue;
    if (h.any_initiator() && other.any_initiator())
      return refuse(kind::exists, "host.any_initiator",
                    key + " already stands for every initiator");
    for (const std::string& iqn : other.iqns()) {
      if (own.contains(lower(iqn)))
        return refuse(kind::exists, "host.iqns", iqn + " belongs to " + key);
    }
    for (const std::string& nqn : other.nqns()) {
      if (own_nqns.contains(nqn))
        return refuse(kind::exists, "host.nqns", nqn + " belongs to " + key);
    }
  }
  return {};
}

outcome<v1::Host> management::create_host(const std::string& host_id, const v1::Host& want) {
  if (!valid_id(host_id)) return bad_id("host_id", host_id);
  v1::Host host = want;
  host.set_name("hosts/" + host_id);
  std::lock_guard hold(changes_);
  if (config_.get(host.name())) return refuse(kind::exists, "host_id", host.name() + " exists");
  if (auto ok = check_host(host); !ok) return std::unexpected(ok.error());
  if (auto allowed = may_change("to serve the host"); !allowed)
    return std::unexpected(allowed.error());
  auto served = on_loop(*array_, [this, name = host.name(), access = host_access_of(host)](
                                     auto done) { done(array_->set_host(name, access)); });
  if (!served) return refused(served.error(), "host");
  config_batch b;
  b.put(host.name(), host.SerializeAsString());
  if (auto done = commit(b); !done) {
    (void)on_loop(*array_,
                  [this, name = host.name()](auto undo) { undo(array_->remove_host(name)); });
    return std::unexpected(done.error());
  }
  array_->events().record(severity::info, host.name(), "created");
  return host;
}

outcome<v1::Host> management::update_host(const v1::Host& want,
                                          const std::vector<std::string>& fields) {
  if (auto ok = check_fields(fields, {"iqns", "nqns", "any_initiator", "chap_user", "chap_secret",
                                      "mutual_chap_user", "mutual_chap_secret"});
      !ok) {
    return std::unexpected(ok.error());
  }
  std::lock_guard hold(changes_);
  const std::string& name = want.name();
  auto before = name.starts_with("hosts/") ? read<v1::Host>(config_, name) : std::nullopt;
  if (!before) return refuse(kind::not_found, "host.name", name + " does not exist");
  v1::Host host = *before;
  for (const std::string& f : fields) {
    if (f == "iqns") {
      host.mutable_iqns()->CopyFrom(want.iqns());
    } else if (f == "nqns") {
      host.mutable_nqns()->CopyFrom(want.nqns());
    } else if (f == "any_initiator") {
      host.set_any_initiator(want.any_initiator());
    } else if (f == "chap_user") {
      host.set_chap_user(want.chap_user());
    } else if (f == "chap_secret") {
      host.set_chap_secret(want.chap_secret());
    } else if (f == "mutual_chap_user") {
      host.set_mutual_chap_user(want.mutual_chap_user());
    } else {
      host.set_mutual_chap_secret(want.mutual_chap_secret());
    }
  }
  if (auto ok = check_host(host); !ok) return std::unexpected(ok.error());
  if (auto allowed = may_change("to serve the host"); !allowed)
    return std::unexpected(allowed.error());
  auto served = on_loop(*array_, [this, name, access = host_access_of(host)](auto done) {
    done(array_->set_host(name, access));
  });
  if (!served) return refused(served.error(), "host");
  config_batch b;
  b.put(name, host.SerializeAsString());
  if (auto done = commit(b); !done) {
    (void)on_loop(*array_, [this, name, access = host_access_of(*before)](auto undo) {
      undo(array_->set_host(name, access));
    });
    return std::unexpected(done.error());
  }
  array_->events().record(severity::info, name, "changed");
  return host;
}

outcome<void> management::delete_host(const std::string& name) {
  std::lock_guard hold(changes_);
  auto host = name.starts_with("hosts/") ? read<v1::Host>(config_, name) : std::nullopt;
  if (!host) return refuse(kind::not_found, "name", name + " does not exist");
  for (const auto& [key, bytes] : config_.list("mappings/")) {
    v1::Mapping m;
    if (m.ParseFromString(bytes) && m.host() == name) {
      return refuse(kind::precondition, "name",
                    name + " has LUNs mapped (" + key + "); delete its mappings first");
    }
  }
  if (auto allowed = may_change("to remove the host from"); !allowed)
    return std::unexpected(allowed.error());
  auto removed = on_loop(*array_, [this, name](auto done) { done(array_->remove_host(name)); });
  if (!removed) return refused(removed.error(), "name");
  config_batch b;
  b.erase(name);
  if (auto done = commit(b); !done) {
    (void)on_loop(*array_, [this, name, access = host_access_of(*host)](auto undo) {
      undo(array_->set_host(name, access));
    });
    return std::unexpected(done.error());
  }
  array_->events().record(severity::info, name, "deleted; its sessions were closed");
  return {};
}

outcome<v1::Mapping> management::create_mapping(const std::string& mapping_id,
                                                const v1::Mapping& m) {
  if (!valid_id(mapping_id)) return bad_id("mapping_id", mapping_id);
  if (m.lun() >= 16384)
    return invalid("mapping.lun", std::to_string(m.lun()) + " is not below 16384");
  std::lock_guard hold(changes_);
  const std::string name = "mappings/" + mapping_id;
  if (config_.get(name)) return refuse(kind::exists, "mapping_id", name + " exists");
  const auto volume =
      is_volume_name(m.volume()) ? read<v1::Volume>(config_, m.volume()) : std::nullopt;
  if (!volume) return refuse(kind::not_found, "mapping.volume", m.volume() + " does not exist");
  if (!m.host().starts_with("hosts/") || !read<v1::Host>(config_, m.host()))
    return refuse(kind::not_found, "mapping.host", m.host() + " does not exist");
  for (const auto& [key, bytes] : config_.list("mappings/")) {
    v1::Mapping other;
    if (!other.ParseFromString(bytes) || other.host() != m.host()) continue;
    if (other.lun() == m.lun())
      return refuse(kind::exists, "mapping.lun",
                    "LUN " + std::to_string(m.lun()) + " of " + m.host() + " is " + key);
    if (other.volume() == m.volume()) {
      return refuse(kind::precondition, "mapping.volume",
                    m.volume() + " is already mapped to " + m.host() + " (" + key + ", LUN " +
                        std::to_string(other.lun()) + ")");
    }
  }
  if (auto allowed = may_change("to serve the volume"); !allowed)
    return std::unexpected(allowed.error());
  v1::Mapping out = m;
  out.set_name(name);
  config_batch b;
  b.put(name, out.SerializeAsString());
  if (auto done = commit(b); !done) return std::unexpected(done.error());
  // The record is read here, off the loop: the loop gets what it needs.
  auto mapped = on_loop(*array_, [this, volume = volume->name(), serial = volume->serial(),
                                  block_size_bytes = volume->block_size_bytes(), host = m.host(),
                                  lun = m.lun()](auto done) {
    done(array_->map_volume(volume, serial, block_size_bytes, host, lun));
  });
  if (!mapped) {
    config_batch undo;  // a failed request changes nothing
    undo.erase(name);
    (void)commit(undo);
    return refused(mapped.error(), "mapping");
  }
  array_->events().record(
      severity::info, name,
      m.volume() + " served to " + m.host() + " as LUN " + std::to_string(m.lun()));
  return out;
}

outcome<void> management::delete_mapping(const std::string& name) {
  std::lock_guard hold(changes_);
  auto mapping = name.starts_with("mappings/") ? read<v1::Mapping>(config_, name) : std::nullopt;
  if (!mapping) return refuse(kind::not_found, "name", name + " does not exist");
  if (auto allowed = may_change("to unmap the volume from"); !allowed)
    return std::unexpected(allowed.error());
  auto unmapped = on_loop(*array_, [this, host = mapping->host(), lun = mapping->lun()](auto done) {
    array_->unmap_volume(host, lun, std::move(done));
  });
  if (!unmapped) return refused(unmapped.error(), "name");
  config_batch b;
  b.erase(name);
  if (auto done = commit(b); !done) return std::unexpected(done.error());
  array_->events().record(
      severity::info, name,
      "deleted: " + mapping->host() + " no longer sees LUN " + std::to_string(mapping->lun()));
  return {};
}

// ---- operations ----

outcome<v1::Operation> management::operation(const std::string& name) const {
  if (array_ == nullptr) return get_record<v1::Operation>(config_, "operations/", name);
  if (!name.starts_with("operations/"))
    return invalid("name", "\"" + name + "\" is not an operations/NAME resource name");
  if (auto there = partner_operation(name, "GetOperation")) return std::move(*there);
  auto op = array_->operations().get(name);
  if (!op) return refuse(kind::not_found, "name", name + " does not exist");
  return std::move(*op);
}

outcome<v1::Operation> management::cancel_operation(const std::string& name) {
  if (array_ == nullptr) return no_array("runs operations");
  if (auto there = partner_operation(name, "CancelOperation")) return std::move(*there);
  auto op = array_->operations().cancel(name);
  if (!op)
    return refuse(
        op.error().code == make_error_code(errc::not_found) ? kind::not_found : kind::precondition,
        "name", op.error().message);
  return std::move(*op);
}

v1::ListOperationsResponse management::list_operations(const v1::ListRequest& request) const {
  const std::size_t page =
      request.page_size() == 0 ? 100 : static_cast<std::size_t>(request.page_size());
  drain_operations();  // what was just recorded, listed
  std::vector<v1::Operation> ops;
  bool more = false;
  for (const auto& [key, bytes] : config_.list("operations/", request.page_token(), page + 1)) {
    if (!ops.emplace_back().ParseFromString(bytes)) ops.pop_back();
  }
  if (array_ != nullptr && array_->partner() != nullptr && !delegated) {
    bool active = false;
    (void)on_loop(*array_, [this, &active](auto done) {
      active = array_->partner()->state() == partner::liveness::active;
      done({});
    });
    if (active) {
      if (auto theirs = parsed<v1::ListOperationsResponse>(
              call_partner(link_type::management_delegated, "ListOperations", request))) {
        more = !theirs->next_page_token().empty();
        for (v1::Operation& op : *theirs->mutable_operations()) ops.push_back(std::move(op));
      }
    }
  }
  std::ranges::sort(ops, {}, &v1::Operation::name);
  more = more || ops.size() > page;
  if (ops.size() > page) ops.resize(page);
  v1::ListOperationsResponse out;
  for (v1::Operation& op : ops) *out.add_operations() = std::move(op);
  if (more && !ops.empty()) out.set_next_page_token(out.operations().rbegin()->name());
  return out;
}

// ---- what the running array knows ----

// A disk or group of a pool the partner serves is described by the
// partner: its groups are assembled there, not here.
void management::describe(v1::Disk& disk) const {
  if (array_ == nullptr) return;
  v1::GetRequest request;
  request.set_name(disk.name());
  if (auto there = elsewhere(pool_of_disk(disk.name()), "GetDisk", request)) {
    if (auto described = parsed<v1::Disk>(std::move(*there))) disk = std::move(*described);
    return;
  }
  (void)on_loop(*array_, [this, &disk](auto done) {
    array_->drives().describe(disk);
    done({});
  });
}

void management::describe(v1::DiskGroup& group) const {
  if (array_ == nullptr) return;
  v1::GetRequest request;
  request.set_name(group.name());
  if (auto there = elsewhere(pool_of_group(group.name()), "GetDiskGroup", request)) {
    if (auto described = parsed<v1::DiskGroup>(std::move(*there))) group = std::move(*described);
    return;
  }
  (void)on_loop(*array_, [this, &group](auto done) {
    array_->drives().describe(group);
    array_->describe_pause(group);
    done({});
  });
}

void management::describe(google::protobuf::RepeatedPtrField<v1::Disk>& disks) const {
  for (v1::Disk& d : disks) describe(d);
}

void management::describe(google::protobuf::RepeatedPtrField<v1::DiskGroup>& groups) const {
  for (v1::DiskGroup& g : groups) describe(g);
}

outcome<v1::VolumeStatistics> management::volume_statistics(const std::string& name) const {
  if (!is_volume_name(name))
    return invalid("name", "\"" + name + "\" is not a pools/POOL/volumes/NAME resource name");
  if (array_ == nullptr) return no_array("to measure");
  v1::GetRequest request;
  request.set_name(name);
  if (auto there = elsewhere(pool_of_volume(name), "GetVolumeStatistics", request))
    return parsed<v1::VolumeStatistics>(std::move(*there));
  v1::VolumeStatistics out;
  auto measured = on_loop(
      *array_, [this, &name, &out](auto done) { done(array_->volume_statistics(name, out)); });
  if (!measured) return refused(measured.error(), "name");
  return out;
}

outcome<v1::PoolStatistics> management::pool_statistics(const std::string& name) const {
  if (!name.starts_with("pools/") || name.find('/', 6) != std::string::npos)
    return invalid("name", "\"" + name + "\" is not a pools/NAME resource name");
  if (array_ == nullptr) return no_array("to measure");
  v1::GetRequest request;
  request.set_name(name);
  if (auto there = elsewhere(name, "GetPoolStatistics", request))
    return parsed<v1::PoolStatistics>(std::move(*there));
  v1::PoolStatistics out;
  auto measured = on_loop(
      *array_, [this, &name, &out](auto done) { done(array_->pool_statistics(name, out)); });
  if (!measured) return refused(measured.error(), "name");
  return out;
}

outcome<v1::ListHeatResponse> management::heat(const std::string& volume, bool hottest_first,
                                               std::uint64_t first, std::size_t limit) const {
  if (array_ == nullptr) return no_array("to read heat from");
  v1::ListHeatRequest request;
  request.set_volume(volume);
  request.set_hottest_first(hottest_first);
  request.set_page_size(static_cast<std::int32_t>(limit));
  request.set_page_token(heat_token(hottest_first, first));
  if (auto there = elsewhere(pool_of_volume(volume), "ListHeat", request)) {
    return parsed<v1::ListHeatResponse>(std::move(*there));
  }
  v1::ListHeatResponse out;
  auto read_heat = on_loop(
      *array_, [&](auto done) { done(array_->heat(volume, hottest_first, first, limit, out)); });
  if (!read_heat) return refused(read_heat.error(), "volume");
  return out;
}

outcome<v1::ListHeatHistoryResponse> management::heat_history(
    const heat_history_query& query) const {
  const std::string field = "parent";
  if (!is_pool_name(query.pool))
    return invalid(field, "\"" + query.pool +
                              "\" is not a pools/NAME or pools/POOL/volumes/NAME resource name");
  if (!config_.get(query.pool))
    return refuse(kind::not_found, field, query.pool + " does not exist");
  if (!query.volume.empty() && !config_.get(query.volume))
    return refuse(kind::not_found, field, query.volume + " does not exist");
  if (array_ == nullptr) return no_array("to read heat history from");
  v1::ListHeatHistoryRequest request;
  request.set_parent(query.volume.empty() ? query.pool : query.volume);
  request.set_since_unix_seconds(query.since_unix_seconds);
  request.set_page_size(static_cast<std::int32_t>(query.max_snapshots));
  if (query.first_sequence != 0) request.set_page_token(heat_history_token(query.first_sequence));
  if (auto there = elsewhere(query.pool, "ListHeatHistory", request))
    return parsed<v1::ListHeatHistoryResponse>(std::move(*there));
  // Read-only, beside the pool's open store: RocksDB lets both be open,
  // and the blocking reads stay off the loop.
  auto read =
      read_heat_history(array_->state_dir() / "pools" / records::short_name(query.pool), query);
  if (!read) return refused(read.error(), field);
  return std::move(*read);
}

void management::drain_events() const {
  if (array_ != nullptr) array_->events().drain();
}

void management::drain_operations() const {
  if (array_ != nullptr) array_->operations().drain();
}

std::vector<v1::Controller> management::controllers() const {
  const std::string self = array_ != nullptr ? array_->controller_name() : "a";
  // Each pool's owner, as its record says (a record older than owners: a).
  std::map<std::string, std::vector<std::string>> pools_of;
  for (const auto& [key, bytes] : config_.list("pools/")) {
    v1::Pool p;
    if (key.find('/', 6) != std::string::npos || !p.ParseFromString(bytes)) continue;
    pools_of[p.owner().empty() ? "controllers/a" : p.owner()].push_back(key);
  }
  auto failed_over = [this](const std::string& name) {
    return read<v1::Controller>(config_, name).value_or(v1::Controller()).failed_over();
  };
  v1::Controller c;
  c.set_name("controllers/" + self);
  c.set_state(v1::CONTROLLER_ACTIVE);
  c.set_version(version_);
  for (const std::string& p : pools_of[c.name()]) c.add_pools(p);
  c.set_start_time_unix_ms(started_ms_);
  c.set_failed_over(failed_over(c.name()));
  std::vector<v1::Controller> out;
  partner::liveness seen = partner::liveness::down;
  if (array_ != nullptr) {
    const auto at = array_->iscsi_endpoint();  // fixed once the array serves
    c.set_iscsi_portal(at.address().to_string() + ":" + std::to_string(at.port()));
    c.set_target_name(array_->target_name());
    c.set_state_dir(array_->state_dir().string());
    c.set_array_id(id_text(array_->identity()));
    // What it is doing with pools, and its partner's state: the loop's.
    array::moving now = array::moving::none;
    std::size_t iscsi_connections = 0, nvme_connections = 0;
    bool stepped_down = false;
    (void)on_loop(*array_, [&](auto done) {
      if (array_->partner() != nullptr) seen = array_->partner()->state();
      now = array_->pools_moving();
      stepped_down = !array_->stepped_down_from().empty();
      iscsi_connections = array_->iscsi_connections();
      nvme_connections = array_->nvme_connections();
      done({});
    });
    v1::Controller::Port* iscsi = c.add_ports();
    iscsi->set_protocol("iscsi");
    iscsi->set_address(c.iscsi_portal());
    iscsi->set_connections(static_cast<std::uint32_t>(iscsi_connections));
    if (const auto nvme = array_->nvme_endpoint()) {
      v1::Controller::Port* port = c.add_ports();
      port->set_protocol("nvme-tcp");
      port->set_address(nvme->address().to_string() + ":" + std::to_string(nvme->port()));
      port->set_connections(static_cast<std::uint32_t>(nvme_connections));
    }
    c.set_state(stepped_down                         ? v1::CONTROLLER_STEPPED_DOWN
                : now == array::moving::taking_over  ? v1::CONTROLLER_TAKING_OVER
                : now == array::moving::handing_over ? v1::CONTROLLER_HANDING_OVER
                : c.failed_over()                    ? v1::CONTROLLER_FAILED_OVER
                                                     : v1::CONTROLLER_ACTIVE);
  }
  out.push_back(c);
  if (array_ == nullptr || array_->partner() == nullptr || delegated) return out;
  v1::Controller p;
  p.set_name("controllers/" + array_->partner()->name());
  if (seen == partner::liveness::active) {
    // As it describes itself.
    v1::GetRequest request;
    request.set_name(p.name());
    if (auto theirs = parsed<v1::Controller>(
            call_partner(link_type::management_delegated, "GetController", request))) {
      out.push_back(std::move(*theirs));
      return out;
    }
  }
  p.set_state(seen == partner::liveness::active        ? v1::CONTROLLER_ACTIVE
              : seen == partner::liveness::unreachable ? v1::CONTROLLER_UNREACHABLE
                                                       : v1::CONTROLLER_DOWN);
  for (const std::string& pool : pools_of[p.name()]) p.add_pools(pool);
  p.set_array_id(c.array_id());
  p.set_failed_over(failed_over(p.name()));
  out.push_back(p);
  return out;
}

}  // namespace strata::controller
