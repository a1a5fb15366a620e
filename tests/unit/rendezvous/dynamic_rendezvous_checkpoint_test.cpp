// A job-wide checkpoint through the store (docs/agent.md, "Preemption";
// the fixture: memory_cluster.h): one request per round, whichever nodes
// ask, and every node's watch hears it once.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "memory_cluster.h"
#include "rendezvous/algorithm/dynamic_rendezvous.h"

namespace memory_cluster {

TEST_CASE("a checkpoint asked for by several nodes at once is one request that every node hears "
          "once",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(3, 3);
  std::vector<round_result> results(3);
  std::vector<std::vector<std::string>> heard(3);
  std::vector<int> firsts;
  int joined = 0, answered = 0;
  auto maybe_done = [&] {
    int heard_by = 0;
    for (const auto& h : heard) heard_by += h.empty() ? 0 : 1;
    if (answered == 3 && heard_by == 3) c.shutdown_all();
  };
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++joined < 3) return;
      for (int n = 0; n < 3; ++n) {
        c.nodes[n]->watch_checkpoint([&, n](std::string who) {
          heard[n].push_back(who);
          maybe_done();
        });
      }
      // Nodes 1 and 2 get the notice at once; node 1 asks again later.
      for (int n = 1; n < 3; ++n) {
        c.nodes[n]->request_checkpoint("got the preemption notice SIGUSR1", [&, n](bool first) {
          if (first) firsts.push_back(n);
          if (++answered < 2) return;
          c.nodes[1]->request_checkpoint("got the preemption notice SIGUSR1", [&](bool again) {
            CHECK_FALSE(again);
            ++answered;
            maybe_done();
          });
        });
      }
    });
  }
  c.io.run();
  REQUIRE(firsts.size() == 1);
  for (const auto& h : heard) {
    REQUIRE(h.size() == 1);
    CHECK(h[0] == heard[0][0]);
    CHECK_THAT(h[0], Catch::Contains("got the preemption notice SIGUSR1"));
  }
}

TEST_CASE("no checkpoint is asked for outside a running round", "[dynamic_rendezvous]") {
  cluster c;
  c.add(1, 1);
  bool answered = false;
  c.nodes[0]->request_checkpoint("was preempted (SIGTERM)", [&](bool first) {
    CHECK_FALSE(first);
    answered = true;
  });
  CHECK(answered);
  c.shutdown_all();
}

}  // namespace memory_cluster
