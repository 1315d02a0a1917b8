#include "raid/device/fault_device.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cassert>
#include <cstring>

namespace strata::device {
namespace {

// Longest write the destage issues, in blocks.
constexpr std::uint64_t max_destage_run_blocks = 256;

// The address of block `index` of a request's scatter-gather list. Segments
// are whole blocks (validate() checks), so a block never straddles two.
std::byte* block_in(std::span<const iovec> buffers, std::uint64_t index, std::uint32_t block_size) {
  std::uint64_t offset_bytes = index * block_size;
  for (const iovec& segment : buffers) {
    if (offset_bytes < segment.iov_len)
      return static_cast<std::byte*>(segment.iov_base) + offset_bytes;
    offset_bytes -= segment.iov_len;
  }
  return nullptr;
}

}  // namespace

fault_device::fault_device(block_device& backing, clock& c, const fault_options& options)
    : forwarding_device(backing),
      clock_(c),
      options_(options),
      random_(options.seed),
      delayed_(c, backing.executor(), [this](slot& s) { deliver(s); }),
      reordered_(c, backing.executor(), [this](slot& s) { release_reordered(s); }),
      answers_(backing.executor()) {}

fault_device::~fault_device() {
  assert(backing_in_flight_ == 0 && "fault_device destroyed with I/O in flight");
}

allocation_run fault_device::allocation_at(std::uint64_t lba,
                                           std::uint64_t max_blocks) const noexcept {
  if (options_.volatile_write_cache) return {allocation::mapped, max_blocks};
  return forwarding_device::allocation_at(lba, max_blocks);
}

void fault_device::submit(request& req) noexcept {
  if (auto ec = validate(geometry(), req)) {
    answers_.complete_later(req, ec);
    return;
  }
  if (failed_ || !powered()) {
    ++counters_.requests_failed_device_gone;
    answers_.complete_later(req, errc::device_failed);
    return;
  }
  if (hung_) {
    held_.push_back(req);
    return;
  }
  if (req.operation != op::flush && reorder_probability_ > 0 &&
      std::bernoulli_distribution(reorder_probability_)(random_)) {
    ++counters_.requests_reordered;
    slot& s = slots_.acquire();
    s.outer = &req;
    s.power_cycle = power_cuts_;
    const auto hold = std::uniform_int_distribution<duration::rep>(
        1, std::max<duration::rep>(1, reorder_hold_max_.count()))(random_);
    reordered_.push(clock_.now() + duration(hold), s);
    return;
  }
  if (shuffle_ && req.operation != op::flush) {
    if (shuffling_.empty()) boost::asio::post(executor(), [this] { start_shuffled(); });
    shuffling_.push_back(&req);
    return;
  }
  start(req);
}

void fault_device::release_reordered(slot& s) {
  request& req = *s.outer;
  const bool power_lost = s.power_cycle != power_cuts_;
  slots_.release(s);
  if (failed_ || !powered() || power_lost) {
    // Never reached the medium: it fails with the device (a request held
    // across a power cut must not land after the power comes back).
    ++counters_.requests_failed_device_gone;
    complete(req, errc::device_failed);
    return;
  }
  if (hung_) {
    held_.push_back(req);
    return;
  }
  start(req);
}

void fault_device::start_shuffled() {
  std::vector<request*> batch;
  batch.swap(shuffling_);
  std::shuffle(batch.begin(), batch.end(), random_);
  for (request* req : batch) {
    if (failed_ || !powered()) {
      ++counters_.requests_failed_device_gone;
      answers_.complete_later(*req, errc::device_failed);
    } else if (hung_) {
      held_.push_back(*req);
    } else {
      start(*req);
    }
  }
}

void fault_device::start(request& req) {
  switch (req.operation) {
    case op::read:
      if (latent_errors_.intersects(req.lba, req.block_count)) {
        ++counters_.read_errors_injected;
        finish(req, errc::media_error);
        return;
      }
      forward(req);
      return;
    case op::write:
      if (failing_writes_.intersects(req.lba, req.block_count)) {
        ++counters_.write_errors_injected;
        finish(req, errc::media_error);
        return;
      }
      if (full_ && !allocated_->covers(req.lba, req.block_count)) {
        ++counters_.writes_refused_full;
        finish(req, errc::no_space);
        return;
      }
      [[fallthrough]];
    case op::discard: {
      const std::uint64_t landing = landing_lba(req);
      if (req.operation == op::write) {
        allocated_->insert(landing, req.block_count);
      } else {
        allocated_->erase(landing, req.block_count);
      }
      corrupted_.erase(landing, req.block_count);  // rewritten: whole again
      if (options_.volatile_write_cache && req.fence_exempt) {
        // The controller's own records (its drive heartbeat) go past the
        // cache, written through: its flush must not wait for the cache's
        // other blocks, which a fence below may hold (gate_device.h).
        for (std::uint64_t i = 0; i < req.block_count; ++i) dirty_.erase(landing + i);
      } else if (options_.volatile_write_cache) {
        write_to_cache(req, landing);
        latent_errors_.erase(landing, req.block_count);
        finish(req, {});
        return;
      }
      forward(req, landing);
      return;
    }
    case op::flush:
      if (!options_.volatile_write_cache || req.fence_exempt) {  // exempt: its writes went through
        forward(req);
      } else if (destaging_) {
        flushes_waiting_.push_back(req);  // needs writes the running destage did not take
      } else {
        destaging_ = std::make_unique<destage>();
        destaging_->flushes.push_back(req);
        start_destage();
      }
      return;
  }
}

std::uint64_t fault_device::landing_lba(const request& req) {
  if (req.operation != op::write || misdirect_offset_blocks_ == 0) return req.lba;
  const std::int64_t target = static_cast<std::int64_t>(req.lba) + misdirect_offset_blocks_;
  misdirect_offset_blocks_ = 0;  // one write
  if (target < 0 || static_cast<std::uint64_t>(target) + req.block_count > geometry().block_count)
    return req.lba;
  ++counters_.writes_misdirected;
  return static_cast<std::uint64_t>(target);
}

void fault_device::forward(request& req, std::optional<std::uint64_t> lba) {
  slot& s = slots_.acquire();
  s.owner = this;
  s.outer = &req;
  copy_io(req, s.inner);
  if (lba) s.inner.lba = *lba;
  s.inner.context = &s;
  s.inner.on_complete = &fault_device::on_forwarded;
  if (req.operation == op::read && options_.volatile_write_cache) ++cache_reads_in_flight_;
  ++backing_in_flight_;
  backing().submit(s.inner);
}

void fault_device::on_forwarded(request& inner) noexcept {
  slot& s = *static_cast<slot*>(inner.context);
  fault_device& self = *s.owner;
  request& outer = *s.outer;
  std::error_code result = inner.result;
  const std::uint64_t landed = inner.lba;  // where a write went (misdirect_next_write)
  self.slots_.release(s);
  --self.backing_in_flight_;

  if (self.failed_ || !self.powered()) {
    ++self.counters_.requests_failed_device_gone;
    result = errc::device_failed;
  } else if (!result && outer.operation == op::read) {
    if (self.options_.volatile_write_cache) self.overlay_cache(outer);
    self.rot(outer);
  } else if (!result && (outer.operation == op::write || outer.operation == op::discard)) {
    self.latent_errors_.erase(landed, outer.block_count);  // rewritten: readable again
  }
  if (outer.operation == op::read && self.options_.volatile_write_cache &&
      --self.cache_reads_in_flight_ == 0 && !self.written_out_.empty()) {
    std::vector<block_version> blocks;
    blocks.swap(self.written_out_);
    self.mark_written_out(blocks);
  }
  self.finish(outer, result);
  self.backing_done();
}

void fault_device::finish(request& req, std::error_code result) {
  if (delay_probability_ > 0 && std::bernoulli_distribution(delay_probability_)(random_)) {
    ++counters_.requests_delayed;
    slot& s = slots_.acquire();
    s.outer = &req;
    s.result = result;
    delayed_.push(clock_.now() + delay_, s);
    return;
  }
  answers_.complete_later(req, result);
}

void fault_device::deliver(slot& s) {
  request& req = *s.outer;
  std::error_code result = s.result;
  slots_.release(s);
  if (failed_ || !powered()) {
    // Still in flight as far as the caller knows, so it fails with the device.
    ++counters_.requests_failed_device_gone;
    result = errc::device_failed;
  }
  complete(req, result);
}

void fault_device::rot(const request& req) {
  if (corrupted_.block_count() == 0 || !corrupted_.intersects(req.lba, req.block_count)) return;
  const std::uint32_t block_size = geometry().logical_block_size_bytes;
  for (std::uint64_t i = 0; i < req.block_count; ++i) {
    if (!corrupted_.covers(req.lba + i, 1)) continue;
    ++counters_.corrupt_blocks_read;
    std::byte* b = block_in(req.buffers, i, block_size);
    b[block_size / 2] ^= std::byte{0x5a};  // a few bits flipped mid-block, no error
  }
}

void fault_device::corrupt(std::uint64_t lba, std::uint64_t block_count) {
  corrupted_.insert(lba, block_count);
}

void fault_device::write_to_cache(request& req, std::uint64_t lba) {
  const std::uint32_t block_size = geometry().logical_block_size_bytes;
  for (std::uint64_t i = 0; i < req.block_count; ++i) {
    cached_block& block = dirty_[lba + i];
    if (block.data.size() == 0) block.data = aligned_buffer(block_size);
    if (req.operation == op::discard) {
      std::memset(block.data.data(), 0, block_size);
    } else {
      std::memcpy(block.data.data(), block_in(req.buffers, i, block_size), block_size);
    }
    block.version = next_version_++;
  }
}

void fault_device::overlay_cache(const request& req) {
  const std::uint32_t block_size = geometry().logical_block_size_bytes;
  const std::uint64_t end = req.lba + req.block_count;
  for (auto it = dirty_.lower_bound(req.lba); it != dirty_.end() && it->first < end; ++it) {
    std::memcpy(block_in(req.buffers, it->first - req.lba, block_size), it->second.data.data(),
                block_size);
  }
}

void fault_device::mark_written_out(const std::vector<block_version>& blocks) {
  if (cache_reads_in_flight_ > 0) {
    written_out_.insert(written_out_.end(), blocks.begin(), blocks.end());
    return;
  }
  for (const auto& [lba, version] : blocks) {
    auto it = dirty_.find(lba);
    if (it != dirty_.end() && it->second.version == version) dirty_.erase(it);
  }
}

void fault_device::start_destage() {
  destage& d = *destaging_;
  const std::uint32_t block_size = geometry().logical_block_size_bytes;
  // Runs of consecutive dirty blocks, each one write.
  for (auto it = dirty_.begin(); it != dirty_.end();) {
    const std::uint64_t first = it->first;
    std::uint64_t count = 0;
    auto run_end = it;
    while (run_end != dirty_.end() && run_end->first == first + count &&
           count < max_destage_run_blocks) {
      ++count;
      ++run_end;
    }
    auto w = std::make_unique<destage_write>();
    w->owner = this;
    w->data = aligned_buffer(count * block_size);
    for (std::uint64_t i = 0; it != run_end; ++it, ++i) {
      std::memcpy(w->data.data() + i * block_size, it->second.data.data(), block_size);
      w->covered.emplace_back(it->first, it->second.version);
    }
    w->segment = w->data.segment();
    w->req.operation = op::write;
    w->req.lba = first;
    w->req.block_count = count;
    w->req.buffers = {&w->segment, 1};
    w->req.context = w.get();
    w->req.on_complete = &fault_device::on_destage_write;
    d.writes.push_back(std::move(w));
  }
  d.outstanding = d.writes.size();
  backing_in_flight_ += d.writes.size();
  d.backing_flush.operation = op::flush;
  d.backing_flush.context = this;
  d.backing_flush.on_complete = &fault_device::on_destage_flush;
  if (d.writes.empty()) {
    ++backing_in_flight_;
    backing().submit(d.backing_flush);
    return;
  }
  for (auto& w : d.writes) backing().submit(w->req);
}

void fault_device::on_destage_write(request& req) noexcept {
  destage_write& w = *static_cast<destage_write*>(req.context);
  fault_device& self = *w.owner;
  destage& d = *self.destaging_;
  --self.backing_in_flight_;
  if (req.result && !d.error) d.error = req.result;
  // On the backing device now, whatever becomes of the flush: a power cut
  // from here on finds these blocks there.
  if (!req.result) self.mark_written_out(w.covered);
  if (--d.outstanding > 0) return;
  if (d.error || self.failed_ || !self.powered()) {
    self.end_destage();
    return;
  }
  // Ordered after the writes it makes durable: only now do they all exist.
  ++self.backing_in_flight_;
  self.backing().submit(d.backing_flush);
}

void fault_device::on_destage_flush(request& req) noexcept {
  fault_device& self = *static_cast<fault_device*>(req.context);
  --self.backing_in_flight_;
  if (req.result && !self.destaging_->error) self.destaging_->error = req.result;
  self.end_destage();
}

void fault_device::end_destage() {
  std::unique_ptr<destage> d = std::move(destaging_);
  std::error_code result = d->error;
  if (failed_ || !powered()) result = errc::device_failed;
  while (request* flush = d->flushes.pop_front()) finish(*flush, result);
  if (!flushes_waiting_.empty() && powered() && !failed_) {
    destaging_ = std::make_unique<destage>();
    destaging_->flushes = flushes_waiting_.take_all();
    start_destage();
  }
  backing_done();
}

void fault_device::backing_done() {
  if (power_cut_pending_ && backing_in_flight_ == 0) apply_power_cut();
}

void fault_device::fail() {
  failed_ = true;
  fail_waiting();
}

void fault_device::fail_waiting() {
  for (request_list* list : {&held_, &flushes_waiting_}) {
    while (request* req = list->pop_front()) {
      ++counters_.requests_failed_device_gone;
      answers_.complete_later(*req, errc::device_failed);
    }
  }
}

void fault_device::add_latent_error(std::uint64_t lba, std::uint64_t block_count) {
  latent_errors_.insert(lba, block_count);
}

void fault_device::fail_writes(std::uint64_t lba, std::uint64_t block_count) {
  failing_writes_.insert(lba, block_count);
}

void fault_device::clear_write_failures() {
  failing_writes_.clear();
}

void fault_device::set_reorder(duration max_hold, double probability) {
  reorder_hold_max_ = max_hold;
  reorder_probability_ = probability;
}

void fault_device::set_delay(duration extra, double probability) {
  delay_ = extra;
  delay_probability_ = probability;
}

void fault_device::hang() {
  hung_ = true;
}

void fault_device::resume() {
  hung_ = false;
  request_list held = held_.take_all();
  while (request* req = held.pop_front()) start(*req);
}

void fault_device::power_cut(power_loss mode, std::function<void()> settled) {
  power_off_ = true;
  ++power_cuts_;
  power_loss_mode_ = mode;
  on_power_settled_ = std::move(settled);
  fail_waiting();
  power_cut_pending_ = true;
  backing_done();
}

void fault_device::apply_power_cut() {
  power_cut_pending_ = false;
  const std::uint32_t block_size = geometry().logical_block_size_bytes;
  // Each block still only in the cache reaches the medium or does not; a
  // write of several blocks may therefore land in part.
  for (auto& [lba, block] : dirty_) {
    const bool kept =
        power_loss_mode_ == power_loss::tear && std::bernoulli_distribution(0.5)(random_);
    if (!kept) {
      ++counters_.blocks_lost_at_power_cut;
      continue;
    }
    ++counters_.blocks_kept_at_power_cut;
    auto w = std::make_unique<destage_write>();
    w->owner = this;
    w->data = std::move(block.data);
    w->segment = w->data.segment(0, block_size);
    w->req.operation = op::write;
    w->req.lba = lba;
    w->req.block_count = 1;
    w->req.buffers = {&w->segment, 1};
    w->req.context = w.get();
    w->req.on_complete = [](request& r) noexcept {
      fault_device& self = *static_cast<destage_write*>(r.context)->owner;
      if (--self.crash_writes_outstanding_ > 0) return;
      self.crash_writes_.clear();
      auto settled = std::move(self.on_power_settled_);
      if (settled) settled();
    };
    crash_writes_.push_back(std::move(w));
  }
  dirty_.clear();
  crash_writes_outstanding_ = crash_writes_.size();
  if (crash_writes_.empty()) {
    boost::asio::post(executor(), [this] {
      auto settled = std::move(on_power_settled_);
      if (settled) settled();
    });
    return;
  }
  for (auto& w : crash_writes_) backing().submit(w->req);
}

void fault_device::power_on() {
  assert(!power_cut_pending_ && crash_writes_outstanding_ == 0);
  power_off_ = false;
}

}  // namespace strata::device
