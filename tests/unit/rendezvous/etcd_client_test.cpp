// The etcd client against a fake member that answers with chosen bytes:
// replies of the wrong shape, bodies that never end, trickles, cancelled
// watches. Each must end as an error line naming the member (or a retry
// with a pause), never as an exception out of the loop or memory spent.
#include <catch2/catch.hpp>

#include <chrono>
#include <stdexcept>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "rendezvous/etcd/etcd_connection.h"
#include "rendezvous/etcd/etcd_round_store.h"
#include "rendezvous/etcd/etcd_session.h"
#include "rendezvous/etcd/etcd_watch.h"
#include "rendezvous/store/round_store.h"
#include "rendezvous/store/store.h"
#include "tests/unit/rendezvous/fake_etcd_member.h"

using namespace dtrun::rendezvous;
using namespace dtrun::rendezvous::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using clock_type = std::chrono::steady_clock;
namespace asio = boost::asio;

namespace {

etcd_options options_for(const fake_etcd_member& m) { return options_for(m, 500ms); }

// What a real etcd 3.4 answers dtrun's calls with (recorded), where a test
// does not choose otherwise. The job's lease key names lease 7.
fake_etcd_member::reply etcd_like(const std::string& path, const std::string& body) {
  if (path == "/v3/lease/grant") return {http_json(R"({"header":{"revision":"2"},"ID":"7","TTL":"1"})")};
  if (path == "/v3/lease/keepalive") return {http_json(R"({"result":{"ID":"7","TTL":"1"}})")};
  if (path == "/v3/kv/range" && body.find(base64_encode("/dtrun/job/lease")) != std::string::npos) {
    return {http_json(R"({"header":{"revision":"2"},"kvs":[{"key":"L2R0cnVuL2pvYi9sZWFzZQ==",)"
                      R"("create_revision":"2","mod_revision":"2","version":"1","value":"Nw==",)"
                      R"("lease":"7"}],"count":"1"})")};
  }
  if (path == "/v3/kv/range") return {http_json(R"({"header":{"revision":"2"}})")};
  if (path == "/v3/kv/txn") {
    return {http_json(R"({"header":{"revision":"3"},"responses":[{"response_range":{"header":{"revision":"3"}}}]})")};
  }
  if (path == "/v3/watch") {
    return {http_chunked_head() + http_chunk(R"({"result":{"header":{"revision":"3"},"created":true}})"),
            fake_etcd_member::then::hold};
  }
  return {http_json(R"({"header":{"revision":"3"}})")};
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

// A round_store client on a fresh session, connected; `then` runs once it is.
std::shared_ptr<round_store> connected_store(asio::io_context& io, const etcd_options& o,
                                             std::function<void(std::shared_ptr<round_store>)> then) {
  auto session = std::make_shared<etcd_session>(io, o, nullptr);
  auto store = etcd_round_store_factory(io, session)(2s);
  store->connect([store, then](store_result r) {
    REQUIRE_FALSE(r.error);
    then(store);
  });
  return store;
}

}  // namespace

TEST_CASE("etcd: a lease grant answered with a list is an error naming the member, not an exception") {
  asio::io_context io;
  fake_etcd_member m(io, [](const std::string&, const std::string&) {
    return fake_etcd_member::reply{http_json("[]")};
  });
  auto session = std::make_shared<etcd_session>(io, options_for(m), nullptr);
  std::string error = "never answered";
  session->acquire(clock_type::now() + 300ms, [&](std::string e) {
    error = e;
    io.stop();
  });
  REQUIRE_NOTHROW(io.run());
  CHECK_THAT(error, Contains(m.endpoint()) && Contains("malformed lease grant reply") &&
                        Contains("the reply is a list, not an object"));
  CHECK_THAT(error, !Contains("json.exception") && !Contains("no quorum"));
}

TEST_CASE("etcd: a keep-alive reply of the wrong shape is a failed renewal, not a lost job") {
  asio::io_context io;
  int keepalives = 0;
  fake_etcd_member m(io, [&](const std::string& path, const std::string& body) {
    if (path != "/v3/lease/keepalive") return etcd_like(path, body);
    // Two bad answers, 2/3 s apart: well within the 4 s (twice the TTL)
    // that renewals may fail before the lease counts as lost.
    if (++keepalives == 2) io.stop();
    return fake_etcd_member::reply{http_json(R"({"result":[1,2]})")};
  });
  auto options = options_for(m);
  options.lease_ttl = 2s;
  auto session = std::make_shared<etcd_session>(io, options, nullptr);
  std::string lost;
  session->acquire(clock_type::now() + 1s, [&](std::string e) {
    REQUIRE(e.empty());
    session->listen([&](const std::string& why) { lost = why; });
  });
  REQUIRE_NOTHROW(io.run());
  CHECK(keepalives == 2);
  CHECK(lost.empty());
  CHECK(session->job_lease() == "7");
}

TEST_CASE("etcd: a txn whose succeeded is not true/false fails the call with what was wrong") {
  asio::io_context io;
  fake_etcd_member m(io, [](const std::string& path, const std::string& body) {
    if (path == "/v3/kv/txn") {
      return fake_etcd_member::reply{http_json(R"({"header":{"revision":"3"},"succeeded":"yes"})")};
    }
    return etcd_like(path, body);
  });
  std::string error;
  auto store = connected_store(io, options_for(m), [&](std::shared_ptr<round_store> s) {
    s->compare_set("k", "", "v", [&](store_result r) {
      REQUIRE(r.error);
      error = what_of(r.error);
      io.stop();
    });
  });
  REQUIRE_NOTHROW(io.run());
  // A call still waiting holds its client: closing lets both go.
  store->close();
  CHECK_THAT(error, Contains(m.endpoint()) && Contains("malformed txn reply") &&
                        Contains("`succeeded` is a string, not true or false"));
}

TEST_CASE("etcd: a watch event of the wrong shape reopens the watch after a pause, nothing thrown") {
  asio::io_context io;
  int watches = 0;
  fake_etcd_member m(io, [&](const std::string& path, const std::string& body) {
    if (path != "/v3/watch") return etcd_like(path, body);
    ++watches;
    return fake_etcd_member::reply{http_chunked_head() + http_chunk(R"({"result":{"events":[{"kv":5}]}})"),
                                   fake_etcd_member::then::hold};
  });
  std::exception_ptr error;
  auto kind = store_error_kind::none;
  auto store = connected_store(io, options_for(m), [&](std::shared_ptr<round_store> s) {
    s->get("k", 400ms, [&](store_result r) {
      error = r.error;
      kind = r.kind;
      io.stop();
    });
  });
  REQUIRE_NOTHROW(io.run());
  // A call still waiting holds its client: closing lets both go.
  store->close();
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), store_wait_timeout);
  CHECK(kind == store_error_kind::wait_timeout);
  // Reopened with a growing pause (50-100 ms, then 100-200 ms, ...): a
  // few times in 400 ms, not hundreds.
  CHECK(watches >= 1);
  CHECK(watches <= 5);
}

