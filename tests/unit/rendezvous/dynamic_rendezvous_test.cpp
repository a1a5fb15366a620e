// The rendezvous algorithm (dynamic_rendezvous, the production class) with
// every node of a cluster in one process, meeting in an in-memory store
// (memory_cluster.h): no socket, no OS call, so these run in milliseconds
// and inside `unshare -n`. Joining, ranks, late joiners, node loss (last
// will, heartbeat), failures and restarts, stale rounds, timeouts. The
// exit barrier and the end of a job: dynamic_rendezvous_exit_test.cpp. The
// same over the real TCPStore and hosting: store_host_test.cpp,
// tests/integration, tests/e2e.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "memory_cluster.h"
#include "random_timeouts.h"
#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/algorithm/rendezvous_keys.h"
#include "rendezvous/store/store.h"

namespace memory_cluster {

TEST_CASE("three nodes get distinct ranks and every node's worker count", "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(3, 3, i + 1);
  check_three_nodes_ranked(run_round(c), c.port);
}

TEST_CASE("with MIN:MAX the round closes after the last call with the nodes present",
          "[dynamic_rendezvous]") {
  cluster c;
  std::vector<round_result> results(2);
  int completed = 0;
  c.add(2, 4);
  c.add(2, 4);
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++completed == 2) c.shutdown_all();
    });
  }
  c.io.run();
  for (auto& r : results) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.group_world_size == 2);
  }
}

TEST_CASE("a failure on one node ends the round everywhere, and ranks survive the restart",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(3, 3);
  std::vector<round_result> first(3), second(3);
  std::vector<std::string> reasons(3);
  int restarts = 0;
  int first_done = 0, second_done = 0;

  auto start_second = [&](int i) {
    join(*c.nodes[i], second[i], [&] {
      if (++second_done == 3) c.shutdown_all();
    });
  };
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      c.nodes[i]->watch_round([&, i](said reason) {
        reasons[i] = reason;
        start_second(i);
      });
      if (++first_done < 3) return;
      // Every node runs round 0; now node 1's workers fail.
      c.nodes[1]->report_failure(worker_failure("worker 3 exited with 1"), [&](std::exception_ptr e, auto v) {
        REQUIRE_FALSE(e);
        restarts = v.restarts;
        start_second(1);
      });
    });
  }
  c.io.run();
  CHECK(restarts == 1);
  CHECK_THAT(reasons[0], Catch::Contains("worker 3 exited with 1"));
  CHECK_THAT(reasons[2], Catch::Contains("worker 3 exited with 1"));
  CHECK(reasons[1].empty());  // the failing node is not told about itself
  for (int i = 0; i < 3; ++i) {
    REQUIRE_FALSE(second[i].error);
    CHECK(second[i].info.round == 1);
    CHECK(second[i].info.group_rank == first[i].info.group_rank);
    // A new round, a new (empty) store for the workers.
    CHECK(second[i].info.master_port != first[i].info.master_port);
    CHECK(second[i].info.master_port == second[0].info.master_port);
    CHECK(second[i].info.master_port != c.port);
  }
}

TEST_CASE("nodes whose workers fail together in one round count one restart",
          "[dynamic_rendezvous]") {
  // Both nodes report before either hears that the round ended (the
  // workers of one collective fail together): the job has used one restart
  // after round 0 and two after round 1, on both nodes.
  cluster c;
  for (int i = 0; i < 2; ++i) c.add(2, 2);
  std::vector<std::vector<int>> counts(2);
  int joined = 0;
  std::function<void(int)> start_round = [&](int round) {
    auto results = std::make_shared<std::vector<round_result>>(2);
    for (int i = 0; i < 2; ++i) {
      join(*c.nodes[i], (*results)[i], [&, results, round] {
        if (++joined < 2 * (round + 1)) return;
        for (const auto& r : *results) REQUIRE_FALSE(r.error);
        auto reported = std::make_shared<int>(0);
        for (int n = 0; n < 2; ++n) {
          c.nodes[n]->report_failure(worker_failure("worker exited with 3"),
                                     [&, n, round, reported](std::exception_ptr e, auto v) {
                                       REQUIRE_FALSE(e);
                                       counts[n].push_back(v.restarts);
                                       if (++*reported < 2) return;
                                       if (round == 0) {
                                         start_round(1);
                                       } else {
                                         c.shutdown_all();
                                       }
                                     });
        }
      });
    }
  };
  start_round(0);
  c.io.run();
  CHECK(counts[0] == std::vector<int>{1, 2});
  CHECK(counts[1] == std::vector<int>{1, 2});
}

