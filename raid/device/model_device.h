// Base of the timing models (hdd_model, ssd_model): a decorator that stores
// data on a backing device and decides, by a model of the drive, when each
// request completes.
//
// A request completes at the later of its modelled finish time and the
// backing device's completion, so a model is never faster than its backing
// store. Derived models choose the finish time (admit) and may hold
// requests back to model queueing.
//
// Threads, lifetime: as block_device. The backing device and the clock must
// outlive the model; the model uses the backing device's executor.
#pragma once

#include "raid/device/clock.h"
#include "raid/device/forwarding_device.h"
#include "raid/device/request_queue.h"
#include "raid/device/timing.h"

namespace strata::device {

class model_device : public forwarding_device {
 public:
  void submit(request& req) noexcept final;

 protected:
  struct slot {
    model_device* owner = nullptr;
    request* outer = nullptr;  // the caller's request
    request inner;             // the same I/O, to the backing device
    time_point arrival{};
    time_point finish{};  // modelled
    bool backing_done = false;
    bool modelled_done = false;
  };

  model_device(block_device& backing, clock& c);

  // A new, valid request: call begin() now or later.
  virtual void admit(slot& s) = 0;
  // The modelled service of `s` has ended (the backing device may still be busy).
  virtual void on_modelled_done(slot&) {}

  // Starts `s` on the backing device now; it completes at `finish` or when
  // the backing device is done, whichever is later.
  void begin(slot& s, time_point finish);

  clock& clock_;

 private:
  static void on_backing_done(request& inner) noexcept;
  void on_due(slot& s);
  void finish_if_done(slot& s);

  slot_pool<slot> slots_;
  deadline_queue<slot> due_;
  completion_queue rejected_;
};

}  // namespace strata::device