TEST_CASE("etcd: a cancelled watch is reopened with a growing pause, not at once") {
  asio::io_context io;
  int watches = 0;
  clock_type::time_point first, fourth;
  fake_etcd_member m(io, [&](const std::string& path, const std::string& body) {
    if (path != "/v3/watch") return etcd_like(path, body);
    if (++watches == 1) first = clock_type::now();
    if (watches == 4) {
      fourth = clock_type::now();
      io.stop();
    }
    return fake_etcd_member::reply{http_chunked_head() + http_chunk(R"({"result":{"canceled":true}})"),
                                   fake_etcd_member::then::hold};
  });
  auto store = connected_store(io, options_for(m), [&](std::shared_ptr<round_store> s) {
    s->get("k", 60s, [](store_result) {});
  });
  REQUIRE_NOTHROW(io.run());
  // A call still waiting holds its client: closing lets both go.
  store->close();
  REQUIRE(watches == 4);
  // At least the shortest pauses: 50 + 100 + 200 ms (timers never fire early).
  CHECK(fourth - first >= 350ms);
}

TEST_CASE("etcd: watch pauses double from 100 ms to at most 5 s, jitter taking up to half") {
  CHECK(watch_retry_delay(0, 0.0) == 100ms);
  CHECK(watch_retry_delay(0, 1.0) == 50ms);
  CHECK(watch_retry_delay(1, 0.0) == 200ms);
  CHECK(watch_retry_delay(3, 0.5) == 600ms);
  CHECK(watch_retry_delay(6, 0.0) == 5s);
  CHECK(watch_retry_delay(1000, 0.0) == 5s);
  CHECK(watch_retry_delay(1000, 1.0) == 2500ms);
}

