// The API's names of the tiering layer's tiers and affinities, both ways,
// and the tier each kind of group holds: one place for each mapping.
#pragma once

#include "controller/disk_group.h"
#include "strata/v1/resources.pb.h"
#include "tiering/records.h"

namespace strata::controller {

// The tier a pool's group of this kind holds.
inline tiering::tier tier_of(group_kind k) {
  return k == group_kind::raid6  ? tiering::tier::capacity
         : k == group_kind::ceph ? tiering::tier::cold
                                 : tiering::tier::performance;
}
inline v1::Tier tier_of(tiering::tier t) {
  return t == tiering::tier::performance ? v1::TIER_PERFORMANCE
         : t == tiering::tier::cold      ? v1::TIER_COLD
                                         : v1::TIER_CAPACITY;
}
inline tiering::affinity placement_of(v1::Affinity a) {
  return a == v1::PERFORMANCE ? tiering::affinity::performance
         : a == v1::CAPACITY  ? tiering::affinity::archive
         : a == v1::LOCAL     ? tiering::affinity::local
                              : tiering::affinity::automatic;
}
inline v1::Affinity affinity_of(tiering::affinity a) {
  return a == tiering::affinity::performance ? v1::PERFORMANCE
         : a == tiering::affinity::archive   ? v1::CAPACITY
         : a == tiering::affinity::local     ? v1::LOCAL
                                             : v1::AUTO;
}

}  // namespace strata::controller
