#include "target/scsi/reservations.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string_view>

#include "target/crc32c.h"
#include "target/scsi/big_endian.h"
#include "target/scsi/logical_unit.h"

namespace strata::scsi {

namespace {

// PERSISTENT RESERVE OUT service actions.
enum out_action : std::uint8_t {
  register_key = 0x0,
  reserve_unit = 0x1,
  release_unit = 0x2,
  clear_all = 0x3,
  preempt = 0x4,
  preempt_and_abort = 0x5,
  register_and_ignore_existing_key = 0x6,
  register_and_move = 0x7,
};

bool valid_type(std::uint8_t code) noexcept {
  return code == 1 || code == 3 || code == 5 || code == 6 || code == 7 || code == 8;
}
bool all_registrants(pr_type t) noexcept {
  return t == pr_type::write_exclusive_all_registrants ||
         t == pr_type::exclusive_access_all_registrants;
}
bool registrants_only(pr_type t) noexcept {
  return t == pr_type::write_exclusive_registrants_only ||
         t == pr_type::exclusive_access_registrants_only;
}
// Write Exclusive, Write Exclusive - Registrants Only, - All Registrants:
// nexuses that hold nothing may still read.
bool write_exclusive_kind(pr_type t) noexcept {
  return t == pr_type::write_exclusive || t == pr_type::write_exclusive_registrants_only ||
         t == pr_type::write_exclusive_all_registrants;
}

bool matches(const registration& r, const i_t_nexus& n) noexcept {
  return r.initiator_port == n.initiator_port &&
         (r.all_target_ports || r.relative_port == n.relative_target_port);
}
// Two registrations that would cover a common I_T nexus.
bool overlap(const registration& a, const registration& b) noexcept {
  return a.initiator_port == b.initiator_port &&
         (a.all_target_ports || b.all_target_ports || a.relative_port == b.relative_port);
}
bool same(const registration& a, const registration& b) noexcept {
  return a.initiator_port == b.initiator_port && a.relative_port == b.relative_port &&
         a.all_target_ports == b.all_target_ports;
}

int find(const reservation_state& s, const i_t_nexus& n) noexcept {
  for (std::size_t i = 0; i < s.registrations.size(); ++i) {
    if (matches(s.registrations[i], n)) return static_cast<int>(i);
  }
  return -1;
}

bool is_holder(const reservation_state& s, std::size_t i) noexcept {
  return s.reservation && (all_registrants(*s.reservation) || s.registrations[i].holder);
}

// An iSCSI TransportID (SPC-4 7.6.4.6) for an initiator port: format 01b
// (name, ",i,0x", ISID) when the port name carries an ISID, else format
// 00b (the name alone). Null-terminated, padded to a multiple of 4 bytes,
// at least 20 bytes after the header.
std::vector<std::uint8_t> transport_id(std::string_view initiator_port) {
  const bool with_isid = initiator_port.find(",i,0x") != std::string_view::npos;
  std::size_t body_bytes = (initiator_port.size() + 1 + 3) / 4 * 4;
  body_bytes = std::max<std::size_t>(body_bytes, 20);
  be_writer w;
  w.u8((with_isid ? 0x40 : 0x00) | 0x05);  // FORMAT CODE, PROTOCOL IDENTIFIER 5h: iSCSI
  w.u8(0);
  w.be(body_bytes, 2);
  w.append(initiator_port);
  w.bytes.resize(4 + body_bytes, 0);
  return w.bytes;
}

// The initiator port an iSCSI TransportID of format 01b names, and how many
// bytes it takes; empty if `p` does not start with one.
std::optional<std::pair<std::string, std::size_t>> parse_transport_id(
    std::span<const std::uint8_t> p) {
  if (p.size() < 4) return std::nullopt;
  const std::uint8_t format = p[0] >> 6;
  const std::uint8_t protocol = p[0] & 0x0f;
  if (protocol != 0x5 || format != 0x1) return std::nullopt;
  const std::size_t body_bytes = get_be(p.data() + 2, 2);
  if (body_bytes < 20 || body_bytes % 4 != 0 || 4 + body_bytes > p.size()) return std::nullopt;
  const auto body = p.subspan(4, body_bytes);
  const auto nul = std::find(body.begin(), body.end(), std::uint8_t{0});
  if (nul == body.end()) return std::nullopt;
  std::string name(body.begin(), nul);
  // "<iSCSI name>,i,0x<ISID>": the ISID is 12 hex digits, kept lowercase
  // as the transport writes them.
  const std::size_t separator = name.rfind(",i,0x");
  if (separator == std::string::npos || separator == 0 || name.size() != separator + 5 + 12 ||
      name.size() > reservations::max_initiator_port_bytes)
    return std::nullopt;
  for (std::size_t i = separator + 5; i < name.size(); ++i) {
    const char c = name[i];
    if (c >= 'A' && c <= 'F') {
      name[i] = static_cast<char>(c - 'A' + 'a');
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return std::nullopt;
    }
  }
  return std::pair{std::move(name), 4 + body_bytes};
}

constexpr std::uint8_t state_magic[4] = {'S', 'P', 'R', 'S'};
constexpr std::uint16_t state_version = 1;
constexpr std::size_t state_header_bytes = 14;
constexpr std::size_t state_crc_bytes = 4;

}  // namespace

// ---------------------------------------------------------------------------
// The saved state

std::vector<std::uint8_t> encode_reservation_state(const reservation_state& s) {
  be_writer w;
  w.bytes.assign(std::begin(state_magic), std::end(state_magic));
  w.be(state_version, 2);
  w.u8(s.aptpl ? 0x01 : 0x00);
  w.u8(s.reservation ? static_cast<std::uint8_t>(*s.reservation) : 0);
  w.be(s.generation, 4);
  w.be(s.registrations.size(), 2);
  for (const registration& r : s.registrations) {
    w.be(r.key, 8);
    w.be(r.all_target_ports ? 0 : r.relative_port, 2);
    w.u8((r.all_target_ports ? 0x01 : 0x00) | (r.holder ? 0x02 : 0x00));
    w.u8(r.initiator_port.size());
    w.append(r.initiator_port);
  }
  w.be(crc32c(w.bytes), 4);
  return w.bytes;
}

std::expected<reservation_state, error> decode_reservation_state(std::span<const std::uint8_t> b) {
  auto bad = [](const std::string& why) {
    return std::unexpected(
        make_error(errc::invalid_argument, "persistent reservation state: " + why));
  };
  if (b.size() < state_header_bytes + state_crc_bytes)
    return bad("too short (" + std::to_string(b.size()) + " bytes)");
  if (!std::equal(std::begin(state_magic), std::end(state_magic), b.begin()))
    return bad("not a reservation state (bad magic)");
  const auto version = get_be(b.data() + 4, 2);
  if (version != state_version) return bad("unsupported version " + std::to_string(version));
  const std::size_t end = b.size() - state_crc_bytes;
  if (get_be(b.data() + end, 4) != crc32c(b.first(end))) return bad("checksum mismatch");
  const std::uint8_t flags = b[6];
  const std::uint8_t type = b[7];
  if ((flags & ~0x01) != 0) return bad("unknown flags");
  if (type != 0 && !valid_type(type))
    return bad("unknown reservation type " + std::to_string(type));
  reservation_state s;
  s.aptpl = (flags & 0x01) != 0;
  if (type != 0) s.reservation = static_cast<pr_type>(type);
  s.generation = static_cast<std::uint32_t>(get_be(b.data() + 8, 4));
  const std::size_t count = get_be(b.data() + 12, 2);
  if (count > reservations::max_registrations) return bad("too many registrations");
  std::size_t at = state_header_bytes;
  std::size_t holders = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (at + 12 > end) return bad("truncated registration");
    registration r;
    r.key = get_be(b.data() + at, 8);
    r.relative_port = static_cast<std::uint16_t>(get_be(b.data() + at + 8, 2));
    const std::uint8_t reg_flags = b[at + 10];
    const std::size_t name_bytes = b[at + 11];
    at += 12;
    if (at + name_bytes > end) return bad("truncated registration");
    r.initiator_port.assign(b.begin() + at, b.begin() + at + name_bytes);
    at += name_bytes;
    if (r.key == 0) return bad("a zero reservation key");
    if ((reg_flags & ~0x03) != 0) return bad("unknown registration flags");
    r.all_target_ports = (reg_flags & 0x01) != 0;
    r.holder = (reg_flags & 0x02) != 0;
    if (r.all_target_ports && r.relative_port != 0)
      return bad("a relative target port with ALL_TG_PT");
    holders += r.holder ? 1 : 0;
    for (const registration& other : s.registrations) {
      if (overlap(other, r)) return bad("two registrations of one I_T nexus");
    }
    s.registrations.push_back(std::move(r));
  }
  if (at != end) return bad("trailing bytes");
  const std::size_t holders_expected = s.reservation && !all_registrants(*s.reservation) ? 1 : 0;
  if (holders != holders_expected) return bad("reservation holder does not match the reservation");
  if (s.reservation && s.registrations.empty()) return bad("a reservation without registrations");
  return s;
}

