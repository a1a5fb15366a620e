// store_server with threads: the connections live on different
// threads and share one key table, so what TCPStore promises (ADD and
// compare_set atomic, a WAIT woken by a SET from any connection, a last
// will that wakes the others) must hold across threads. Each test runs
// many clients at once and checks the outcome of every operation: a lost
// update, a lost wake-up or a torn value fails it (a lost wake-up as a
// wait timeout, not a hang). The store contract suite
// (store_suite_test.cpp) also runs against a threaded server.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "server_fixture.h"

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;

namespace {

constexpr unsigned server_threads = 4;

// Runs body(i) on `count` threads at once and joins them; an exception on
// any thread is rethrown here. Catch's assertions are not thread-safe: the
// bodies record, the test checks afterwards.
void on_threads(int count, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(count);
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      try {
        body(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace

TEST_CASE("threaded store: ADD hands out every count exactly once") {
  testing::server_thread server({.host = "127.0.0.1", .threads = server_threads});
  constexpr int clients = 8, adds = 300;
  std::vector<std::vector<std::int64_t>> seen(clients);
  on_threads(clients, [&](int i) {
    auto c = server.client();
    for (int k = 0; k < adds; ++k) seen[i].push_back(c->add("n", 1));
  });
  std::vector<std::int64_t> all;
  for (const auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> expected(clients * adds);
  std::iota(expected.begin(), expected.end(), 1);
  CHECK(all == expected);
  CHECK(server.client()->get("n") == std::to_string(clients * adds));
}

TEST_CASE("threaded store: compare_set lets exactly one writer win each value") {
  testing::server_thread server({.host = "127.0.0.1", .threads = server_threads});
  constexpr int clients = 6, wins_each = 50;
  // The value is "<count>:<writer>": each writer's next value is its own,
  // so compare_set returning it means this writer won that count.
  auto count_of = [](const std::string& v) { return v.empty() ? 0 : std::stoi(v); };
  std::vector<std::vector<int>> won(clients);
  on_threads(clients, [&](int i) {
    auto c = server.client();
    std::string current;  // "" matches the missing key
    while (static_cast<int>(won[i].size()) < wins_each) {
      auto next = fmt::format("{}:{}", count_of(current) + 1, i);
      current = c->compare_set("cas", current, next);
      if (current == next) won[i].push_back(count_of(next));
    }
  });
  // Every count 1..N was won by exactly one writer, none twice.
  std::vector<int> all;
  for (const auto& w : won) all.insert(all.end(), w.begin(), w.end());
  std::sort(all.begin(), all.end());
  std::vector<int> expected(clients * wins_each);
  std::iota(expected.begin(), expected.end(), 1);
  CHECK(all == expected);
  CHECK(count_of(server.client()->get("cas")) == clients * wins_each);
}

TEST_CASE("threaded store: a SET wakes the waiters of every thread") {
  testing::server_thread server({.host = "127.0.0.1", .threads = server_threads});
  constexpr int rounds = 40, waiters = 7;
  for (int r = 0; r < rounds; ++r) {
    auto key = "go/" + std::to_string(r);
    // Waiters and the writer race: whichever order the server sees them
    // in, every waiter must return (a lost wake-up times out).
    std::vector<std::string> read(waiters);  // Catch's CHECK is not thread-safe
    on_threads(waiters + 1, [&](int i) {
      auto c = server.client();
      if (i == waiters) {
        c->set(key, "now");
      } else {
        c->wait({key}, 10s);
        read[i] = c->get(key);
      }
    });
    CHECK(read == std::vector<std::string>(waiters, "now"));
  }
}

TEST_CASE("threaded store: a closed connection's last will wakes a waiter on another thread") {
  testing::server_thread server({.host = "127.0.0.1", .threads = server_threads});
  auto watcher = server.client();
  {
    auto dying = server.client();
    dying->set("dtrun/will/n1", "/over\nnode 1 lost");
    CHECK(dying->get("dtrun/will/n1") == "/over\nnode 1 lost");
  }  // its connection closes here
  watcher->wait({"over"}, 10s);
  CHECK(watcher->get("over") == "node 1 lost");
}

TEST_CASE("threaded store: one thread of its own serves apart from the caller's loop") {
  // threads = 1 (--rdzv-conf store_threads=1): the caller's loop only
  // accepts; a client is served while that loop is busy with other work.
  boost::asio::io_context caller;
  store_server server(caller, {.host = "127.0.0.1", .threads = 1});
  std::thread loop([&] { caller.run(); });
  std::promise<void> release;
  // Occupy the caller's loop after the client is accepted: the store's
  // own thread must still answer.
  auto client = std::make_shared<tcp_store_client>(tcp_store_client_options{
      .port = server.port(), .timeout = std::chrono::seconds(10)});
  client->set("k", "v");
  boost::asio::post(caller, [&] { release.get_future().wait(); });
  std::string got;
  std::int64_t counted = 0;
  try {
    got = client->get("k");
    counted = client->add("n", 2);
  } catch (...) {
    release.set_value();
    loop.join();
    throw;
  }
  release.set_value();
  boost::asio::post(caller, [&] { server.stop(); });
  loop.join();
  CHECK(got == "v");
  CHECK(counted == 2);
}

TEST_CASE("threaded store: stopping it ends every client's wait with a connection error") {
  auto server = std::make_unique<testing::server_thread>(
      store_server_options{.host = "127.0.0.1", .threads = server_threads});
  constexpr int clients = 6;
  std::vector<std::shared_ptr<tcp_store_client>> connected;
  for (int i = 0; i < clients; ++i) {
    connected.push_back(server->client());
    connected.back()->set("here/" + std::to_string(i), "1");  // connected before the stop
  }
  std::vector<std::string> outcomes(clients);
  std::thread stopper([&] { server.reset(); });
  on_threads(clients, [&](int i) {
    try {
      connected[i]->wait({"never"}, 30s);
      outcomes[i] = "returned";
    } catch (const store_timeout&) {
      outcomes[i] = "timed out";
    } catch (const store_connection_error&) {
      outcomes[i] = "connection closed";
    }
  });
  stopper.join();
  CHECK(outcomes == std::vector<std::string>(clients, "connection closed"));
}
