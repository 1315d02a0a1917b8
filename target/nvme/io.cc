// The NVM commands of an I/O queue, run on their namespace's unit
// (nvm.h), and the fused Compare and Write.
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include "target/nvme/connection.h"
#include "target/scsi/sense.h"
#include "target/scsi/unit_interface.h"

namespace strata::nvme {

void connection::execute_io(slot& s) {
  const command_view c = s.command();
  s.subsys = subsys_;
  s.ns = s.subsys == nullptr ? nullptr : s.subsys->find(ctrl_->host.host_nqn, c.nsid());
  if (s.ns == nullptr) {
    // A Flush of every namespace (NSID FFFFFFFFh): each volume's own
    // flush is what a power cut would need; one suffices for none here.
    if (c.opcode() == opcode::flush) return finish(s, success);
    return finish(s, generic(code::invalid_namespace));
  }
  const auto data = s.data.bytes().first(s.data_bytes);
  if (auto answer = s.nvm.start(c, *s.ns, data, s.task)) {
    s.ns = nullptr;  // no read data to send
    return finish(s, *answer);
  }
  run_on_unit(s);
}

void connection::execute_fused(slot& compare) {
  slot& write = *compare.fused_with;
  const command_view cc = compare.command();
  const command_view wc = write.command();
  compare.subsys = subsys_;
  compare.ns =
      compare.subsys == nullptr ? nullptr : compare.subsys->find(ctrl_->host.host_nqn, cc.nsid());
  // The pair must name the same blocks of one namespace (NVMe Base 2.0,
  // 3.4.2): otherwise neither runs.
  const bool same = cc.nsid() == wc.nsid() && cc.cdw(10) == wc.cdw(10) &&
                    cc.cdw(11) == wc.cdw(11) && (cc.cdw(12) & 0xffff) == (wc.cdw(12) & 0xffff) &&
                    cc.opcode() == opcode::compare && wc.opcode() == opcode::write;
  const auto fail_both = [&](status why) {
    compare.ns = nullptr;
    write.fused_with = nullptr;
    compare.fused_with = nullptr;
    finish(compare, why);
    finish(write, generic(code::aborted_failed_fused));
  };
  if (compare.ns == nullptr) return fail_both(generic(code::invalid_namespace));
  if (!same) return fail_both(generic(code::invalid_field));
  // COMPARE AND WRITE takes the compare's blocks, then the write's, in one
  // buffer: the write's data joins the compare's.
  const std::uint32_t half = compare.data_bytes;
  try {
    device::aligned_buffer both(2 * std::size_t{half});
    std::memcpy(both.data(), compare.data.data(), half);
    std::memcpy(both.data() + half, write.data.data(), half);
    compare.data = std::move(both);
  } catch (const std::bad_alloc&) {
    return fail_both(generic(code::command_interrupted, false));
  }
  if (auto answer = compare.nvm.start(
          cc, *compare.ns, compare.data.bytes().first(2 * std::size_t{half}), compare.task,
          /*compare_and_write=*/true)) {
    return fail_both(*answer);
  }
  run_on_unit(compare);
}

void connection::run_on_unit(slot& s) {
  s.task.on_complete = &connection::on_task_done;
  s.task.context = &s;
  s.task.nexus = scsi::i_t_nexus{ctrl_->initiator_port, server_.options().port_id};
  s.task.lun = 0;
  s.task.result = scsi::status::good;
  s.task.sense_data = {};
  s.task.data_in_bytes = 0;
  s.task.data_out_described_bytes.reset();
  hand_to_unit(s);
}

void connection::hand_to_unit(slot& s) {
  s.on_unit = true;
  if (executor_ == server_.loop_) {
    // One loop: the subsystem changes on this loop too, synchronously, so
    // this connection's copy is current.
    scsi::unit_interface* unit = s.ns->unit;
    asio::dispatch(unit->executor(), [unit, &t = s.task] { unit->execute(t); });
    return;
  }
  // The units live on the server's loop, where the subsystem changes and
  // units retire: there, the namespace is looked up again if this
  // connection's copy of the subsystem is behind, so that a command never
  // reaches a unit that has gone (a takeover replaced it, say).
  asio::post(server_.loop_, [self = shared_from_this(), &s] {
    const auto current = self->server_.subsystem_here(s.subsys->nqn);
    if (current.get() != s.subsys.get()) {
      const namespace_config* ns =
          current == nullptr ? nullptr
                             : current->find(self->ctrl_->host.host_nqn, s.command().nsid());
      if (ns == nullptr || ns->block_bytes != s.ns->block_bytes) {
        // Gone from under it: the host retries, on this path or another.
        s.task.result = scsi::status::check_condition;
        s.task.sense_data = scsi::make_sense(scsi::sense_key::not_ready,
                                             scsi::asc::asymmetric_access_state_transition);
        return s.task.on_complete(s.task);  // its own completion: an I/O command's, or Identify's
      }
      s.subsys = current;
      s.ns = ns;
    }
    scsi::unit_interface* unit = s.ns->unit;
    asio::dispatch(unit->executor(), [unit, &t = s.task] { unit->execute(t); });
  });
}

void connection::on_task_done(scsi::task& t) noexcept {
  auto& s = *static_cast<slot*>(t.context);
  // Back on the connection's loop. The slot holds its connection while a
  // unit runs it; the copy keeps it alive past the slot's release.
  std::shared_ptr<connection> conn = s.hold;
  asio::dispatch(conn->socket_.get_executor(), [conn, &s] {
    s.on_unit = false;
    conn->task_done(s);
  });
}

void connection::task_done(slot& s) {
  if (s.nvm.next(s.task)) {
    // The next unit command of the same NVM command, or the same again
    // after a unit attention (which the host hears of as an event).
    if (const auto& ua = s.nvm.attention(); ua && ctrl_ != nullptr && !ctrl_->ended()) {
      if (ua->asc == 0x2a && ua->ascq == 0x09) ctrl_->raise(namespace_attribute_changed());
    }
    return run_on_unit(s);
  }
  if (s.nvm.result().ok() && !server_alive_.expired()) {
    auto& h = server_.health_;
    const std::uint8_t op = s.command().opcode();
    if (op == opcode::read) {
      h.read_commands.fetch_add(1, std::memory_order_relaxed);
      h.bytes_read.fetch_add(s.nvm.to_host_bytes(), std::memory_order_relaxed);
    } else if (op == opcode::write || s.fused_with != nullptr) {
      h.write_commands.fetch_add(1, std::memory_order_relaxed);
      h.bytes_written.fetch_add(s.data_bytes, std::memory_order_relaxed);
    }
  }
  slot* write = s.fused_with;
  finish(s, s.nvm.result());
  if (write != nullptr) {
    // The fused Write succeeded with its Compare, or did not run.
    write->fused_with = nullptr;
    finish(*write, s.nvm.result().ok() ? success : generic(code::aborted_failed_fused));
  }
}

}  // namespace strata::nvme