// ---------------------------------------------------------------------------
// Access

access_class classify_access(const std::array<std::uint8_t, 16>& cdb) noexcept {
  const std::uint8_t service_action = cdb[1] & 0x1f;
  switch (cdb[0]) {
    // The SPC-4 and SBC-3 tables: allowed from every nexus.
    case 0x00:  // TEST UNIT READY
    case 0x03:  // REQUEST SENSE
    case 0x12:  // INQUIRY
    case 0x25:  // READ CAPACITY(10)
    case 0x4d:  // LOG SENSE
    case 0x5e:  // PERSISTENT RESERVE IN
    case 0x86:  // ACCESS CONTROL IN
    case 0x87:  // ACCESS CONTROL OUT
    case 0xa0:  // REPORT LUNS
      return access_class::any;
    case 0x1b:  // START STOP UNIT: only START=1 with POWER CONDITION 0h
      return (cdb[4] & 0x01) != 0 && (cdb[4] >> 4) == 0 ? access_class::any : access_class::write;
    case 0x1e:  // PREVENT ALLOW MEDIUM REMOVAL: only PREVENT 00b
      return (cdb[4] & 0x03) == 0 ? access_class::any : access_class::write;
    case 0x9e:  // SERVICE ACTION IN(16)
      switch (service_action) {
        case 0x10:  // READ CAPACITY(16)
          return access_class::any;
        case 0x11:  // READ LONG(16)
        case 0x12:  // GET LBA STATUS
        case 0x13:  // REPORT REFERRALS
          return access_class::read;
        default:
          return access_class::write;
      }
    case 0xa3:  // MAINTENANCE IN
      switch (service_action) {
        case 0x05:  // REPORT IDENTIFYING INFORMATION
        case 0x0a:  // REPORT TARGET PORT GROUPS
        case 0x0b:  // REPORT ALIASES
        case 0x0e:  // REPORT PRIORITY
        case 0x0f:  // REPORT TIMESTAMP
          return access_class::any;
        case 0x0c:  // REPORT SUPPORTED OPERATION CODES
        case 0x0d:  // REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS
        case 0x10:  // MANAGEMENT PROTOCOL IN
          return access_class::read;
        default:
          return access_class::write;
      }
    case 0xab:  // SERVICE ACTION IN(12): READ MEDIA SERIAL NUMBER
      return service_action == 0x01 ? access_class::any : access_class::write;

    // Allowed under the Write Exclusive types only: they read.
    case 0x08:  // READ(6)
    case 0x28:  // READ(10)
    case 0xa8:  // READ(12)
    case 0x88:  // READ(16)
    case 0x2f:  // VERIFY(10)
    case 0xaf:  // VERIFY(12)
    case 0x8f:  // VERIFY(16)
    case 0x34:  // PRE-FETCH(10)
    case 0x90:  // PRE-FETCH(16)
    case 0x37:  // READ DEFECT DATA(10)
    case 0xb7:  // READ DEFECT DATA(12)
    case 0x3e:  // READ LONG(10)
    case 0x1a:  // MODE SENSE(6)
    case 0x5a:  // MODE SENSE(10)
    case 0x1c:  // RECEIVE DIAGNOSTIC RESULTS
    case 0x3c:  // READ BUFFER(10)
    case 0x9b:  // READ BUFFER(16)
    case 0x8c:  // READ ATTRIBUTE
    case 0xa2:  // SECURITY PROTOCOL IN
      return access_class::read;
    case 0x7f: {  // variable length: READ(32), VERIFY(32) read, the rest write
      const auto sa32 = get_be(cdb.data() + 8, 2);
      return sa32 == 0x0009 || sa32 == 0x000a ? access_class::read : access_class::write;
    }

    case 0x5f:  // PERSISTENT RESERVE OUT
      return access_class::persistent_reserve_out;
    case 0x16:  // RESERVE(6)
    case 0x17:  // RELEASE(6)
    case 0x56:  // RESERVE(10)
    case 0x57:  // RELEASE(10)
      return access_class::spc2_reservation;

    // Everything else changes the medium or the unit: WRITE(6/10/12/16),
    // WRITE AND VERIFY, WRITE SAME, UNMAP, SYNCHRONIZE CACHE, COMPARE AND
    // WRITE, ORWRITE, WRITE ATOMIC, FORMAT UNIT, SANITIZE, MODE SELECT, LOG
    // SELECT, WRITE BUFFER, SEND DIAGNOSTIC, EXTENDED COPY, RECEIVE COPY
    // RESULTS, MAINTENANCE OUT, ... and what this table does not know.
    default:
      return access_class::write;
  }
}

