// The rendezvous over its production parts (store_host.h): the c10d
// TCPStore that the first node hosts on loopback, the TCP client, the real
// OS. The algorithm's scenarios run on the in-memory store in
// dynamic_rendezvous_test.cpp; these are the ones about hosting, sockets
// and the OS: the store a node hosts and the workers' fresh store, an
// endpoint nobody answers at, an external store, a reserved port, client
// timeouts at 0 and at random points.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <random>
#include <map>
#include <set>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/algorithm/rendezvous_os.h"
#include "rendezvous/store/store.h"
#include "rendezvous/store/store_server.h"
#include "random_timeouts.h"
#include "round_test_support.h"
#include <boost/asio/ip/host_name.hpp>

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;

// Everything in a namespace of its own, test cases included: a unity batch
// compiles the test files of the folder together.
namespace tcp_cluster {

using namespace round_test_support;

struct cluster {
  boost::asio::io_context io;
  std::vector<std::unique_ptr<dynamic_rendezvous>> nodes;
  std::vector<std::string> log;
  std::uint16_t port = 0;

  dynamic_rendezvous_options options(int min_nodes, int max_nodes, int nproc) {
    return node_options(port, nodes.empty(), min_nodes, max_nodes, nproc, 200ms, log);
  }

  dynamic_rendezvous& add(int min_nodes, int max_nodes, int nproc = 1) {
    nodes.push_back(
        std::make_unique<dynamic_rendezvous>(io, options(min_nodes, max_nodes, nproc)));
    if (port == 0) port = nodes.back()->store_port();
    return *nodes.back();
  }

  void shutdown_all() {
    for (auto& n : nodes) n->shutdown();
  }

  // Adds a node with options(min, max, 1) adjusted by `tweak`.
  dynamic_rendezvous& add_with(int min_nodes, int max_nodes,
                               const std::function<void(dynamic_rendezvous_options&)>& tweak) {
    auto o = options(min_nodes, max_nodes, 1);
    tweak(o);
    nodes.push_back(std::make_unique<dynamic_rendezvous>(io, o));
    if (port == 0) port = nodes.back()->store_port();
    return *nodes.back();
  }
};

TEST_CASE("over TCP, three nodes meet in the store the first hosts, their workers in a fresh one",
          "[store_host]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(3, 3, i + 1);
  check_three_nodes_ranked(run_round(c), c.port);
}

TEST_CASE("nobody hosting the store is reported clearly, then times out", "[store_host]") {
  boost::asio::io_context io;
  std::uint16_t port;
  {
    store_server probe(io, {.host = "127.0.0.1"});
    port = probe.port();
  }
  std::vector<std::string> log;
  dynamic_rendezvous_options o;
  o.endpoint_host = "127.0.0.1";
  o.endpoint_port = port;
  o.join_timeout = 600ms;
  o.no_host_warning = 100ms;
  o.log = [&](const std::string& line) { log.push_back(line); };
  dynamic_rendezvous node(io, o);
  round_result r;
  join(node, r);
  io.run();
  REQUIRE(r.error);
  CHECK_THAT(message_of(r.error), Catch::Contains("could not reach the store"));
  REQUIRE_FALSE(log.empty());
  CHECK_THAT(log.front(), Catch::Contains("no store answers") && Catch::Contains("is_host"));
}

TEST_CASE("endpoint hosts that name this machine are recognised", "[store_host]") {
  CHECK(is_this_machine("localhost"));
  CHECK(is_this_machine("127.0.0.1"));
  CHECK(is_this_machine("::1"));
  CHECK(is_this_machine(boost::asio::ip::host_name()));
  CHECK_FALSE(is_this_machine("192.0.2.1"));  // TEST-NET-1, never local
}

TEST_CASE("without a member hosting the store the workers use the endpoint store", "[store_host]") {
  // An external store (dtrun-store serve): no node hosts it, so none opens
  // a workers' store and MASTER_PORT falls back to the endpoint's port.
  cluster c;
  store_server external(c.io, store_server_options{.host = "127.0.0.1"});
  c.port = external.port();
  for (int i = 0; i < 2; ++i) c.add_with(2, 2, [](auto& o) { o.host_store = false; });
  std::vector<round_result> results(2);
  int completed = 0;
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++completed < 2) return;
      c.shutdown_all();
      external.stop();
    });
  }
  c.io.run();
  for (auto& r : results) {
    REQUIRE(r.done);
    REQUIRE_FALSE(r.error);
    CHECK(r.info.master_port == c.port);
  }
  for (auto& n : c.nodes) CHECK(n->worker_store_port() == 0);
}

TEST_CASE("with worker_store=rank0, MASTER_ADDR:PORT is rank 0's reserved port", "[store_host]") {
  cluster c;
  for (int i = 0; i < 2; ++i) c.add_with(2, 2, [](auto& o) { o.workers_use_agent_store = false; });
  auto results = run_round(c);
  for (auto& r : results) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.master_port != 0);
    CHECK(r.info.master_port != c.port);  // not the agents' store
    CHECK(r.info.master_addr == "127.0.0.1");
    CHECK(r.info.store_port == c.port);
  }
  CHECK(results[0].info.master_port == results[1].info.master_port);
}

// --- timeouts at 0 and at random points -------------------------------------

using testing::random_timeouts_trial;
using testing::test_seed;

TEST_CASE("rounds with zero and random tiny timeouts complete exactly once without crashing",
          "[store_host]") {
  auto seed = test_seed();
  fmt::print(stderr, "rendezvous timeouts: DTRUN_TEST_SEED={}\n", seed);
  INFO("DTRUN_TEST_SEED=" << seed);
  std::mt19937 rng(seed);
  int succeeded = 0;
  for (int trial = 0; trial < 150; ++trial) {
    succeeded += random_timeouts_trial<cluster>(rng, trial);
  }
  INFO("rounds that succeeded: " << succeeded);
  SUCCEED();
}

}  // namespace tcp_cluster
