#include "target/scsi/unit_attentions.h"

#include <algorithm>

namespace strata::scsi {

namespace {

bool reset_class(additional_sense code) noexcept {
  return code.asc == 0x29;
}

}  // namespace

template <class Change>
void unit_attentions::update(record& r, Change change) {
  const bool before = reportable(r);
  change(r);
  const bool after = reportable(r);
  if (before != after) after ? ++reportable_ : --reportable_;
}

void unit_attentions::push(record& r, additional_sense code) noexcept {
  auto same = [&](const additional_sense& c) { return c.asc == code.asc && c.ascq == code.ascq; };
  if (std::any_of(r.queue.begin(), r.queue.begin() + r.count, same)) return;
  if (reset_class(code)) {
    // A reset tells the initiator that everything may have changed: it
    // replaces what is pending, unless a reset is pending already.
    const bool reset_pending =
        std::any_of(r.queue.begin(), r.queue.begin() + r.count,
                    [](const additional_sense& c) { return reset_class(c); });
    if (reset_pending) return;
    r.count = 0;
    r.overflow = false;
  }
  if (r.count == r.queue.size()) {
    r.overflow = true;  // dropped; the next condition reported says so
    return;
  }
  r.queue[r.count++] = code;
}

sense unit_attentions::pop(record& r) noexcept {
  sense s = make_sense(sense_key::unit_attention, r.queue[0]);
  // SKSV with OVERFLOW (SPC-4 4.5.2.4.6): UASK_SUP is set, so every unit
  // attention carries the field.
  s.key_specific = std::array<std::uint8_t, 3>{
      static_cast<std::uint8_t>(0x80 | (r.overflow ? 0x01 : 0x00)), 0, 0};
  r.overflow = false;
  std::copy(r.queue.begin() + 1, r.queue.begin() + r.count, r.queue.begin());
  --r.count;
  return s;
}

unit_attentions::record* unit_attentions::find_or_make(const i_t_nexus& n) {
  const auto it = records_.find(n);
  if (it != records_.end()) {
    it->second.last_used = ++clock_;
    return &it->second;
  }
  if (records_.size() >= max_nexuses) {
    // Forget the least recently used nexus that is not connected: it has
    // gone, and may not come back.
    auto victim = records_.end();
    for (auto i = records_.begin(); i != records_.end(); ++i) {
      if (i->second.connected) continue;
      if (victim == records_.end() || i->second.last_used < victim->second.last_used) victim = i;
    }
    if (victim == records_.end()) return nullptr;
    records_.erase(victim);
  }
  record& r = records_.emplace(key{std::string(n.initiator_port), n.relative_target_port}, record{})
                  .first->second;
  r.last_used = ++clock_;
  return &r;
}

void unit_attentions::nexus_created(const i_t_nexus& n) {
  record* r = find_or_make(n);
  if (r == nullptr) return;
  update(*r, [&](record& x) {
    // A nexus never announced to this unit has missed the power on (what was
    // kept for it, a preempted registration say, is superseded); one that
    // was lost has 29/07 waiting already; one announced twice, nothing new.
    if (!x.announced) push(x, asc::power_on_reset_occurred);
    x.announced = true;
    x.connected = true;
  });
}

void unit_attentions::nexus_lost(const i_t_nexus& n) {
  // A nexus this unit never knew has nothing to be told when it returns
  // that 29/00 would not say.
  const auto it = records_.find(n);
  if (it == records_.end()) return;
  update(it->second, [&](record& x) {
    // SAM-5, I_T nexus loss: told when the nexus is formed again. It replaces what was
    // pending (a reset-class condition).
    x.count = 0;
    x.overflow = false;
    push(x, asc::i_t_nexus_loss_occurred);
    x.connected = false;
  });
}

void unit_attentions::establish(const i_t_nexus& n, additional_sense code) {
  record* r = find_or_make(n);
  if (r == nullptr) return;
  update(*r, [&](record& x) { push(x, code); });
}

void unit_attentions::establish_all(additional_sense code, const std::optional<i_t_nexus>& except) {
  for (auto& [k, r] : records_) {
    if (except && k.first == except->initiator_port && k.second == except->relative_target_port)
      continue;
    update(r, [&](record& x) { push(x, code); });
  }
}

void unit_attentions::establish_all_ports(std::string_view initiator_port,
                                          std::uint16_t fallback_port, additional_sense code,
                                          const std::optional<i_t_nexus>& except) {
  bool any = false;
  for (auto it = records_.lower_bound(i_t_nexus{initiator_port, 0});
       it != records_.end() && it->first.first == initiator_port; ++it) {
    any = true;
    if (except && except->initiator_port == initiator_port &&
        except->relative_target_port == it->first.second)
      continue;
    update(it->second, [&](record& x) { push(x, code); });
  }
  const i_t_nexus fallback{initiator_port, fallback_port};
  if (!any && (!except || *except != fallback)) establish(fallback, code);
}

bool unit_attentions::report(task& t) {
  switch (t.cdb[0]) {
    case 0x12:  // INQUIRY
    case 0xa0:  // REPORT LUNS (the LUN map's)
    case 0x03:  // REQUEST SENSE: returns the condition as its data (take())
      return false;
    default:
      break;
  }
  ++lookups_;
  const auto it = records_.find(t.nexus);
  if (it == records_.end() || it->second.count == 0) return false;
  record& r = it->second;
  sense s;
  update(r, [&](record& x) {
    s = pop(x);
    // A command came through it: it is evidently connected, announced or not.
    x.connected = true;
  });
  set_check_condition(t, s);
  return true;
}

std::optional<sense> unit_attentions::take(const i_t_nexus& n) {
  const auto it = records_.find(n);
  if (it == records_.end() || it->second.count == 0) return std::nullopt;
  sense s;
  update(it->second, [&](record& x) {
    s = pop(x);
    x.connected = true;
  });
  return s;
}

void unit_attentions::clear(const i_t_nexus& n, additional_sense code) {
  const auto it = records_.find(n);
  if (it == records_.end()) return;
  update(it->second, [&](record& r) {
    auto* end = std::remove_if(
        r.queue.begin(), r.queue.begin() + r.count,
        [&](const additional_sense& c) { return c.asc == code.asc && c.ascq == code.ascq; });
    r.count = static_cast<std::size_t>(end - r.queue.begin());
  });
}

std::size_t unit_attentions::pending(const i_t_nexus& n) const {
  const auto it = records_.find(n);
  return it == records_.end() ? 0 : it->second.count;
}

}  // namespace strata::scsi