TEST_CASE("a node whose connection dies ends the round at once (last will)",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(2, 3);
  std::vector<round_result> first(3), second(2);
  std::string reason;
  int first_done = 0, second_done = 0;
  c.log.clear();
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      if (i < 2) {
        c.nodes[i]->watch_round([&, i](said why) {
          reason = why;
          join(*c.nodes[i], second[i], [&] {
            if (++second_done == 2) c.shutdown_all();
          });
        });
      }
      // Node 2 "dies": its connections close without a goodbye.
      if (++first_done == 3) c.nodes[2]->shutdown();
    });
  }
  c.io.run();
  CHECK_THAT(reason, Catch::Contains("was lost"));
  for (auto& r : second) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.group_world_size == 2);
    CHECK(r.info.round == 1);
  }
}

TEST_CASE("a node arriving at a running round below MAX is let in", "[dynamic_rendezvous]") {
  cluster c;
  c.add(2, 3);
  c.add(2, 3);
  std::vector<round_result> first(2), second(3);
  std::vector<std::string> reasons(2);
  int first_done = 0, second_done = 0;
  auto all_second = [&] {
    if (++second_done == 3) c.shutdown_all();
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      c.nodes[i]->watch_round([&, i](said why) {
        reasons[i] = why;
        join(*c.nodes[i], second[i], all_second);
      });
      if (++first_done == 2) {
        // Round 0 runs with two nodes; a third arrives.
        join(c.add(2, 3), second[2], all_second);
      }
    });
  }
  c.io.run();
  CHECK_THAT(reasons[0], Catch::Contains("waiting to join"));
  for (auto& r : second) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.round == 1);
    CHECK(r.info.group_world_size == 3);
  }
  // The first two kept their ranks; the newcomer took the free one.
  CHECK(second[0].info.group_rank == first[0].info.group_rank);
  CHECK(second[1].info.group_rank == first[1].info.group_rank);
  CHECK(second[2].info.group_rank == 2);
}

// A newcomer joins a round without asking first whether it has closed; at
// a full round it must learn from its arrival index that it came late and
// wait, not end the round or take a rank in it.
TEST_CASE("a node arriving at a full round waits for the next one", "[dynamic_rendezvous]") {
  cluster c;
  c.add(2, 2);
  c.add(2, 2);
  std::vector<round_result> first(2);
  round_result newcomer, node0_again;
  std::vector<std::string> reasons(2);
  int first_done = 0;
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      c.nodes[i]->watch_round([&, i](said why) {
        reasons[i] = why;
        if (i == 0) join(*c.nodes[0], node0_again, [&] {
          if (newcomer.done) c.shutdown_all();
        });
      });
      if (++first_done < 2) return;
      // Round 0 runs with its two nodes, the most it takes; a third arrives.
      auto& third = c.add_with(2, 2, [&](dynamic_rendezvous_options& o) {
        o.log = [&](const std::string& line) {
          c.log.push_back(line);
          // It waits; only then does node 1 die, and its last will end
          // round 0, so node 0 and the newcomer meet in round 1.
          if (line.find("is full") != std::string::npos) {
            boost::asio::post(c.io, [&] { c.nodes[1]->shutdown(); });
          }
        };
      });
      join(third, newcomer, [&] {
        if (node0_again.done) c.shutdown_all();
      });
    });
  }
  c.io.run();
  CHECK(std::count_if(c.log.begin(), c.log.end(), [](const std::string& l) {
          return l.find("round 0 is full (2 nodes); waiting for the next one") != std::string::npos;
        }) == 1);
  // Round 0 ended because node 1 died, not because of the newcomer.
  CHECK_THAT(reasons[0], !Catch::Contains("waiting to join"));
  REQUIRE_FALSE(newcomer.error);
  REQUIRE_FALSE(node0_again.error);
  CHECK(newcomer.info.round == 1);
  CHECK(node0_again.info.round == 1);
  CHECK(newcomer.info.group_world_size == 2);
  CHECK(node0_again.info.group_rank == first[0].info.group_rank);
  CHECK(newcomer.info.group_rank == 1 - first[0].info.group_rank);
}

