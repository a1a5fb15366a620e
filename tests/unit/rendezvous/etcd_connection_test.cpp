// One etcd connection shared by several callers: the agent's session posts
// a lease check beside its renewal, and a revoke when it closes, while
// another call may still be on the wire. HTTP/1.1 carries one request at a
// time, so the connection queues them: each is answered in turn, or fails
// on its own deadline without being sent (CI once saw Beast's "one read at
// a time" assertion end an agent whose lease expired while it was stopped).
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "rendezvous/etcd/etcd_connection.h"
#include "rendezvous/etcd/etcd_session.h"
#include "tests/unit/rendezvous/fake_etcd_member.h"

using namespace dtrun::rendezvous;
using namespace dtrun::rendezvous::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
namespace asio = boost::asio;

namespace {

etcd_options one_member(const fake_etcd_member& m) { return options_for(m, 2s); }

// Each call's reply names its path; "/slow" trickles a byte per 50 ms.
fake_etcd_member::reply echo_path(const std::string& path, const std::string&) {
  if (path == "/slow") {
    return {"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{", fake_etcd_member::then::drip};
  }
  return {http_json(R"({"path":")" + path + R"("})")};
}

// Stops `io` once `count` replies are in, or after 20 s (a broken client).
struct replies {
  asio::io_context& io;
  std::size_t count;
  std::vector<etcd_reply> got;
  asio::steady_timer guard{io, 20s};

  replies(asio::io_context& i, std::size_t n) : io(i), count(n) {
    guard.async_wait([this](boost::system::error_code ec) {
      if (!ec) io.stop();
    });
  }
  etcd_reply_callback collect() {
    return [this](etcd_reply r) {
      got.push_back(std::move(r));
      if (got.size() == count) {
        guard.cancel();
        io.stop();
      }
    };
  }
};

// One connection to a member that echoes each call's path.
struct echo_connection {
  asio::io_context io;
  fake_etcd_member m{io, echo_path};
  std::shared_ptr<etcd_connection> c = etcd_connection::create(io, one_member(m), nullptr);
};

}  // namespace

TEST_CASE_METHOD(echo_connection,
                 "etcd: calls posted while one is on the wire are sent in turn and each answered") {
  replies r(io, 3);
  for (const char* path : {"/a", "/b", "/c"}) c->post(path, "{}", 2s, r.collect());
  io.run();
  REQUIRE(r.got.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(r.got[i].error.empty());
    CHECK_THAT(r.got[i].body, Contains(std::string("\"/") + char('a' + i) + "\""));
  }
  CHECK(m.paths() == std::vector<std::string>{"/a", "/b", "/c"});
}

TEST_CASE_METHOD(echo_connection,
                 "etcd: a caller that moves on to the next member when answered drops no waiting call") {
  replies r(io, 2);
  auto collect = r.collect();
  c->post("/a", "{}", 2s, [c = c, collect](etcd_reply reply) {
    c->next_member();  // as etcd_session does after a failed renewal
    collect(std::move(reply));
  });
  c->post("/b", "{}", 2s, r.collect());
  io.run();
  REQUIRE(r.got.size() == 2);
  CHECK(r.got[0].error.empty());
  CHECK(r.got[1].error.empty());
  CHECK(m.paths() == std::vector<std::string>{"/a", "/b"});
}

TEST_CASE_METHOD(echo_connection,
                 "etcd: a call whose deadline comes while it waits its turn fails then, unsent") {
  replies r(io, 2);
  c->post("/slow", "{}", 600ms, r.collect());
  c->post("/quick", "{}", 200ms, r.collect());
  io.run();
  REQUIRE(r.got.size() == 2);
  // Its deadline came while the slow call held the wire: it fails then,
  // never sent, and may be tried again elsewhere.
  CHECK_THAT(r.got[0].error, Contains("did not answer within 200 ms") && Contains("not sent"));
  CHECK_FALSE(r.got[0].sent);
  CHECK(r.got[0].retryable);
  CHECK_THAT(r.got[1].error, Contains("did not answer within 600 ms"));
  CHECK(m.paths() == std::vector<std::string>{"/slow"});
}

TEST_CASE_METHOD(echo_connection,
                 "etcd: close fails the call on the wire and every call waiting, sending none of them") {
  replies r(io, 3);
  c->post("/slow", "{}", 5s, r.collect());
  c->post("/b", "{}", 5s, r.collect());
  c->post("/c", "{}", 5s, r.collect());
  asio::steady_timer later(io, 100ms);
  later.async_wait([c = c](boost::system::error_code) { c->close(); });
  io.run();
  REQUIRE(r.got.size() == 3);
  for (const auto& reply : r.got) CHECK_FALSE(reply.error.empty());
  CHECK_THAT(r.got[1].error, Contains("closed"));
  CHECK_FALSE(r.got[1].sent);
  CHECK_FALSE(r.got[2].retryable);
  CHECK(m.paths() == std::vector<std::string>{"/slow"});
}

TEST_CASE("etcd: a lease check and the close's revoke, posted together, reach etcd in turn") {
  asio::io_context io;
  fake_etcd_member m(io, [&io](const std::string& path, const std::string&) {
    if (path == "/v3/lease/revoke") asio::post(io, [&io] { io.stop(); });
    if (path == "/v3/lease/grant") {
      return fake_etcd_member::reply{http_json(R"({"header":{"revision":"2"},"ID":"7","TTL":"1"})")};
    }
    if (path == "/v3/lease/keepalive") {
      return fake_etcd_member::reply{http_json(R"({"result":{"ID":"7","TTL":"1"}})")};
    }
    if (path == "/v3/kv/range") {
      // The job's lease key names lease 7 ("Nw==").
      return fake_etcd_member::reply{http_json(
          R"({"header":{"revision":"2"},"kvs":[{"key":"L2R0cnVuL2pvYi9sZWFzZQ==",)"
          R"("create_revision":"2","mod_revision":"2","version":"1","value":"Nw==",)"
          R"("lease":"7"}],"count":"1"})")};
    }
    return fake_etcd_member::reply{http_json(R"({"header":{"revision":"3"}})")};
  });
  auto session = std::make_shared<etcd_session>(io, one_member(m), nullptr);
  bool checked = false;
  session->acquire(std::chrono::steady_clock::now() + 5s, [&](const std::string& error) {
    REQUIRE(error.empty());
    // The keep-alive of the check is on the wire when close posts its revoke.
    session->lease_refused("requested lease not found", [&] { checked = true; });
    session->close();
  });
  asio::steady_timer guard(io, 20s);
  guard.async_wait([&io](boost::system::error_code ec) {
    if (!ec) io.stop();
  });
  io.run();
  CHECK(checked);
  CHECK(m.paths() == std::vector<std::string>{"/v3/lease/grant", "/v3/kv/range",
                                              "/v3/lease/keepalive", "/v3/lease/revoke"});
}
