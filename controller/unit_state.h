// A logical unit's persistent reservation state (scsi::unit_state_store),
// kept in the metadata of the volume's pool (tiering::keys::unit_state,
// docs/tiering-keys.md), which is mirrored to the partner controller
// before each write is acknowledged: so registrations and reservations
// survive a restart, and follow the pool to whichever controller serves
// it after a takeover or a hand-over.
//
// save() is a synced write of the pool's store (on the store's thread;
// `done` runs on the loop, the unit's). load() reads at once, when the
// unit is made. A volume whose state is not in its pool (saved by a
// release that kept it in the controller's config_store, key
// "reservations/VOLUME") loads it from there; its next save puts it in
// the pool.
// Lifetime: the pool's store and the config_store outlive this store,
// which outlives its unit.
#pragma once

#include <string>

#include "controller/config_store.h"
#include "target/scsi/unit_state_store.h"
#include "tiering/metadata_store.h"

namespace strata::controller {

class pool_unit_state_store final : public scsi::unit_state_store {
 public:
  // `key`: tiering::keys::unit_state of the volume's id. `earlier`: the
  // config_store key it was kept under before, read when the pool has none.
  pool_unit_state_store(tiering::metadata_store& pool_store, std::string key,
                        const config_store& config, std::string earlier)
      : store_(pool_store), key_(std::move(key)), config_(config), earlier_(std::move(earlier)) {}

  std::vector<std::uint8_t> load() override;
  void save(std::vector<std::uint8_t> bytes, std::function<void(std::error_code)> done) override;

 private:
  tiering::metadata_store& store_;
  const std::string key_;
  const config_store& config_;
  const std::string earlier_;
};

}  // namespace strata::controller
