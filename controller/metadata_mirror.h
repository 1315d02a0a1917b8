// Pool metadata mirrored to the partner controller, so that it can take a
// pool over with the metadata of every acknowledged write: the extent map
// and the read cache's index (heat too, which may lag). The frames are in
// docs/partner-link.md, "Mirrored pool metadata".
//
// The owner's side, `pool_mirror`, is the copy (tiering::metadata_copy)
// the pool's metadata store feeds on its own thread: every batch goes to
// the partner over the link as it is applied locally, and a synced batch
// is acknowledged only once the partner holds it synced too. When the
// link goes down, the copy falls behind: before the next batch is
// acknowledged, the pool's ownership records on its drives say so
// (pool_ownership::partner_copy), so that the partner never takes the
// pool over from a copy that lacks an acknowledged write (it waits for
// the owner instead). When the link comes back, the whole store is sent
// anew, and the records say the copy is current again. The partner's copy
// begins empty and counts only once the last batch of the whole store is
// in, so that the drives' word "current", from before, never vouches for
// half a copy.
//
// The partner's side, `metadata_replicas`: one RocksDB per pool at
// STATE/pools/NAME (where the pool's own store is when this controller
// owns it), written on a thread of its own in the order the frames come,
// and handed to the pool at takeover.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "controller/partner_link.h"
#include "tiering/metadata_store.h"

namespace strata::controller {

namespace link_type {
// Request: the pool's name. The partner's copy of it starts anew, empty.
// Answer: empty, once it is.
constexpr std::uint16_t metadata_begin = partner_link::first_user_type + 4;
// Request: the pool's name, a flags byte (bit 0: synced; bit 1: the last
// batch of a whole copy, which is whole from then on), a batch's bytes
// (tiering::metadata_batch::encode). Answer: empty, once the copy holds it.
constexpr std::uint16_t metadata_batch = partner_link::first_user_type + 5;
// Request: a pool's name, once its owner closed it and wrote this
// controller's ownership (a new epoch) on its drives. Answer: empty once
// the pool is served here, or why not (the sender then takes it back).
constexpr std::uint16_t pool_handover = partner_link::first_user_type + 6;
}  // namespace link_type

class pool_mirror final : public tiering::metadata_copy {
 public:
  // A request over the link (to be made on the loop; `done` runs there).
  using call_fn = std::function<void(std::uint16_t type, link_bytes payload, link_reply done)>;
  // Writes the pool's ownership records anew saying whether the partner's
  // copy is current; on the loop. An error: not written (this controller
  // lost its lease, or the drives failed).
  using record_fn = std::function<void(bool current, std::function<void(std::error_code)> done)>;

  pool_mirror(boost::asio::any_io_executor loop, std::string pool, call_fn call, record_fn record);
  // On the loop, after the store that fed it is gone.
  ~pool_mirror() override = default;

  // The link came up: the next thing the store's thread does is send the
  // whole store (the caller pokes the store).
  void link_up();
  // The pool closes: every wait returns at once from now on, and nothing
  // more is sent. Call before the store is destroyed, on the loop.
  void stop();
  // Whether the partner holds every batch sent, and no link-up since
  // calls for a copy made anew (for people, and for a hand-over's start:
  // the records on the drives are what a takeover goes by).
  bool current() const;

  bool wants_everything() override;
  void send_everything(const tiering::metadata_store& store) override;
  std::uint64_t send(const tiering::metadata_batch& batch, bool sync) override;
  std::error_code wait(std::uint64_t ticket) override;

 private:
  // Makes the records on the drives say `current` (blocking: the store's
  // thread waits for the loop).
  std::error_code record(bool current);
  // Sends one request and returns its ticket; its outcome lands in results_.
  std::uint64_t post_call(std::uint16_t type, link_bytes payload, bool synced);
  // Blocks until ticket `t` is answered (or stop()); true if it succeeded.
  bool answered_ok(std::uint64_t t);

  boost::asio::any_io_executor loop_;
  const std::string pool_;
  call_fn call_;
  record_fn record_;