namespace {

// One unary call on a bare connection to a member answering `bytes` and
// then doing `after`; the reply, once it came.
etcd_reply one_call(asio::io_context& io, fake_etcd_member& m, std::chrono::milliseconds timeout) {
  auto c = etcd_connection::create(io, options_for(m), nullptr);
  etcd_reply out;
  out.error = "never answered";
  // Only a bound for a broken client: a right one answers well before.
  asio::steady_timer guard(io, 20s);
  guard.async_wait([&](boost::system::error_code ec) {
    if (!ec) io.stop();
  });
  c->post("/v3/kv/range", "{}", timeout, [&](etcd_reply r) {
    out = std::move(r);
    guard.cancel();
    io.stop();
  });
  io.run();
  return out;
}

}  // namespace

TEST_CASE("etcd: a Content-Length beyond the cap fails before anything is read or reserved") {
  asio::io_context io;
  fake_etcd_member m(io, [](const std::string&, const std::string&) {
    return fake_etcd_member::reply{
        "HTTP/1.1 200 OK\r\nContent-Length: 1000000000000000000\r\n\r\n{\"a\":", fake_etcd_member::then::hold};
  });
  etcd_reply r;
  REQUIRE_NOTHROW(r = one_call(io, m, 5s));
  CHECK_THAT(r.error, Contains(m.endpoint()) && Contains("its reply exceeds 1048576 bytes"));
}

TEST_CASE("etcd: a reply that announces 1 GiB and keeps coming is cut at the cap") {
  asio::io_context io;
  fake_etcd_member m(io, [](const std::string&, const std::string&) {
    return fake_etcd_member::reply{"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n",
                                   fake_etcd_member::then::flood};
  });
  auto r = one_call(io, m, 10s);
  CHECK_THAT(r.error, Contains("its reply exceeds 1048576 bytes"));
  // The cap, plus what the sockets' buffers held when the client hung up.
  CHECK(m.streamed() < 16u << 20);
}

TEST_CASE("etcd: a reply that trickles in cannot extend the call's deadline") {
  asio::io_context io;
  fake_etcd_member m(io, [](const std::string&, const std::string&) {
    // 1,000 bytes at one per 50 ms: 50 s, unless the deadline ends it.
    return fake_etcd_member::reply{"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{",
                                   fake_etcd_member::then::drip};
  });
  auto start = clock_type::now();
  auto r = one_call(io, m, 300ms);
  CHECK_THAT(r.error, Contains("etcd member " + m.endpoint() + " did not answer within 300 ms"));
  CHECK(clock_type::now() - start < 10s);
}

TEST_CASE("etcd: a watch answered without length or chunks is bounded by the cap per line") {
  asio::io_context io;
  fake_etcd_member m(io, [](const std::string&, const std::string&) {
    return fake_etcd_member::reply{"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n",
                                   fake_etcd_member::then::flood};
  });
  auto c = etcd_connection::create(io, options_for(m), nullptr);
  etcd_reply out;
  out.error = "never ended";
  asio::steady_timer guard(io, 20s);
  guard.async_wait([&](boost::system::error_code ec) {
    if (!ec) io.stop();
  });
  int lines = 0;
  c->stream(
      "/v3/watch", "{}", 5s, [&](std::string_view) { ++lines; },
      [&](etcd_reply r) {
        out = std::move(r);
        guard.cancel();
        io.stop();
      });
  io.run();
  CHECK(lines == 0);
  CHECK_THAT(out.error, Contains("its reply exceeds 1048576 bytes"));
  CHECK(m.streamed() < 16u << 20);
}

