#include "controller/metadata_mirror.h"

#include <boost/asio/post.hpp>
#include <cstring>
#include <future>

namespace strata::controller {

namespace {

// Frames carry at most this much of a copy's whole store each.
constexpr std::size_t chunk_bytes = 1 << 20;
// Chunks sent before waiting for the first of them.
constexpr std::size_t chunks_in_flight = 8;

// A metadata_batch frame's flags byte.
constexpr std::uint8_t batch_synced = 1;
// The last batch of a whole copy: the copy is whole once it holds it.
constexpr std::uint8_t batch_completes_copy = 2;

link_bytes frame_for(const std::string& pool, std::optional<std::uint8_t> flags,
                     std::string_view batch) {
  const std::size_t head = 1 + pool.size() + (flags ? 1 : 0);
  link_bytes out(head + batch.size());
  out[0] = static_cast<std::uint8_t>(pool.size());
  std::memcpy(out.data() + 1, pool.data(), pool.size());
  if (flags) out[head - 1] = *flags;
  if (!batch.empty()) std::memcpy(out.data() + head, batch.data(), batch.size());
  return out;
}

// The pool's name at the frame's start, and the rest.
std::optional<std::pair<std::string, std::span<const std::uint8_t>>> split_frame(
    std::span<const std::uint8_t> in) {
  if (in.empty() || in.size() < 1u + in[0]) return std::nullopt;
  std::string pool(reinterpret_cast<const char*>(in.data() + 1), in[0]);
  return std::pair{std::move(pool), in.subspan(1u + in[0])};
}

}  // namespace

std::optional<std::string> pool_directory(std::string_view pool) {
  if (!pool.starts_with("pools/")) return std::nullopt;
  const std::string_view name = pool.substr(6);
  if (name.empty() || name.size() > 63) return std::nullopt;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                    (c >= 'A' && c <= 'Z');
    if (!ok) return std::nullopt;
  }
  return std::string(name);
}

pool_mirror::pool_mirror(boost::asio::any_io_executor loop, std::string pool, call_fn call,
                         record_fn record)
    : loop_(std::move(loop)),
      pool_(std::move(pool)),
      call_(std::move(call)),
      record_(std::move(record)) {}

void pool_mirror::link_up() {
  std::lock_guard lock(mutex_);
  want_everything_ = true;
}

void pool_mirror::stop() {
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
  }
  answered_.notify_all();
}

bool pool_mirror::current() const {
  std::lock_guard lock(mutex_);
  // A link that came up again may have found the partner restarted, its
  // copy gone, with no batch failing to say so: current again only once
  // the copy made anew is whole.
  return current_ && !want_everything_;
}

bool pool_mirror::wants_everything() {
  std::lock_guard lock(mutex_);
  return want_everything_ && !stopped_;
}

std::uint64_t pool_mirror::post_call(std::uint16_t type, link_bytes payload, bool synced) {
  std::uint64_t t = 0;
  {
    std::lock_guard lock(mutex_);
    t = ++next_ticket_;
    if (synced) results_[t] = std::nullopt;
  }
  // The answer may come after the pool closed (an unsynced batch is not
  // waited for): the mirror is gone then, and the answer is dropped.
  boost::asio::post(loop_, [this, t, type, synced, payload = std::move(payload),
                            alive = std::weak_ptr<int>(alive_)]() mutable {
    if (alive.expired()) return;
    call_(type, std::move(payload), [this, t, synced, alive](std::expected<link_bytes, error> r) {
      if (alive.expired()) return;
      {
        std::lock_guard lock(mutex_);
        if (!r) current_ = false;  // a batch missed: only a whole new copy mends it
        if (synced) results_[t] = bool(r);
      }
      answered_.notify_all();
    });
  });
  return t;
}

bool pool_mirror::answered_ok(std::uint64_t t) {
  std::unique_lock lock(mutex_);
  answered_.wait(lock, [&] { return stopped_ || results_[t].has_value(); });
  const bool ok = results_[t].value_or(false);
  results_.erase(t);
  return ok;
}

