// The event-loop client's timeouts at 0 and at random points, with the
// server on the same io_context and thread (one_loop_fixture.h).
#include <catch2/catch.hpp>

#include <random>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "rendezvous/store/async_store_client.h"
#include "rendezvous/store/store_server.h"
#include "one_loop_fixture.h"
#include "random_timeouts.h"
#include "server_fixture.h"

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;
using testing::holds;
using testing::one_loop;

// --- timeouts at 0 and at random points -------------------------------------
//
// A timeout acts only on the operation that armed it: whatever the timeouts
// and whenever keys arrive or the client is closed, every callback runs
// exactly once, with a correct value or store_timeout/store_connection_error
// (never "bytes nobody asked for", which a timeout acting on the wrong
// operation produces), and nothing crashes (run these under ASan too).

namespace {

using testing::test_seed;
using testing::up_to;

bool expected_failure(const std::exception_ptr& e) {
  return holds<store_timeout>(e) || holds<store_connection_error>(e);
}

std::string failure_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  }
}

// One client with timeouts of at most `max_ms` runs `ops` random operations
// against a server on the same loop (on a 2.x server, each through the
// client or its watch lane, at random), while a second client sets the
// keys they wait for at random moments and, sometimes, the first is closed
// at a random moment. Returns how many operations succeeded.
int chaos_round(std::mt19937& rng, wire::dialect dialect, int max_ms, int ops) {
  boost::asio::io_context io;
  store_server server{io, {.host = "127.0.0.1"}};
  tcp_store_client_options o;
  o.port = server.port();
  o.dialect = dialect;
  o.connect_timeout = 10s;
  o.timeout = up_to(rng, max_ms);
  auto client = async_store_client::create(io, o);
  const bool lanes = dialect == wire::dialect::v2;
  auto lane = lanes ? client->watch_lane() : client;
  o.timeout = 10s;
  auto writer = async_store_client::create(io, o);

  std::vector<int> calls(ops + 2, 0);  // [ops] and [ops + 1] are the connects
  int adds_issued[2] = {0, 0};         // by the client, by its lane
  int outstanding = ops + 2, succeeded = 0;
  std::vector<std::unique_ptr<boost::asio::steady_timer>> timers;
  auto finished = [&] {
    if (--outstanding > 0) return;
    writer->close();
    server.stop();
  };
  // Checks one outcome: `check` looks at a success.
  auto outcome = [&](int i, std::function<void(const store_result&)> check) {
    return [&, i, check](store_result r) {
      ++calls[i];
      if (r.error) {
        INFO("operation " << i << ": " << failure_text(r.error));
        CHECK(expected_failure(r.error));
      } else {
        ++succeeded;
        check(r);
      }
      finished();
    };
  };

  client->connect(outcome(ops, [](const store_result&) {}));
  if (lanes) {
    lane->connect(outcome(ops + 1, [](const store_result&) {}));
  } else {
    outcome(ops + 1, [](const store_result&) {})({});
  }
  writer->connect([](store_result) {});
  for (int i = 0; i < ops; ++i) {
    auto& c = std::bernoulli_distribution(0.5)(rng) ? lane : client;
    auto key = fmt::format("k{}", i);
    auto value = fmt::format("value {}", i);
    // The key arrives around the deadline of whoever waits for it.
    auto& t = timers.emplace_back(
        std::make_unique<boost::asio::steady_timer>(io, up_to(rng, max_ms)));
    t->async_wait([&, key, value](const boost::system::error_code&) {
      writer->set(key, value, [](store_result) {});
    });
    switch (std::uniform_int_distribution<int>(0, dialect == wire::dialect::v2 ? 5 : 4)(rng)) {
      case 0:
        c->get(key, up_to(rng, max_ms),
                    outcome(i, [value](const store_result& r) { CHECK(r.value == value); }));
        break;
      case 1:
        c->wait({key}, up_to(rng, max_ms), outcome(i, [](const store_result&) {}));
        break;
      case 2:
        c->set(fmt::format("own{}", i), value, outcome(i, [](const store_result&) {}));
        break;
      case 3:
      {
        // Lanes overtake each other: each counts its own adds, in order.
        const bool on_lane = c != client;
        auto bound = ++adds_issued[on_lane];
        c->add(on_lane ? "lane counter" : "counter", 1,
               outcome(i, [bound](const store_result& r) {
                 CHECK(r.number >= 1);
                 CHECK(r.number <= bound);
               }));
      }
        break;
      case 4:
        c->check({key}, outcome(i, [](const store_result&) {}));
        break;
      default:
        c->multi_get({key, key}, up_to(rng, max_ms),
                          outcome(i, [value](const store_result& r) {
                            CHECK(r.values == std::vector<std::string>{value, value});
                          }));
        break;
    }
  }
  if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
    auto& t = timers.emplace_back(
        std::make_unique<boost::asio::steady_timer>(io, up_to(rng, max_ms)));
    t->async_wait([&](const boost::system::error_code&) { client->close(); });
  }
  io.run();
  for (int i = 0; i <= ops + 1; ++i) {
    INFO("operation " << i << " (" << (i >= ops ? "connect" : "an operation") << ")");
    CHECK(calls[i] == 1);
  }
  return succeeded;
}

}  // namespace

