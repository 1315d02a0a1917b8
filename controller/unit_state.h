// A logical unit's persistent reservation state in the controller's
// config_store (scsi::unit_state_store), under the unit's own key, so that
// registrations and reservations survive a restart and a takeover.
//
// save() runs the synced RocksDB write on `writer` (a thread of the
// controller's, never the unit's loop: the write is a disk flush) and
// calls `done` back on the unit's loop. load() reads at once: the unit
// calls it once, before its first command, at start-up.
// Lifetime: the config_store and `writer` outlive this store, which
// outlives its unit; the controller drains `writer` before destroying it.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <string>

#include "controller/config_store.h"
#include "target/scsi/unit_state_store.h"

namespace strata::controller {

class config_unit_state_store final : public scsi::unit_state_store {
 public:
  config_unit_state_store(config_store& store, std::string key, boost::asio::any_io_executor unit_loop,
                          boost::asio::any_io_executor writer)
      : store_(store), key_(std::move(key)), unit_loop_(std::move(unit_loop)), writer_(std::move(writer)) {}

  std::vector<std::uint8_t> load() override;
  void save(std::vector<std::uint8_t> bytes, std::function<void(std::error_code)> done) override;

 private:
  config_store& store_;
  const std::string key_;
  boost::asio::any_io_executor unit_loop_;
  boost::asio::any_io_executor writer_;
};

}  // namespace strata::controller
