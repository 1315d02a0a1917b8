#include "raid/device/model_device.h"

namespace strata::device {

model_device::model_device(block_device& backing, clock& c)
    : forwarding_device(backing),
      clock_(c),
      due_(c, backing.executor(), [this](slot& s) { on_due(s); }),
      rejected_(backing.executor()) {}

void model_device::submit(request& req) noexcept {
  if (auto ec = validate(geometry(), req)) {
    rejected_.complete_later(req, ec);
    return;
  }
  if (req.fence_exempt) {
    // The controller's own records (drive heartbeat, ownership areas): past
    // the model's queue, whose requests in service a fence below may hold
    // (gate_device.h): a drive busy with fenced I/O must not stop the beat
    // that renews the lease. Untimed: a few blocks every 250 ms.
    backing().submit(req);
    return;
  }
  slot& s = slots_.acquire();
  s.owner = this;
  s.outer = &req;
  s.arrival = clock_.now();
  s.backing_done = false;
  s.modelled_done = false;
  admit(s);
}

void model_device::begin(slot& s, time_point finish) {
  s.finish = finish;
  copy_io(*s.outer, s.inner);
  s.inner.context = &s;
  s.inner.on_complete = &model_device::on_backing_done;
  due_.push(finish, s);
  backing().submit(s.inner);
}

void model_device::on_backing_done(request& inner) noexcept {
  slot& s = *static_cast<slot*>(inner.context);
  s.backing_done = true;
  s.owner->finish_if_done(s);
}

void model_device::on_due(slot& s) {
  s.modelled_done = true;
  on_modelled_done(s);
  finish_if_done(s);
}

void model_device::finish_if_done(slot& s) {
  if (!s.backing_done || !s.modelled_done) return;
  request& outer = *s.outer;
  const std::error_code result = s.inner.result;
  slots_.release(s);
  complete(outer, result);
}

}  // namespace strata::device
