// What the SCSI layer's tests share (scsi_test.cc, scsi_commands_test.cc,
// reservation_test.cc, extended_copy_test.cc): big-endian fields, the CDBs
// more than one of them builds, a command as a transport hands it to a
// logical unit (its task, its Data-Out, a count of its completions), a
// device that holds requests until the test lets them through, and the
// checks on what came back. Each test keeps its own rig: the volumes, the devices between and
// the units differ from one to the next.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "target/scsi/sense.h"
#include "target/scsi/task.h"
#include "tests/raid/device/harness.h"

namespace strata::scsi::testing {

using cdb_bytes = std::array<std::uint8_t, 16>;

// `length_bytes` bytes of `v`, big-endian, into `d` from `at`; and back.
inline void put(std::span<std::uint8_t> d, std::size_t at, std::uint64_t v, int length_bytes) {
  for (int i = length_bytes - 1; i >= 0; --i) {
    d[at + i] = static_cast<std::uint8_t>(v);
    v >>= 8;
  }
}
inline std::uint64_t get(std::span<const std::uint8_t> d, std::size_t at, int length_bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < length_bytes; ++i) v = (v << 8) | d[at + i];
  return v;
}

// The layout the 10-, 12- and 16-byte READ and WRITE CDBs share: OPERATION
// CODE, byte 1 (flags), the LBA from byte 2, then a length field. They
// differ only in how wide the LBA is, and where and how wide the length is.
inline cdb_bytes block_cdb(std::uint8_t op, std::uint8_t byte1, std::uint64_t lba, int lba_bytes,
                           std::uint64_t length, std::size_t length_at, int length_bytes) {
  cdb_bytes c{op, byte1};
  put(c, 2, lba, lba_bytes);
  put(c, length_at, length, length_bytes);
  return c;
}
inline cdb_bytes cdb10(std::uint8_t op, std::uint64_t lba, std::uint16_t length,
                       std::uint8_t byte1 = 0) {
  return block_cdb(op, byte1, lba, 4, length, 7, 2);
}
inline cdb_bytes cdb12(std::uint8_t op, std::uint64_t lba, std::uint32_t length,
                       std::uint8_t byte1 = 0) {
  return block_cdb(op, byte1, lba, 4, length, 6, 4);
}
inline cdb_bytes cdb16(std::uint8_t op, std::uint64_t lba, std::uint32_t length,
                       std::uint8_t byte1 = 0) {
  return block_cdb(op, byte1, lba, 8, length, 10, 4);
}

inline cdb_bytes inquiry_cdb(bool evpd, std::uint8_t page, std::uint16_t allocation_length = 4096) {
  cdb_bytes c{0x12, static_cast<std::uint8_t>(evpd ? 0x01 : 0x00), page};
  put(c, 3, allocation_length, 2);
  return c;
}
// REPORT SUPPORTED OPERATION CODES (MAINTENANCE IN, service action 0Ch),
// with room for 8192 bytes.
// READ CAPACITY(16): SERVICE ACTION IN(16), service action 10h, room for the 32 bytes.
inline cdb_bytes read_capacity_16_cdb() {
  cdb_bytes c{};
  c[0] = 0x9e;
  c[1] = 0x10;
  c[13] = 32;
  return c;
}

inline cdb_bytes rsoc(std::uint8_t options, std::uint8_t opcode, std::uint16_t service_action) {
  cdb_bytes c{0xa3, 0x0c, options, opcode};
  put(c, 4, service_action, 2);
  put(c, 6, 8192, 4);
  return c;
}

// One command as a transport sends it, and what came back.
struct command {
  task t;
  device::aligned_buffer out;  // the Data-Out t.data_out points into
  std::string port;            // the initiator port name t.nexus points into (set_nexus)
  int completions = 0;

  command() {
    t.context = this;
    t.on_complete = [](task& x) noexcept { ++static_cast<command*>(x.context)->completions; };
  }
  command(const command&) = delete;

  // Gives the task a copy of `data` as its Data-Out (in a buffer of its own,
  // so never a null span, even when empty), and, as a transport does, the
  // length of it as the expected transfer length.
  void set_data_out(std::span<const std::byte> data) {
    out = device::aligned_buffer(std::max<std::size_t>(data.size(), 1));
    if (!data.empty()) std::memcpy(out.data(), data.data(), data.size());
    t.data_out = out.bytes().first(data.size());
    t.expected_transfer_bytes = static_cast<std::uint32_t>(data.size());
  }
  // Sends the task through `n`, with a copy of its port name: an i_t_nexus
  // only points at one, which must outlive the task.
  void set_nexus(const i_t_nexus& n) {
    port = std::string(n.initiator_port);
    t.nexus = i_t_nexus{port, n.relative_target_port};
  }

  std::span<const std::uint8_t> data() const {
    return {reinterpret_cast<const std::uint8_t*>(t.data_in.data()), t.data_in_bytes};
  }
  std::vector<std::byte> data_bytes() const {
    return {t.data_in.data(), t.data_in.data() + t.data_in_bytes};
  }
};

// Holds every request until the test lets it through, so that a test sees
// exactly which requests a unit has issued, and when. Open, it passes them
// straight on.
class gate_device final : public device::block_device {
 public:
  explicit gate_device(device::block_device& below) : below_(below) {}
  const device::block_geometry& geometry() const noexcept override { return below_.geometry(); }
  boost::asio::any_io_executor executor() const noexcept override { return below_.executor(); }
  void submit(device::request& req) noexcept override {
    if (open_) return below_.submit(req);
    held_.push_back(&req);
  }

  void close() { open_ = false; }
  void open() {
    open_ = true;
    release_all();
  }
  const std::vector<device::request*>& held() const { return held_; }
  // Lets every held request through (they complete later, from the loop).
  void release_all() {
    const std::vector<device::request*> going = std::move(held_);
    held_.clear();
    for (device::request* r : going) below_.submit(*r);
  }

 private:
  device::block_device& below_;
  bool open_ = true;
  std::vector<device::request*> held_;
};

// Runs the loop until `c`, already executed, completes; checks it completed
// exactly once.
inline void finish(device::testing::test_loop& loop, const command& c) {
  loop.run_until([&] { return c.completions > 0; });
  loop.settle();
  REQUIRE(c.completions == 1);  // exactly once
}

inline std::string describe(const command& c) {
  return "status " + std::to_string(static_cast<int>(c.t.result)) + " sense key " +
         std::to_string(static_cast<int>(c.t.sense_data.key)) + " asc " +
         std::to_string(c.t.sense_data.asc) + " ascq " + std::to_string(c.t.sense_data.ascq);
}
inline void require_good(const command& c) {
  INFO(describe(c));
  REQUIRE(c.t.result == status::good);
}
inline void require_sense(const command& c, sense_key key, additional_sense code) {
  INFO(describe(c));
  REQUIRE(c.t.result == status::check_condition);
  CHECK(c.t.sense_data.key == key);
  CHECK(c.t.sense_data.asc == code.asc);
  CHECK(c.t.sense_data.ascq == code.ascq);
}

inline bool all_zero(std::span<const std::byte> v) {
  return std::all_of(v.begin(), v.end(), [](std::byte b) { return b == std::byte{0}; });
}

}  // namespace strata::scsi::testing
