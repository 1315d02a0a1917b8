#include "controller/forwarded_unit.h"

#include <boost/asio/post.hpp>
#include <cassert>
#include <cstring>
#include <span>

#include "controller/wire.h"

namespace strata::controller {

namespace {

void put64(link_bytes& out, std::uint64_t v) {
  wire::put32(out, static_cast<std::uint32_t>(v));
  wire::put32(out, static_cast<std::uint32_t>(v >> 32));
}

std::optional<std::uint64_t> get64(wire::reader& in) {
  const auto low = in.u32();
  const auto high = in.u32();
  if (!low || !high) return std::nullopt;
  return (std::uint64_t{*high} << 32) | *low;
}

std::string_view chars(std::span<const std::uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// Flags of a command's outcome (docs/partner-link.md, "Forwarded I/O").
constexpr std::uint8_t has_information = 1;
constexpr std::uint8_t has_key_specific = 2;
constexpr std::uint8_t has_command_specific = 4;
constexpr std::uint8_t has_described = 8;

link_bytes encode_outcome(const scsi::task& t) {
  link_bytes out;
  const std::uint32_t data_bytes = t.data_in_bytes;
  out.reserve(40 + data_bytes);
  out.push_back(static_cast<std::uint8_t>(t.result));
  const scsi::sense& s = t.sense_data;
  out.push_back(static_cast<std::uint8_t>(s.key));
  out.push_back(s.asc);
  out.push_back(s.ascq);
  out.push_back(static_cast<std::uint8_t>((s.information ? has_information : 0) |
                                          (s.key_specific ? has_key_specific : 0) |
                                          (s.command_specific ? has_command_specific : 0) |
                                          (t.data_out_described_bytes ? has_described : 0)));
  put64(out, s.information.value_or(0));
  const auto specific = s.key_specific.value_or(std::array<std::uint8_t, 3>{});
  out.insert(out.end(), specific.begin(), specific.end());
  wire::put32(out, s.command_specific.value_or(0));
  wire::put32(out, t.data_out_described_bytes.value_or(0));
  wire::put_text(out,
                 std::string_view(reinterpret_cast<const char*>(t.data_in.data()), data_bytes));
  return out;
}

// Sets t's outcome from an answer; false if it is malformed.
bool decode_outcome(std::span<const std::uint8_t> in, scsi::task& t) {
  wire::reader r(in);
  const auto result = r.byte();
  const auto key = r.byte();
  const auto asc = r.byte();
  const auto ascq = r.byte();
  const auto flags = r.byte();
  const auto information = get64(r);
  const auto s0 = r.byte();
  const auto s1 = r.byte();
  const auto s2 = r.byte();
  const auto command_specific = r.u32();
  const auto described = r.u32();
  const auto data = r.text();
  if (!r.done()) return false;
  t.result = static_cast<scsi::status>(*result);
  t.sense_data = scsi::sense{
      static_cast<scsi::sense_key>(*key), *asc, *ascq, std::nullopt, std::nullopt, std::nullopt};
  if (*flags & has_information) t.sense_data.information = *information;
  if (*flags & has_key_specific)
    t.sense_data.key_specific = std::array<std::uint8_t, 3>{*s0, *s1, *s2};
  if (*flags & has_command_specific) t.sense_data.command_specific = *command_specific;
  t.data_out_described_bytes =
      (*flags & has_described) ? std::optional<std::uint32_t>(*described) : std::nullopt;
  t.data_in_bytes = 0;
  if (!data->empty()) {
    const auto bytes = std::span(reinterpret_cast<const std::uint8_t*>(data->data()), data->size());
    if (!scsi::set_data_in(t, bytes, static_cast<std::uint32_t>(bytes.size()))) return false;
  }
  return true;
}

bool is_report_target_port_groups(const scsi::task& t) {
  return t.cdb[0] == 0xa3 && (t.cdb[1] & 0x1f) == 0x0a;
}

}  // namespace

// ---------------------------------------------------------------------------
// The forwarding controller's end

forwarded_unit::forwarded_unit(std::string volume, const forwarding_path& path)
    : volume_(std::move(volume)), path_(path) {}

forwarded_unit::~forwarded_unit() {
  assert(in_flight_ == 0 && "forwarded_unit destroyed with commands in flight");
}

void forwarded_unit::execute(scsi::task& t) noexcept {
  ++in_flight_;
  const forwarding_state state = path_.state();
  if (state != forwarding_state::forwarding) return answer_here(t, state);
  link_bytes payload;
  try {
    payload.reserve(64 + volume_.size() + t.nexus.initiator_port.size() + t.data_out.size());
    wire::put_text(payload, volume_);
    wire::put_text(payload, t.nexus.initiator_port);
    wire::put32(payload, t.nexus.relative_target_port);
    payload.push_back(static_cast<std::uint8_t>(t.attribute));
    wire::put32(payload, t.expected_transfer_bytes);
    wire::put_text(payload, chars(t.cdb));
    wire::put_text(payload, std::string_view(reinterpret_cast<const char*>(t.data_out.data()),
                                             t.data_out.size()));
  } catch (const std::bad_alloc&) {
    t.result = scsi::status::busy;
    t.data_in_bytes = 0;
    boost::asio::post(path_.loop, [this, &t] {
      --in_flight_;
      t.on_complete(t);
    });
    return;
  }
  // The outcome reaches the task from the loop, never inside execute():
  // the link answers a call at once when it is down.
  auto inside = std::make_shared<bool>(true);
  path_.call(link_type::scsi_command, std::move(payload),
             [this, &t, inside](std::expected<link_bytes, error> answer) {
               auto finish = [this, &t, answer = std::move(answer)] {
                 owner_answered(answer);
                 if (!answer || !decode_outcome(*answer, t)) {
                   // Lost with the link, refused by a partner that does not serve the
                   // volume (a hand-over or a takeover under way), or garbled: the
                   // initiator tries again.
                   t.data_in_bytes = 0;
                   t.data_out_described_bytes.reset();
                   scsi::set_check_condition(
                       t, scsi::make_sense(scsi::sense_key::not_ready,
                                           scsi::asc::asymmetric_access_state_transition));
                 }
                 --in_flight_;
                 t.on_complete(t);
               };
               if (*inside) return boost::asio::post(path_.loop, std::move(finish));
               finish();
             });
  *inside = false;
}

void forwarded_unit::answer_here(scsi::task& t, forwarding_state state) {
  t.data_in_bytes = 0;
  t.result = scsi::status::good;
  t.sense_data = scsi::sense{};
  const bool unavailable = state == forwarding_state::unavailable;
  if (is_report_target_port_groups(t)) {
    // The path checker's question has an answer here: this controller's
    // ports transitioning (or unavailable), the partner's serving (or,
    // while it may be dead, unavailable).
    scsi::target_port_group own = path_.own_group;
    scsi::target_port_group partner = path_.partner_group;
    own.state = unavailable ? scsi::alua_state::unavailable : scsi::alua_state::transitioning;
    partner.state =
        unavailable ? scsi::alua_state::active_optimized : scsi::alua_state::unavailable;
    const std::vector<scsi::target_port_group> groups{own, partner};
    const auto data = scsi::report_target_port_groups_data(
        groups, t.cdb[1] >> 5, scsi::logical_unit::implicit_transition_seconds);
    const std::uint32_t allocation = (std::uint32_t{t.cdb[6]} << 24) |
                                     (std::uint32_t{t.cdb[7]} << 16) |
                                     (std::uint32_t{t.cdb[8]} << 8) | t.cdb[9];
    if (data.empty()) {
      scsi::set_check_condition(t, scsi::illegal_request(scsi::asc::invalid_field_in_cdb));
    } else if (!scsi::set_data_in(t, data, allocation)) {
      t.result = scsi::status::busy;
    }
  } else {
    scsi::set_check_condition(
        t, scsi::make_sense(scsi::sense_key::not_ready,
                            unavailable ? scsi::asc::target_port_in_unavailable_state
                                        : scsi::asc::asymmetric_access_state_transition));
  }
  boost::asio::post(path_.loop, [this, &t] {
    --in_flight_;
    t.on_complete(t);
  });
}

void forwarded_unit::send_event(event e, const scsi::i_t_nexus& n, scsi::additional_sense code) {
  link_bytes payload;
  wire::put_text(payload, volume_);
  payload.push_back(static_cast<std::uint8_t>(e));
  wire::put_text(payload, n.initiator_port);
  wire::put32(payload, n.relative_target_port);
  payload.push_back(code.asc);
  payload.push_back(code.ascq);
  // Lost with the link: reannounce() at the next link-up says it again
  // (a nexus lost or a reset meanwhile too: the owner's unit must not keep
  // the nexus's RESERVE(6), nor miss the reset's unit attentions).
  path_.call(
      link_type::scsi_nexus_event, std::move(payload),
      [this, e, n = std::pair<std::string, std::uint16_t>(n.initiator_port, n.relative_target_port),
       alive = std::weak_ptr<int>(alive_)](std::expected<link_bytes, error> answer) {
        if (alive.expired()) return;
        if (!answer && (e == event::lost || e == event::reset)) missed_events_.emplace_back(e, n);
        owner_answered(answer);
      });
}

void forwarded_unit::owner_answered(const std::expected<link_bytes, error>& answer) {
  // Refused by a partner that did not serve the volume yet (a hand-over
  // under way): the unit it makes next has not heard of our nexuses, so
  // they are announced again once it answers.
  if (!answer && answer.error().code == make_error_code(errc::not_found)) {
    owner_missed_ = true;
  } else if (answer && owner_missed_) {
    owner_missed_ = false;
    reannounce();
  }
}

void forwarded_unit::nexus_created(const scsi::i_t_nexus& n) {
  ++nexuses_[{std::string(n.initiator_port), n.relative_target_port}];
  send_event(event::created, n);
}

void forwarded_unit::nexus_lost(const scsi::i_t_nexus& n) {
  const auto it = nexuses_.find({std::string(n.initiator_port), n.relative_target_port});
  if (it != nexuses_.end() && --it->second <= 0) nexuses_.erase(it);
  send_event(event::lost, n);
}

void forwarded_unit::reset(const scsi::i_t_nexus& by) {
  send_event(event::reset, by);
}

void forwarded_unit::establish_unit_attention(const scsi::i_t_nexus& n,
                                              scsi::additional_sense code) {
  send_event(event::establish, n, code);
}

void forwarded_unit::clear_unit_attention(const scsi::i_t_nexus& n, scsi::additional_sense code) {
  send_event(event::clear, n, code);
}

void forwarded_unit::reannounce() {
  auto missed = std::exchange(missed_events_, {});
  for (const auto& [e, n] : missed) send_event(e, scsi::i_t_nexus{n.first, n.second});
  for (const auto& [n, count] : nexuses_)
    send_event(event::created, scsi::i_t_nexus{n.first, n.second});
}

// ---------------------------------------------------------------------------
// The owner's end

struct forward_receiver::remote_command {
  forward_receiver* receiver = nullptr;
  link_bytes payload;  // data_out points into it
  std::string initiator_port;
  scsi::task task;
  link_reply reply;
};

forward_receiver::~forward_receiver() {
  assert(in_flight_ == 0 && "forward_receiver destroyed with forwarded commands running");
}

void forward_receiver::command(link_bytes payload, link_reply reply) {
  auto c = std::make_unique<remote_command>();
  c->receiver = this;
  c->payload = std::move(payload);
  wire::reader r(c->payload);
  const auto volume = r.text();
  auto port = r.text();
  const auto relative_port = r.u32();
  const auto attribute = r.byte();
  const auto expected = r.u32();
  const auto cdb = r.text();
  const auto data_out_bytes = r.u32();
  // The data-out is the payload's tail, used where it lies (not copied):
  // exactly its length must be left.
  const std::size_t header_bytes =
      4 + (volume ? volume->size() : 0) + 4 + (port ? port->size() : 0) + 4 + 1 + 4 + 4 + 16 + 4;
  if (!r.ok() || cdb->size() != 16 || *attribute > 2 || *relative_port == 0 ||
      *relative_port > 0xffff || c->payload.size() - header_bytes != *data_out_bytes) {
    return reply(
        std::unexpected(make_error(errc::invalid_argument, "a malformed forwarded SCSI command")));
  }
  const std::size_t data_at = header_bytes;
  scsi::logical_unit* unit = unit_of_(*volume);
  if (unit == nullptr)
    return reply(std::unexpected(make_error(errc::not_found, *volume + " is not served here")));
  c->initiator_port = std::move(*port);
  scsi::task& t = c->task;
  std::memcpy(t.cdb.data(), cdb->data(), 16);
  t.attribute = static_cast<scsi::task_attribute>(*attribute);
  t.nexus = scsi::i_t_nexus{c->initiator_port, static_cast<std::uint16_t>(*relative_port)};
  t.expected_transfer_bytes = *expected;
  t.data_out =
      std::span(reinterpret_cast<std::byte*>(c->payload.data() + data_at), *data_out_bytes);
  t.on_complete = &forward_receiver::completed;
  t.context = c.get();
  c->reply = std::move(reply);
  ++in_flight_;
  unit->execute(c.release()->task);
}

void forward_receiver::completed(scsi::task& t) noexcept {
  std::unique_ptr<remote_command> c(static_cast<remote_command*>(t.context));
  --c->receiver->in_flight_;
  try {
    c->reply(encode_outcome(t));
  } catch (const std::bad_alloc&) {
    c->reply(std::unexpected(make_error(errc::busy, "no memory for a forwarded command's answer")));
  }
}

void forward_receiver::nexus_event(link_bytes payload, link_reply reply) {
  wire::reader r(payload);
  const auto volume = r.text();
  const auto kind = r.byte();
  const auto port = r.text();
  const auto relative_port = r.u32();
  const auto asc = r.byte();
  const auto ascq = r.byte();
  if (!r.done() || *relative_port == 0 || *relative_port > 0xffff) {
    return reply(
        std::unexpected(make_error(errc::invalid_argument, "a malformed forwarded nexus event")));
  }
  scsi::logical_unit* unit = unit_of_(*volume);
  if (unit == nullptr)
    return reply(std::unexpected(make_error(errc::not_found, *volume + " is not served here")));
  const scsi::i_t_nexus n{*port, static_cast<std::uint16_t>(*relative_port)};
  switch (*kind) {
    case 1:
      unit->nexus_created(n);
      break;
    case 2:
      unit->nexus_lost(n);
      break;
    case 3:
      unit->reset(n);
      break;
    case 4:
      unit->establish_unit_attention(n, scsi::additional_sense{*asc, *ascq});
      break;
    case 5:
      unit->clear_unit_attention(n, scsi::additional_sense{*asc, *ascq});
      break;
    default:
      return reply(
          std::unexpected(make_error(errc::invalid_argument, "an unknown forwarded nexus event")));
  }
  reply(link_bytes{});
}

}  // namespace strata::controller