// ---------------------------------------------------------------------------

// A PERSISTENT RESERVE OUT decided but not yet saved: the state it leaves
// and the unit attentions to establish once it is saved.
struct reservations::change {
  struct attention {
    registration to;  // its nexus (or, with all_target_ports, its initiator port's)
    additional_sense code;
  };
  reservation_state next;
  std::vector<attention> attentions;

  void attend(const registration& r, additional_sense code) { attentions.push_back({r, code}); }
};

reservations::reservations(unit_attentions& attentions, unit_state_store* store,
                           std::uint16_t relative_port, std::function<void(task&)> complete)
    : attentions_(attentions),
      store_(store),
      relative_port_(relative_port),
      complete_(std::move(complete)) {}

reservations::~reservations() = default;

bool reservations::allows(task& t) const {
  const access_class kind = classify_access(t.cdb);
  if (spc2_holder_ && !spc2_reserved_by(t.nexus)) {
    const std::uint8_t op = t.cdb[0];
    const bool exempt = op == 0x12 || op == 0x03 || op == 0xa0 || op == 0x17 || op == 0x57 ||
                        (op == 0xa3 && (t.cdb[1] & 0x1f) == 0x0a);
    if (!exempt) {
      t.result = status::reservation_conflict;
      return false;
    }
  }
  if (!state_.reservation) return true;
  const pr_type type = *state_.reservation;
  const int i = find(state_, t.nexus);
  // The holder may do anything; so may every registrant under the
  // registrants-only and all-registrants types.
  if (i >= 0 && (state_.registrations[i].holder || registrants_only(type) || all_registrants(type)))
    return true;
  switch (kind) {
    case access_class::any:
    case access_class::persistent_reserve_out:
    case access_class::spc2_reservation:
      return true;
    case access_class::read:
      if (write_exclusive_kind(type)) return true;
      break;
    case access_class::write:
      break;
  }
  t.result = status::reservation_conflict;
  return false;
}

