#include "controller/shelf.h"

#include <boost/asio/post.hpp>
#include <cstdio>

#include "raid/device/fault_device.h"
#include "raid/device/file_device.h"
#include "raid/device/hdd_model.h"
#include "raid/device/io_scheduler.h"
#include "raid/device/ssd_model.h"

namespace strata::controller {

namespace {
constexpr std::uint32_t drive_block_bytes = 4096;
constexpr std::uint64_t read_cache_bytes = 32ull << 30;
// The write log's mirrored pair: a quarter each for up to four RAID-6 groups.
constexpr std::uint64_t write_log_bytes = 8ull << 30;

std::string slot(const char* kind, int i) {
  char name[16];
  std::snprintf(name, sizeof name, "%s-%02d", kind, i);
  return name;
}

std::uint64_t whole_blocks(std::uint64_t bytes) {
  return bytes / drive_block_bytes * drive_block_bytes;
}
}  // namespace

std::span<const timing_model_info> timing_models() {
  static const timing_model_info models[] = {
      {"nl_sas_7k2", drive_kind::hdd, "model NL-SAS 7.2k",
       whole_blocks(device::hdd_profile::nl_sas_7k2().capacity_bytes)},
      {"sas_10k", drive_kind::hdd, "model SAS 10k",
       whole_blocks(device::hdd_profile::sas_10k().capacity_bytes)},
      {"sas_12g", drive_kind::ssd, "model SAS SSD 12G",
       whole_blocks(device::ssd_profile::sas_12g().capacity_bytes)},
  };
  return models;
}

const timing_model_info* find_timing_model(std::string_view name) {
  for (const timing_model_info& m : timing_models()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

const timing_model_info& default_timing_model(drive_kind kind) {
  return *find_timing_model(kind == drive_kind::hdd ? "nl_sas_7k2" : "sas_12g");
}

std::vector<drive_spec> default_shelf() {
  std::vector<drive_spec> drives;
  const timing_model_info& hdd = default_timing_model(drive_kind::hdd);
  const timing_model_info& ssd = default_timing_model(drive_kind::ssd);
  for (int i = 0; i < 20; ++i)
    drives.push_back(
        {slot("hdd", i), drive_kind::hdd, hdd.nominal_bytes, {}, std::string(hdd.name)});
  for (int i = 0; i < 2; ++i)
    drives.push_back(
        {slot("ssd", i), drive_kind::ssd, ssd.nominal_bytes, {}, std::string(ssd.name)});
  drives.push_back({slot("ssd", 2), drive_kind::ssd, read_cache_bytes, {}, std::string(ssd.name)});
  for (int i = 3; i < 5; ++i)
    drives.push_back({slot("ssd", i), drive_kind::ssd, write_log_bytes, {}, std::string(ssd.name)});
  return drives;
}

std::vector<drive_spec> dual_shelf() {
  std::vector<drive_spec> drives = default_shelf();
  const timing_model_info& ssd = default_timing_model(drive_kind::ssd);
  for (int i = 5; i < 7; ++i)
    drives.push_back(
        {slot("ssd", i), drive_kind::ssd, ssd.nominal_bytes, {}, std::string(ssd.name)});
  drives.push_back({slot("ssd", 7), drive_kind::ssd, read_cache_bytes, {}, std::string(ssd.name)});
  for (int i = 8; i < 10; ++i)
    drives.push_back({slot("ssd", i), drive_kind::ssd, write_log_bytes, {}, std::string(ssd.name)});
  return drives;
}

std::expected<std::unique_ptr<shelf>, error> shelf::open(device::io_ring& ring,
                                                         device::clock& clock,
                                                         const std::filesystem::path& directory,
                                                         const std::vector<drive_spec>& drives,
                                                         const shelf_options& options) {
  std::unique_ptr<shelf> s(new shelf(ring, clock, directory, options));
  for (const drive_spec& d : drives) {
    if (auto added = s->add(d); !added) return std::unexpected(added.error());
  }
  return s;
}

std::expected<std::size_t, error> shelf::add(const drive_spec& spec) {
  drive_spec d = spec;
  const bool simulated = d.path.empty();
  auto refuse = [&](errc code, const std::string& why) {
    return std::unexpected(make_error(code, "shelf: drive " + d.name + ": " + why));
  };
  if (simulated && d.timing_model.empty()) d.timing_model = default_timing_model(d.kind).name;
  const timing_model_info* model = nullptr;
  if (!d.timing_model.empty()) {
    model = find_timing_model(d.timing_model);
    if (model == nullptr)
      return refuse(errc::invalid_argument, "no timing model \"" + d.timing_model + "\"");
    if (model->kind != d.kind) {
      return refuse(errc::invalid_argument,
                    "the timing model " + d.timing_model + " is of " +
                        (model->kind == drive_kind::hdd ? "an HDD" : "an SSD") + ", the drive is " +
                        (d.kind == drive_kind::hdd ? "an HDD" : "an SSD"));
    }
  }
  if ((simulated && d.bytes == 0) || d.bytes % drive_block_bytes != 0) {
    return refuse(errc::invalid_argument,
                  std::to_string(d.bytes) + " bytes is not a whole number of 4 KiB blocks");
  }
  device::file_options options;
  options.logical_block_size_bytes = drive_block_bytes;
  options.block_count = d.bytes / drive_block_bytes;  // 0 (a drive at a path): all of it
  if (simulated) {
    std::error_code ec;
    std::filesystem::create_directories(directory_, ec);
    if (ec)
      return std::unexpected(make_error(
          errc::io_error, "shelf: cannot create " + directory_.string() + ": " + ec.message()));
    d.path = directory_ / (d.name + ".img");
    options.create = true;  // sparse, if missing (the first start); reopened as it is after
  }
  auto file = device::file_device::open(ring_, d.path.string(), options);
  if (!file)
    return std::unexpected(
        error{file.error().code, "shelf: drive " + d.name + ": " + file.error().message});
  // Its persistent reservations: a simulated drive's beside its file; a
  // block device's its driver's; none for a regular file at a path.
  std::unique_ptr<device::reservations> pr;
  if (simulated) {
    auto modelled = device::file_reservations::open(directory_ / (d.name + ".pr"));
    if (!modelled)
      return std::unexpected(
          error{modelled.error().code, "shelf: drive " + d.name + ": " + modelled.error().message});
    pr = std::move(*modelled);
  } else if (auto real = device::block_reservations(d.path.string())) {
    pr = std::move(*real);
  }
  const device::block_geometry& g = (*file)->geometry();
  d.bytes = g.block_count * g.logical_block_size_bytes;
  // The fence where a request is handed to the kernel: whatever waited in
  // this process's queues above it (the scheduler's held background
  // writes, the model's queue, the volatile cache) is asked again here, so
  // a controller frozen with I/O queued and thawed after its partner took
  // the pool over writes none of it (gate_device.h; issue 48, finding 2).
  auto dispatch = std::make_unique<device::gate_device>(
      **file, [this] { return !fence_allowed_ || fence_allowed_(); },
      [this] {
        if (fence_on_hold_) fence_on_hold_();
      });
  std::unique_ptr<device::block_device> front;
  if (model != nullptr && model->kind == drive_kind::hdd) {
    front = std::make_unique<device::hdd_model>(*dispatch, clock_,
                                                model->name == "sas_10k"
                                                    ? device::hdd_profile::sas_10k()
                                                    : device::hdd_profile::nl_sas_7k2());
  } else if (model != nullptr) {
    front = std::make_unique<device::ssd_model>(*dispatch, clock_, device::ssd_profile::sas_12g());
  }
  device::block_device& beneath = front ? *front : *dispatch;
  std::unique_ptr<device::block_device> cache;
  if (options_.volatile_write_caches) {
    // The seed only drives faults this mode never injects (delays, reordering, tears).
    cache = std::make_unique<device::fault_device>(
        beneath, clock_,
        device::fault_options{.seed = drives_.size() + 1, .volatile_write_cache = true});
  }
  // On top, the scheduler that puts the array's deferrable work (scrub,
  // moves, cache fills) behind the hosts' I/O: one background request beside host I/O on an HDD
  // (its one actuator), four on an SSD (its channels), more once the drive is quiet.
  device::block_device& below = cache ? *cache : beneath;
  auto scheduler = std::make_unique<device::io_scheduler>(
      below, clock_,
      d.kind == drive_kind::hdd
          ? device::io_scheduler_options{.busy_background_in_flight = 1,
                                         .idle_background_in_flight = 8,
                                         .idle_wait = std::chrono::milliseconds(10)}
          : device::io_scheduler_options{.busy_background_in_flight = 4,
                                         .idle_background_in_flight = 32,
                                         .idle_wait = std::chrono::milliseconds(1)});
  auto gate = std::make_unique<device::gate_device>(
      *scheduler, [this] { return !fence_allowed_ || fence_allowed_(); },
      [this] {
        if (fence_on_hold_) fence_on_hold_();
      });
  auto raw = std::make_unique<device::fence_exempt_device>(*scheduler);
  drives_.push_back(gate.get());
  raw_.push_back(raw.get());
  raws_.push_back(std::move(raw));
  gates_.push_back(std::move(gate));
  specs_.push_back(std::move(d));
  file_devices_.push_back(file->get());
  files_.push_back(std::move(*file));
  reservations_.push_back(std::move(pr));
  dispatch_gates_.push_back(std::move(dispatch));
  models_.push_back(std::move(front));
  caches_.push_back(std::move(cache));
  schedulers_.push_back(std::move(scheduler));
  const std::size_t i = drives_.size() - 1;
  // A drive added while the array runs takes part in the fence at once.
  if (auto& r = reservations_[i]; key_ != 0 && r && r->register_key(key_)) r.reset();
  fence_file(i);
  return i;
}

void shelf::fence_file(std::size_t i) {
  file_devices_[i]->fence({
      .allowed = [this] { return !fence_allowed_ || fence_allowed_(); },
      .model = key_ == 0 ? nullptr
                         : dynamic_cast<const device::file_reservations*>(reservations_[i].get()),
      .key = key_,
      .refused = [gate = dispatch_gates_[i].get()](device::request& r) { gate->refused(r); },
  });
}

std::string shelf::register_key(std::uint64_t key) {
  key_ = key;
  std::size_t fenced = 0;
  std::string without;
  for (std::size_t i = 0; i < size(); ++i) {
    auto& r = reservations_[i];
    std::error_code e = r ? r->register_key(key) : make_error_code(errc::not_supported);
    // Held by the partner already: under Write Exclusive, Registrants
    // Only, every registrant writes.
    if (!e) e = r->reserve(key);
    if (e == errc::reservation_conflict) e = {};
    if (!e) {
      ++fenced;
    } else {
      without += (without.empty() ? "" : ", ") + specs_[i].name + " (" + e.message() + ")";
      r.reset();
    }
    fence_file(i);
  }
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));
  return "persistent reservations: key " + std::string(hex) + " registered on " +
         std::to_string(fenced) + " of " + std::to_string(size()) + " drives" +
         (without.empty() ? std::string() : "; fenced by the lease alone: " + without);
}

void shelf::run(std::vector<std::size_t> drives,
                std::function<std::error_code(device::reservations&)> op,
                std::function<void(std::error_code)> done) {
  std::vector<device::reservations*> targets;
  bool blocks = false;
  for (std::size_t i : drives) {
    if (!reservations_[i]) continue;
    targets.push_back(reservations_[i].get());
    blocks |= dynamic_cast<device::file_reservations*>(targets.back()) == nullptr;
  }
  auto job = [targets = std::move(targets), op = std::move(op)] {
    std::error_code first;
    for (device::reservations* r : targets) {
      if (std::error_code e = op(*r); e && !first) first = e;
    }
    return first;
  };
  auto finish = [this, done = std::move(done),
                 alive = std::weak_ptr<int>(alive_)](std::error_code e) {
    boost::asio::post(ring_.context(), [done, e, alive] {
      if (!alive.expired()) done(e);
    });
  };
  if (!blocks) return finish(job());
  // The objects live until the destructor, which joins this thread first.
  jobs_.emplace_back([job = std::move(job), finish = std::move(finish)] { finish(job()); });
}

void shelf::preempt(std::vector<std::size_t> drives, std::uint64_t victim,
                    std::function<void(std::error_code)> done) {
  run(
      std::move(drives),
      [key = key_, victim](device::reservations& r) {
        std::error_code e = r.register_key(key);
        return e ? e : r.preempt(key, victim);
      },
      std::move(done));
}

void shelf::register_again(std::function<void(std::error_code)> done) {
  std::vector<std::size_t> all(size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  run(
      std::move(all), [key = key_](device::reservations& r) { return r.register_key(key); },
      std::move(done));
}

void shelf::fence(std::function<bool()> allowed, std::function<void()> on_hold) {
  fence_allowed_ = std::move(allowed);
  fence_on_hold_ = std::move(on_hold);
}

void shelf::open_gates() {
  for (std::size_t i = 0; i < gates_.size(); ++i) {
    if (lost_.contains(i)) continue;
    dispatch_gates_[i]->open();  // what waited below first, in the order it came
    gates_[i]->open();
  }
}

void shelf::hold_for_good(std::size_t i) {
  lost_.insert(i);
  gates_[i]->hold();
  dispatch_gates_[i]->hold();
}

void shelf::shut_lost(std::error_code why) {
  for (std::size_t i : lost_) {
    gates_[i]->shut(why);
    dispatch_gates_[i]->shut(why);
  }
}

std::size_t shelf::held_below(std::size_t i) const noexcept {
  return dispatch_gates_[i]->held();
}

shelf::~shelf() {
  for (std::thread& t : jobs_) t.join();
  drives_.clear();
  raw_.clear();
  raws_.clear();
  gates_.clear();  // each layer before the one it sits on
  schedulers_.clear();
  caches_.clear();
  models_.clear();
  dispatch_gates_.clear();
  files_.clear();
}

}  // namespace strata::controller
