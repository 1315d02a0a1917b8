// The partner link over real loopback sockets: controller A (dialing from
// 127.0.0.1) and controller B (listening on 127.0.0.2), each on its own
// loop thread as in two stratad processes. The handshake both ways, calls
// answered out of order, a wrong key, strangers, a partner frozen (its loop
// blocked, as by SIGSTOP) and back.
#include "controller/partner_link.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <future>
#include <mutex>
#include <thread>

#include "target/crc32c.h"
#include "tests/controller/within.h"

using namespace strata;
using strata::test::within;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr std::uint16_t echo = controller::partner_link::first_user_type;
constexpr std::uint16_t later =
    echo + 1;  // answered after the time its payload's first byte says, in ms
constexpr std::uint16_t refused_type = echo + 2;

controller::link_key key_of(std::uint8_t seed) {
  controller::link_key k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint8_t>(seed + i * 7);
  return k;
}

// One controller: its loop on its own thread, its link, and what the link reported.
struct side {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::unique_ptr<controller::partner_link> link;
  std::thread thread;
  std::mutex m;
  int ups = 0, downs = 0;
  std::vector<std::string> refusals, down_reasons;

  side(const std::string& self, const std::string& partner, tcp::endpoint listen_at,
       controller::link_key key) {
    controller::partner_link_options o;
    o.self = self;
    o.partner = partner;
    o.listen_at = listen_at;
    o.key = key;
    o.handshake_limit = 500ms;
    link = std::make_unique<controller::partner_link>(io.get_executor(), o);
    link->on_state = [this](bool up, const std::string& why) {
      std::lock_guard hold(m);
      (up ? ups : downs)++;
      if (!up) down_reasons.push_back(why);
    };
    link->on_refused = [this](const std::string& what) {
      std::lock_guard hold(m);
      refusals.push_back(what);
    };
    link->handle(
        echo, [](controller::link_bytes p, controller::link_reply reply) { reply(std::move(p)); });
    link->handle(later, [this](controller::link_bytes p, controller::link_reply reply) {
      auto t = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(p.at(0)));
      t->async_wait([t, p, reply](boost::system::error_code) { reply(p); });
    });
    link->handle(refused_type, [](controller::link_bytes, controller::link_reply reply) {
      reply(std::unexpected(make_error(errc::busy, "pool p2 is being taken over")));
    });
    thread = std::thread([this] { io.run(); });
  }
  ~side() {
    run([this] { link->stop(); });
    run([this] { link.reset(); });
    work.reset();
    io.stop();
    thread.join();
  }
  // Runs `f` on the loop and waits for it.
  template <class F>
  std::invoke_result_t<F> run(F f) {
    std::packaged_task<std::invoke_result_t<F>()> task(std::move(f));
    auto done = task.get_future();
    asio::post(io, [&task] { task(); });
    return done.get();
  }
  std::expected<controller::link_bytes, error> call(std::uint16_t type,
                                                    controller::link_bytes payload) {
    std::promise<std::expected<controller::link_bytes, error>> answer;
    auto got = answer.get_future();
    asio::post(io, [&] {
      link->call(type, std::move(payload), [&](auto r) { answer.set_value(std::move(r)); });
    });
    return got.get();
  }
  bool up() {
    return run([this] { return link->up(); });
  }
  int count(int side::*what) {
    std::lock_guard hold(m);
    return this->*what;
  }
  std::vector<std::string> refused() {
    std::lock_guard hold(m);
    return refusals;
  }
};

bool any_says(const std::vector<std::string>& texts, const std::string& part) {
  for (const auto& t : texts) {
    if (t.find(part) != std::string::npos) return true;
  }
  return false;
}

std::string join(const std::vector<std::string>& texts) {
  std::string all;
  for (const auto& t : texts) all += t + "\n";
  return all;
}

const tcp::endpoint b_any_port(asio::ip::make_address("127.0.0.2"), 0);

// B listening on 127.0.0.2 (a free port), then A dialing it.
struct pair_of_controllers {
  side b;
  side a;
  explicit pair_of_controllers(controller::link_key a_key = key_of(1),
                               controller::link_key b_key = key_of(1))
      : b("b", "a", b_any_port, b_key), a("a", "b", listening(b), a_key) {
    REQUIRE(a.run([this] { return a.link->start(); }));
  }
  static tcp::endpoint listening(side& s) {
    auto started = s.run([&] { return s.link->start(); });
    if (!started) FAIL(started.error().message);
    return s.run([&] { return s.link->listen_endpoint(); });
  }
};