TEST_CASE("timeouts of zero fail or complete each operation exactly once") {
  auto seed = test_seed();
  fmt::print(stderr, "timeouts of zero: DTRUN_TEST_SEED={}\n", seed);
  INFO("DTRUN_TEST_SEED=" << seed);
  std::mt19937 rng(seed);
  for (int round = 0; round < 100; ++round) {
    chaos_round(rng, round % 2 ? wire::dialect::v2 : wire::dialect::v1_13, 0, 8);
  }
}

TEST_CASE("random small timeouts and closes call every callback once with the right value") {
  auto seed = test_seed();
  fmt::print(stderr, "random small timeouts: DTRUN_TEST_SEED={}\n", seed);
  INFO("DTRUN_TEST_SEED=" << seed);
  std::mt19937 rng(seed);
  int succeeded = 0;
  for (int round = 0; round < 300; ++round) {
    succeeded += chaos_round(rng, round % 3 ? wire::dialect::v2 : wire::dialect::v1_13, 2, 12);
  }
  // Both outcomes happened: the test exercised completions, not only failures.
  CHECK(succeeded > 0);
}

TEST_CASE("a stale timer expiry never acts on the operation after it") {
  // Each SET is answered immediately; with a 0 ms timeout its timer expires
  // about when the reply is read, so the expiry is often queued behind the
  // completion and then meets the next operation (or an empty queue).
  for (int round = 0; round < 200; ++round) {
    boost::asio::io_context io;
    store_server server{io, {.host = "127.0.0.1"}};
    tcp_store_client_options o;
    o.port = server.port();
    o.timeout = 0ms;
    auto c = async_store_client::create(io, o);
    int calls = 0;
    c->connect([](store_result) {});
    for (int i = 0; i < 4; ++i) {
      c->set("k", "v", [&](store_result r) {
        ++calls;
        if (r.error) CHECK(expected_failure(r.error));
        if (calls == 4) server.stop();
      });
    }
    io.run();
    CHECK(calls == 4);
  }
}

TEST_CASE("connection retries with tiny connect timeouts end exactly once") {
  auto seed = test_seed();
  INFO("DTRUN_TEST_SEED=" << seed);
  std::mt19937 rng(seed);
  for (int round = 0; round < 100; ++round) {
    boost::asio::io_context io;
    testing::refusing_port refusing;
    auto port = refusing.port();
    tcp_store_client_options o;
    o.port = port;
    o.connect_timeout = up_to(rng, 30);
    auto c = async_store_client::create(io, o);
    int connects = 0, ops = 0;
    c->connect([&](store_result r) {
      ++connects;
      CHECK(expected_failure(r.error));
    });
    c->set("k", "v", [&](store_result r) {
      ++ops;
      CHECK(expected_failure(r.error));
    });
    boost::asio::steady_timer closer(io, up_to(rng, 30));
    closer.async_wait([&](const boost::system::error_code&) { c->close(); });
    io.run();
    CHECK(connects == 1);
    CHECK(ops == 1);
  }
}

TEST_CASE("connect after close fails once from the loop") {
  boost::asio::io_context io;
  tcp_store_client_options o;
  o.port = 1;
  auto c = async_store_client::create(io, o);
  c->close();
  int calls = 0;
  c->connect([&](store_result r) {
    ++calls;
    CHECK(holds<store_connection_error>(r.error));
    CHECK(r.kind == store_error_kind::closed);  // our own close(), not a lost store
  });
  CHECK(calls == 0);  // not inline
  io.run();
  CHECK(calls == 1);
}

