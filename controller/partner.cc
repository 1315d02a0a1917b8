#include "controller/partner.h"

#include <boost/asio/post.hpp>

namespace strata::controller {

partner::partner(boost::asio::any_io_executor loop, const config_store& config, event_log& events, partner_link_options options)
    : loop_(loop), config_(config), events_(events), options_(options), link_(loop, std::move(options)) {
  link_.on_state = [this](bool up, const std::string& why) {
    if (up) {
      events_.record(severity::info, "controllers/" + options_.partner, "the partner link is up");
    } else {
      events_.record(severity::warning, "controllers/" + options_.partner, "the partner link is down: " + why);
    }
  };
  link_.on_refused = [this](const std::string& what) { events_.record(severity::warning, "", what); };
  link_.handle(link_type::config_snapshot, [this](link_bytes, link_reply reply) {
    boost::asio::post(reader_, [this, reply = std::move(reply), alive = std::weak_ptr<int>(alive_)]() mutable {
      auto bytes = encode_records(array_wide_records(config_));
      boost::asio::post(loop_, [reply = std::move(reply), bytes = std::move(bytes), alive]() mutable {
        if (!alive.expired()) reply(std::move(bytes));
      });
    });
  });
}

partner::~partner() {
  stop();
  reader_.join();
  alive_.reset();
}

void partner::stop() { link_.stop(); }

void partner::fetch_configuration(std::function<void(std::expected<config_records, error>)> done) {
  link_.call(link_type::config_snapshot, {}, [done = std::move(done)](std::expected<link_bytes, error> r) {
    if (!r) return done(std::unexpected(r.error()));
    done(decode_records(*r));
  });
}

}  // namespace strata::controller
