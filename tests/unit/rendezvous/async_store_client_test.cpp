// The event-loop client, with the server on the same io_context and the
// same thread: the agent's situation when it hosts the store itself.
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "rendezvous/store/async_store_client.h"
#include "rendezvous/store/store_server.h"
#include "one_loop_fixture.h"
#include "server_fixture.h"

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;
using testing::holds;
using testing::one_loop;

TEST_CASE("async client and server share one thread") {
  one_loop loop;
  auto c = loop.client();
  std::vector<std::string> seen;
  c->set("k", "v", [&](store_result r) { CHECK_FALSE(r.error); });
  c->get("k", 1s, [&](store_result r) { seen.push_back("get " + r.value); });
  c->add("n", 3, [&](store_result r) { seen.push_back("add " + std::to_string(r.number)); });
  c->compare_set("k", "v", "w", [&](store_result r) { seen.push_back("cas " + r.value); });
  c->check({"k", "n"}, [&](store_result r) { seen.push_back(r.flag ? "ready" : "not ready"); });
  c->multi_set({"a", "b"}, {"1", "2"}, [](store_result r) { CHECK_FALSE(r.error); });
  c->multi_get({"b", "a"}, 1s, [&](store_result r) {
    if (r.error) std::rethrow_exception(r.error);
    seen.push_back("multi " + r.values.at(0) + r.values.at(1));
  });
  c->delete_key("a", [&](store_result r) { seen.push_back(r.flag ? "deleted" : "absent"); });
  c->num_keys([&](store_result r) {
    seen.push_back("keys " + std::to_string(r.number));
    loop.server.stop();
    c->close();
  });
  loop.io.run();
  CHECK(seen == std::vector<std::string>{"get v", "add 3", "cas w", "ready", "multi 21",
                                         "deleted", "keys 3"});
}

TEST_CASE("a get waits for another client's set on the same loop") {
  one_loop loop;
  auto reader = loop.client();
  auto writer = loop.client();
  std::string got;
  reader->get("late", 5s, [&](store_result r) {
    got = r.value;
    loop.server.stop();
  });
  // Queued after the reader's WAIT reached the server? Either order works.
  writer->set("late", "here", [](store_result r) { CHECK_FALSE(r.error); });
  loop.io.run();
  CHECK(got == "here");
}

TEST_CASE("a timed-out wait names its keys and leaves the connection usable (2.x)") {
  one_loop loop;
  auto c = loop.client();
  std::string message;
  std::string after;
  c->wait({"never", "nor"}, 100ms, [&](store_result r) {
    CHECK(holds<store_timeout>(r.error, &message));
  });
  c->set("after", "ok", [](store_result) {});
  c->get("after", 1s, [&](store_result r) {
    after = r.value;
    loop.server.stop();
  });
  loop.io.run();
  CHECK_THAT(message, Catch::Contains("'never', 'nor'") && Catch::Contains("100 ms"));
  CHECK(after == "ok");
}

TEST_CASE("a 1.13 wait timeout closes the connection and fails what was queued") {
  one_loop loop;
  auto c = loop.client(wire::dialect::v1_13);
  bool timed_out = false, queued_failed = false;
  c->wait({"never"}, 100ms, [&](store_result r) { timed_out = holds<store_timeout>(r.error); });
  c->add("n", 1, [&](store_result r) {
    queued_failed = holds<store_connection_error>(r.error);
    loop.server.stop();
  });
  loop.io.run();
  CHECK(timed_out);
  CHECK(queued_failed);
}

TEST_CASE("a watch lane's wait does not hold up the main lane, on one connection") {
  one_loop loop;
  auto c = loop.client();
  auto watch = c->watch_lane();
  watch->connect([](store_result r) { CHECK_FALSE(r.error); });
  auto writer = loop.client();
  std::vector<std::string> seen;
  // A wait with nothing to end it but a key set after the main lane's
  // work: were the main lane held behind it, the adds would complete
  // only at its timeout, after the wait had failed.
  watch->get("over", 5s, [&](store_result r) {
    seen.push_back(r.error ? "over failed" : "over " + r.value);
    // The client and the writer: two connections, not three.
    seen.push_back(fmt::format("connections {}", loop.server.stats().connections_accepted));
    c->close();
    writer->close();
    loop.server.stop();
  });
  c->add("hb", 1, [&](store_result r) { seen.push_back("add " + std::to_string(r.number)); });
  c->add("hb", 1, [&](store_result r) {
    seen.push_back("add " + std::to_string(r.number));
    writer->set("over", "node 3 was lost", [](store_result) {});
  });
  loop.io.run();
  CHECK(seen ==
        std::vector<std::string>{"add 1", "add 2", "over node 3 was lost", "connections 2"});
}

TEST_CASE("a suspended wait keeps its deadline and times out once, naming its key") {
  one_loop loop;
  auto c = loop.client();
  auto watch = c->watch_lane();
  watch->connect([](store_result) {});
  std::string message;
  int beats = 0;
  auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration waited{};
  watch->wait({"never"}, 300ms, [&](store_result r) {
    waited = std::chrono::steady_clock::now() - start;
    CHECK(holds<store_timeout>(r.error, &message));
    c->close();
    loop.server.stop();
  });
  // Main-lane work every 20 ms suspends and resumes the wait many times.
  boost::asio::steady_timer beat(loop.io);
  std::function<void()> next = [&] {
    beat.expires_after(20ms);
    beat.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      c->add("hb", 1, [&](store_result r) {
        if (r.error) return;
        ++beats;
        next();
      });
    });
  };
  next();
  loop.io.run();
  CHECK_THAT(message, Catch::Contains("'never'"));
  CHECK(waited >= 300ms);  // a suspension never restarts or shortens the clock
  CHECK(beats >= 2);
}

TEST_CASE("a watch lane needs a 2.x server") {
  boost::asio::io_context io;
  tcp_store_client_options options;
  options.dialect = wire::dialect::v1_13;
  auto c = async_store_client::create(io, options);
  CHECK_THROWS_WITH(c->watch_lane(), Catch::Contains("CANCEL_WAIT"));
}

TEST_CASE("losing the server fails a pending wait at once, not at its timeout") {
  one_loop loop;
  auto c = loop.client();
  std::string message;
  auto start = std::chrono::steady_clock::now();
  c->wait({"k"}, 60s, [&](store_result r) {
    CHECK(holds<store_connection_error>(r.error, &message));
    CHECK(r.kind == store_error_kind::connection_lost);
  });
  // Stop the server once the client is connected and its WAIT is queued
  // behind the handshake: a check round-trip proves both.
  auto other = loop.client();
  other->check({"x"}, [&](store_result) { loop.server.stop(); });
  loop.io.run();
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK_THAT(message, Catch::Contains("lost the connection"));
}

TEST_CASE("connecting to nothing gives up after connect_timeout with a clear error") {
  boost::asio::io_context io;
  testing::refusing_port refusing;
  auto port = refusing.port();
  tcp_store_client_options options;
  options.port = port;
  options.connect_timeout = 300ms;
  auto c = async_store_client::create(io, options);
  std::string message;
  bool queued_failed = false;
  c->connect([&](store_result r) { CHECK(holds<store_timeout>(r.error, &message)); });
  c->set("k", "v", [&](store_result r) { queued_failed = r.error != nullptr; });
  io.run();
  CHECK_THAT(message, Catch::Contains("could not reach the store"));
  CHECK(queued_failed);
}
