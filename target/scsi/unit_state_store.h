// Where a logical unit keeps the state that must outlive it: the persistent
// reservation state (registrations, the reservation, PRgeneration, APTPL),
// encoded by reservations.h as one versioned byte string. The unit loads it
// once (logical_unit::restore_state) and saves the whole string after every
// change a PERSISTENT RESERVE OUT makes, before that command completes.
//
// The pool keeps it in its RocksDB metadata, so that it survives a restart
// and a controller takeover; memory LUNs and tests use
// memory_unit_state_store below.
//
// Threads: called on the unit's loop. save() may complete at once (inside
// save) or later, but `done` must run on the unit's loop.
// Lifetime: the store outlives the unit; a save in flight keeps the unit's
// commands_in_flight() above zero.
#pragma once

#include <cstdint>
#include <functional>
#include <system_error>
#include <utility>
#include <vector>

namespace strata::scsi {

class unit_state_store {
 public:
  virtual ~unit_state_store() = default;

  // What the last successful save() stored; empty if nothing ever was.
  virtual std::vector<std::uint8_t> load() = 0;

  // Replaces what is stored with `bytes`, durably, then calls done({}) once;
  // on failure calls done(error) and keeps what was stored before. The unit
  // saves one string at a time: the next save starts after `done`.
  virtual void save(std::vector<std::uint8_t> bytes, std::function<void(std::error_code)> done) = 0;
};

// A store in memory: survives the unit (a new unit over the same store
// loads it) but not the process. `fail_next` makes the next save fail, for
// tests of what a unit does when it cannot save.
class memory_unit_state_store final : public unit_state_store {
 public:
  std::vector<std::uint8_t> load() override { return bytes_; }
  void save(std::vector<std::uint8_t> bytes, std::function<void(std::error_code)> done) override {
    ++saves_;
    if (fail_next_) {
      const std::error_code ec = std::exchange(fail_next_, {});
      done(ec);
      return;
    }
    bytes_ = std::move(bytes);
    done({});
  }

  const std::vector<std::uint8_t>& bytes() const noexcept { return bytes_; }
  void set_bytes(std::vector<std::uint8_t> bytes) { bytes_ = std::move(bytes); }
  void fail_next(std::error_code ec) noexcept { fail_next_ = ec; }
  std::size_t saves() const noexcept { return saves_; }

 private:
  std::vector<std::uint8_t> bytes_;
  std::error_code fail_next_;
  std::size_t saves_ = 0;
};

}  // namespace strata::scsi
