// What an NVMe controller keeps for its host between commands (NVM Express
// Base 2.0, 5.27 "Set Features" and 5.2 "Asynchronous Event Request"):
// the features a host sets and reads (number of queues, keep alive timer,
// volatile write cache, asynchronous event configuration), and the
// asynchronous events waiting for the host's outstanding requests.
//
// Threads: the admin queue's connection.
#pragma once

#include <cstdint>
#include <deque>
#include <expected>
#include <optional>
#include <vector>

#include "target/nvme/status.h"

namespace strata::nvme {

namespace feature {
constexpr std::uint8_t arbitration = 0x01;
constexpr std::uint8_t volatile_write_cache = 0x06;
constexpr std::uint8_t number_of_queues = 0x07;
constexpr std::uint8_t async_event_configuration = 0x0b;
constexpr std::uint8_t keep_alive_timer = 0x0f;
}  // namespace feature

// Asynchronous event configuration bits (FID 0x0b) Strata reports.
namespace async_event_config {
constexpr std::uint32_t namespace_attribute = 1u << 8;
constexpr std::uint32_t ana_change = 1u << 11;
}  // namespace async_event_config

class controller_features {
 public:
  // `max_io_queues`: what Number of Queues grants at most; `keep_alive_ms`:
  // the Connect's KATO.
  controller_features(std::uint16_t max_io_queues, std::uint32_t keep_alive_ms,
                      bool volatile_write_cache) noexcept;

  // Set Features: the result dword (Number of Queues: those granted), or
  // why not: an unknown feature or a bad value (invalid field), saving
  // asked for (not saveable).
  std::expected<std::uint32_t, status> set(std::uint8_t fid, std::uint32_t cdw11,
                                           bool save) noexcept;
  // Get Features, SEL 0 (current), 1 (default) or 3 (capabilities); 2 (saved)
  // answers as default, nothing being saveable.
  std::expected<std::uint32_t, status> get(std::uint8_t fid, std::uint8_t select) const noexcept;

  std::uint16_t io_queues() const noexcept {
    return io_queues_;
  }  // granted (1 until the host asks)
  std::uint32_t keep_alive_ms() const noexcept { return keep_alive_ms_; }
  bool write_cache() const noexcept { return write_cache_; }
  std::uint32_t async_events_enabled() const noexcept { return async_config_; }

 private:
  std::uint16_t max_io_queues_;
  std::uint32_t default_keep_alive_ms_;
  bool default_write_cache_;
  std::uint16_t io_queues_ = 1;
  bool queues_set_ = false;
  std::uint32_t keep_alive_ms_;
  bool write_cache_;
  std::uint32_t async_config_ = 0;
};

// An asynchronous event: its type, information and the log page that
// clears it (the result dword of the request that reports it).
struct async_event {
  std::uint8_t type = 2;  // 2: a notice
  std::uint8_t info = 0;  // for a notice: 0x00 namespace attribute changed, 0x03 ANA change
  std::uint8_t log_page = 0;
  std::uint32_t result() const noexcept {
    return type | std::uint32_t{info} << 8 | std::uint32_t{log_page} << 16;
  }
  friend bool operator==(const async_event&, const async_event&) = default;
};
async_event namespace_attribute_changed() noexcept;  // page 0x04
async_event ana_changed() noexcept;                  // page 0x0c

// A completion for an outstanding Asynchronous Event Request.
struct async_completion {
  std::uint16_t command_id = 0;
  std::uint32_t result = 0;
};

// The requests the host left outstanding and the events waiting for
// them. An event reported is masked until the host reads its log page
// (without RAE), as the spec asks, so a burst of ANA changes is one
// event; one raised while masked, or disabled, is dropped (the page the
// host reads then says everything).
class async_events {
 public:
  explicit async_events(std::uint8_t limit) noexcept : limit_(limit) {}

  // An Asynchronous Event Request: completed at once if an event waits
  // (`now`), else kept; refused past the limit (AERL + 1). (Not a
  // std::expected: libc++ 16 clobbers its flag in an optional's tail
  // padding, LLVM issue 70494.)
  struct answer {
    status refusal;  // success unless refused
    std::optional<async_completion> now;
  };
  answer request(std::uint16_t command_id);
  // An event happened: the completion to send, if a request waits.
  std::optional<async_completion> raise(const async_event& e, std::uint32_t enabled);
  // The host read `log_page` without retaining the event: it is reported again next time.
  void page_read(std::uint8_t log_page);
  // The requests still outstanding, for the connection's teardown (each
  // is completed "aborted" then).
  std::vector<std::uint16_t> outstanding() const { return {waiting_.begin(), waiting_.end()}; }

 private:
  std::uint8_t limit_;
  std::deque<std::uint16_t> waiting_;
  std::deque<async_event> pending_;
  std::vector<std::uint8_t> masked_;  // log pages whose event was reported, not yet read
};

}  // namespace strata::nvme
