#include "target/nvme/log_pages.h"

#include <algorithm>
#include <cstring>

#include "target/nvme/little_endian.h"

namespace strata::nvme {

log_page_request parse_get_log_page(const command_view& c) noexcept {
  log_page_request r;
  const std::uint32_t cdw10 = c.cdw(10);
  r.id = static_cast<std::uint8_t>(cdw10);
  r.specific = static_cast<std::uint8_t>((cdw10 >> 8) & 0x7f);
  r.retain_event = (cdw10 >> 15) & 1;
  const std::uint64_t dwords = ((std::uint64_t{c.cdw(11)} & 0xffff) << 16 | cdw10 >> 16) + 1;
  r.bytes = dwords * 4;
  r.offset_bytes = std::uint64_t{c.cdw(12)} | std::uint64_t{c.cdw(13)} << 32;
  return r;
}

std::expected<std::vector<std::uint8_t>, status> piece(std::span<const std::uint8_t> page,
                                                       const log_page_request& r,
                                                       std::uint64_t max_transfer_bytes) {
  // Checked before anything is allocated: NUMD may ask for 16 GiB.
  if (r.bytes > max_transfer_bytes || r.offset_bytes % 4 != 0)
    return std::unexpected(generic(code::invalid_field));
  std::vector<std::uint8_t> out(r.bytes, 0);
  if (r.offset_bytes < page.size()) {
    const std::size_t n = std::min<std::uint64_t>(r.bytes, page.size() - r.offset_bytes);
    std::memcpy(out.data(), page.data() + r.offset_bytes, n);
  }
  return out;
}

std::vector<std::uint8_t> ana_log(std::uint64_t change_count, std::span<const ana_group> groups,
                                  bool groups_only) {
  std::size_t size = 16;
  for (const ana_group& g : groups) size += 32 + (groups_only ? 0 : 4 * g.nsids.size());
  std::vector<std::uint8_t> d(size, 0);
  put64(d.data() + 0, change_count);
  put16(d.data() + 8, static_cast<std::uint16_t>(groups.size()));
  std::size_t at = 16;
  for (const ana_group& g : groups) {
    put32(d.data() + at, g.id);
    put32(d.data() + at + 4, groups_only ? 0 : static_cast<std::uint32_t>(g.nsids.size()));
    put64(d.data() + at + 8, g.change_count);
    d[at + 16] = static_cast<std::uint8_t>(g.state);
    at += 32;
    if (groups_only) continue;
    for (std::uint32_t id : g.nsids) {
      put32(d.data() + at, id);
      at += 4;
    }
  }
  return d;
}

std::vector<std::uint8_t> discovery_log(std::uint64_t generation,
                                        std::span<const discovery_entry> entries) {
  std::vector<std::uint8_t> d(1024 * (1 + entries.size()), 0);
  put64(d.data() + 0, generation);      // GENCTR
  put64(d.data() + 8, entries.size());  // NUMREC
  put16(d.data() + 16, 0);              // RECFMT
  std::size_t at = 1024;
  for (const discovery_entry& e : entries) {
    d[at + 0] = 3;                              // TRTYPE: TCP
    d[at + 1] = e.ipv6 ? 2 : 1;                 // ADRFAM
    d[at + 2] = e.discovery_subsystem ? 3 : 2;  // SUBTYPE
    // TREQ 0, "not specified" (a host assumes no secure channel), as Linux's
    // nvmet reports a port without TLS: libnvme takes "not required" (2)
    // for "TLS offered", and its connect-all then asks a 6.1 kernel for TLS.
    d[at + 3] = 0;
    put16(d.data() + at + 4, e.port_id);
    put16(d.data() + at + 6, 0xffff);  // CNTLID: the dynamic controller model
    put16(d.data() + at + 8, 32);      // ASQSZ: the admin queue's entries
    put_ascii(d.data() + at + 32, 32, e.service);
    const std::size_t nqn = std::min<std::size_t>(e.subsystem_nqn.size(), 255);
    std::memcpy(d.data() + at + 256, e.subsystem_nqn.data(), nqn);
    put_ascii(d.data() + at + 512, 256, e.address);
    d[at + 768] = 0;  // TSAS: SECTYPE none
    at += 1024;
  }
  return d;
}

std::vector<std::uint8_t> health_log(const health_counters& h) {
  std::vector<std::uint8_t> d(512, 0);
  d[0] = h.degraded ? 0x04 : 0;   // critical warning: reliability degraded
  put16(d.data() + 1, 273 + 25);  // composite temperature, kelvin (the array has no sensor here)
  d[3] = 100;                     // available spare
  d[4] = 10;                      // its threshold
  // Data units: thousands of 512-byte units, rounded up.
  put64(d.data() + 32, (h.bytes_read / 512 + 999) / 1000);
  put64(d.data() + 48, (h.bytes_written / 512 + 999) / 1000);
  put64(d.data() + 64, h.read_commands);
  put64(d.data() + 80, h.write_commands);
  put64(d.data() + 128, h.power_on_hours);
  put64(d.data() + 160, h.media_errors);
  return d;
}

std::vector<std::uint8_t> firmware_slot_log(const std::string& revision) {
  std::vector<std::uint8_t> d(512, 0);
  d[0] = 0x1;  // AFI: slot 1 active
  put_ascii(d.data() + 8, 8, revision);
  return d;
}

std::vector<std::uint8_t> changed_namespace_log(std::span<const std::uint32_t> nsids) {
  std::vector<std::uint8_t> d(4096, 0);
  if (nsids.size() > 1024) {
    put32(d.data() + 0, 0xffffffff);
    return d;
  }
  for (std::size_t i = 0; i < nsids.size(); ++i) put32(d.data() + 4 * i, nsids[i]);
  return d;
}

}  // namespace strata::nvme
