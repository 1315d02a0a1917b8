// Polling for what another thread (a loop, a link) makes true: the
// controller tests that run real loops on threads of their own.
#pragma once

#include <chrono>
#include <thread>

namespace strata::test {

// Whether `pred` holds within `limit`, asked every 10 ms (and once more at the end).
template <class Pred>
bool within(std::chrono::milliseconds limit, Pred pred) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace strata::test