// ---------------------------------------------------------------------------
// PERSISTENT RESERVE IN

void reservations::persistent_reserve_in(task& t) {
  if (spc2_holder_) {
    t.result = status::reservation_conflict;
    return;
  }
  const std::uint8_t action = t.cdb[1] & 0x1f;
  const auto allocation_length = static_cast<std::uint32_t>(get_be(t.cdb.data() + 7, 2));
  const reservation_state& s = state_;
  be_writer r;
  switch (action) {
    case 0x00:  // READ KEYS
      r.be(s.generation, 4);
      r.be(8 * s.registrations.size(), 4);
      for (const registration& reg : s.registrations) r.be(reg.key, 8);
      break;
    case 0x01:  // READ RESERVATION
      r.be(s.generation, 4);
      if (!s.reservation) {
        r.be(0, 4);
        break;
      }
      r.be(16, 4);
      {
        // The all-registrants types have no one key: SPC-4 has it 0.
        std::uint64_t key = 0;
        if (!all_registrants(*s.reservation)) {
          for (const registration& reg : s.registrations) {
            if (reg.holder) key = reg.key;
          }
        }
        r.be(key, 8);
      }
      r.be(0, 4);                                       // obsolete
      r.u8(0);                                          // reserved
      r.u8(static_cast<std::uint8_t>(*s.reservation));  // SCOPE 0h (LU_SCOPE), TYPE
      r.be(0, 2);                                       // obsolete
      break;
    case 0x02:  // REPORT CAPABILITIES
      r.be(8, 2);
      // CRH (the SPC-2 exceptions), SIP_C, ATP_C; PTPL_C when there is
      // somewhere to persist.
      r.u8(0x10 | 0x08 | 0x04 | (store_ != nullptr ? 0x01 : 0x00));
      // TMV; ALLOW COMMANDS 001b (TEST UNIT READY passes Write Exclusive and
      // Exclusive Access); PTPL_A.
      r.u8(0x80 | 0x10 | (s.aptpl ? 0x01 : 0x00));
      r.u8(0x80 | 0x40 | 0x20 | 0x08 | 0x02);  // WR_EX_AR, EX_AC_RO, WR_EX_RO, EX_AC, WR_EX
      r.u8(0x01);                              // EX_AC_AR
      r.be(0, 2);
      break;
    case 0x03: {  // READ FULL STATUS
      r.be(s.generation, 4);
      r.be(0, 4);  // ADDITIONAL LENGTH, patched below
      for (std::size_t i = 0; i < s.registrations.size(); ++i) {
        const registration& reg = s.registrations[i];
        const bool holder = is_holder(s, i);
        r.be(reg.key, 8);
        r.be(0, 4);
        r.u8((reg.all_target_ports ? 0x02 : 0x00) | (holder ? 0x01 : 0x00));  // ALL_TG_PT, R_HOLDER
        r.u8(holder ? static_cast<std::uint8_t>(*s.reservation) : 0);         // SCOPE, TYPE
        r.be(0, 4);
        r.be(reg.all_target_ports ? 0 : reg.relative_port, 2);
        const auto id = transport_id(reg.initiator_port);
        r.be(id.size(), 4);
        r.bytes.insert(r.bytes.end(), id.begin(), id.end());
      }
      r.patch(4, r.bytes.size() - 8, 4);
      break;
    }
    default:
      set_check_condition(t, illegal_request(asc::invalid_field_in_cdb));
      return;
  }
  if (!set_data_in(t, r.bytes, allocation_length)) t.result = status::busy;
}