TEST_CASE("static rendezvous pins each node's rank and rejects a duplicate",
          "[dynamic_rendezvous]") {
  cluster c;
  std::vector<round_result> results;
  auto run_with_node_ranks = [&](std::vector<int> node_ranks) {
    for (int rank : node_ranks) {
      c.add_with(3, 3, [rank](auto& o) {
        o.fixed_rank = rank;
        o.fresh_worker_store = false;  // as the static backend sets it
      });
    }
    results = run_round(c);
  };
  SECTION("distinct node ranks are kept whatever the arrival order") {
    run_with_node_ranks({2, 0, 1});
    CHECK(results[0].info.group_rank == 2);
    CHECK(results[1].info.group_rank == 0);
    CHECK(results[2].info.group_rank == 1);
    // Static: MASTER_PORT stays --master-port (the endpoint), as torchrun's.
    for (auto& r : results) CHECK(r.info.master_port == c.port);
  }
  SECTION("two nodes with the same --node-rank fail with a clear message") {
    run_with_node_ranks({0, 1, 1});
    int failed = 0;
    for (auto& r : results) {
      if (!r.error) continue;
      ++failed;
      CHECK_THAT(message_of(r.error), Catch::Contains("--node-rank=1"));
    }
    CHECK(failed == 1);
  }
}

TEST_CASE("a round started again at once ignores the abandoned round's replies",
          "[dynamic_rendezvous]") {
  // The second next_round() closes the first's connections, whose
  // callbacks then fail: they must not fail the new round, and the first
  // call still completes, once, with an error.
  cluster c;
  auto& a = c.add(2, 2);
  auto& b = c.add(2, 2);
  int first_calls = 0;
  std::string first_error;
  a.next_round([&](std::exception_ptr e, rendezvous_info) {
    ++first_calls;
    if (e) first_error = message_of(e);
  });
  round_result again, other;
  std::size_t completed = 0;
  auto both = [&] {
    if (++completed == 2) c.shutdown_all();
  };
  join(a, again, both);
  join(b, other, both);
  c.io.run();
  CHECK(first_calls == 1);
  CHECK_THAT(first_error, Catch::Contains("abandoned"));
  REQUIRE(again.done);
  REQUIRE(other.done);
  CHECK_FALSE(again.error);
  CHECK_FALSE(other.error);
  CHECK(again.info.group_rank != other.info.group_rank);
}

// A node that hangs with its connection open (no will runs) is named by its
// ring predecessor, which ends the round; the others go on without it.
TEST_CASE("a node that stops sending heartbeats is declared lost by its ring predecessor",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) {
    c.add_with(2, 3, [](dynamic_rendezvous_options& o) {
      o.keep_alive_interval = 10ms;
      o.keep_alive_max_attempt = 3;
    });
  }
  std::vector<round_result> first(3), second(2);
  std::vector<std::string> reasons(2);
  int first_done = 0, second_done = 0;
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      if (i < 2) {
        c.nodes[i]->watch_round([&, i](said why) {
          reasons[i] = why;
          join(*c.nodes[i], second[i], [&] {
            if (++second_done == 2) c.shutdown_all();
          });
        });
      }
      if (++first_done == 3) c.hang(2);
    });
  }
  c.io.run();
  REQUIRE(first[2].done);
  auto lost = fmt::format("node {} stopped sending heartbeats", first[2].info.group_rank);
  CHECK(reasons[0] == lost);
  CHECK(reasons[1] == lost);
  for (auto& r : second) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.round == 1);
    CHECK(r.info.group_world_size == 2);
  }
}

