// The NVMe reservation commands (NVMe Base 2.0, 8.19 and 7.2-7.5) as the
// SCSI persistent reservations they were modelled on (SPC-4 5.13): the
// volume keeps one reservation state, which iSCSI initiators and NVMe
// hosts register in, reserve and preempt alike.
//
// A host is one registrant whatever controller or port it comes through:
// its nexus is its host NQN and host identifier ("<NQN>,hostid,0x<32 hex
// digits>", controller.h), and it registers with ALL_TG_PT, so that a
// registration made through one controller holds on the partner's port
// too (NVMe 2.0, 8.19.1: "a host ... registered ... on all controllers").
#include <algorithm>
#include <cstring>
#include <string_view>

#include "target/nvme/nvm.h"
#include "target/scsi/big_endian.h"

namespace strata::nvme {

namespace {

constexpr std::uint8_t persistent_reserve_in = 0x5e;
constexpr std::uint8_t persistent_reserve_out = 0x5f;
// PERSISTENT RESERVE OUT service actions.
constexpr std::uint8_t pr_register = 0x00, pr_reserve = 0x01, pr_release = 0x02, pr_clear = 0x03,
                       pr_preempt = 0x04, pr_preempt_and_abort = 0x05,
                       pr_register_and_ignore = 0x06;
// PERSISTENT RESERVE IN service actions.
constexpr std::uint8_t pr_report_capabilities = 0x02, pr_read_full_status = 0x03;
constexpr std::size_t pr_out_parameter_bytes = 24;
constexpr std::uint8_t all_target_ports = 0x04, activate_persist_through_power_loss = 0x01;

using scsi::get_be;  // CDBs and SCSI parameter data are big-endian
using scsi::put_be;

// Reservation types: NVMe's 1..6 (write exclusive, exclusive access, their
// registrants-only and all-registrants forms) are SPC-4's 1, 3, 5, 6, 7, 8.
constexpr std::array<std::uint8_t, 7> scsi_type_of{0, 1, 3, 5, 6, 7, 8};
std::uint8_t nvme_type_of(std::uint8_t scsi_type) noexcept {
  for (std::uint8_t t = 1; t < scsi_type_of.size(); ++t) {
    if (scsi_type_of[t] == scsi_type) return t;
  }
  return 0;
}

// The host identifier in an NVMe registrant's port name; zeros for an iSCSI
// initiator's, which has none.
std::array<std::uint8_t, 16> host_id_in(std::string_view port) noexcept {
  std::array<std::uint8_t, 16> id{};
  const auto at = port.rfind(",hostid,0x");
  if (at == std::string_view::npos || port.size() - at - 10 < 32) return id;
  const std::string_view hex = port.substr(at + 10, 32);
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < 16; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return {};
    id[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return id;
}

}  // namespace

std::optional<status> nvm_command::start_reservation(const command_view& c,
                                                     scsi::task& t) noexcept {
  const std::uint32_t cdw10 = c.cdw(10);
  const std::uint8_t action = cdw10 & 0x7;
  const bool ignore_key = (cdw10 & 0x8) != 0;
  const std::uint8_t type = static_cast<std::uint8_t>(cdw10 >> 8);
  const auto* data = reinterpret_cast<const std::uint8_t*>(data_.data());
  const auto key_at = [&](std::size_t at) { return get64(std::span(data, data_.size()), at); };
  t.cdb = {};
  if (opcode_ == opcode::reservation_report) {
    // REPORT CAPABILITIES first, for PTPLS; then READ FULL STATUS.
    extended_report_ = (c.cdw(11) & 0x1) != 0;
    report_bytes_ = (c.cdw(10) + 1) * 4;
    report_step_ = 0;
    t.cdb[0] = persistent_reserve_in;
    t.cdb[1] = pr_report_capabilities;
    put_be(t.cdb.data() + 7, 8, 2);
    t.expected_transfer_bytes = 8;
    return std::nullopt;
  }
  std::uint8_t service_action = 0;
  std::uint64_t key = key_at(0), service_key = 0;
  std::uint8_t scsi_type = 0, flags = 0;
  if (opcode_ == opcode::reservation_register) {
    // RREGA: 0 register, 1 unregister, 2 replace; CPTPL (bits 31:30): 3
    // persists through a power loss, anything else does not.
    if (action > 2) return generic(code::invalid_field);
    service_action = ignore_key ? pr_register_and_ignore : pr_register;
    if (action == 0) key = 0;  // not registered yet: no current key
    service_key = action == 1 ? 0 : key_at(8);
    flags = static_cast<std::uint8_t>(
        all_target_ports | ((cdw10 >> 30) == 3 ? activate_persist_through_power_loss : 0));
  } else if (opcode_ == opcode::reservation_acquire) {
    // RACQA: 0 acquire, 1 preempt, 2 preempt and abort (nothing aborts).
    if (action > 2 || type == 0 || type >= scsi_type_of.size()) return generic(code::invalid_field);
    service_action = action == 0 ? pr_reserve : action == 1 ? pr_preempt : pr_preempt_and_abort;
    scsi_type = scsi_type_of[type];
    if (action != 0) service_key = key_at(8);
  } else {
    // RRELA: 0 release, 1 clear.
    if (action > 1 || (action == 0 && (type == 0 || type >= scsi_type_of.size())))
      return generic(code::invalid_field);
    service_action = action == 0 ? pr_release : pr_clear;
    scsi_type = action == 0 ? scsi_type_of[type] : 0;
  }
  parameters_.assign(pr_out_parameter_bytes, 0);
  put_be(parameters_.data(), key, 8);
  put_be(parameters_.data() + 8, service_key, 8);
  parameters_[20] = flags;
  t.cdb[0] = persistent_reserve_out;
  t.cdb[1] = service_action;
  t.cdb[2] = scsi_type;  // SCOPE 0h: the logical unit
  put_be(t.cdb.data() + 5, pr_out_parameter_bytes, 4);
  t.data_out = {reinterpret_cast<std::byte*>(parameters_.data()), parameters_.size()};
  t.expected_transfer_bytes = pr_out_parameter_bytes;
  return std::nullopt;
}

bool nvm_command::report_step(scsi::task& t) noexcept {
  const auto* in = reinterpret_cast<const std::uint8_t*>(t.data_in.data());
  if (report_step_ == 0) {
    persist_through_power_loss_ = t.data_in_bytes >= 4 && (in[3] & 0x01) != 0;  // PTPL_A
    report_step_ = 1;
    t.cdb = {};
    t.cdb[0] = persistent_reserve_in;
    t.cdb[1] = pr_read_full_status;
    put_be(t.cdb.data() + 7, 0xffff, 2);
    t.expected_transfer_bytes = 0xffff;
    return true;
  }
  // READ FULL STATUS: PRGENERATION, ADDITIONAL LENGTH, then per registrant
  // its key, R_HOLDER, TYPE and TransportID (SPC-4 6.16.5).
  const std::size_t got = t.data_in_bytes;
  const std::uint32_t generation = got >= 4 ? static_cast<std::uint32_t>(get_be(in, 4)) : 0;
  const std::size_t end = got >= 8 ? std::min<std::size_t>(got, 8 + get_be(in + 4, 4)) : 0;
  struct registrant {
    std::uint64_t key;
    bool holder;
    std::array<std::uint8_t, 16> host_id;
  };
  std::vector<registrant> registrants;
  std::uint8_t held_type = 0;
  for (std::size_t at = 8; at + 24 <= end;) {
    const std::uint8_t* d = in + at;
    const auto id_bytes = static_cast<std::size_t>(get_be(d + 20, 4));
    const bool holder = (d[12] & 0x01) != 0;
    if (holder) held_type = nvme_type_of(d[13] & 0x0f);
    // The TransportID's name: after its 4-byte header, NUL-terminated.
    std::string_view name;
    if (id_bytes > 4 && at + 28 < end) {
      const auto* n = reinterpret_cast<const char*>(d + 28);
      name = std::string_view(n, strnlen(n, std::min(id_bytes - 4, end - (at + 28))));
    }
    registrants.push_back({get_be(d, 8), holder, host_id_in(name)});
    at += 24 + id_bytes;
  }
  // The Reservation Status data structure (NVMe Base 2.0, 5.25.1; extended
  // with 128-bit host identifiers when EDS).
  const std::size_t header = extended_report_ ? 64 : 24, entry = extended_report_ ? 64 : 24;
  report_.assign(header + registrants.size() * entry, 0);
  std::uint8_t* r = report_.data();
  put32(r, generation);
  r[4] = held_type;
  put16(r + 5, static_cast<std::uint16_t>(std::min<std::size_t>(registrants.size(), 0xffff)));
  r[9] = persist_through_power_loss_ ? 1 : 0;  // PTPLS
  for (std::size_t i = 0; i < registrants.size(); ++i) {
    std::uint8_t* e = r + header + i * entry;
    put16(e, 0xffff);  // CNTLID: the host's controllers, whichever (dynamic model)
    e[2] = registrants[i].holder ? 1 : 0;  // RCSTS
    if (extended_report_) {
      put64(e + 8, registrants[i].key);
      std::memcpy(e + 16, registrants[i].host_id.data(), 16);
    } else {
      std::memcpy(e + 8, registrants[i].host_id.data(), 8);  // the 64-bit form: the first 8 bytes
      put64(e + 16, registrants[i].key);
    }
  }
  if (report_.size() > report_bytes_) report_.resize(report_bytes_);
  to_host_bytes_ = static_cast<std::uint32_t>(report_.size());
  return false;
}

}  // namespace strata::nvme
