#include "controller/unit_state.h"

#include <boost/asio/post.hpp>

namespace strata::controller {

std::vector<std::uint8_t> config_unit_state_store::load() {
  const auto value = store_.get(key_);
  if (!value) return {};
  return {value->begin(), value->end()};
}

void config_unit_state_store::save(std::vector<std::uint8_t> bytes, std::function<void(std::error_code)> done) {
  boost::asio::post(writer_, [this, bytes = std::move(bytes), done = std::move(done)]() mutable {
    config_batch b;
    b.put(key_, std::string(bytes.begin(), bytes.end()));
    const auto committed = store_.commit(b);
    const std::error_code ec = committed ? std::error_code{} : committed.error().code;
    boost::asio::post(unit_loop_, [done = std::move(done), ec] { done(ec); });
  });
}

}  // namespace strata::controller
