// The event-loop client, with the server on the same io_context and the
// same thread: the agent's situation when it hosts the store itself.
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>

#include "rendezvous/async_store_client.h"
#include "rendezvous/store_server.h"

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;

namespace {

struct one_loop {
  boost::asio::io_context io;
  store_server server{io, {.host = "127.0.0.1"}};

  std::shared_ptr<async_store_client> client(wire::dialect d = wire::dialect::v2) {
    tcp_store_client_options options;
    options.port = server.port();
    options.dialect = d;
    options.timeout = 5s;
    auto c = async_store_client::create(io, options);
    c->connect([](store_result r) {
      if (r.error) std::rethrow_exception(r.error);
    });
    return c;
  }
};

template <typename E>
bool holds(const std::exception_ptr& error, std::string* message = nullptr) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const E& e) {
    if (message) *message = e.what();
    return true;
  } catch (...) {
  }
  return false;
}

}  // namespace

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

TEST_CASE("losing the server fails a pending wait at once, not at its timeout") {
  one_loop loop;
  auto c = loop.client();
  std::string message;
  auto start = std::chrono::steady_clock::now();
  c->wait({"k"}, 60s, [&](store_result r) {
    CHECK(holds<store_connection_error>(r.error, &message));
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
  std::uint16_t port;
  {
    store_server s(io, {.host = "127.0.0.1"});
    port = s.port();
  }
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
