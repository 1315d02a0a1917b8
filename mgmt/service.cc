#include "mgmt/service.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cctype>
#include <future>
#include <map>
#include <set>
#include <string_view>

#include "strata/v1/operations.pb.h"
#include "target/iscsi/chap.h"
#include "tiering/records.h"

namespace strata::mgmt {

namespace {

constexpr int default_page_size = 100;
constexpr int max_page_size = 1000;

// A failed call's status: "field: reason" in words, and the same as an
// ErrorInfo in a strata.v1.Status (google.rpc.Status's layout) in the
// details, for programs.
grpc::Status fail(grpc::StatusCode code, const std::string& field, const std::string& why) {
  v1::Status rich;
  rich.set_code(code);
  rich.set_message(field.empty() ? why : field + ": " + why);
  v1::ErrorInfo info;
  info.set_field(field);
  info.set_reason(why);
  rich.add_details()->PackFrom(info);
  return {code, rich.message(), rich.SerializeAsString()};
}

grpc::Status invalid(const std::string& field, const std::string& why) { return fail(grpc::StatusCode::INVALID_ARGUMENT, field, why); }

// One page of the records directly under `collection` ("disks/"): not
// those further down ("pools/p1/volumes/…" under "pools/").
template <class Message, class Response>
grpc::Status list(const controller::config_store& config, const std::string& collection, const v1::ListRequest& in,
                  Response* out, Message* (Response::*add)()) {
  if (in.page_size() < 0 || in.page_size() > max_page_size) {
    return invalid("page_size", std::to_string(in.page_size()) + " is outside 0 to " + std::to_string(max_page_size));
  }
  if (!in.page_token().empty() && !std::string_view(in.page_token()).starts_with(collection)) {
    return invalid("page_token", "\"" + in.page_token() + "\" is not a token of this list");
  }
  const std::size_t page = in.page_size() == 0 ? default_page_size : static_cast<std::size_t>(in.page_size());
  std::vector<std::pair<std::string, std::string>> picked;
  bool more = false;  // a record follows the page: it gets a next_page_token
  std::string after = in.page_token();
  while (!more) {
    const auto records = config.list(collection, after, page + 1);
    for (const auto& [key, bytes] : records) {
      after = key;
      if (std::string_view(key).substr(collection.size()).find('/') != std::string_view::npos) continue;  // nested
      if (picked.size() == page) {
        more = true;
        break;
      }
      picked.emplace_back(key, bytes);
    }
    if (records.size() < page + 1) break;  // the collection ended
  }
  for (const auto& [key, bytes] : picked) {
    if (!(out->*add)()->ParseFromString(bytes)) return fail(grpc::StatusCode::DATA_LOSS, "", "the record " + key + " is corrupt");
  }
  if (more) out->set_next_page_token(picked.back().first);
  return grpc::Status::OK;
}

template <class Message>
grpc::Status get(const controller::config_store& config, const std::string& collection, const v1::GetRequest& in,
                 Message* out) {
  if (!std::string_view(in.name()).starts_with(collection) || in.name().size() == collection.size()) {
    return invalid("name", "\"" + in.name() + "\" is not a " + collection + "NAME resource name");
  }
  const auto bytes = config.get(in.name());
  if (!bytes) return fail(grpc::StatusCode::NOT_FOUND, "name", in.name() + " does not exist");
  if (!out->ParseFromString(*bytes)) return fail(grpc::StatusCode::DATA_LOSS, "", "the record " + in.name() + " is corrupt");
  return grpc::Status::OK;
}

// "pools/NAME", not a name under one ("pools/p1/volumes/v1").
bool is_pool_name(std::string_view name) {
  return name.starts_with("pools/") && name.size() > 6 && name.find('/', 6) == std::string_view::npos;
}

// A short name the API accepts for a new resource: [a-z][a-z0-9-]*, at most 63.
bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 63 || id[0] < 'a' || id[0] > 'z') return false;
  return std::ranges::all_of(id, [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

// What an error from the array says, as a status naming `field`.
grpc::Status status_of(const error& e, const std::string& field = {}) {
  switch (static_cast<errc>(e.code.value())) {
    case errc::no_space:
      return fail(grpc::StatusCode::RESOURCE_EXHAUSTED, field, e.message);
    case errc::invalid_argument:
      return fail(grpc::StatusCode::INVALID_ARGUMENT, field, e.message);
    case errc::not_found:
      return fail(grpc::StatusCode::NOT_FOUND, field, e.message);
    case errc::timed_out:
      return fail(grpc::StatusCode::DEADLINE_EXCEEDED, field, e.message);
    case errc::busy:           // the resource's state does not allow it now
    case errc::not_supported:  // nor its make-up (a pool without a write log)
      return fail(grpc::StatusCode::FAILED_PRECONDITION, field, e.message);
    default:
      return fail(grpc::StatusCode::INTERNAL, field, e.message);
  }
}

// Runs `change` on the array's loop and waits for what it reports. No
// time limit: `change` may use the handler's request, response and the
// service, which must outlive it; the loop runs until the server has
// stopped (stratad stops the API first).
std::expected<void, error> on_loop(controller::array& array,
                                   std::function<void(std::function<void(std::expected<void, error>)>)> change) {
  auto result = std::make_shared<std::promise<std::expected<void, error>>>();
  auto outcome = result->get_future();
  boost::asio::post(array.executor(), [result, change = std::move(change)] {
    change([result](std::expected<void, error> r) { result->set_value(std::move(r)); });
  });
  return outcome.get();
}

template <class Message>
std::optional<Message> read(const controller::config_store& config, const std::string& name) {
  const auto bytes = config.get(name);
  Message m;
  if (!bytes || !m.ParseFromString(*bytes)) return std::nullopt;
  return m;
}

grpc::Status commit(controller::config_store& config, const controller::config_batch& b) {
  if (auto done = config.commit(b); !done) return status_of(done.error());
  return grpc::Status::OK;
}

// The paths of `mask`, each checked against the ones `allowed`.
std::expected<std::vector<std::string>, grpc::Status> paths_of(const google::protobuf::FieldMask& mask,
                                                               std::initializer_list<std::string_view> allowed) {
  std::string names;
  for (const std::string_view a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
  if (mask.paths().empty()) return std::unexpected(invalid("update_mask", "empty; name the fields to change (" + names + ")"));
  std::vector<std::string> out;
  for (const std::string& p : mask.paths()) {
    if (std::ranges::find(allowed, p) == allowed.end()) {
      return std::unexpected(invalid("update_mask", "\"" + p + "\" cannot be changed; these can: " + names));
    }
    out.push_back(p);
  }
  return out;
}

// iSCSI names compare case-insensitively (RFC 3722 folds them to lower case).
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// An iSCSI name (RFC 3720 3.2.6.3): iqn., eui. or naa., at most 223 bytes.
bool valid_iscsi_name(const std::string& n) {
  if (n.size() > 223 || n.size() < 5) return false;
  const std::string folded = lower(n);
  if (!folded.starts_with("iqn.") && !folded.starts_with("eui.") && !folded.starts_with("naa.")) return false;
  return std::ranges::none_of(n, [](char c) { return c <= ' ' || c == ',' || static_cast<unsigned char>(c) >= 0x7f; });
}

// Checks a host's own fields, and that no other host claims what it does.
grpc::Status check_host(const controller::config_store& config, const v1::Host& h) {
  if (h.iqns().empty() && !h.any_initiator()) return invalid("host.iqns", "a host needs an initiator name, or any_initiator");
  std::set<std::string> own;
  for (const std::string& iqn : h.iqns()) {
    if (!valid_iscsi_name(iqn)) return invalid("host.iqns", "\"" + iqn + "\" is not an iSCSI name (iqn.…, eui.… or naa.…)");
    if (!own.insert(lower(iqn)).second) return invalid("host.iqns", iqn + " is listed twice");
  }
  if (h.chap_user().empty() != h.chap_secret().empty()) {
    return invalid(h.chap_user().empty() ? "host.chap_user" : "host.chap_secret", "CHAP needs both a user and a secret");
  }
  if (h.mutual_chap_user().empty() != h.mutual_chap_secret().empty()) {
    return invalid(h.mutual_chap_user().empty() ? "host.mutual_chap_user" : "host.mutual_chap_secret",
                   "mutual CHAP needs both a user and a secret");
  }
  if (!h.mutual_chap_user().empty() && h.chap_user().empty()) return invalid("host.mutual_chap_user", "mutual CHAP needs CHAP");
  if (!h.chap_user().empty()) {
    const auto access = controller::host_access_of(h);
    if (auto bad = iscsi::check_chap_secrets(*access.chap, std::nullopt)) return invalid("host.chap_secret", *bad);
    if (auto bad = iscsi::check_chap_secrets(*access.chap, access.mutual_chap)) return invalid("host.mutual_chap_secret", *bad);
  }
  for (const auto& [key, bytes] : config.list("hosts/")) {
    v1::Host other;
    if (key == h.name() || !other.ParseFromString(bytes)) continue;
    if (h.any_initiator() && other.any_initiator()) {
      return fail(grpc::StatusCode::ALREADY_EXISTS, "host.any_initiator", key + " already stands for every initiator");
    }
    for (const std::string& iqn : other.iqns()) {
      if (own.contains(lower(iqn))) return fail(grpc::StatusCode::ALREADY_EXISTS, "host.iqns", iqn + " belongs to " + key);
    }
  }
  return grpc::Status::OK;
}

// What reads return of a host: its secrets are write-only.
void redact(v1::Host& h) {
  h.clear_chap_secret();
  h.clear_mutual_chap_secret();
}

tiering::affinity placement_of(v1::Affinity a) {
  return a == v1::PERFORMANCE ? tiering::affinity::performance
         : a == v1::CAPACITY  ? tiering::affinity::archive
                              : tiering::affinity::automatic;
}

}  // namespace

grpc::Status array_service::CreateVolume(grpc::ServerContext*, const v1::CreateVolumeRequest* in, v1::Volume* out) {
  if (in->parent().empty()) return invalid("parent", "the pool to create the volume in, e.g. pools/p1");
  if (!valid_id(in->volume_id())) return invalid("volume_id", "\"" + in->volume_id() + "\" is not [a-z][a-z0-9-]*, at most 63");
  const std::uint64_t bytes = in->volume().size_bytes();
  if (bytes == 0 || bytes % 4096 != 0) return invalid("volume.size_bytes", std::to_string(bytes) + " is not a positive multiple of 4096");
  // 0 (unset) is the default, 512e: 512-byte logical blocks over the
  // pool's 4096-byte ones, which every initiator (qemu among them) takes.
  const std::uint32_t block_size_bytes = in->volume().block_size_bytes() == 0 ? 512 : in->volume().block_size_bytes();
  if (block_size_bytes != 512 && block_size_bytes != 4096) {
    return invalid("volume.block_size_bytes", std::to_string(block_size_bytes) + " is not 512 (512e, the default) or 4096 (4Kn)");
  }
  std::lock_guard hold(changes_);
  if (!is_pool_name(in->parent()) || !config_.get(in->parent())) {
    return fail(grpc::StatusCode::NOT_FOUND, "parent", in->parent() + " is not a pool");
  }
  const std::string name = in->parent() + "/volumes/" + in->volume_id();
  if (config_.get(name)) return fail(grpc::StatusCode::ALREADY_EXISTS, "volume_id", name + " exists");
  const v1::WriteCache write_cache = in->volume().write_cache() == v1::WRITE_CACHE_UNSPECIFIED ? v1::WRITE_BACK : in->volume().write_cache();
  if (auto refused = check_volume_write_cache(in->parent(), write_cache); !refused.ok()) return refused;
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to create the volume in");
  const v1::Affinity affinity = in->volume().affinity() == v1::AFFINITY_UNSPECIFIED ? v1::AUTO : in->volume().affinity();
  auto created = on_loop(*array_, [this, name, bytes, placement = placement_of(affinity)](auto done) {
    array_->create_volume(name, bytes, placement, std::move(done));
  });
  if (!created) return status_of(created.error(), "volume.size_bytes");
  if (write_cache == v1::WRITE_THROUGH) {
    // Before any host sees it: the record below says the same.
    auto set = on_loop(*array_, [this, name](auto done) { done(array_->set_volume_write_cache(name, raid::cache_mode::write_through)); });
    if (!set) return status_of(set.error(), "volume.write_cache");
  }
  out->set_name(name);
  out->set_size_bytes(bytes);
  out->set_block_size_bytes(block_size_bytes);
  out->set_affinity(affinity);
  out->set_write_cache(write_cache);
  out->set_serial(controller::new_volume_serial(in->volume_id()));
  controller::config_batch b;
  b.put(name, out->SerializeAsString());
  // A crash before this commit leaves a volume in the pool with no record:
  // the next start deletes it (array::reconcile_volumes).
  if (auto done = commit(config_, b); !done.ok()) return done;
  array_->events().record(controller::severity::info, name, "created, " + std::to_string(bytes) + " bytes");
  return grpc::Status::OK;
}

grpc::Status array_service::UpdateVolume(grpc::ServerContext*, const v1::UpdateVolumeRequest* in, v1::Volume* out) {
  const auto paths = paths_of(in->update_mask(), {"size_bytes", "affinity", "write_cache"});
  if (!paths) return paths.error();
  const std::string& name = in->volume().name();
  std::lock_guard hold(changes_);
  auto volume = name.find("/volumes/") == std::string::npos ? std::nullopt : read<v1::Volume>(config_, name);
  if (!volume) return fail(grpc::StatusCode::NOT_FOUND, "volume.name", name + " does not exist");
  v1::Volume updated = *volume;
  for (const std::string& p : *paths) {
    if (p == "size_bytes") {
      const std::uint64_t bytes = in->volume().size_bytes();
      if (bytes == 0 || bytes % 4096 != 0) return invalid("volume.size_bytes", std::to_string(bytes) + " is not a positive multiple of 4096");
      if (bytes < volume->size_bytes()) {
        return invalid("volume.size_bytes", "shrinking from " + std::to_string(volume->size_bytes()) + " would lose data; volumes only grow");
      }
      updated.set_size_bytes(bytes);
    } else if (p == "write_cache") {
      const v1::WriteCache mode = in->volume().write_cache();
      const std::string pool = name.substr(0, name.find("/volumes/"));
      if (auto refused = check_volume_write_cache(pool, mode); !refused.ok()) return refused;
      updated.set_write_cache(mode);
    } else {
      if (in->volume().affinity() == v1::AFFINITY_UNSPECIFIED) return invalid("volume.affinity", "AUTO, PERFORMANCE or CAPACITY");
      updated.set_affinity(in->volume().affinity());
    }
  }
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to change the volume in");
  if (updated.size_bytes() != volume->size_bytes()) {
    auto grown = on_loop(*array_, [this, name, bytes = updated.size_bytes()](auto done) { array_->resize_volume(name, bytes, std::move(done)); });
    if (!grown) return status_of(grown.error(), "volume.size_bytes");
  }
  if (updated.affinity() != volume->affinity()) {
    auto placed = on_loop(*array_, [this, name, p = placement_of(updated.affinity())](auto done) {
      array_->set_placement(name, p, std::move(done));
    });
    if (!placed) return status_of(placed.error(), "volume.affinity");
  }
  controller::config_batch b;
  b.put(name, updated.SerializeAsString());
  if (auto done = commit(config_, b); !done.ok()) return done;
  // After the record: a crash between the two leaves the next start in
  // the recorded mode, and either mode keeps every acknowledged write.
  const bool write_through = updated.write_cache() == v1::WRITE_THROUGH;
  if (write_through != (volume->write_cache() == v1::WRITE_THROUGH)) {
    auto set = on_loop(*array_, [this, name, write_through](auto done) {
      done(array_->set_volume_write_cache(name, write_through ? raid::cache_mode::write_through : raid::cache_mode::write_back));
    });
    if (!set) return status_of(set.error(), "volume.write_cache");
    if (write_through) {
      v1::VolumeStatistics now;
      (void)on_loop(*array_, [this, name, &now](auto done) { done(array_->volume_statistics(name, now)); });
      array_->events().record(controller::severity::info, name,
                              "write cache: writing through; its " + std::to_string(now.dirty_bytes()) +
                                  " dirty bytes in the write log are destaged in the background");
    }
  }
  array_->events().record(controller::severity::info, name, "changed: size " + std::to_string(updated.size_bytes()) + " bytes, affinity " +
                                                                v1::Affinity_Name(updated.affinity()) + ", write cache " +
                                                                v1::WriteCache_Name(updated.write_cache() == v1::WRITE_CACHE_UNSPECIFIED
                                                                                        ? v1::WRITE_BACK
                                                                                        : updated.write_cache()));
  *out = updated;
  return grpc::Status::OK;
}

grpc::Status array_service::check_volume_write_cache(const std::string& pool_name, v1::WriteCache mode) {
  if (mode != v1::WRITE_BACK && mode != v1::WRITE_THROUGH) return invalid("volume.write_cache", "WRITE_BACK or WRITE_THROUGH");
  if (mode == v1::WRITE_BACK) return grpc::Status::OK;
  const auto pool = read<v1::Pool>(config_, pool_name);
  if (pool && pool->write_log_group().empty()) {
    return fail(grpc::StatusCode::FAILED_PRECONDITION, "volume.write_cache",
                pool_name + " has no write log (its write_log_group): its volumes write through already");
  }
  return grpc::Status::OK;
}

grpc::Status array_service::UpdatePool(grpc::ServerContext*, const v1::UpdatePoolRequest* in, v1::Pool* out) {
  const auto paths = paths_of(in->update_mask(), {"write_cache"});
  if (!paths) return paths.error();
  const std::string& name = in->pool().name();
  std::lock_guard hold(changes_);
  auto pool = is_pool_name(name) ? read<v1::Pool>(config_, name) : std::nullopt;
  if (!pool) return fail(grpc::StatusCode::NOT_FOUND, "pool.name", name + " does not exist");
  const v1::WriteCache mode = in->pool().write_cache();
  if (mode != v1::WRITE_BACK && mode != v1::WRITE_THROUGH) return invalid("pool.write_cache", "WRITE_BACK or WRITE_THROUGH");
  if (pool->write_log_group().empty()) {
    return fail(grpc::StatusCode::FAILED_PRECONDITION, "pool.write_cache",
                name + " has no write log (its write_log_group): it writes through, and cannot write back");
  }
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to change the pool in");
  v1::Pool updated = *pool;
  updated.set_write_cache(mode);
  // Recorded first: the next start opens the pool in the mode asked for.
  controller::config_batch b;
  b.put(name, updated.SerializeAsString());
  if (auto done = commit(config_, b); !done.ok()) return done;
  auto set = on_loop(*array_, [this, name, mode](auto done) {
    done(array_->set_write_cache(name, mode == v1::WRITE_BACK ? raid::cache_mode::write_back : raid::cache_mode::write_through));
  });
  if (!set) return status_of(set.error(), "pool.write_cache");
  array_->events().record(controller::severity::info, name, std::string("changed: write cache ") + v1::WriteCache_Name(mode));
  *out = updated;
  return grpc::Status::OK;
}

grpc::Status array_service::set_affinity(v1::Volume& volume, v1::Affinity affinity) {
  auto placed = on_loop(*array_, [this, name = volume.name(), p = placement_of(affinity)](auto done) {
    array_->set_placement(name, p, std::move(done));
  });
  if (!placed) return status_of(placed.error(), "volume.affinity");
  volume.set_affinity(affinity);
  controller::config_batch b;
  b.put(volume.name(), volume.SerializeAsString());
  return commit(config_, b);
}

grpc::Status array_service::MoveVolume(grpc::ServerContext*, const v1::MoveVolumeRequest* in, v1::Operation* out) {
  if (in->affinity() != v1::CAPACITY && in->affinity() != v1::PERFORMANCE) {
    return invalid("affinity", "CAPACITY (off the SSD tier) or PERFORMANCE (onto it)");
  }
  const std::string& name = in->name();
  std::lock_guard hold(changes_);
  auto volume = name.find("/volumes/") == std::string::npos ? std::nullopt : read<v1::Volume>(config_, name);
  if (!volume) return fail(grpc::StatusCode::NOT_FOUND, "name", name + " does not exist");
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to move the volume in");
  const v1::Affinity before = volume->affinity();
  if (auto set = set_affinity(*volume, in->affinity()); !set.ok()) return set;
  // Cancelled on a gRPC thread (CancelOperation's): the affinity goes
  // back as it was, on the array and in the record, as one change.
  auto op = std::make_shared<std::string>();
  *out = array_->operations().start("volume.move", name, [this, name, before, op] {
    std::lock_guard again(changes_);
    bool stopped = false;
    (void)on_loop(*array_, [this, op, &stopped](auto done) {
      stopped = array_->stop_following(*op);
      done({});
    });
    if (!stopped) return;  // it ended meanwhile: what it did stands
    if (auto back = read<v1::Volume>(config_, name)) {
      if (auto undone = set_affinity(*back, before); !undone.ok()) {
        array_->events().record(controller::severity::error, name, "its affinity could not be put back: " + undone.error_message());
      }
    }
  });
  *op = out->name();
  (void)on_loop(*array_, [this, name, to = in->affinity() == v1::CAPACITY ? tiering::tier::capacity : tiering::tier::performance,
                          op = out->name()](auto done) {
    array_->follow_move(name, to, op);
    done({});
  });
  array_->events().record(controller::severity::info, name,
                          std::string(in->affinity() == v1::CAPACITY ? "drain off the SSD tier" : "move onto the SSD tier") + " started (" +
                              out->name() + ")");
  return grpc::Status::OK;
}

grpc::Status array_service::DeleteVolume(grpc::ServerContext*, const v1::DeleteRequest* in, v1::Operation* out) {
  const std::string& name = in->name();
  std::lock_guard hold(changes_);
  auto volume = name.find("/volumes/") == std::string::npos ? std::nullopt : read<v1::Volume>(config_, name);
  if (!volume) return fail(grpc::StatusCode::NOT_FOUND, "name", name + " does not exist");
  for (const auto& [key, bytes] : config_.list("mappings/")) {
    v1::Mapping m;
    if (m.ParseFromString(bytes) && m.volume() == name) {
      return fail(grpc::StatusCode::FAILED_PRECONDITION, "name", name + " is mapped (" + key + "); delete its mappings first");
    }
  }
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to delete the volume from");
  // The record goes first: from now on the volume is gone for the API,
  // and a restart before the pool has let it go finishes the delete.
  controller::config_batch b;
  b.erase(name);
  b.erase("reservations/" + name);
  if (auto done = commit(config_, b); !done.ok()) return done;
  *out = array_->operations().start("volume.delete", name);
  boost::asio::post(array_->executor(), [array = array_, name, op = out->name()] {
    array->delete_volume(name, [array, name, op](std::expected<void, error> r) {
      array->operations().finish(op, r);
      if (r) {
        array->events().record(controller::severity::info, name, "deleted");
      } else {
        array->events().record(controller::severity::error, name, "its delete failed: " + r.error().message);
      }
    });
  });
  return grpc::Status::OK;
}

grpc::Status array_service::CreateHost(grpc::ServerContext*, const v1::CreateHostRequest* in, v1::Host* out) {
  if (!valid_id(in->host_id())) return invalid("host_id", "\"" + in->host_id() + "\" is not [a-z][a-z0-9-]*, at most 63");
  v1::Host host = in->host();
  host.set_name("hosts/" + in->host_id());
  std::lock_guard hold(changes_);
  if (config_.get(host.name())) return fail(grpc::StatusCode::ALREADY_EXISTS, "host_id", host.name() + " exists");
  if (auto bad = check_host(config_, host); !bad.ok()) return bad;
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to serve the host");
  auto served = on_loop(*array_, [this, name = host.name(), access = controller::host_access_of(host)](auto done) {
    done(array_->set_host(name, access));
  });
  if (!served) return status_of(served.error(), "host");
  controller::config_batch b;
  b.put(host.name(), host.SerializeAsString());
  if (auto done = commit(config_, b); !done.ok()) {
    (void)on_loop(*array_, [this, name = host.name()](auto undo) { undo(array_->remove_host(name)); });
    return done;
  }
  array_->events().record(controller::severity::info, host.name(), "created");
  *out = host;
  redact(*out);
  return grpc::Status::OK;
}

grpc::Status array_service::UpdateHost(grpc::ServerContext*, const v1::UpdateHostRequest* in, v1::Host* out) {
  const auto paths = paths_of(in->update_mask(), {"iqns", "any_initiator", "chap_user", "chap_secret", "mutual_chap_user", "mutual_chap_secret"});
  if (!paths) return paths.error();
  std::lock_guard hold(changes_);
  const std::string& name = in->host().name();
  auto before = name.starts_with("hosts/") ? read<v1::Host>(config_, name) : std::nullopt;
  if (!before) return fail(grpc::StatusCode::NOT_FOUND, "host.name", name + " does not exist");
  v1::Host host = *before;
  const v1::Host& h = in->host();
  for (const std::string& p : *paths) {
    if (p == "iqns") {
      host.mutable_iqns()->CopyFrom(h.iqns());
    } else if (p == "any_initiator") {
      host.set_any_initiator(h.any_initiator());
    } else if (p == "chap_user") {
      host.set_chap_user(h.chap_user());
    } else if (p == "chap_secret") {
      host.set_chap_secret(h.chap_secret());
    } else if (p == "mutual_chap_user") {
      host.set_mutual_chap_user(h.mutual_chap_user());
    } else {
      host.set_mutual_chap_secret(h.mutual_chap_secret());
    }
  }
  if (auto bad = check_host(config_, host); !bad.ok()) return bad;
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to serve the host");
  auto served = on_loop(*array_, [this, name, access = controller::host_access_of(host)](auto done) { done(array_->set_host(name, access)); });
  if (!served) return status_of(served.error(), "host");
  controller::config_batch b;
  b.put(name, host.SerializeAsString());
  if (auto done = commit(config_, b); !done.ok()) {
    (void)on_loop(*array_, [this, name, access = controller::host_access_of(*before)](auto undo) { undo(array_->set_host(name, access)); });
    return done;
  }
  array_->events().record(controller::severity::info, name, "changed");
  *out = host;
  redact(*out);
  return grpc::Status::OK;
}

grpc::Status array_service::DeleteHost(grpc::ServerContext*, const v1::DeleteRequest* in, google::protobuf::Empty*) {
  std::lock_guard hold(changes_);
  const std::string& name = in->name();
  auto host = name.starts_with("hosts/") ? read<v1::Host>(config_, name) : std::nullopt;
  if (!host) return fail(grpc::StatusCode::NOT_FOUND, "name", name + " does not exist");
  for (const auto& [key, bytes] : config_.list("mappings/")) {
    v1::Mapping m;
    if (m.ParseFromString(bytes) && m.host() == name) {
      return fail(grpc::StatusCode::FAILED_PRECONDITION, "name", name + " has LUNs mapped (" + key + "); delete its mappings first");
    }
  }
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to remove the host from");
  auto removed = on_loop(*array_, [this, name](auto done) { done(array_->remove_host(name)); });
  if (!removed) return status_of(removed.error(), "name");
  controller::config_batch b;
  b.erase(name);
  if (auto done = commit(config_, b); !done.ok()) {
    (void)on_loop(*array_, [this, name, access = controller::host_access_of(*host)](auto undo) { undo(array_->set_host(name, access)); });
    return done;
  }
  array_->events().record(controller::severity::info, name, "deleted; its sessions were closed");
  return grpc::Status::OK;
}

grpc::Status array_service::CreateMapping(grpc::ServerContext*, const v1::CreateMappingRequest* in, v1::Mapping* out) {
  if (!valid_id(in->mapping_id())) return invalid("mapping_id", "\"" + in->mapping_id() + "\" is not [a-z][a-z0-9-]*, at most 63");
  const v1::Mapping& m = in->mapping();
  if (m.lun() >= 16384) return invalid("mapping.lun", std::to_string(m.lun()) + " is not below 16384");
  std::lock_guard hold(changes_);
  const std::string name = "mappings/" + in->mapping_id();
  if (config_.get(name)) return fail(grpc::StatusCode::ALREADY_EXISTS, "mapping_id", name + " exists");
  const auto volume = m.volume().find("/volumes/") == std::string::npos ? std::nullopt : read<v1::Volume>(config_, m.volume());
  if (!volume) return fail(grpc::StatusCode::NOT_FOUND, "mapping.volume", m.volume() + " does not exist");
  if (!m.host().starts_with("hosts/") || !read<v1::Host>(config_, m.host())) {
    return fail(grpc::StatusCode::NOT_FOUND, "mapping.host", m.host() + " does not exist");
  }
  for (const auto& [key, bytes] : config_.list("mappings/")) {
    v1::Mapping other;
    if (!other.ParseFromString(bytes) || other.host() != m.host()) continue;
    if (other.lun() == m.lun()) {
      return fail(grpc::StatusCode::ALREADY_EXISTS, "mapping.lun", "LUN " + std::to_string(m.lun()) + " of " + m.host() + " is " + key);
    }
    if (other.volume() == m.volume()) {
      return fail(grpc::StatusCode::FAILED_PRECONDITION, "mapping.volume",
                  m.volume() + " is already mapped to " + m.host() + " (" + key + ", LUN " + std::to_string(other.lun()) + ")");
    }
  }
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to serve the volume");
  *out = m;
  out->set_name(name);
  controller::config_batch b;
  b.put(name, out->SerializeAsString());
  if (auto done = commit(config_, b); !done.ok()) return done;
  // The record is read here, on the gRPC thread: the loop gets what it needs.
  auto mapped = on_loop(*array_, [this, volume = volume->name(), serial = volume->serial(),
                                 block_size_bytes = volume->block_size_bytes(), host = m.host(), lun = m.lun()](auto done) {
    done(array_->map_volume(volume, serial, block_size_bytes, host, lun));
  });
  if (!mapped) {
    controller::config_batch undo;  // a failed request changes nothing
    undo.erase(name);
    (void)config_.commit(undo);
    return status_of(mapped.error(), "mapping");
  }
  array_->events().record(controller::severity::info, name, m.volume() + " served to " + m.host() + " as LUN " + std::to_string(m.lun()));
  return grpc::Status::OK;
}

grpc::Status array_service::DeleteMapping(grpc::ServerContext*, const v1::DeleteRequest* in, google::protobuf::Empty*) {
  std::lock_guard hold(changes_);
  const std::string& name = in->name();
  auto mapping = name.starts_with("mappings/") ? read<v1::Mapping>(config_, name) : std::nullopt;
  if (!mapping) return fail(grpc::StatusCode::NOT_FOUND, "name", name + " does not exist");
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to unmap the volume from");
  auto unmapped = on_loop(*array_, [this, host = mapping->host(), lun = mapping->lun()](auto done) {
    array_->unmap_volume(host, lun, std::move(done));
  });
  if (!unmapped) return status_of(unmapped.error(), "name");
  controller::config_batch b;
  b.erase(name);
  if (auto done = commit(config_, b); !done.ok()) return done;
  array_->events().record(controller::severity::info, name, "deleted: " + mapping->host() + " no longer sees LUN " + std::to_string(mapping->lun()));
  return grpc::Status::OK;
}

grpc::Status array_service::ListOperations(grpc::ServerContext*, const v1::ListRequest* in, v1::ListOperationsResponse* out) {
  if (array_ != nullptr) array_->operations().drain();  // what was just recorded, listed
  return list(config_, "operations/", *in, out, &v1::ListOperationsResponse::add_operations);
}

grpc::Status array_service::GetOperation(grpc::ServerContext*, const v1::GetRequest* in, v1::Operation* out) {
  if (array_ == nullptr) return get(config_, "operations/", *in, out);
  if (!in->name().starts_with("operations/")) return invalid("name", "\"" + in->name() + "\" is not an operations/NAME resource name");
  auto op = array_->operations().get(in->name());
  if (!op) return fail(grpc::StatusCode::NOT_FOUND, "name", in->name() + " does not exist");
  *out = std::move(*op);
  return grpc::Status::OK;
}

grpc::Status array_service::CancelOperation(grpc::ServerContext*, const v1::GetRequest* in, v1::Operation* out) {
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array runs operations");
  auto op = array_->operations().cancel(in->name());
  if (!op) {
    return op.error().code == make_error_code(errc::not_found) ? fail(grpc::StatusCode::NOT_FOUND, "name", op.error().message)
                                                               : fail(grpc::StatusCode::FAILED_PRECONDITION, "name", op.error().message);
  }
  *out = std::move(*op);
  return grpc::Status::OK;
}

grpc::Status array_service::GetVolumeStatistics(grpc::ServerContext*, const v1::GetRequest* in, v1::VolumeStatistics* out) {
  if (in->name().find("/volumes/") == std::string::npos) return invalid("name", "\"" + in->name() + "\" is not a pools/POOL/volumes/NAME resource name");
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to measure");
  auto measured = on_loop(*array_, [this, name = in->name(), out](auto done) { done(array_->volume_statistics(name, *out)); });
  return measured ? grpc::Status::OK : status_of(measured.error(), "name");
}

grpc::Status array_service::GetPoolStatistics(grpc::ServerContext*, const v1::GetRequest* in, v1::PoolStatistics* out) {
  if (!in->name().starts_with("pools/") || in->name().find('/', 6) != std::string::npos) {
    return invalid("name", "\"" + in->name() + "\" is not a pools/NAME resource name");
  }
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to measure");
  auto measured = on_loop(*array_, [this, name = in->name(), out](auto done) { done(array_->pool_statistics(name, *out)); });
  return measured ? grpc::Status::OK : status_of(measured.error(), "name");
}

grpc::Status array_service::ListHeat(grpc::ServerContext*, const v1::ListHeatRequest* in, v1::ListHeatResponse* out) {
  if (in->volume().find("/volumes/") == std::string::npos) return invalid("volume", "\"" + in->volume() + "\" is not a pools/POOL/volumes/NAME resource name");
  if (in->page_size() < 0 || in->page_size() > max_page_size) {
    return invalid("page_size", std::to_string(in->page_size()) + " is outside 0 to " + std::to_string(max_page_size));
  }
  // The token is where the page starts: an extent index, or a rank when
  // hottest first ("rank:N"), so a token of one order is not taken by the other.
  const std::string prefix = in->hottest_first() ? "rank:" : "extent:";
  std::uint64_t first = 0;
  if (!in->page_token().empty()) {
    std::size_t used = 0;
    try {
      if (!in->page_token().starts_with(prefix)) throw std::invalid_argument("order");
      first = std::stoull(in->page_token().substr(prefix.size()), &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || prefix.size() + used != in->page_token().size()) {
      return invalid("page_token", "\"" + in->page_token() + "\" is not a token of this list");
    }
  }
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to read heat from");
  const std::size_t page = in->page_size() == 0 ? default_page_size : static_cast<std::size_t>(in->page_size());
  auto read_heat = on_loop(*array_, [this, in, first, page, out](auto done) {
    done(array_->heat(in->volume(), in->hottest_first(), first, page, *out));
  });
  if (!read_heat) return status_of(read_heat.error(), "volume");
  if (first + page < out->total_extents()) out->set_next_page_token(prefix + std::to_string(first + page));
  return grpc::Status::OK;
}

grpc::Status array_service::ListEvents(grpc::ServerContext*, const v1::ListRequest* in, v1::ListEventsResponse* out) {
  if (in->page_size() < 0 || in->page_size() > max_page_size) {
    return invalid("page_size", std::to_string(in->page_size()) + " is outside 0 to " + std::to_string(max_page_size));
  }
  if (!in->page_token().empty() && !in->page_token().starts_with("events/")) {
    return invalid("page_token", "\"" + in->page_token() + "\" is not a token of this list");
  }
  if (array_ != nullptr) array_->events().drain();
  const std::size_t page = in->page_size() == 0 ? default_page_size : static_cast<std::size_t>(in->page_size());
  const auto records = config_.list_backward("events/", in->page_token(), page + 1);
  for (std::size_t i = 0; i < records.size() && i < page; ++i) {
    if (!out->add_events()->ParseFromString(records[i].second)) {
      return fail(grpc::StatusCode::DATA_LOSS, "", "the record " + records[i].first + " is corrupt");
    }
  }
  if (records.size() > page) out->set_next_page_token(records[page - 1].first);
  return grpc::Status::OK;
}

grpc::Status array_service::GetVersion(grpc::ServerContext*, const v1::GetVersionRequest*, v1::GetVersionResponse* out) {
  out->set_version(version);
  out->set_controller("A");
  return grpc::Status::OK;
}

v1::Controller array_service::self() const {
  v1::Controller c;
  c.set_name("controllers/a");
  c.set_state(v1::CONTROLLER_ACTIVE);
  c.set_version(version);
  for (const auto& [key, bytes] : config_.list("pools/")) {
    if (key.find('/', 6) == std::string::npos) c.add_pools(key);
  }
  c.set_start_time_unix_ms(started_ms_);
  if (array_ != nullptr) {
    const auto at = array_->iscsi_endpoint();  // fixed once the array serves
    c.set_iscsi_portal(at.address().to_string() + ":" + std::to_string(at.port()));
    c.set_target_name(array_->target_name());
    c.set_state_dir(array_->state_dir().string());
  }
  return c;
}

grpc::Status array_service::ListControllers(grpc::ServerContext*, const v1::ListRequest* in, v1::ListControllersResponse* out) {
  if (in->page_size() < 0 || in->page_size() > max_page_size) {
    return invalid("page_size", std::to_string(in->page_size()) + " is outside 0 to " + std::to_string(max_page_size));
  }
  if (!in->page_token().empty()) return invalid("page_token", "\"" + in->page_token() + "\" is not a token of this list");
  *out->add_controllers() = self();  // one controller: one page
  return grpc::Status::OK;
}

grpc::Status array_service::GetController(grpc::ServerContext*, const v1::GetRequest* in, v1::Controller* out) {
  if (in->name() != "controllers/a") {
    if (!in->name().starts_with("controllers/")) return invalid("name", "\"" + in->name() + "\" is not a controllers/NAME resource name");
    return fail(grpc::StatusCode::NOT_FOUND, "name", in->name() + " does not exist (this array has controllers/a)");
  }
  *out = self();
  return grpc::Status::OK;
}

namespace {

// The output-only fields of disk and group records: what the array sees
// now, filled in on its loop.
template <class Record>
void describe(controller::array* array, Record* record) {
  if (array == nullptr) return;
  (void)on_loop(*array, [array, record](auto done) {
    array->drives().describe(*record);
    done({});
  });
}
template <class Record>
void describe(controller::array* array, google::protobuf::RepeatedPtrField<Record>* records) {
  if (array == nullptr) return;
  (void)on_loop(*array, [array, records](auto done) {
    for (Record& r : *records) array->drives().describe(r);
    done({});
  });
}

}  // namespace

grpc::Status array_service::ListDisks(grpc::ServerContext*, const v1::ListRequest* in, v1::ListDisksResponse* out) {
  auto status = list(config_, "disks/", *in, out, &v1::ListDisksResponse::add_disks);
  if (status.ok()) describe(array_, out->mutable_disks());
  return status;
}
grpc::Status array_service::GetDisk(grpc::ServerContext*, const v1::GetRequest* in, v1::Disk* out) {
  auto status = get(config_, "disks/", *in, out);
  if (status.ok()) describe(array_, out);
  return status;
}
grpc::Status array_service::ListDiskGroups(grpc::ServerContext*, const v1::ListRequest* in, v1::ListDiskGroupsResponse* out) {
  auto status = list(config_, "groups/", *in, out, &v1::ListDiskGroupsResponse::add_groups);
  if (status.ok()) describe(array_, out->mutable_groups());
  return status;
}
grpc::Status array_service::GetDiskGroup(grpc::ServerContext*, const v1::GetRequest* in, v1::DiskGroup* out) {
  auto status = get(config_, "groups/", *in, out);
  if (status.ok()) describe(array_, out);
  return status;
}

grpc::Status array_service::CreateDisk(grpc::ServerContext*, const v1::CreateDiskRequest* in, v1::Disk* out) {
  if (!valid_id(in->disk_id())) return invalid("disk_id", "\"" + in->disk_id() + "\" is not [a-z][a-z0-9-]*, at most 63");
  const v1::Disk& d = in->disk();
  if (d.kind() != v1::HDD && d.kind() != v1::SSD) return invalid("disk.kind", "HDD or SSD");
  constexpr std::uint64_t smallest = 64ull << 20;
  if (d.size_bytes() < smallest || d.size_bytes() % 4096 != 0) {
    return invalid("disk.size_bytes", std::to_string(d.size_bytes()) + " is not a multiple of 4096 of at least 64 MiB");
  }
  std::lock_guard hold(changes_);
  const std::string name = "disks/" + in->disk_id();
  if (config_.get(name)) return fail(grpc::StatusCode::ALREADY_EXISTS, "disk_id", name + " exists");
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to add the disk to");
  auto added = on_loop(*array_, [this, id = in->disk_id(), kind = d.kind() == v1::HDD ? controller::drive_kind::hdd : controller::drive_kind::ssd,
                                 bytes = d.size_bytes(), out](auto done) {
    auto disk = array_->add_disk(id, kind, bytes);
    if (!disk) return done(std::unexpected(disk.error()));
    *out = std::move(*disk);
    done({});
  });
  if (!added) return status_of(added.error(), "disk");
  controller::config_batch b;
  b.put(name, out->SerializeAsString());
  if (auto done = commit(config_, b); !done.ok()) return done;
  array_->events().record(controller::severity::info, name, "added: a simulated " + v1::DiskKind_Name(d.kind()) + " of " +
                                                                std::to_string(d.size_bytes()) + " bytes in slot " + std::to_string(out->slot()));
  describe(array_, out);
  return grpc::Status::OK;
}

grpc::Status array_service::CreateDiskGroup(grpc::ServerContext*, const v1::CreateDiskGroupRequest* in, v1::DiskGroup* out) {
  if (!valid_id(in->group_id())) return invalid("group_id", "\"" + in->group_id() + "\" is not [a-z][a-z0-9-]*, at most 63");
  const v1::DiskGroup& g = in->group();
  const int n = g.members_size();
  switch (g.kind()) {
    case v1::RAID6:
      if (n < 4 || n > 255) return invalid("group.members", "RAID-6 needs 4 to 255 disks, not " + std::to_string(n));
      break;
    case v1::RAID1:
      if (n < 2) return invalid("group.members", "RAID-1 needs 2 or more disks, not " + std::to_string(n));
      break;
    case v1::READ_CACHE:
      if (n != 1) return invalid("group.members", "a read cache is one SSD, not " + std::to_string(n) + " disks");
      break;
    default:
      return invalid("group.kind", "RAID6, RAID1 or READ_CACHE");
  }
  std::lock_guard hold(changes_);
  const std::string name = "groups/" + in->group_id();
  if (config_.get(name)) return fail(grpc::StatusCode::ALREADY_EXISTS, "group_id", name + " exists");
  std::set<std::string> seen;
  for (const std::string& d : g.members()) {
    auto disk = d.starts_with("disks/") ? read<v1::Disk>(config_, d) : std::nullopt;
    if (!disk) return fail(grpc::StatusCode::NOT_FOUND, "group.members", d + " does not exist");
    if (!seen.insert(d).second) return invalid("group.members", d + " is listed twice");
    if (g.kind() != v1::RAID6 && disk->kind() != v1::SSD) {
      return invalid("group.members", d + " is an HDD: " + v1::GroupKind_Name(g.kind()) + " groups are the SSD tier");
    }
  }
  std::optional<v1::Pool> pool;
  if (!in->pool().empty()) {
    pool = is_pool_name(in->pool()) ? read<v1::Pool>(config_, in->pool()) : std::nullopt;
    if (!pool) return fail(grpc::StatusCode::NOT_FOUND, "pool", in->pool() + " does not exist");
    if (g.kind() == v1::READ_CACHE) return fail(grpc::StatusCode::FAILED_PRECONDITION, "pool", "a read cache joins a pool only when the pool is built");
    if (g.kind() == v1::WRITE_LOG) return fail(grpc::StatusCode::FAILED_PRECONDITION, "pool", "a write log joins a pool only when the pool is built");
  }
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to make the group in");
  const std::vector<std::string> members(g.members().begin(), g.members().end());
  auto formed = on_loop(*array_, [this, name, kind = g.kind(), members, out](auto done) {
    array_->form_group(name,
                       kind == v1::RAID6       ? controller::group_kind::raid6
                       : kind == v1::RAID1     ? controller::group_kind::raid1
                       : kind == v1::WRITE_LOG ? controller::group_kind::write_log
                                               : controller::group_kind::read_cache,
                       members, [out, done](std::expected<v1::DiskGroup, error> r) {
                         if (!r) return done(std::unexpected(r.error()));
                         *out = std::move(*r);
                         done({});
                       });
  });
  if (!formed) return status_of(formed.error(), "group.members");
  // The group, and the pool naming it, are recorded before the pool uses
  // it: a crash in between is finished by the next start.
  controller::config_batch b;
  b.put(name, out->SerializeAsString());
  if (pool) {
    pool->add_groups(name);
    b.put(pool->name(), pool->SerializeAsString());
  }
  if (auto done = commit(config_, b); !done.ok()) return done;
  if (pool) {
    auto grown = on_loop(*array_, [this, pool_name = pool->name(), name](auto done) { array_->grow_pool(pool_name, name, std::move(done)); });
    if (!grown) {
      if (grown.error().code == make_error_code(errc::invalid_argument)) {
        // Refused before the pool changed: the pool record goes back; the
        // group stays, a group no pool uses.
        controller::config_batch undo;
        pool->mutable_groups()->RemoveLast();
        undo.put(pool->name(), pool->SerializeAsString());
        (void)config_.commit(undo);
      }
      return status_of(grown.error(), "pool");
    }
  }
  array_->events().record(controller::severity::info, name, v1::GroupKind_Name(g.kind()) + " of " + std::to_string(n) + " disks made" +
                                                                (pool ? ", " + pool->name() + " grown by it" : ""));
  describe(array_, out);
  return grpc::Status::OK;
}

grpc::Status array_service::CreatePool(grpc::ServerContext*, const v1::CreatePoolRequest* in, v1::Pool* out) {
  if (!valid_id(in->pool_id())) return invalid("pool_id", "\"" + in->pool_id() + "\" is not [a-z][a-z0-9-]*, at most 63");
  const v1::Pool& want = in->pool();
  if (want.groups().empty()) return invalid("pool.groups", "a pool needs one or more RAID-6 or RAID-1 groups");
  std::lock_guard hold(changes_);
  const std::string name = "pools/" + in->pool_id();
  if (config_.get(name)) return fail(grpc::StatusCode::ALREADY_EXISTS, "pool_id", name + " exists");
  // Every group a pool has, and which.
  std::map<std::string, std::string> taken;
  for (const auto& [key, bytes] : config_.list("pools/")) {
    v1::Pool other;
    if (key.find('/', 6) != std::string::npos || !other.ParseFromString(bytes)) continue;
    for (const std::string& g : other.groups()) taken[g] = key;
    if (!other.read_cache_group().empty()) taken[other.read_cache_group()] = key;
    if (!other.write_log_group().empty()) taken[other.write_log_group()] = key;
  }
  std::set<std::string> seen;
  for (const std::string& g : want.groups()) {
    auto group = g.starts_with("groups/") ? read<v1::DiskGroup>(config_, g) : std::nullopt;
    if (!group) return fail(grpc::StatusCode::NOT_FOUND, "pool.groups", g + " does not exist");
    if (!seen.insert(g).second) return invalid("pool.groups", g + " is listed twice");
    if (group->kind() == v1::READ_CACHE) return invalid("pool.groups", g + " is a read cache: name it as pool.read_cache_group");
    if (group->kind() == v1::WRITE_LOG) return invalid("pool.groups", g + " is a write log: name it as pool.write_log_group");
    if (taken.contains(g)) return fail(grpc::StatusCode::FAILED_PRECONDITION, "pool.groups", g + " is in " + taken[g]);
  }
  if (const std::string& cache = want.read_cache_group(); !cache.empty()) {
    auto group = cache.starts_with("groups/") ? read<v1::DiskGroup>(config_, cache) : std::nullopt;
    if (!group) return fail(grpc::StatusCode::NOT_FOUND, "pool.read_cache_group", cache + " does not exist");
    if (group->kind() != v1::READ_CACHE) return invalid("pool.read_cache_group", cache + " is " + v1::GroupKind_Name(group->kind()) + ", not READ_CACHE");
    if (taken.contains(cache)) return fail(grpc::StatusCode::FAILED_PRECONDITION, "pool.read_cache_group", cache + " is in " + taken[cache]);
  }
  if (const std::string& log = want.write_log_group(); !log.empty()) {
    // The write log's replay runs at start-up, where the loop is the
    // array's alone; a pool made through the API writes through.
    return fail(grpc::StatusCode::UNIMPLEMENTED, "pool.write_log_group",
                "a write log is set up with the pool in the configuration file's build sections (write_log); "
                "pools made through the API write through");
  }
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to make the pool in");
  *out = want;
  out->set_name(name);
  // Recorded first: a crash before it is open opens it at the next start.
  controller::config_batch b;
  b.put(name, out->SerializeAsString());
  if (auto done = commit(config_, b); !done.ok()) return done;
  if (auto opened = array_->add_pool(*out); !opened) {
    controller::config_batch undo;  // a failed request changes nothing
    undo.erase(name);
    (void)config_.commit(undo);
    return status_of(opened.error(), "pool");
  }
  array_->events().record(controller::severity::info, name, "created over " + std::to_string(want.groups_size()) + " group(s)");
  return grpc::Status::OK;
}

grpc::Status array_service::UpdateDisk(grpc::ServerContext*, const v1::UpdateDiskRequest* in, v1::Disk* out) {
  const auto paths = paths_of(in->update_mask(), {"spare"});
  if (!paths) return paths.error();
  const std::string& name = in->disk().name();
  std::lock_guard hold(changes_);
  auto disk = name.starts_with("disks/") ? read<v1::Disk>(config_, name) : std::nullopt;
  if (!disk) return fail(grpc::StatusCode::NOT_FOUND, "disk.name", name + " does not exist");
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to change the disk in");
  const bool spare = in->disk().spare();
  const bool was = disk->spare();
  auto changed = on_loop(*array_, [this, name, spare](auto done) { done(array_->drives().set_spare(name, spare)); });
  if (!changed) return status_of(changed.error(), "disk.spare");
  disk->set_spare(spare);
  controller::config_batch b;
  b.put(name, disk->SerializeAsString());
  if (auto done = commit(config_, b); !done.ok()) {
    // Back to what it was (not to the opposite of what was asked: asking
    // a spare to be a spare changes nothing to undo).
    if (was != spare) (void)on_loop(*array_, [this, name, was](auto undo) { undo(array_->drives().set_spare(name, was)); });
    return done;
  }
  *out = *disk;
  describe(array_, out);
  return grpc::Status::OK;
}

grpc::Status array_service::FailDisk(grpc::ServerContext*, const v1::GetRequest* in, v1::Disk* out) {
  std::lock_guard hold(changes_);
  if (auto status = get(config_, "disks/", *in, out); !status.ok()) return status;
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to fail the disk in");
  // Described in the same turn of the loop: a hot spare may take its place right after.
  auto failed = on_loop(*array_, [this, out](auto done) {
    auto r = array_->drives().fail_disk(out->name());
    if (r) array_->drives().describe(*out);
    done(std::move(r));
  });
  if (!failed) return status_of(failed.error(), "name");
  return grpc::Status::OK;
}

grpc::Status array_service::ReplaceDisk(grpc::ServerContext*, const v1::ReplaceDiskRequest* in, v1::Operation* out) {
  std::lock_guard hold(changes_);
  if (!in->name().starts_with("disks/") || !config_.get(in->name())) return fail(grpc::StatusCode::NOT_FOUND, "name", in->name() + " does not exist");
  if (!in->replacement().starts_with("disks/") || !config_.get(in->replacement())) {
    return fail(grpc::StatusCode::NOT_FOUND, "replacement", in->replacement() + " does not exist");
  }
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to replace the disk in");
  auto started = on_loop(*array_, [this, in, out](auto done) {
    auto op = array_->drives().replace_disk(in->name(), in->replacement());
    if (!op) return done(std::unexpected(op.error()));
    *out = std::move(*op);
    done({});
  });
  // The bay's messages start with the disk they are about.
  if (!started) return status_of(started.error(), started.error().message.starts_with(in->replacement()) ? "replacement" : "name");
  return grpc::Status::OK;
}

grpc::Status array_service::EraseDisk(grpc::ServerContext*, const v1::GetRequest* in, v1::Disk* out) {
  std::lock_guard hold(changes_);
  if (auto status = get(config_, "disks/", *in, out); !status.ok()) return status;
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to erase the disk in");
  auto erased = on_loop(*array_, [this, name = in->name()](auto done) { array_->drives().erase_disk(name, std::move(done)); });
  if (!erased) return status_of(erased.error(), "name");
  describe(array_, out);
  return grpc::Status::OK;
}

grpc::Status array_service::ScrubDiskGroup(grpc::ServerContext*, const v1::GetRequest* in, v1::Operation* out) {
  std::lock_guard hold(changes_);
  if (!in->name().starts_with("groups/") || !config_.get(in->name())) return fail(grpc::StatusCode::NOT_FOUND, "name", in->name() + " does not exist");
  if (array_ == nullptr) return fail(grpc::StatusCode::UNAVAILABLE, "", "no array to scrub");
  auto started = on_loop(*array_, [this, in, out](auto done) {
    auto op = array_->drives().scrub(in->name());
    if (!op) return done(std::unexpected(op.error()));
    *out = std::move(*op);
    done({});
  });
  if (!started) return status_of(started.error(), "name");
  return grpc::Status::OK;
}

grpc::Status array_service::ListPools(grpc::ServerContext*, const v1::ListRequest* in, v1::ListPoolsResponse* out) {
  return list(config_, "pools/", *in, out, &v1::ListPoolsResponse::add_pools);
}
grpc::Status array_service::GetPool(grpc::ServerContext*, const v1::GetRequest* in, v1::Pool* out) {
  return get(config_, "pools/", *in, out);
}
grpc::Status array_service::ListVolumes(grpc::ServerContext*, const v1::ListRequest* in, v1::ListVolumesResponse* out) {
  if (in->parent().empty()) return invalid("parent", "the pool whose volumes to list, e.g. pools/p1");
  if (!is_pool_name(in->parent()) || !config_.get(in->parent())) {
    return fail(grpc::StatusCode::NOT_FOUND, "parent", in->parent() + " is not a pool");
  }
  return list(config_, in->parent() + "/volumes/", *in, out, &v1::ListVolumesResponse::add_volumes);
}
grpc::Status array_service::GetVolume(grpc::ServerContext*, const v1::GetRequest* in, v1::Volume* out) {
  if (in->name().find("/volumes/") == std::string::npos) return invalid("name", "\"" + in->name() + "\" is not a pools/POOL/volumes/NAME resource name");
  return get(config_, "pools/", *in, out);
}
grpc::Status array_service::ListHosts(grpc::ServerContext*, const v1::ListRequest* in, v1::ListHostsResponse* out) {
  auto status = list(config_, "hosts/", *in, out, &v1::ListHostsResponse::add_hosts);
  for (v1::Host& h : *out->mutable_hosts()) redact(h);
  return status;
}
grpc::Status array_service::GetHost(grpc::ServerContext*, const v1::GetRequest* in, v1::Host* out) {
  auto status = get(config_, "hosts/", *in, out);
  redact(*out);
  return status;
}
grpc::Status array_service::ListMappings(grpc::ServerContext*, const v1::ListRequest* in, v1::ListMappingsResponse* out) {
  return list(config_, "mappings/", *in, out, &v1::ListMappingsResponse::add_mappings);
}
grpc::Status array_service::GetMapping(grpc::ServerContext*, const v1::GetRequest* in, v1::Mapping* out) {
  return get(config_, "mappings/", *in, out);
}

}  // namespace strata::mgmt