// A raw TCP client: what a stranger on the machine can do.
struct stranger {
  asio::io_context io;
  tcp::socket socket{io};
  explicit stranger(const tcp::endpoint& at) { socket.connect(at); }
  void send(const std::string& bytes) { asio::write(socket, asio::buffer(bytes)); }
  // Reads until the peer closes; what it sent.
  std::string read_to_close() {
    std::string got;
    std::array<char, 4096> buf{};
    boost::system::error_code ec;
    while (!ec) {
      const std::size_t n = socket.read_some(asio::buffer(buf), ec);
      got.append(buf.data(), n);
    }
    return got;
  }
};

}  // namespace

TEST_CASE(
    "partner link: A and B prove the key to each other; calls go both ways and are answered out of "
    "order",
    "[controller][link]") {
  pair_of_controllers c;
  REQUIRE(within(3s, [&] { return c.a.up() && c.b.up(); }));
  CHECK(c.a.count(&side::ups) == 1);
  CHECK(c.b.count(&side::ups) == 1);
  CHECK(c.a.refused().empty());
  CHECK(c.b.refused().empty());

  auto r = c.a.call(echo, {1, 2, 3});
  REQUIRE(r);
  CHECK(*r == controller::link_bytes{1, 2, 3});
  r = c.b.call(echo, controller::link_bytes(1 << 20, 0x5a));  // a 1 MiB payload, the other way
  REQUIRE(r);
  CHECK(r->size() == 1u << 20);

  // A slow answer and a quick one in flight at once: each reaches its caller.
  std::promise<controller::link_bytes> slow, quick;
  c.a.run([&] {
    c.a.link->call(later, {200},
                   [&](auto got) { slow.set_value(got.value_or(controller::link_bytes{})); });
    c.a.link->call(later, {1},
                   [&](auto got) { quick.set_value(got.value_or(controller::link_bytes{})); });
    return 0;
  });
  auto quick_answer = quick.get_future();
  auto slow_answer = slow.get_future();
  REQUIRE(quick_answer.wait_for(150ms) == std::future_status::ready);  // not behind the slow one
  CHECK(quick_answer.get() == controller::link_bytes{1});
  CHECK(slow_answer.get() == controller::link_bytes{200});

  // A refusal keeps its code and words; a type nobody handles is not_supported.
  r = c.a.call(refused_type, {});
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::busy);
  CHECK(r.error().message == "pool p2 is being taken over");
  r = c.a.call(echo + 9, {});
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::not_supported);
  // A request over the limit is refused here, and the link stays up.
  r = c.a.call(echo, controller::link_bytes(controller::partner_link::max_payload_bytes + 1));
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::invalid_argument);
  CHECK(c.a.up());
  CHECK(c.a.call(echo, {5}).value_or(controller::link_bytes{}) == controller::link_bytes{5});
}

TEST_CASE(
    "partner link: a partner with another key is refused with the reason on both sides, and no "
    "link comes up",
    "[controller][link]") {
  pair_of_controllers c(key_of(1), key_of(2));
  REQUIRE(within(3s, [&] { return !c.a.refused().empty() && !c.b.refused().empty(); }));
  std::this_thread::sleep_for(1s);  // redials meanwhile, backing off
  CHECK_FALSE(c.a.up());
  CHECK_FALSE(c.b.up());
  INFO("A: " << join(c.a.refused()) << "B: " << join(c.b.refused()));
  CHECK(any_says(c.a.refused(), "does not hold this array's link key"));
  CHECK(any_says(c.b.refused(), "refused us: wrong link key"));
  // Said once, not once per redial.
  CHECK(c.a.refused().size() == 1);
  CHECK(c.b.refused().size() == 1);
  // A call while down fails at once.
  auto r = c.a.call(echo, {1});
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::canceled);
}

