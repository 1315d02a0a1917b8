// Closes every connection in a server's live set, each on its own loop,
// and calls `done` on the server's loop once all are closed: what each
// connection passed on before its close was posted ahead of `done` there.
// Shared by the iSCSI and NVMe/TCP servers (their close_connections()).
//
// Threads: call on the server's loop, which owns `live`.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <functional>
#include <memory>

namespace strata::target {

template <class LiveSet>
void close_connections(const LiveSet& live, boost::asio::any_io_executor loop,
                       std::function<void()> done) {
  if (live.empty()) return boost::asio::post(loop, std::move(done));
  auto left = std::make_shared<std::atomic<std::size_t>>(live.size());
  auto finish = std::make_shared<std::function<void()>>(std::move(done));
  for (const auto& c : live) {
    boost::asio::post(c->executor(), [c, left, finish, loop] {
      c->close();
      if (left->fetch_sub(1) == 1) boost::asio::post(loop, [finish] { (*finish)(); });
    });
  }
}

}  // namespace strata::target
