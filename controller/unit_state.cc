#include "controller/unit_state.h"

namespace strata::controller {

std::vector<std::uint8_t> pool_unit_state_store::load() {
  auto value = store_.get(tiering::column::pool, key_);
  if (!value) value = config_.get(earlier_);
  if (!value) return {};
  return {value->begin(), value->end()};
}

void pool_unit_state_store::save(std::vector<std::uint8_t> bytes,
                                 std::function<void(std::error_code)> done) {
  tiering::metadata_batch b;
  b.put(tiering::column::pool, key_,
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  store_.write(std::move(b), true, std::move(done));
}

}  // namespace strata::controller