TEST_CASE("partner link: strangers get a clear refusal and are closed; the partner still links",
          "[controller][link]") {
  side b("b", "a", b_any_port, key_of(1));
  const auto at = pair_of_controllers::listening(b);

  SECTION("something else than a link frame") {
    stranger s(at);
    s.send("GET / HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n");
    (void)s.read_to_close();
    REQUIRE(within(2s, [&] { return !b.refused().empty(); }));
    INFO(join(b.refused()));
    CHECK(any_says(b.refused(), "bad magic"));
  }
  SECTION("a controller that is not the partner") {
    stranger s(at);
    // A well-formed hello naming controller c, from docs/partner-link.md.
    std::string hello = {1, 0, 1, 'c'};
    hello += std::string(32, 'n');
    std::string header(32, '\0');
    auto put = [&](std::size_t at_byte, std::uint64_t v, int bytes) {
      for (int i = 0; i < bytes; ++i) header[at_byte + i] = static_cast<char>(v >> (8 * i));
    };
    put(0, 0x4c505453, 4);
    put(4, 1, 2);
    put(16, hello.size(), 4);
    // The CRC is computed by the same function the link uses.
    put(24, strata::crc32c({reinterpret_cast<const std::uint8_t*>(header.data()), 24}), 4);
    s.send(header + hello);
    const std::string answer = s.read_to_close();
    CHECK(answer.find("links only with controller a") != std::string::npos);
    REQUIRE(within(2s, [&] { return !b.refused().empty(); }));
    INFO(join(b.refused()));
    CHECK(any_says(b.refused(), "says it is controller c, not a"));
  }
  SECTION("a caller that says nothing is closed after the handshake limit") {
    stranger s(at);
    const auto t0 = std::chrono::steady_clock::now();
    (void)s.read_to_close();
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    REQUIRE(within(2s, [&] { return !b.refused().empty(); }));
    CHECK(any_says(b.refused(), "did not finish the handshake in time"));
  }
  // Whatever the stranger did, the partner links afterwards.
  side a("a", "b", at, key_of(1));
  REQUIRE(a.run([&] { return a.link->start(); }));
  CHECK(within(3s, [&] { return a.up() && b.up(); }));
}

TEST_CASE(
    "partner link: a frozen partner is detected within the silence limit; it links again when it "
    "thaws",
    "[controller][link]") {
  pair_of_controllers c;
  REQUIRE(within(3s, [&] { return c.a.up() && c.b.up(); }));
  // A call B will answer only after it thaws: A fails it when the link goes down.
  std::promise<std::expected<controller::link_bytes, error>> pending;
  auto pending_answer = pending.get_future();
  // Freeze B's loop for 2 s, as SIGSTOP would the whole process.
  asio::post(c.b.io, [] { std::this_thread::sleep_for(2s); });
  const auto t0 = std::chrono::steady_clock::now();
  c.a.run([&] {
    c.a.link->call(echo, {7}, [&](auto r) { pending.set_value(std::move(r)); });
    return 0;
  });
  REQUIRE(within(3s, [&] { return c.a.count(&side::downs) == 1; }));
  const auto detected = std::chrono::steady_clock::now() - t0;
  CHECK(detected >=
        700ms);  // the silence limit is 1 s, from the last heartbeat heard (200 ms apart)
  CHECK(detected < 1600ms);
  {
    std::lock_guard hold(c.a.m);
    CHECK(c.a.down_reasons.at(0).find("nothing heard from the partner") != std::string::npos);
  }
  auto failed = pending_answer.get();
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code == errc::canceled);
  // B thaws, finds its old connection gone, and A's redial brings the link back.
  CHECK(within(4s, [&] { return c.a.up() && c.b.up() && c.a.count(&side::ups) == 2; }));
  auto r = c.a.call(echo, {9});
  REQUIRE(r);
  CHECK(*r == controller::link_bytes{9});
}

TEST_CASE(
    "partner link: when the partner stops, the link goes down at once, and comes back when it "
    "returns",
    "[controller][link]") {
  auto b = std::make_unique<side>("b", "a", b_any_port, key_of(1));
  const auto at = pair_of_controllers::listening(*b);
  side a("a", "b", at, key_of(1));
  REQUIRE(a.run([&] { return a.link->start(); }));
  REQUIRE(within(3s, [&] { return a.up(); }));
  b.reset();  // the partner's process ends: its socket closes
  REQUIRE(within(1s, [&] { return a.count(&side::downs) == 1; }));
  CHECK_FALSE(a.up());
  // It restarts at the same address.
  side again("b", "a", at, key_of(1));
  REQUIRE(again.run([&] { return again.link->start(); }));
  CHECK(within(3s, [&] { return a.up() && again.up(); }));
}