// ---------------------------------------------------------------------------
// PERSISTENT RESERVE OUT

void reservations::persistent_reserve_out(task& t) {
  waiting_.push_back(&t);
  drain();
}

void reservations::drain() {
  // One at a time, in arrival order; a save that completes inside save()
  // comes back here through on_saved() and is picked up by this loop.
  if (draining_) return;
  draining_ = true;
  while (!saving_ && !waiting_.empty()) {
    task& t = *waiting_.front();
    waiting_.pop_front();
    start_out(t);
  }
  draining_ = false;
}

void reservations::start_out(task& t) noexcept {
  try {
    auto c = std::make_unique<change>();
    if (!prepare(t, *c)) return complete_(t);
    if (store_ == nullptr) {
      commit(*c);
      return complete_(t);
    }
    std::vector<std::uint8_t> bytes = encode_reservation_state(c->next);
    saving_ = true;
    saving_task_ = &t;
    saving_change_ = std::move(c);
    store_->save(std::move(bytes), [this](std::error_code ec) { on_saved(ec); });
  } catch (const std::bad_alloc&) {
    // Nothing changed: the state is committed only after the save.
    if (saving_task_ == &t) {
      saving_ = false;
      saving_task_ = nullptr;
      saving_change_.reset();
    }
    t.result = status::busy;
    complete_(t);
  }
}

void reservations::on_saved(std::error_code ec) {
  task* t = saving_task_;
  const std::unique_ptr<change> c = std::move(saving_change_);
  saving_ = false;
  saving_task_ = nullptr;
  if (t != nullptr) {
    if (ec) {
      // Not saved: the state stays as it was, and the command says why.
      t->result = status_for(ec);
      if (t->result == status::check_condition) t->sense_data = sense_for(ec, device::op::write);
    } else {
      commit(*c);
    }
    complete_(*t);
  }
  drain();
}

void reservations::commit(change& c) {
  state_ = std::move(c.next);
  for (const change::attention& a : c.attentions) {
    if (a.to.all_target_ports) {
      attentions_.establish_all_ports(a.to.initiator_port, relative_port_, a.code);
    } else {
      attentions_.establish(i_t_nexus{a.to.initiator_port, a.to.relative_port}, a.code);
    }
  }
}