  mutable std::mutex mutex_;
  std::condition_variable answered_;
  bool stopped_ = false;
  bool want_everything_ = false;
  bool current_ = false;          // every batch sent so far reached the copy
  std::optional<bool> recorded_;  // what the drives were last made to say
  std::uint64_t next_ticket_ = 0;
  std::map<std::uint64_t, std::optional<bool>>
      results_;  // synced batches' outcomes, until waited for
  // The loop's: answers and posts that come after the mirror is gone see it expired.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

class metadata_replicas {
 public:
  // Answers the metadata frames on `link`; the copies live under
  // `pools_dir` (STATE/pools), each opened with `loop` as its store's loop.
  metadata_replicas(boost::asio::any_io_executor loop, std::filesystem::path pools_dir,
                    partner_link& link);
  // Answering no link: the caller hands it the frames with answer() and
  // takes copies with take_now(), always from one thread of its own (the
  // seeded simulation's partner, tests/sim).
  metadata_replicas(boost::asio::any_io_executor loop, std::filesystem::path pools_dir);
  ~metadata_replicas();
  metadata_replicas(const metadata_replicas&) = delete;
  metadata_replicas& operator=(const metadata_replicas&) = delete;

  // Takeover: closes the copy of `pool` ("pools/p1") so that the pool
  // opens its directory as its store; false if no whole copy was made
  // since this process started (a copy on disk from before may lack
  // batches). A copy begun anew is whole once its last batch is in; until
  // then the last whole copy is kept, and taken.
  // `done` on the loop, once the frames before have been applied. A pool
  // taken is held from then on (hold()): the caller release()s it if it
  // does not open it after all.
  void take(const std::string& pool, std::function<void(bool)> done);
  // This controller closed `pool`'s store, current, to hand the pool over:
  // from now on it is the partner's whole copy (the hand-over's record on
  // the drives says so), kept while the new owner makes one anew. So a
  // receiver that dies mid-hand-over leaves a pool this controller can
  // take over, not one nobody serves.
  void adopt(const std::string& pool);
  // Pool `pool` is open here (this controller serves it, or still holds it
  // open after losing it): a copy of it is refused until release().
  void hold(const std::string& pool);
  void release(const std::string& pool);

  // The work of the link's frames, of take() and of adopt(), on the
  // caller's thread (for a link, the replicas' own thread): a
  // metadata_begin or metadata_batch frame answered, a copy closed, a
  // closed store adopted.
  std::expected<link_bytes, error> answer(std::uint16_t type,
                                          std::span<const std::uint8_t> payload);
  bool take_now(const std::string& pool);
  void adopt_now(const std::string& pool);

 private:
  // The directory of `pool`'s whole copy (where the pool's store opens at
  // a takeover), and of a copy being made anew beside it.
  std::filesystem::path whole_directory(const std::string& pool) const;
  std::filesystem::path next_directory(const std::string& pool) const;
  // An empty copy in `dir`, anything there before removed; null and `why` if it cannot be opened.
  std::unique_ptr<tiering::metadata_store> open_empty(const std::filesystem::path& dir,
                                                      std::string& why);
  // The copy being made anew of `pool` ended (its completing batch is in):
  // it replaces the whole one kept, in the whole one's directory.
  std::error_code promote(const std::string& pool);
  boost::asio::any_io_executor loop_;
  const std::filesystem::path pools_dir_;
  // The thread's, by pool: the copy the frames go to (whole once in
  // whole_), and the last whole copy, kept while one is made anew (its
  // owner may die midway, and the drives' record may still vouch for the
  // last whole copy: no synced batch was acknowledged since it was current
  // without the record saying "behind" first).
  std::map<std::string, std::unique_ptr<tiering::metadata_store>> copies_;
  std::set<std::string> whole_;
  std::map<std::string, std::unique_ptr<tiering::metadata_store>> kept_;
  std::mutex held_mutex_;
  std::set<std::string> held_;
  boost::asio::thread_pool thread_{1};
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

// "pools/p1" -> the directory name "p1"; nullopt for anything else (a
// name with a slash or a dot, which must not reach the file system).
std::optional<std::string> pool_directory(std::string_view pool);

}  // namespace strata::controller
