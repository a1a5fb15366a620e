// Real lookups through the system's resolver: "localhost" resolves from
// /etc/hosts, and `.invalid` never resolves (RFC 6761).
#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "agent/health/endpoint_check.h"
#include "rendezvous/base/generation_timer.h"

using namespace dtrun::agent;
using namespace std::chrono_literals;

namespace {

// Runs the loop until `got` is set; a safety timer fails the test.
void run_until(boost::asio::io_context& io, const std::optional<health_finding>& got) {
  dtrun::generation_timer safety(io);
  bool expired = false;
  safety.arm_after(60s, [&] {
    expired = true;
    io.stop();
  });
  while (!got && !expired) io.run_one();
  io.restart();
  REQUIRE_FALSE(expired);
}

}  // namespace

TEST_CASE("the endpoint check passes for a host that resolves", "[health]") {
  boost::asio::io_context io;
  endpoint_check check(io);
  std::optional<health_finding> got;
  check.run("localhost", 30s, false, [&](health_finding f) { got = std::move(f); });
  CHECK_FALSE(got);  // never from inside run()
  run_until(io, got);
  CHECK(got->check == "endpoint");
  CHECK(got->healthy);
  CHECK_FALSE(got->gating);
  CHECK(got->reason.empty());
}

TEST_CASE("the endpoint check fails for a host that does not resolve, naming it", "[health]") {
  boost::asio::io_context io;
  endpoint_check check(io);
  std::optional<health_finding> got;
  check.run("dtrun-no-such-host.invalid", 30s, true, [&](health_finding f) { got = std::move(f); });
  run_until(io, got);
  CHECK_FALSE(got->healthy);
  CHECK(got->gating);
  CHECK(got->reason.find("cannot resolve the rendezvous host dtrun-no-such-host.invalid: ") == 0);
  CHECK(got->reason.find("; check with: getent hosts dtrun-no-such-host.invalid") !=
        std::string::npos);
}

TEST_CASE("a cancelled endpoint check never calls back", "[health]") {
  boost::asio::io_context io;
  bool called = false;
  std::optional<health_finding> got;
  {
    endpoint_check destroyed(io);
    destroyed.run("localhost", 30s, true, [&](health_finding) { called = true; });
  }
  endpoint_check check(io);
  check.run("localhost", 30s, true, [&](health_finding) { called = true; });
  check.cancel();
  check.cancel();
  CHECK_FALSE(check.running());
  check.run("localhost", 30s, true, [&](health_finding f) { got = std::move(f); });
  run_until(io, got);
  // The earlier lookups' answers came first (one resolver thread, in
  // order) and reached nothing.
  CHECK_FALSE(called);
  CHECK(got->healthy);
}

TEST_CASE("the endpoint check's reason", "[health]") {
  health_finding f = endpoint_finding("node1", "no answer within 10 s", true);
  CHECK(f.reason ==
        "cannot resolve the rendezvous host node1: no answer within 10 s; check with: getent "
        "hosts node1");
  CHECK(endpoint_finding("node1", "", true).healthy);
}