TEST_CASE("a second connect fails once and leaves the first to finish") {
  one_loop loop;
  auto c = loop.client();  // connects
  int first_calls = 0;
  std::string message;
  c->connect([&](store_result r) {
    ++first_calls;
    CHECK(holds<store_connection_error>(r.error, &message));
  });
  std::string got;
  c->set("k", "v", [](store_result r) { CHECK_FALSE(r.error); });
  c->get("k", 1s, [&](store_result r) {
    got = r.value;
    loop.server.stop();
  });
  loop.io.run();
  CHECK(first_calls == 1);
  CHECK_THAT(message, Catch::Contains("already called"));
  CHECK(got == "v");
}

TEST_CASE("timeouts beyond the clock's range behave as no timeout") {
  one_loop loop;
  tcp_store_client_options options;
  options.port = loop.server.port();
  options.timeout = std::chrono::milliseconds::max();
  options.connect_timeout = std::chrono::milliseconds::max();
  auto c = async_store_client::create(loop.io, options);
  c->connect([](store_result r) { CHECK_FALSE(r.error); });
  std::string got;
  c->set("k", "v", [](store_result r) { CHECK_FALSE(r.error); });
  c->get("k", std::chrono::milliseconds::max(), [&](store_result r) {
    got = r.value;
    c->wait({"never"}, std::chrono::milliseconds::min(), [&](store_result w) {
      CHECK(holds<store_timeout>(w.error));
      loop.server.stop();
    });
  });
  loop.io.run();
  CHECK(got == "v");
}

TEST_CASE("a wait whose key arrives as it times out completes once with a 0 ms request timeout") {
  // The wait's deadline and the key's arrival coincide, so the CANCEL_WAIT
  // goes out while STOP_WAITING is on its way; with a 0 ms request timeout
  // the cancel's own timer expires as that reply is read: the reply and the
  // expiry are ready in the same turn of the loop, the reply first.
  auto seed = test_seed();
  INFO("DTRUN_TEST_SEED=" << seed);
  std::mt19937 rng(seed);
  int succeeded = 0, timed_out = 0;
  for (int round = 0; round < 300; ++round) {
    boost::asio::io_context io;
    store_server server{io, {.host = "127.0.0.1"}};
    tcp_store_client_options o;
    o.port = server.port();
    o.timeout = 10s;
    auto writer = async_store_client::create(io, o);
    o.timeout = 0ms;
    auto reader = async_store_client::create(io, o);
    int calls = 0;
    auto deadline = up_to(rng, 3);
    boost::asio::steady_timer at_deadline(io);
    writer->connect([](store_result) {});
    reader->connect([](store_result) {});
    // Both connected (the writer's check is its second round trip): now
    // start the reader's wait and the writer's timer from the same moment.
    writer->check({"x"}, [&](store_result) {
      reader->wait({"key"}, deadline, [&](store_result r) {
        ++calls;
        if (r.error) {
          CHECK(expected_failure(r.error));
          ++timed_out;
        } else {
          ++succeeded;
        }
        writer->close();
        server.stop();
      });
      at_deadline.expires_after(deadline);
      at_deadline.async_wait([&](const boost::system::error_code&) {
        writer->set("key", "v", [](store_result) {});
      });
    });
    io.run();
    CHECK(calls == 1);
  }
  CHECK(succeeded + timed_out == 300);
}

TEST_CASE("a connection attempt that gets no answer ends at connect_timeout") {
  // A listener whose accept queue is full drops further SYNs (Linux's
  // default), like a host that is down or firewalled: the attempt would
  // otherwise wait for the kernel's retries, minutes.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor listener(io);
  boost::asio::ip::tcp::endpoint where(boost::asio::ip::make_address("127.0.0.1"), 0);
  listener.open(where.protocol());
  listener.bind(where);
  listener.listen(0);
  where = listener.local_endpoint();
  std::vector<std::unique_ptr<boost::asio::ip::tcp::socket>> fillers;
  for (int i = 0; i < 4; ++i) {
    auto& s = fillers.emplace_back(std::make_unique<boost::asio::ip::tcp::socket>(io));
    s->async_connect(where, [](const boost::system::error_code&) {});
  }
  tcp_store_client_options options;
  options.port = where.port();
  options.connect_timeout = 300ms;
  auto c = async_store_client::create(io, options);
  int calls = 0;
  std::string message;
  c->connect([&](store_result r) {
    ++calls;
    CHECK(holds<store_timeout>(r.error, &message));
    boost::system::error_code ignored;
    for (auto& s : fillers) s->close(ignored);
    listener.close(ignored);
  });
  io.run();
  CHECK(calls == 1);
  // Refused (a kernel that resets instead of dropping) also ends in time.
  CHECK_THAT(message, Catch::Contains("could not reach the store") &&
                          (Catch::Contains("no answer") || Catch::Contains("refused")));
}
