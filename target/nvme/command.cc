#include "target/nvme/command.h"

#include <algorithm>

namespace strata::nvme {

namespace {

constexpr std::size_t subsystem_nqn_at = 256;
constexpr std::size_t host_nqn_at = 512;
constexpr std::size_t nqn_field_bytes = 256;

// The NUL-terminated NQN at `at`; NVMe Base 2.0 4.5: at most 223 bytes,
// "nqn." first (the discovery subsystem's is such an NQN too).
std::expected<std::string, connect_refusal> nqn_at(std::span<const std::uint8_t> data,
                                                   std::size_t at) {
  const auto field = data.subspan(at, nqn_field_bytes);
  const auto end = std::ranges::find(field, std::uint8_t{0});
  const auto refuse = [at] {
    return std::unexpected(
        connect_refusal{{status_type::command_specific, code::connect_invalid_parameters, true},
                        static_cast<std::uint16_t>(at)});
  };
  if (end == field.end()) return refuse();
  std::string nqn(field.begin(), end);
  if (nqn.size() > 223 || !nqn.starts_with("nqn.")) return refuse();
  return nqn;
}

}  // namespace

connect_command parse_connect(const command_view& c) noexcept {
  connect_command r;
  r.record_format = c.u16(40);
  r.queue_id = c.u16(42);
  r.queue_entries = std::uint32_t{c.u16(44)} + 1;
  r.keep_alive_ms = c.u32(48);
  return r;
}

std::expected<connect_data, connect_refusal> parse_connect_data(
    std::span<const std::uint8_t> data) {
  if (data.size() < connect_data_bytes) {
    // Short data is a transfer the host got wrong, not a field in error.
    return std::unexpected(connect_refusal{generic(code::invalid_field), 0});
  }
  connect_data d;
  std::copy_n(data.begin(), d.host_id.size(), d.host_id.begin());
  d.controller_id = get16(data, 16);
  auto subsystem = nqn_at(data, subsystem_nqn_at);
  if (!subsystem) return std::unexpected(subsystem.error());
  auto host = nqn_at(data, host_nqn_at);
  if (!host) return std::unexpected(host.error());
  d.subsystem_nqn = std::move(*subsystem);
  d.host_nqn = std::move(*host);
  return d;
}

property_access parse_property(const command_view& c) noexcept {
  property_access p;
  const std::uint32_t attrib = c.u32(40) & 0x7;
  p.size_bytes = attrib == 0 ? 4 : attrib == 1 ? 8 : 0;
  p.offset = c.u32(44);
  p.value = c.u64(48);
  return p;
}

}  // namespace strata::nvme