TEST_CASE("etcd: a wait whose watch start was compacted reads its keys again, as etcd's clients do") {
  asio::io_context io;
  int counts = 0;
  fake_etcd_member m(io, [&](const std::string& path, const std::string& body) {
    if (path == "/v3/kv/txn" && body.find("count_only") != std::string::npos) {
      // Absent at first; put (and compacted away) by the time it looks again.
      auto count = ++counts == 1 ? "" : R"(,"count":"1")";
      return fake_etcd_member::reply{http_json(
          fmt::format(R"({{"header":{{"revision":"9"}},"responses":[{{"response_range":{{"header":{{}}{}}}}}]}})",
                      count))};
    }
    if (path == "/v3/kv/txn") {
      return fake_etcd_member::reply{http_json(
          R"({"header":{"revision":"9"},"responses":[{"response_range":{"kvs":[{"key":"L2s=","value":"dg==",)"
          R"("mod_revision":"5","version":"1"}],"count":"1"}}]})")};
    }
    if (path == "/v3/watch") {
      return fake_etcd_member::reply{
          http_chunked_head() + http_chunk(R"({"result":{"header":{"revision":"9"},"created":true}})") +
              http_chunk(R"({"result":{"canceled":true,"compact_revision":"8"}})"),
          fake_etcd_member::then::hold};
    }
    return etcd_like(path, body);
  });
  std::string value = "never read";
  asio::steady_timer guard(io, 20s);
  guard.async_wait([&](boost::system::error_code ec) {
    if (!ec) io.stop();
  });
  auto store = connected_store(io, options_for(m), [&](std::shared_ptr<round_store> s) {
    s->get("k", 60s, [&](store_result r) {
      REQUIRE_FALSE(r.error);
      value = r.value;
      guard.cancel();
      io.stop();
    });
  });
  REQUIRE_NOTHROW(io.run());
  // A call still waiting holds its client: closing lets both go.
  store->close();
  CHECK(value == "v");
  CHECK(counts == 2);
}

TEST_CASE("etcd: a vanished will sets its target only if absent: the round's first end stands") {
  // Issue 49: a plain put overwrote a survivor's failure that had ended
  // the round first, so two survivors could read two ends of one round.
  asio::io_context io;
  const std::string target = "/t/over", text = "node 1 (10.0.0.2) was lost";
  std::string will_txn, will_put;
  fake_etcd_member m(io, [&](const std::string& path, const std::string& body) {
    bool names_target = body.find(base64_encode(target)) != std::string::npos;
    if (path == "/v3/kv/txn" && names_target) {
      will_txn = body;
      io.stop();
    }
    if (path == "/v3/kv/put" && names_target) will_put = body;
    if (path != "/v3/watch") return etcd_like(path, body);
    // The wills' watch: the will's lease expired, its key deleted.
    auto key = base64_encode("/w/1");
    auto event = fmt::format(
        R"({{"result":{{"header":{{"revision":"5"}},"events":[{{"type":"DELETE",)"
        R"("kv":{{"key":"{}","mod_revision":"5"}},"prev_kv":{{"key":"{}","value":"{}"}}}}]}}}})",
        key, key, base64_encode(target + "\n" + text));
    return fake_etcd_member::reply{
        http_chunked_head() + http_chunk(R"({"result":{"header":{"revision":"4"},"created":true}})") +
            http_chunk(event),
        fake_etcd_member::then::hold};
  });
  auto store = connected_store(io, options_for(m), [&](std::shared_ptr<round_store> s) {
    s->set_will("w/1", "t/over", text, [](store_result) {});
  });
  asio::steady_timer guard(io, 5s);  // a bound, not a pause: the txn stops the loop
  guard.async_wait([&](const boost::system::error_code&) { io.stop(); });
  io.run();
  store->close();
  REQUIRE_FALSE(will_txn.empty());
  CHECK_THAT(will_txn, Contains(R"("target":"CREATE")") && Contains(R"("create_revision":"0")"));
  CHECK_THAT(will_txn, Contains(base64_encode(text)));
  CHECK(will_put.empty());
}

