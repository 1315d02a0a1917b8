#include "target/stream_reader.h"

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>

namespace strata::target {

namespace asio = boost::asio;

stream_reader::stream_reader(std::size_t buffer_bytes, std::size_t direct_bytes)
    : buffer_(buffer_bytes), direct_bytes_(direct_bytes) {}

asio::awaitable<bool> stream_reader::read(asio::ip::tcp::socket& socket, asio::mutable_buffer a,
                                          asio::mutable_buffer b, asio::mutable_buffer c) {
  constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
  const std::array<asio::mutable_buffer, 3> all{a, b, c};
  for (const asio::mutable_buffer& into : all) {
    auto* to = static_cast<std::uint8_t*>(into.data());
    std::size_t left = into.size();
    while (left > 0) {
      if (begin_ < end_) {
        const std::size_t n = std::min(left, end_ - begin_);
        std::memcpy(to, buffer_.data() + begin_, n);
        begin_ += n;
        to += n;
        left -= n;
        continue;
      }
      begin_ = end_ = 0;  // empty: from the start again
      if (left >= direct_bytes_) {
        // Long: straight into place. What follows it comes with the next refill.
        auto [ec, n] = co_await asio::async_read(socket, asio::buffer(to, left), use_tuple);
        if (ec) co_return false;
        left = 0;
        continue;
      }
      auto [ec, n] =
          co_await socket.async_read_some(asio::buffer(buffer_.data(), buffer_.size()), use_tuple);
      if (ec) co_return false;
      end_ = n;
    }
  }
  co_return true;
}

}  // namespace strata::target