bool reservations::prepare(task& t, change& c) {
  const std::uint8_t* cdb = t.cdb.data();
  auto fail = [&](additional_sense code) {
    set_check_condition(t, illegal_request(code));
    return false;
  };
  auto conflict = [&] {
    t.result = status::reservation_conflict;
    return false;
  };
  if (spc2_holder_) return conflict();  // SPC-2 5.5.1, as for PERSISTENT RESERVE IN

  const std::uint8_t action = cdb[1] & 0x1f;
  const std::uint8_t scope = cdb[2] >> 4;
  const std::uint8_t type_code = cdb[2] & 0x0f;
  const auto list_bytes = static_cast<std::uint32_t>(get_be(cdb + 5, 4));
  if (action > register_and_move) return fail(asc::invalid_field_in_cdb);
  const bool typed = action == reserve_unit || action == release_unit || action == preempt ||
                     action == preempt_and_abort;
  if (typed && (scope != 0 || !valid_type(type_code))) return fail(asc::invalid_field_in_cdb);
  if (list_bytes < 24) return fail(asc::parameter_list_length_error);
  if (t.data_out.size() < list_bytes) return fail(asc::invalid_field_in_command_iu);

  const auto* p = reinterpret_cast<const std::uint8_t*>(t.data_out.data());
  const std::uint64_t key = get_be(p, 8);              // RESERVATION KEY
  const std::uint64_t service_key = get_be(p + 8, 8);  // SERVICE ACTION RESERVATION KEY
  bool spec_i_pt = false, all_tg_pt = false, aptpl = false, unregister_source = false;
  std::uint16_t move_port = 0;
  std::span<const std::uint8_t> transport_ids;
  if (action == register_and_move) {
    unregister_source = (p[17] & 0x02) != 0;
    aptpl = (p[17] & 0x01) != 0;
    move_port = static_cast<std::uint16_t>(get_be(p + 18, 2));
    const std::uint64_t ids_bytes = get_be(p + 20, 4);
    if (24 + ids_bytes > list_bytes) return fail(asc::parameter_list_length_error);
    transport_ids = std::span(p + 24, ids_bytes);
  } else {
    spec_i_pt = (p[20] & 0x08) != 0;
    all_tg_pt = (p[20] & 0x04) != 0;
    aptpl = (p[20] & 0x01) != 0;
    if (spec_i_pt && action != register_key) return fail(asc::invalid_field_in_parameter_list);
    if (!spec_i_pt && list_bytes != 24) return fail(asc::parameter_list_length_error);
    if (spec_i_pt) {
      if (list_bytes < 28) return fail(asc::parameter_list_length_error);
      const std::uint64_t ids_bytes = get_be(p + 24, 4);
      if (28 + ids_bytes > list_bytes) return fail(asc::parameter_list_length_error);
      transport_ids = std::span(p + 28, ids_bytes);
    }
  }
  const bool registers = action == register_key || action == register_and_ignore_existing_key ||
                         action == register_and_move;
  if (registers && aptpl && store_ == nullptr) return fail(asc::invalid_field_in_parameter_list);

  c.next = state_;
  reservation_state& s = c.next;
  const int self = find(s, t.nexus);
  // Every service action but the two REGISTERs needs the nexus registered
  // with the key it gives.
  if (action != register_key && action != register_and_ignore_existing_key &&
      (self < 0 || s.registrations[self].key != key))
    return conflict();

  switch (action) {
    case register_key:
    case register_and_ignore_existing_key: {
      const bool ignore_key = action == register_and_ignore_existing_key;
      if (self >= 0) {
        registration& mine = s.registrations[self];
        if (!ignore_key && key != mine.key) return conflict();
        if (spec_i_pt) return fail(asc::invalid_field_in_parameter_list);
        if (service_key != 0) {
          mine.key = service_key;
        } else {
          // Unregistering. The holder of a reservation that is not
          // all-registrants releases it; for registrants-only, the others
          // hear of it (RESERVATIONS RELEASED).
          const registration gone = mine;
          s.registrations.erase(s.registrations.begin() + self);
          if (s.reservation) {
            const pr_type type = *s.reservation;
            if (all_registrants(type)) {
              if (s.registrations.empty()) s.reservation.reset();
            } else if (gone.holder) {
              s.reservation.reset();
              if (registrants_only(type)) {
                for (const registration& r : s.registrations)
                  c.attend(r, asc::reservations_released);
              }
            }
          }
        }
      } else {
        if (!ignore_key && key != 0) return conflict();
        if (service_key == 0) {
          // Nothing to unregister: GOOD, and nothing changes (PRgeneration included).
          if (spec_i_pt) return fail(asc::invalid_field_in_parameter_list);
          return false;
        }
        registration mine;
        mine.initiator_port = std::string(t.nexus.initiator_port);
        mine.all_target_ports = all_tg_pt;
        mine.relative_port = all_tg_pt ? 0 : t.nexus.relative_target_port;
        mine.key = service_key;
        if (mine.initiator_port.size() > max_initiator_port_bytes)
          return fail(asc::insufficient_registration_resources);
        // Through another target port already: one registration per nexus.
        for (const registration& r : s.registrations) {
          if (overlap(r, mine)) return conflict();
        }
        s.registrations.push_back(mine);
        // SPEC_I_PT: the same key for each initiator port named, on this
        // target port (every port with ALL_TG_PT).
        for (std::size_t at = 0; at < transport_ids.size();) {
          auto id = parse_transport_id(transport_ids.subspan(at));
          if (!id) return fail(asc::invalid_field_in_parameter_list);
          registration other = mine;
          other.initiator_port = std::move(id->first);
          for (const registration& r : s.registrations) {
            if (overlap(r, other)) return fail(asc::invalid_field_in_parameter_list);
          }
          s.registrations.push_back(std::move(other));
          at += id->second;
        }
        if (s.registrations.size() > max_registrations)
          return fail(asc::insufficient_registration_resources);
      }
      s.aptpl = aptpl;
      ++s.generation;
      return true;
    }

    case reserve_unit: {
      const auto type = static_cast<pr_type>(type_code);
      if (s.reservation) {
        // The holder asking again for the same: nothing to do. A different
        // type or another holder: RESERVATION CONFLICT.
        if (is_holder(s, self) && *s.reservation == type) return false;
        return conflict();
      }
      s.reservation = type;
      if (!all_registrants(type)) s.registrations[self].holder = true;
      return true;  // PRgeneration counts registrations only
    }

    case release_unit: {
      if (!s.reservation || !is_holder(s, self)) return false;  // GOOD, nothing to release
      const pr_type type = *s.reservation;
      if (static_cast<std::uint8_t>(type) != type_code)
        return fail(asc::invalid_release_of_persistent_reservation);
      s.reservation.reset();
      s.registrations[self].holder = false;
      if (registrants_only(type) || all_registrants(type)) {
        for (std::size_t i = 0; i < s.registrations.size(); ++i) {
          if (static_cast<int>(i) != self) c.attend(s.registrations[i], asc::reservations_released);
        }
      }
      return true;
    }

    case clear_all: {
      for (std::size_t i = 0; i < s.registrations.size(); ++i) {
        if (static_cast<int>(i) != self) c.attend(s.registrations[i], asc::reservations_preempted);
      }
      s.registrations.clear();
      s.reservation.reset();
      ++s.generation;
      return true;
    }

    case preempt:
    case preempt_and_abort: {
      // PREEMPT AND ABORT would also abort the preempted nexuses' commands;
      // this unit has no abort (reservations.h), so it preempts.
      const registration me = s.registrations[self];
      const auto type = static_cast<pr_type>(type_code);
      // Removes the registrations with `k` (but the sender's own when
      // keep_me), telling each removed nexus but the sender. Returns how many.
      auto remove_key = [&](std::uint64_t k, bool keep_me) {
        std::size_t removed = 0;
        std::erase_if(s.registrations, [&](const registration& r) {
          if (r.key != k || (keep_me && same(r, me))) return false;
          if (!same(r, me)) c.attend(r, asc::registrations_preempted);
          ++removed;
          return true;
        });
        return removed;
      };
      auto take_reservation = [&](pr_type new_type) {
        const pr_type old_type = *s.reservation;
        s.reservation = new_type;
        for (registration& r : s.registrations)
          r.holder = !all_registrants(new_type) && same(r, me);
        // A changed type is a released reservation to those who stay.
        if (old_type != new_type) {
          for (const registration& r : s.registrations) {
            if (!same(r, me)) c.attend(r, asc::reservations_released);
          }
        }
      };
      if (!s.reservation) {
        if (service_key == 0) return fail(asc::invalid_field_in_parameter_list);
        if (remove_key(service_key, false) == 0) return conflict();
      } else if (all_registrants(*s.reservation)) {
        if (service_key == 0) {
          // Everyone else goes, and the sender takes the reservation.
          std::erase_if(s.registrations, [&](const registration& r) {
            if (same(r, me)) return false;
            c.attend(r, asc::registrations_preempted);
            return true;
          });
          take_reservation(type);
        } else {
          if (remove_key(service_key, false) == 0) return conflict();
          if (s.registrations.empty()) s.reservation.reset();
        }
      } else {
        const auto holder = std::find_if(s.registrations.begin(), s.registrations.end(),
                                         [](const registration& r) { return r.holder; });
        if (holder != s.registrations.end() && service_key == holder->key) {
          remove_key(service_key, true);
          take_reservation(type);
        } else {
          if (service_key == 0) return fail(asc::invalid_field_in_parameter_list);
          if (remove_key(service_key, false) == 0) return conflict();
        }
      }
      ++s.generation;
      return true;
    }

    case register_and_move: {
      if (!s.reservation || all_registrants(*s.reservation) || !s.registrations[self].holder)
        return conflict();
      if (service_key == 0 || move_port == 0) return fail(asc::invalid_field_in_parameter_list);
      auto id = parse_transport_id(transport_ids);
      if (!id) return fail(asc::invalid_field_in_parameter_list);
      const i_t_nexus destination{id->first, move_port};
      if (matches(s.registrations[self], destination))
        return fail(asc::invalid_field_in_parameter_list);
      int d = find(s, destination);
      if (d < 0) {
        if (s.registrations.size() >= max_registrations)
          return fail(asc::insufficient_registration_resources);
        registration r;
        r.initiator_port = id->first;
        r.relative_port = move_port;
        s.registrations.push_back(std::move(r));
        d = static_cast<int>(s.registrations.size() - 1);
      }
      s.registrations[d].key = service_key;
      s.registrations[self].holder = false;
      s.registrations[d].holder = true;  // same type and scope
      if (unregister_source) s.registrations.erase(s.registrations.begin() + self);
      s.aptpl = aptpl;
      ++s.generation;
      return true;
    }
  }
  return fail(asc::invalid_field_in_cdb);
}