TEST_CASE("etcd: a wait on a client whose lease etcd dropped fails as a lost session, not a lost "
          "connection") {
  // The rendezvous takes a new lease for a lost session (round_session_lost.cpp)
  // and gives up on a lost connection: the kind is what tells them apart.
  asio::io_context io;
  fake_etcd_member m(io, [](const std::string& path, const std::string& body) {
    // A lease etcd no longer has: the keep-alive answers without a TTL.
    if (path == "/v3/lease/keepalive") return fake_etcd_member::reply{http_json(R"({"result":{"ID":"7"}})")};
    return etcd_like(path, body);
  });
  store_result waited;
  waited.fail(std::make_exception_ptr(std::runtime_error("never answered")));
  asio::steady_timer guard(io, 10s);  // a bound: the lost lease ends the wait
  guard.async_wait([&](const boost::system::error_code& ec) {
    if (!ec) io.stop();
  });
  auto store = connected_store(io, options_for(m), [&](std::shared_ptr<round_store> s) {
    s->wait({"k"}, 60s, [&](store_result r) {
      waited = std::move(r);
      guard.cancel();
      io.stop();
    });
  });
  REQUIRE_NOTHROW(io.run());
  store->close();
  CHECK(waited.kind == store_error_kind::session_lost);
  CHECK_THAT(what_of(waited.error), Contains("etcd let this agent's lease expire"));
}

namespace {

// What etcd answers a put on a lease it no longer has (recorded from 3.4).
fake_etcd_member::reply lease_not_found() {
  std::string body =
      R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested )"
      R"(lease not found","code":5})";
  return {fmt::format("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                      "Content-Length: {}\r\n\r\n{}",
                      body.size(), body)};
}

// The error a put gets when etcd refuses it for its lease; the agent's
// lease answers its keep-alives without a TTL from then on when
// `agent_lease_expired`.
std::string refused_put_error(bool agent_lease_expired) {
  asio::io_context io;
  bool refused = false;
  fake_etcd_member m(io, [&](const std::string& path, const std::string& body) {
    if (path == "/v3/kv/put") {
      refused = true;
      return lease_not_found();
    }
    // Only after the put: the regular renewal cannot have found it first.
    if (path == "/v3/lease/keepalive" && refused && agent_lease_expired) {
      return fake_etcd_member::reply{http_json(R"({"result":{"ID":"7"}})")};
    }
    return etcd_like(path, body);
  });
  store_result put;
  asio::steady_timer guard(io, 10s);  // a bound: the put's answer stops the loop
  guard.async_wait([&](const boost::system::error_code& ec) {
    if (!ec) io.stop();
  });
  auto store = connected_store(io, options_for(m), [&](std::shared_ptr<round_store> s) {
    s->set("k", "v", [&](store_result r) {
      put = std::move(r);
      guard.cancel();
      io.stop();
    });
  });
  REQUIRE_NOTHROW(io.run());
  store->close();
  REQUIRE(put.error);
  CHECK(put.kind == store_error_kind::session_lost);
  return what_of(put.error);
}

}  // namespace

TEST_CASE("etcd: a put refused for an expired lease names the agent's lease, as its renewal "
          "would have") {
  // Whichever request meets the expired lease first, the agent's line is
  // the same (the e2e's SIGSTOPped agent raced its status put against its
  // renewal).
  CHECK_THAT(refused_put_error(true), Contains("etcd let this agent's lease expire"));
}

TEST_CASE("etcd: a put refused while both leases still renew is a lost session in etcd's words") {
  auto error = refused_put_error(false);
  CHECK_THAT(error, Contains("etcd dropped a lease of this agent") &&
                        Contains("requested lease not found"));
}