// A node may start its next round at once (its workers failed and it does
// not wait to hear it from the store): the previous round's WAIT on `over`
// then fails when the new round closes its client. That stale reply must
// not end the new round (before 2026-11-22 it set the round-over flag of
// the new round: no `over` was ever reported again, and the exit barrier
// waited out its timeout).
TEST_CASE("a reply of the previous round neither ends nor blocks the next round",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 2; ++i) {
    c.add_with(2, 2, [](dynamic_rendezvous_options& o) { o.exit_barrier_timeout = 3s; });
  }
  std::vector<round_result> first(2), second(2);
  std::vector<std::string> told_round1, released;
  int first_done = 0, second_done = 0;
  auto start_second = [&](int i) {
    join(*c.nodes[i], second[i], [&, i] {
      REQUIRE_FALSE(second[i].error);
      c.nodes[i]->watch_round([&](said why) { told_round1.push_back(why); });
      if (++second_done < 2) return;
      c.finish_all(2, released);
    });
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      REQUIRE_FALSE(first[i].error);
      if (i == 1) c.nodes[1]->watch_round([&](said) { start_second(1); });
      if (++first_done < 2) return;
      // Node 0 rejoins at once; its will tells node 1 that round 0 is over.
      start_second(0);
    });
  }
  c.io.run();
  CHECK(told_round1.empty());
  CHECK(released == std::vector<std::string>{"", ""});
  CHECK(c.log_count("exit barrier: not every node finished") == 0);
  for (auto& r : second) CHECK(r.info.round == 1);
}

TEST_CASE("in memory, rounds with zero and random tiny timeouts complete exactly once",
          "[dynamic_rendezvous]") {
  auto seed = testing::test_seed();
  INFO("DTRUN_TEST_SEED=" << seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 150; ++trial) testing::random_timeouts_trial<cluster>(rng, trial);
}


// --node-unit (docs/rendezvous.md, "Spare nodes"): three of at most four
// nodes in units of two make a round of two; the third waits as a spare
// without ending the round, until a fourth completes a unit: then all four
// meet, the first two keeping their ranks.
TEST_CASE("with --node-unit a round takes whole units; the rest wait until a unit is complete",
          "[dynamic_rendezvous]") {
  cluster c;
  auto unit_of_two = [](dynamic_rendezvous_options& o) { o.node_unit = 2; };
  std::vector<round_result> first(2), second(4);
  std::vector<std::string> reasons(2);
  int first_done = 0, second_done = 0;
  auto all_second = [&] {
    if (++second_done == 4) c.shutdown_all();
  };
  for (int i = 0; i < 2; ++i) c.add_with(2, 4, unit_of_two);
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      c.nodes[i]->watch_round([&, i](said why) {
        reasons[i] = why;
        join(*c.nodes[i], second[i], all_second);
      });
      if (++first_done < 2) return;
      // The third: alone it is no unit, so it waits as a spare; once it
      // said so, the fourth comes and completes one.
      auto& third = c.add_with(2, 4, [&](dynamic_rendezvous_options& o) {
        o.node_unit = 2;
        o.log = [&](const std::string& line) {
          c.log.push_back(line);
          if (line.find("waiting as a spare until a unit is complete") == std::string::npos) {
            return;
          }
          boost::asio::post(c.io, [&] {
            join(c.add_with(2, 4, unit_of_two), second[3], all_second);
          });
        };
      });
      join(third, second[2], all_second);
    });
  }
  c.io.run();
  for (const auto& r : first) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.group_world_size == 2);
  }
  CHECK_THAT(reasons[0], Catch::Contains("waiting to join"));
  CHECK(std::count_if(c.log.begin(), c.log.end(), [](const std::string& l) {
          return l.find("round 0 is running with 2 nodes, in units of 2; waiting as a spare") !=
                 std::string::npos;
        }) == 1);
  for (const auto& r : second) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.round == 1);
    CHECK(r.info.group_world_size == 4);
  }
  CHECK(second[0].info.group_rank == first[0].info.group_rank);
  CHECK(second[1].info.group_rank == first[1].info.group_rank);
  CHECK(second[2].info.promoted);  // it waited as a spare
  CHECK_FALSE(second[3].info.promoted);
}

TEST_CASE("with --node-unit the last call closes with whole units only", "[dynamic_rendezvous]") {
  cluster c;
  // Three arrive for a job of 2 to 4 nodes in units of two: round 0 has two.
  for (int i = 0; i < 3; ++i) c.add_with(2, 4, [](auto& o) { o.node_unit = 2; });
  std::vector<round_result> results(3);
  int done = 0;
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++done == 2) c.shutdown_all();
    });
  }
  join(*c.nodes[2], results[2]);
  c.io.run();
  int ranked = 0;
  for (const auto& r : results) {
    if (r.done && !r.error) {
      ++ranked;
      CHECK(r.info.group_world_size == 2);
    }
  }
  CHECK(ranked == 2);
}

}  // namespace memory_cluster