// ---------------------------------------------------------------------------
// RESERVE and RELEASE (SPC-2)

bool reservations::spc2_applies(task& t) const {
  const int i = find(state_, t.nexus);
  if (state_.reservation && i >= 0 &&
      (state_.registrations[i].holder || registrants_only(*state_.reservation) ||
       all_registrants(*state_.reservation)))
    return false;  // GOOD, and neither reservation changes
  if (!state_.registrations.empty()) {
    t.result = status::reservation_conflict;
    return false;
  }
  return true;
}

void reservations::reserve(task& t) {
  // Third-party reservations (3RDPTY, LONGID) and extents are not supported.
  const std::uint8_t unsupported = t.cdb[0] == 0x56 ? 0x13 : 0x11;
  if ((t.cdb[1] & unsupported) != 0)
    return set_check_condition(t, illegal_request(asc::invalid_field_in_cdb));
  if (!spc2_applies(t)) return;
  if (spc2_holder_ && !spc2_reserved_by(t.nexus)) {
    t.result = status::reservation_conflict;
    return;
  }
  spc2_holder_.emplace(std::string(t.nexus.initiator_port), t.nexus.relative_target_port);
}

void reservations::release(task& t) {
  const std::uint8_t unsupported = t.cdb[0] == 0x57 ? 0x13 : 0x11;
  if ((t.cdb[1] & unsupported) != 0)
    return set_check_condition(t, illegal_request(asc::invalid_field_in_cdb));
  if (!spc2_applies(t)) return;
  // From a nexus that does not hold it: GOOD, nothing happens (SPC-2).
  if (spc2_reserved_by(t.nexus)) spc2_holder_.reset();
}

