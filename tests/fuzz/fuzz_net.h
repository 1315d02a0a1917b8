// What the fuzz targets that drive a whole TCP connection share: bounded
// runs of the loop, and the host's (initiator's) side of one connection,
// which writes what it is given and hands what arrives to the target's
// own framing (iSCSI PDUs for pdu_fuzz, NVMe/TCP PDUs for
// nvme_connection_fuzz).
//
// Threads: the fuzzer's one thread, which runs the loop too.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace strata::fuzz {

using namespace std::chrono_literals;

// Every wait of a harness: far above what a connection needs (a few
// milliseconds), far below libFuzzer's -timeout.
inline constexpr auto wait_bound = 3s;

// Runs the loop until `done` or `bound` passes; whether `done` came true.
inline bool run_until(boost::asio::io_context& loop, std::chrono::steady_clock::duration bound,
                      const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    loop.restart();
    loop.run_one_for(std::min<std::chrono::steady_clock::duration>(deadline - now, 10ms));
  }
  return true;
}

// Runs what is ready until nothing is, twice in a row (a handler may make
// another ready, a socket read among them); whether it got there within a
// bounded number of rounds (a busy target may never be idle).
inline bool idle(boost::asio::io_context& loop) {
  int quiet_rounds = 0;
  for (int round = 0; round < 1000 && quiet_rounds < 2; ++round) {
    loop.restart();
    quiet_rounds = loop.poll() == 0 ? quiet_rounds + 1 : 0;
  }
  return quiet_rounds == 2;
}

// The host's side of one TCP connection. What arrives is appended to what
// is held and given to `frame`, which takes the whole messages at its
// front and says how many bytes it took. Handlers hold the client
// (shared_from_this) until they have run.
class stream_client : public std::enable_shared_from_this<stream_client> {
 public:
  explicit stream_client(boost::asio::io_context& loop) : socket_(loop) {}
  virtual ~stream_client() = default;

  // Asynchronous, and bounded: a blocking connect() fails with EINTR when
  // libFuzzer's timer signal arrives during it.
  bool connect(boost::asio::io_context& loop, const boost::asio::ip::tcp::endpoint& at) {
    std::optional<boost::system::error_code> result;
    socket_.async_connect(at, [&result](boost::system::error_code ec) { result = ec; });
    run_until(loop, wait_bound, [&] { return result.has_value(); });
    if (!result || *result) {
      std::fprintf(stderr, "fuzz: connect to %s:%u: %s\n", at.address().to_string().c_str(),
                   at.port(), result ? result->message().c_str() : "timed out");
      boost::system::error_code ignored;
      socket_.close(ignored);
      if (!result)
        run_until(loop, wait_bound,
                  [&] { return result.has_value(); });  // the handler refers to `result`
      return false;
    }
    boost::system::error_code ignored;
    socket_.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
    read_more();
    return true;
  }
  void send(std::vector<std::uint8_t> b) {
    if (b.empty()) return;
    outbox_.push_back(std::move(b));
    if (outbox_.size() == 1) write_front();
  }
  // Sends FIN once everything queued is written.
  void half_close_when_sent() {
    half_close_ = true;
    if (outbox_.empty()) shutdown_send();
  }
  void close() {
    boost::system::error_code ignored;
    socket_.close(ignored);
  }
  // The target closed its side (or the connection broke).
  bool ended() const noexcept { return ended_; }
  // Everything given to send() is written (or the connection broke).
  bool sent() const noexcept { return outbox_.empty(); }

 protected:
  // Takes the whole messages at the front of `received`: how many bytes.
  virtual std::size_t frame(std::span<const std::uint8_t> received) = 0;

 private:
  void read_more() {
    socket_.async_read_some(
        boost::asio::buffer(chunk_),
        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
          self->received_.insert(self->received_.end(), self->chunk_.begin(),
                                 self->chunk_.begin() + static_cast<std::ptrdiff_t>(n));
          const std::size_t taken = self->frame(self->received_);
          self->received_.erase(self->received_.begin(),
                                self->received_.begin() + static_cast<std::ptrdiff_t>(taken));
          if (ec) {
            self->ended_ = true;
            return;
          }
          self->read_more();
        });
  }
  void write_front() {
    boost::asio::async_write(
        socket_, boost::asio::buffer(outbox_.front()),
        [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
          if (ec) {
            self->outbox_.clear();  // the target closed first: nothing more goes out
            return;
          }
          self->outbox_.pop_front();
          if (!self->outbox_.empty()) {
            self->write_front();
          } else if (self->half_close_) {
            self->shutdown_send();
          }
        });
  }
  void shutdown_send() {
    boost::system::error_code ignored;
    socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
  }

  boost::asio::ip::tcp::socket socket_;
  std::array<std::uint8_t, 65536> chunk_{};
  std::vector<std::uint8_t> received_;
  std::deque<std::vector<std::uint8_t>> outbox_;
  bool half_close_ = false;
  bool ended_ = false;
};

}  // namespace strata::fuzz