void pool_mirror::send_everything(const tiering::metadata_store& store) {
  {
    std::lock_guard lock(mutex_);
    want_everything_ = false;
    current_ = false;
    if (stopped_) return;
  }
  // The partner's copy starts anew (empty) here, while the drives may
  // still call the copy from before current; it counts as a copy only
  // once its last batch (batch_completes_copy) is in, so that a partner
  // whose owner dies midway never takes the pool over from half a copy
  // (the simulation's seed 60).
  std::vector<std::uint64_t> waiting;
  bool ok =
      answered_ok(post_call(link_type::metadata_begin, frame_for(pool_, std::nullopt, {}), true));
  tiering::metadata_batch chunk;
  std::size_t chunk_size = 0;
  auto flush = [&](std::uint8_t flags) {
    if (!ok) return;
    waiting.push_back(
        post_call(link_type::metadata_batch, frame_for(pool_, flags, chunk.encode()), true));
    chunk = {};
    chunk_size = 0;
    if (waiting.size() >= chunks_in_flight) {
      ok = answered_ok(waiting.front());
      waiting.erase(waiting.begin());
    }
  };
  for (std::size_t c = 0; c < tiering::column_count && ok; ++c) {
    const auto col = static_cast<tiering::column>(c);
    const std::error_code scanned = store.scan(col, [&](std::string_view k, std::string_view v) {
      chunk.put(col, k, v);
      chunk_size += k.size() + v.size() + 10;
      if (chunk_size >= chunk_bytes) flush(0);
    });
    if (scanned) ok = false;
  }
  flush(batch_synced | batch_completes_copy);  // the last one synced: the copy is whole and durable
                                               // once it is answered
  for (std::uint64_t t : waiting) ok = answered_ok(t) && ok;
  {
    std::lock_guard lock(mutex_);
    if (!ok || stopped_) return;
    current_ = true;
  }
  // Failing, the drives keep saying what they said before: "behind", or
  // "current" about a copy that is whole all the same (its completing
  // batch is in, so the partner may take over from it); mended at the
  // next link-up.
  (void)record(true);
}

std::uint64_t pool_mirror::send(const tiering::metadata_batch& batch, bool sync) {
  {
    std::lock_guard lock(mutex_);
    if (!current_ || stopped_) return 0;
  }
  return post_call(link_type::metadata_batch,
                   frame_for(pool_, sync ? batch_synced : 0, batch.encode()), sync);
}

std::error_code pool_mirror::wait(std::uint64_t ticket) {
  bool ok = false;
  if (ticket != 0) {
    bool synced = false;
    {
      std::lock_guard lock(mutex_);
      synced = results_.contains(ticket);
      ok = current_;
    }
    if (synced) ok = answered_ok(ticket);
  }
  if (ok) return {};
  {
    std::lock_guard lock(mutex_);
    if (stopped_)
      return {};  // closing: the pool's last batches; the next owner's copy comes from a new
                  // link-up
    current_ = false;
    if (recorded_ == false) return {};
  }
  return record(false);
}

std::error_code pool_mirror::record(bool current) {
  auto promise = std::make_shared<std::promise<std::error_code>>();
  auto outcome = promise->get_future();
  boost::asio::post(loop_, [this, current, promise, alive = std::weak_ptr<int>(alive_)] {
    if (alive.expired()) return promise->set_value(make_error_code(errc::canceled));
    record_(current, [promise](std::error_code e) { promise->set_value(e); });
  });
  // The loop may not run again before the store's thread must end: a
  // stopped mirror's owner closes the store next, joining this thread,
  // without running the loop (a whole copy finishing as the controller
  // stops deadlocked there). Stopped, it gives up: the drives keep saying
  // what they said, and "behind" is safe.
  while (outcome.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    std::lock_guard lock(mutex_);
    if (stopped_) return make_error_code(errc::canceled);
  }
  const std::error_code e = outcome.get();
  std::lock_guard lock(mutex_);
  if (!e) recorded_ = current;
  return e;
}

metadata_replicas::metadata_replicas(boost::asio::any_io_executor loop,
                                     std::filesystem::path pools_dir)
    : loop_(std::move(loop)), pools_dir_(std::move(pools_dir)) {}

metadata_replicas::metadata_replicas(boost::asio::any_io_executor loop,
                                     std::filesystem::path pools_dir, partner_link& link)
    : metadata_replicas(std::move(loop), std::move(pools_dir)) {
  auto answer_on_thread = [this](std::uint16_t type, link_bytes payload, link_reply reply) {
    boost::asio::post(thread_, [this, type, payload = std::move(payload), reply = std::move(reply),
                                alive = std::weak_ptr<int>(alive_)]() mutable {
      auto outcome = answer(type, payload);
      boost::asio::post(loop_,
                        [reply = std::move(reply), outcome = std::move(outcome), alive]() mutable {
                          if (!alive.expired()) reply(std::move(outcome));
                        });
    });
  };
  for (const std::uint16_t type : {link_type::metadata_begin, link_type::metadata_batch}) {
    link.handle(type, [answer_on_thread, type](link_bytes p, link_reply r) {
      answer_on_thread(type, std::move(p), std::move(r));
    });
  }
}

