// The admin commands (NVMe Base 2.0, section 5) of an I/O or discovery
// controller: Identify, Get Log Page, Get and Set Features, Asynchronous
// Event Request, Keep Alive, Abort.
#include <boost/asio/dispatch.hpp>
#include <cstring>

#include "target/nvme/connection.h"
#include "target/nvme/identify.h"
#include "target/nvme/log_pages.h"
#include "target/scsi/unit_interface.h"

namespace strata::nvme {

namespace {

constexpr std::uint8_t admin_abort = 0x08;
// CNS 06h: the I/O command set specific Identify Controller (the NVM
// command set's: its limits, none of which Strata sets beyond MDTS).
constexpr std::uint8_t cns_io_command_set_controller = 0x06;
// NN and MNAN: the highest NSID a host may be given.
constexpr std::uint32_t max_namespaces = 1024;

std::vector<std::uint8_t> as_vector(const identify_data& d) {
  return {d.begin(), d.end()};
}

}  // namespace

void connection::on_admin(slot& s) {
  const command_view c = s.command();
  const bool discovery = ctrl_->discovery();
  switch (c.opcode()) {
    case opcode::identify:
      return identify(s);
    case opcode::get_log_page:
      return get_log_page(s);
    case opcode::get_features: {
      std::unique_lock hold(ctrl_->mutex);
      const auto v = ctrl_->features.get(static_cast<std::uint8_t>(c.cdw(10)),
                                         static_cast<std::uint8_t>((c.cdw(10) >> 8) & 0x7));
      if (!v) return finish(s, v.error());
      return finish(s, success, *v);
    }
    case opcode::set_features: {
      std::unique_lock hold(ctrl_->mutex);
      const auto v = ctrl_->features.set(static_cast<std::uint8_t>(c.cdw(10)), c.cdw(11),
                                         (c.cdw(10) & 0x80000000u) != 0);
      if (!v) return finish(s, v.error());
      return finish(s, success, *v);
    }
    case opcode::async_event_request: {
      std::unique_lock hold(ctrl_->mutex);
      const auto answer = ctrl_->events.request(s.cid);
      hold.unlock();
      if (!answer.refusal.ok()) return finish(s, answer.refusal);
      if (answer.now) return finish(s, success, answer.now->result);
      return;  // outstanding until an event: the slot stays busy
    }
    case opcode::keep_alive:
      return finish(s, success);  // heard() when its capsule came
    case admin_abort:
      // Nothing can be taken back from a volume: result bit 0 set, "not aborted".
      if (discovery) break;
      return finish(s, success, 1);
    default:
      break;
  }
  finish(s, generic(code::invalid_opcode));
}

void connection::identify(slot& s) {
  const command_view c = s.command();
  const auto cns = static_cast<std::uint8_t>(c.cdw(10));
  const server_options& o = server_.options();
  const subsystem* subsys = subsys_.get();
  if (cns == cns::controller) {
    controller_identity id;
    id.serial = o.serial;
    id.model = o.model;
    id.firmware = o.firmware;
    id.controller_id = ctrl_->id;
    id.subsystem_nqn = subsys != nullptr ? subsys->nqn : std::string(discovery_nqn);
    id.discovery = subsys == nullptr;
    id.namespaces = max_namespaces;
    id.max_transfer_bytes = o.max_transfer_bytes;
    id.max_commands = static_cast<std::uint16_t>(o.max_queue_entries);
    id.in_capsule_data_bytes = o.in_capsule_data_bytes;
    id.async_events = 4;
    id.ana_groups = o.ana_groups;
    s.to_host = as_vector(identify_controller(id));
    return finish(s, success);
  }
  if (subsys == nullptr)
    return finish(s, generic(code::invalid_field));  // a discovery controller has no namespaces
  switch (cns) {
    case cns::namespace_data: {
      // Past NN, or the broadcast value: no such NSID. Within NN but not
      // attached to this host: an inactive NSID, answered with zeros.
      if (c.nsid() == 0 || c.nsid() > max_namespaces)
        return finish(s, generic(code::invalid_namespace));
      const namespace_config* ns = subsys->find(ctrl_->host.host_nqn, c.nsid());
      if (ns == nullptr) {
        s.to_host.assign(identify_bytes, 0);  // an inactive NSID: zeros
        return finish(s, success);
      }
      return identify_namespace(s, *ns);
    }
    case cns::active_namespaces: {
      if (c.nsid() >= 0xfffffffe) return finish(s, generic(code::invalid_namespace));
      std::vector<std::uint32_t> nsids;
      for (const namespace_config& ns : subsys->namespaces_of(ctrl_->host.host_nqn))
        nsids.push_back(ns.nsid);
      s.to_host = as_vector(active_namespace_list(nsids, c.nsid()));
      return finish(s, success);
    }
    case cns::namespace_descriptors: {
      const namespace_config* ns = subsys->find(ctrl_->host.host_nqn, c.nsid());
      if (ns == nullptr) return finish(s, generic(code::invalid_namespace));
      s.to_host =
          as_vector(namespace_descriptors(namespace_nguid(ns->serial), namespace_uuid(ns->serial)));
      return finish(s, success);
    }
    case cns_io_command_set_controller:
      if (((c.cdw(11) >> 24) & 0xff) != 0)
        return finish(s, generic(code::invalid_field));  // CSI: NVM only
      s.to_host.assign(identify_bytes, 0);
      return finish(s, success);
    default:
      return finish(s, generic(code::invalid_field));
  }
}

void connection::identify_namespace(slot& s, const namespace_config& ns) {
  // The capacity is the volume's now (it may have grown): READ CAPACITY(16)
  // asks the unit, wherever it runs.
  s.subsys = subsys_;
  s.ns = &ns;
  s.task.cdb = {};
  s.task.cdb[0] = 0x9e;
  s.task.cdb[1] = 0x10;
  s.task.cdb[13] = 32;
  s.task.expected_transfer_bytes = 32;
  s.task.data_out = {};
  s.task.on_complete = [](scsi::task& t) noexcept {
    auto& sl = *static_cast<slot*>(t.context);
    std::shared_ptr<connection> conn = sl.hold;
    asio::dispatch(conn->socket_.get_executor(), [conn, &sl] {
      sl.on_unit = false;
      conn->namespace_capacity_read(sl);
    });
  };
  s.task.context = &s;
  s.task.nexus = scsi::i_t_nexus{ctrl_->initiator_port, server_.options().port_id};
  s.task.result = scsi::status::good;
  s.task.data_in_bytes = 0;
  hand_to_unit(s);
}

void connection::namespace_capacity_read(slot& s) {
  scsi::task& t = s.task;
  if (t.result == scsi::status::check_condition &&
      t.sense_data.key == scsi::sense_key::unit_attention) {
    return identify_namespace(s, *s.ns);  // reported, so cleared: ask again
  }
  const namespace_config& ns = *s.ns;
  s.ns = nullptr;  // not a read: respond() sends to_host
  namespace_identity id;
  if (t.result == scsi::status::good && t.data_in_bytes >= 32) {
    const auto* d = reinterpret_cast<const std::uint8_t*>(t.data_in.data());
    std::uint64_t last_lba = 0;
    for (int i = 0; i < 8; ++i) last_lba = last_lba << 8 | d[i];
    id.blocks = last_lba + 1;
    id.thin = (d[14] & 0x80) != 0;  // LBPME
    if (!server_alive_.expired()) server_.remember_capacity(ns.serial, {id.blocks, id.thin});
  } else {
    // The unit cannot say now: a forwarded one while its pool changes
    // controller (ANA transition). The host rescans its namespaces at the
    // very events that cause it, so answer with what the unit said last,
    // or, never asked here, what the volume's record says (a host that
    // reconnected to a controller just restarted, whose partner still
    // serves the pool, failed its rescan with the path error).
    const status why = status_of(t.result, t.sense_data);
    auto known = server_alive_.expired() ? server::capacity{} : server_.known_capacity(ns.serial);
    if (known.blocks == 0)
      known = {ns.recorded_bytes / ns.block_bytes, true};  // never asked here: the record's (thin)
    if (why.type != status_type::path || known.blocks == 0) return finish(s, why);
    id.blocks = known.blocks;
    id.thin = known.thin;
  }
  id.blocks_allocated = id.blocks;  // what the volume holds is not asked yet
  id.block_bytes = ns.block_bytes;
  id.nguid = namespace_nguid(ns.serial);
  id.ana_group = ns.ana_group;
  id.reservations = true;
  s.to_host = as_vector(nvme::identify_namespace(id));
  finish(s, success);
}

void connection::get_log_page(slot& s) {
  const command_view c = s.command();
  const log_page_request r = parse_get_log_page(c);
  const subsystem* subsys = subsys_.get();
  std::vector<std::uint8_t> page;
  switch (r.id) {
    case log_page::discovery: {
      if (subsys != nullptr)
        return finish(s, {status_type::command_specific, code::invalid_log_page, true});
      page = discovery_log(server_.discovery_generation(),
                           server_.discovery_entries(ctrl_->host.host_nqn, local_address_));
      break;
    }
    case log_page::error:
      page.assign(64, 0);  // one entry, empty: no error is logged
      break;
    case log_page::health:
      page = health_log(server_.health());
      break;
    case log_page::firmware_slot:
      page = firmware_slot_log(server_.options().firmware);
      break;
    case log_page::changed_namespaces: {
      if (subsys == nullptr)
        return finish(s, {status_type::command_specific, code::invalid_log_page, true});
      std::lock_guard hold(ctrl_->mutex);
      page = changed_namespace_log(ctrl_->changed_namespaces);
      if (!r.retain_event) ctrl_->changed_namespaces.clear();
      break;
    }
    case log_page::ana: {
      if (subsys == nullptr)
        return finish(s, {status_type::command_specific, code::invalid_log_page, true});
      std::vector<ana_group> groups;
      for (std::uint32_t g = 1; g <= server_.options().ana_groups; ++g) {
        ana_group group{g, server_.ana_state_of(g), server_.ana_change_count(), {}};
        for (const namespace_config& ns : subsys->namespaces_of(ctrl_->host.host_nqn)) {
          if (ns.ana_group == g) group.nsids.push_back(ns.nsid);
        }
        groups.push_back(std::move(group));
      }
      page = ana_log(server_.ana_change_count(), groups, (r.specific & 0x1) != 0);
      break;
    }
    default:
      return finish(s, {status_type::command_specific, code::invalid_log_page, true});
  }
  auto piece = nvme::piece(page, r, server_.options().max_transfer_bytes);
  if (!piece) return finish(s, piece.error());
  if (!r.retain_event) {
    std::lock_guard hold(ctrl_->mutex);
    ctrl_->events.page_read(r.id);
  }
  s.to_host = std::move(*piece);
  finish(s, success);
}

}  // namespace strata::nvme
