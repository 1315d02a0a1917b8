// Task management functions (RFC 7143 11.5, SAM-5 7): ABORT TASK, ABORT
// TASK SET, CLEAR TASK SET, LUN RESET, TARGET WARM and COLD RESET, each
// answered only once the tasks it aborted, which a unit cannot stop, have
// finished.
#include "target/iscsi/connection.h"

namespace strata::iscsi {

void connection::on_task_management(const bhs& h) {
  auto self = shared_from_this();
  if (target_ == nullptr) {  // a discovery session has no tasks and no LUNs
    order(
        h, [self, h] { self->reject(h, reject_reason::protocol_error); }, true);
    return;
  }
  order(
      h, [self, h] { self->manage_tasks(h); }, true);
}

void connection::manage_tasks(const bhs& h) {
  session& s = *session_;
  auto tmf = std::make_shared<pending_tmf>();
  tmf->conn = weak_from_this();
  bhs& r = tmf->response;
  r.set_opcode(opcode::task_management_response);
  r.set_final(true);
  r.set_initiator_task_tag(h.initiator_task_tag());
  auto respond_now = [&](std::uint8_t response) {
    r.set_byte(2, response);
    finish_tmf(*tmf);
  };
  const std::uint8_t function = h.flags() & 0x7f;
  const std::uint64_t lun_field = h.lun_field();
  // The map is read here, on the session's loop, only for whether the LUN
  // has a unit. What needs the unit (a reset) runs on the units' loop,
  // dispatched from this one as the response goes (tmf->then): commands
  // this session sends after that reach the unit after it.
  const bool unit = access_->luns->mapped(lun_of(lun_field));
  // Every command of this session (on any of its connections) that `pred`
  // picks is aborted; the response goes when the last of those the unit
  // runs has finished.
  auto abort_all = [&](auto pred) {
    std::vector<std::shared_ptr<command>> doomed;
    for (const auto& [tag, c] : s.commands) {
      if (pred(*c)) doomed.push_back(c);
    }
    for (const auto& c : doomed) abort(*c, tmf);
  };
  switch (function) {
    case tmf::abort_task: {
      auto it = s.commands.find(h.u32(field::referenced_task_tag));
      if (it != s.commands.end()) {
        abort(*it->second, tmf);
        break;
      }
      // Not here: if its CmdSN is yet to come (RefCmdSN in the window,
      // before this request), it is taken as received and never run.
      const std::uint32_t ref = h.u32(field::ref_cmd_sn);
      const std::uint32_t max = s.exp_cmd_sn + timing_.command_window - 1;
      if (!sn_less(ref, s.exp_cmd_sn) && sn_less_equal(ref, max) &&
          sn_less(ref, h.u32(field::cmd_sn))) {
        if (s.cancelled_cmd_sns.size() < timing_.command_window) s.cancelled_cmd_sns.push_back(ref);
        return respond_now(tmf::function_complete);
      }
      return respond_now(tmf::task_does_not_exist);
    }
    case tmf::abort_task_set:
    case tmf::clear_task_set:
      // One task set per I_T nexus here: the unit keeps no task sets of its
      // own, so both end this session's tasks for the LUN.
      if (!unit) return respond_now(tmf::lun_does_not_exist);
      abort_all([&](const command& c) { return c.lun_field == lun_field; });
      break;
    case tmf::clear_aca:
      // Strata never establishes an ACA condition (NACA is not supported):
      // there is nothing to clear.
      if (!unit) return respond_now(tmf::lun_does_not_exist);
      break;
    case tmf::logical_unit_reset:
      if (!unit) return respond_now(tmf::lun_does_not_exist);
      abort_all([&](const command& c) { return c.lun_field == lun_field; });
      // The unit is looked up again when the reset runs: the one there now
      // (a takeover may have swapped it, and retired the old one).
      tmf->then = [luns = access_->luns, lun = lun_of(lun_field), port = s.initiator_port,
                   at = server_.options().relative_target_port, sess = session_]() {
        sess->to_units(
            [=] {
              if (scsi::unit_interface* now = luns->find(lun))
                now->reset(scsi::i_t_nexus{*port, at});
            },
            /*at_once=*/true);
      };
      break;
    case tmf::target_warm_reset:
    case tmf::target_cold_reset: {
      if (function == tmf::target_cold_reset && !timing_.allow_target_cold_reset)
        return respond_now(tmf::authorization_failed);
      abort_all([](const command&) { return true; });
      // A cold reset ends every session of the target (RFC 7143 11.5.1),
      // this connection once its response is written. The units are looked
      // up when the reset runs (a takeover may have swapped some).
      tmf->close_after = function == tmf::target_cold_reset;
      // On the units' loop, which is also the server's.
      tmf->then = [luns = access_->luns, port = s.initiator_port,
                   at = server_.options().relative_target_port, cold = tmf->close_after,
                   srv = &server_, alive = server_alive_, target = target_->name,
                   except = weak_from_this(), sess = session_]() {
        sess->to_units(
            [=] {
              for (const std::uint16_t l : luns->luns())
                luns->find(l)->reset(scsi::i_t_nexus{*port, at});
              if (cold && !alive.expired()) srv->close_sessions_of(target, except.lock().get());
            },
            /*at_once=*/true);
      };
      break;
    }
    case tmf::task_reassign:
      return respond_now(tmf::reassign_not_supported);  // ErrorRecoveryLevel 0
    default:
      return respond_now(tmf::function_not_supported);
  }
  r.set_byte(2, tmf::function_complete);
  if (tmf->tasks == 0) finish_tmf(*tmf);
}

void connection::abort(command& c, const std::shared_ptr<pending_tmf>& tmf) {
  session& s = *session_;
  auto keep = s.commands.at(c.itt);
  s.commands.erase(c.itt);
  if (c.task.on_complete == nullptr) {  // gathering its data or waiting for its turn: nothing runs
    s.release(c);
    return;
  }
  c.aborted_by = tmf;
  ++tmf->tasks;
}

void connection::finish_tmf(pending_tmf& tmf) {
  if (auto conn = tmf.conn.lock(); conn && !conn->closed_) {
    conn->stamp(tmf.response, true);
    conn->send({tmf.response, {}, {}, nullptr, tmf.close_after});
  }
  if (tmf.then) tmf.then();
}

}  // namespace strata::iscsi
