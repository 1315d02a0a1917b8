// The receiving side of a PDU stream (iSCSI, NVMe/TCP): what the socket
// holds is taken in one recv, up to the buffer's size, and the PDUs are
// cut from that buffer. A host with many commands in flight sends them in
// bursts; read one piece at a time (a header, then the rest of it), each
// PDU cost two system calls and often a trip through epoll, where one
// recv now takes the whole burst. A payload longer than `direct_bytes`
// is read straight into its destination, not copied through the buffer.
//
// Threads: the connection's loop; one read at a time.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::target {

class stream_reader {
 public:
  explicit stream_reader(std::size_t buffer_bytes = 64 * 1024,
                         std::size_t direct_bytes = 16 * 1024);

  // Fills `a`, then `b`, then `c`, wholly: false if the stream ended or
  // failed first (what was read of them is lost with the connection).
  boost::asio::awaitable<bool> read(boost::asio::ip::tcp::socket& socket,
                                    boost::asio::mutable_buffer a,
                                    boost::asio::mutable_buffer b = {},
                                    boost::asio::mutable_buffer c = {});

 private:
  std::vector<std::uint8_t> buffer_;
  std::size_t begin_ = 0;  // the next byte not yet read
  std::size_t end_ = 0;    // past the last byte received
  std::size_t direct_bytes_;
};

}  // namespace strata::target