std::expected<link_bytes, error> metadata_replicas::answer(std::uint16_t type,
                                                           std::span<const std::uint8_t> payload) {
  const bool begin = type == link_type::metadata_begin;
  auto parts = split_frame(payload);
  const auto dir = parts ? pool_directory(parts->first) : std::nullopt;
  if (!dir)
    return std::unexpected(make_error(errc::invalid_argument, "a metadata frame names no pool"));
  if (begin) {
    if (std::lock_guard l(held_mutex_); held_.contains(parts->first)) {
      return std::unexpected(make_error(
          errc::busy, parts->first + " is open on this controller: no copy of it is made here"));
    }
    const std::string& pool = parts->first;
    if (whole_.erase(pool) > 0) {
      kept_[pool] = std::move(copies_[pool]);  // in the whole directory; the new one beside it
    }
    copies_.erase(pool);
    std::string why;
    auto store =
        open_empty(kept_.contains(pool) ? next_directory(pool) : whole_directory(pool), why);
    if (!store) return std::unexpected(make_error(errc::io_error, why));
    copies_[pool] = std::move(store);
    return link_bytes{};
  }
  const auto it = copies_.find(parts->first);
  const std::span<const std::uint8_t> rest = parts->second;
  std::optional<tiering::metadata_batch> batch;
  if (!rest.empty())
    batch = tiering::metadata_batch::decode(
        std::string_view(reinterpret_cast<const char*>(rest.data() + 1), rest.size() - 1));
  if (it == copies_.end())
    return std::unexpected(
        make_error(errc::invalid_argument, parts->first + ": a batch before its copy began"));
  if (!batch)
    return std::unexpected(make_error(errc::invalid_argument,
                                      parts->first + ": a metadata batch that does not parse"));
  if (auto e = it->second->write_now(*batch, (rest[0] & batch_synced) != 0)) {
    copies_.erase(it);  // a hole in it: no later batch makes it whole (a kept whole copy stays)
    whole_.erase(parts->first);
    return std::unexpected(
        make_error(errc::io_error, parts->first + ": the copy's write failed: " + e.message()));
  }
  if ((rest[0] & batch_completes_copy) != 0) {
    if (auto e = promote(parts->first)) {
      copies_.erase(parts->first);
      return std::unexpected(make_error(
          errc::io_error,
          parts->first + ": the new copy could not replace the last whole one: " + e.message()));
    }
    whole_.insert(parts->first);
  }
  return link_bytes{};
}

std::error_code metadata_replicas::promote(const std::string& pool) {
  const auto kept = kept_.find(pool);
  if (kept == kept_.end()) return {};  // made in the whole directory
  copies_.erase(pool);                 // closed: flushed, its lock released
  kept_.erase(kept);
  std::error_code ec;
  std::filesystem::remove_all(whole_directory(pool), ec);
  if (!ec) std::filesystem::rename(next_directory(pool), whole_directory(pool), ec);
  if (ec) return ec;
  auto store = tiering::metadata_store::open(whole_directory(pool).string(), loop_);
  if (!store) return make_error_code(errc::io_error);
  copies_[pool] = std::move(*store);
  return {};
}

metadata_replicas::~metadata_replicas() {
  alive_.reset();
  thread_.join();
  copies_.clear();
  kept_.clear();
}

std::filesystem::path metadata_replicas::whole_directory(const std::string& pool) const {
  return pools_dir_ / *pool_directory(pool);
}

std::filesystem::path metadata_replicas::next_directory(const std::string& pool) const {
  return pools_dir_ / (*pool_directory(pool) + ".next");
}

std::unique_ptr<tiering::metadata_store> metadata_replicas::open_empty(
    const std::filesystem::path& dir, std::string& why) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // a copy always begins empty
  std::filesystem::create_directories(dir, ec);
  auto store = tiering::metadata_store::open(dir.string(), loop_);
  if (!store) {
    why = store.error().message;
    return nullptr;
  }
  return std::move(*store);
}

void metadata_replicas::hold(const std::string& pool) {
  std::lock_guard lock(held_mutex_);
  held_.insert(pool);
}

void metadata_replicas::release(const std::string& pool) {
  std::lock_guard lock(held_mutex_);
  held_.erase(pool);
}

bool metadata_replicas::take_now(const std::string& pool) {
  const bool whole = whole_.erase(pool) > 0;
  const bool copied = copies_.erase(pool) > 0 && whole;  // closed: flushed, its lock released
  if (!copied) {
    // A copy made anew that never ended: the last whole one, in the whole
    // directory, is what the drives' record vouches for.
    if (kept_.erase(pool) == 0) return false;
    std::error_code ec;
    std::filesystem::remove_all(next_directory(pool), ec);
  }
  // Opened here next: the partner, thawed or reconnected meanwhile, must
  // not begin a copy of it again in the directory the pool opens (the
  // caller releases it if the open fails).
  hold(pool);
  return true;
}

void metadata_replicas::adopt(const std::string& pool) {
  boost::asio::post(thread_, [this, pool] { adopt_now(pool); });
}

void metadata_replicas::adopt_now(const std::string& pool) {
  copies_.erase(pool);
  kept_.erase(pool);
  whole_.erase(pool);
  auto store = tiering::metadata_store::open(whole_directory(pool).string(), loop_);
  if (!store) return;  // no copy: a takeover refuses, as before
  copies_[pool] = std::move(*store);
  whole_.insert(pool);
}

void metadata_replicas::take(const std::string& pool, std::function<void(bool)> done) {
  boost::asio::post(
      thread_, [this, pool, done = std::move(done), alive = std::weak_ptr<int>(alive_)]() mutable {
        const bool copied = take_now(pool);
        boost::asio::post(loop_, [done = std::move(done), copied, alive]() mutable {
          if (!alive.expired()) done(copied);
        });
      });
}

}  // namespace strata::controller