void reservations::reset() {
  spc2_holder_.reset();
}

void reservations::nexus_lost(const i_t_nexus& n) {
  if (spc2_reserved_by(n)) spc2_holder_.reset();
}

void reservations::notify_all(additional_sense code, const std::optional<i_t_nexus>& except) {
  attentions_.establish_all(code, except);
  // Registered nexuses the transport has not announced are known too.
  for (const registration& r : state_.registrations) {
    if (r.all_target_ports) {
      attentions_.establish_all_ports(r.initiator_port, relative_port_, code, except);
    } else {
      const i_t_nexus n{r.initiator_port, r.relative_port};
      if (!except || *except != n) attentions_.establish(n, code);
    }
  }
}

// ---------------------------------------------------------------------------

std::expected<void, error> reservations::restore(state_origin origin) {
  if (store_ == nullptr) return {};
  const std::vector<std::uint8_t> bytes = store_->load();
  if (bytes.empty()) return {};
  auto decoded = decode_reservation_state(bytes);
  if (!decoded) return std::unexpected(decoded.error());
  if (origin == state_origin::failover || decoded->aptpl) {
    state_ = std::move(*decoded);
    return {};
  }
  // A power loss ends registrations made without APTPL (SPC-4), and
  // PRgeneration with them. Erase them from the store too, or a takeover
  // after this restart would load them again. PERSISTENT RESERVE OUT waits
  // for this save like for any other.
  state_ = reservation_state{};
  saving_ = true;
  store_->save(encode_reservation_state(state_), [this](std::error_code ec) { on_saved(ec); });
  return {};
}

}  // namespace strata::scsi
