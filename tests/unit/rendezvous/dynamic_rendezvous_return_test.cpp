// A restart round closes once every node that can come is here
// (round_return.cpp, docs/rendezvous.md "Closing a restart round at once"):
// after a loss the survivors do not wait out the last call, a survivor
// slow to rejoin is still awaited, and a newcomer is not mistaken for it.
// The last call is an hour in these clusters: a round that waited for it
// would fail its join_timeout (10 s) instead.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "memory_cluster.h"
#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/algorithm/rendezvous_keys.h"

namespace memory_cluster {

namespace {

// A node of MIN:MAX whose last call is an hour: any round it closes early
// closed by the rule, not by timing.
dynamic_rendezvous& add_patient(cluster& c, int min_nodes, int max_nodes) {
  return c.add_with(min_nodes, max_nodes, [](dynamic_rendezvous_options& o) {
    o.last_call_timeout = std::chrono::hours(1);
  });
}

// Calls `then` once `key` exists in the cluster's store (a client of its
// own, so that no node's requests wait behind it).
void when_key_exists(cluster& c, const std::string& key, std::function<void()> then) {
  auto watcher = c.store.client();
  watcher->connect([](store_result) {});
  watcher->wait({key}, std::chrono::seconds(10), [watcher, then](store_result r) {
    REQUIRE_FALSE(r.error);
    then();
  });
}

}  // namespace

TEST_CASE("after a node is lost the survivors' round closes at once, not after the last call",
          "[dynamic_rendezvous][returning]") {
  cluster c;
  for (int i = 0; i < 3; ++i) add_patient(c, 2, 3);
  std::vector<round_result> first(3), second(2);
  int first_done = 0, second_done = 0;
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      if (i < 2) {
        c.nodes[i]->watch_round([&, i](said) {
          join(*c.nodes[i], second[i], [&] {
            if (++second_done == 2) c.shutdown_all();
          });
        });
      }
      // Round 0 closed at MAX; node 2 dies (its will ends the round).
      if (++first_done == 3) c.nodes[2]->shutdown();
    });
  }
  c.io.run();
  for (auto& r : second) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.round == 1);
    CHECK(r.info.group_world_size == 2);
  }
  auto gone = first[2].info.group_rank;
  CHECK(c.log_count(fmt::format("round 1: every node that can come is here (2 back from round "
                                "0, node {} gone; 2 arrived); closing with 2 node(s) without "
                                "waiting for the last call",
                                gone)) >= 1);
  CHECK(c.log_count("the last call") == c.log_count("without waiting for the last call"));
}

// Round 1 closes early with 3 of at most 4; then a node of it dies. Of
// the two survivors one rejoins at once and one late, after a newcomer:
// two arrivals are not "every node that can come", so round 2 waits for
// the late survivor and runs with all three.
TEST_CASE("a survivor slow to rejoin is awaited, even when a newcomer arrives before it",
          "[dynamic_rendezvous][returning]") {
  cluster c;
  for (int i = 0; i < 4; ++i) add_patient(c, 2, 4);
  rendezvous_keys keys("job1");
  std::vector<round_result> first(4), second(3), third(2);
  round_result newcomer;
  int first_done = 0, second_done = 0, third_done = 0;
  auto third_round_done = [&] {
    if (++third_done == 3) c.shutdown_all();
  };
  // Node 1 rejoins for round 2 once it knows round 1 is over and two
  // others (node 0, the newcomer) are in round 2.
  int node1_ready = 0;
  auto node1_rejoins = [&] {
    if (++node1_ready == 2) join(*c.nodes[1], third[1], third_round_done);
  };
  when_key_exists(c, keys.node(2, 1),
                  [&] { join(add_patient(c, 2, 4), newcomer, third_round_done); });
  when_key_exists(c, keys.node(2, 2), node1_rejoins);

  auto in_round_1 = [&](int i) {
    join(*c.nodes[i], second[i], [&, i] {
      c.nodes[i]->watch_round([&, i](said) {
        if (i == 0) join(*c.nodes[0], third[0], third_round_done);
        if (i == 1) node1_rejoins();
      });
      if (++second_done == 3) c.nodes[2]->shutdown();
    });
  };
  for (int i = 0; i < 4; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      if (i < 3) c.nodes[i]->watch_round([&, i](said) { in_round_1(i); });
      if (++first_done == 4) c.nodes[3]->shutdown();
    });
  }
  c.io.run();
  for (auto& r : second) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.round == 1);
    CHECK(r.info.group_world_size == 3);
  }
  for (const auto* r : {&third[0], &third[1], &newcomer}) {
    REQUIRE_FALSE(r->error);
    CHECK(r->info.round == 2);
    CHECK(r->info.group_world_size == 3);
  }
  // The survivors kept their ranks; the newcomer took the free one.
  CHECK(third[0].info.group_rank == second[0].info.group_rank);
  CHECK(third[1].info.group_rank == second[1].info.group_rank);
  CHECK(newcomer.info.group_rank == second[2].info.group_rank);
  CHECK(c.log_count("round 1: every node that can come is here (3 back from round 0") >= 1);
  CHECK(c.log_count(fmt::format("round 2: every node that can come is here (2 back from round "
                                "1, node {} gone; 3 arrived); closing with 3 node(s)",
                                second[2].info.group_rank)) >= 1);
}

// A worker failure names no one: every member comes back, and the round
// closes when the last of them is here (below MAX: round 1 had 3 of 4).
TEST_CASE("after a worker failure the round closes when every member is back",
          "[dynamic_rendezvous][returning]") {
  cluster c;
  for (int i = 0; i < 4; ++i) add_patient(c, 2, 4);
  std::vector<round_result> first(4), second(3), third(3);
  int first_done = 0, second_done = 0, third_done = 0;
  auto in_round_2 = [&](int i) {
    join(*c.nodes[i], third[i], [&] {
      if (++third_done == 3) c.shutdown_all();
    });
  };
  auto in_round_1 = [&](int i) {
    join(*c.nodes[i], second[i], [&, i] {
      if (i != 1) c.nodes[i]->watch_round([&, i](said) { in_round_2(i); });
      if (++second_done < 3) return;
      c.nodes[1]->report_failure(worker_failure("worker 0 exited with 1"), [&](std::exception_ptr e, auto) {
        REQUIRE_FALSE(e);
        in_round_2(1);
      });
    });
  };
  for (int i = 0; i < 4; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      if (i < 3) c.nodes[i]->watch_round([&, i](said) { in_round_1(i); });
      if (++first_done == 4) c.nodes[3]->shutdown();
    });
  }
  c.io.run();
  for (auto& r : third) {
    REQUIRE_FALSE(r.error);
    CHECK(r.info.round == 2);
    CHECK(r.info.group_world_size == 3);
  }
  CHECK(c.log_count("round 2: every node that can come is here (3 back from round 1; 3 "
                    "arrived); closing with 3 node(s)") >= 1);
}

// The newest round (`round`) is recorded from round 0 on, so a node that
// starts after a restart (a node that is only restarting) joins the newest
// round at once, instead of walking every past round from round 0.
TEST_CASE("a node started after a restart joins the newest round, not round 0",
          "[dynamic_rendezvous][returning]") {
  cluster c;
  for (int i = 0; i < 3; ++i) add_patient(c, 2, 3);
  std::vector<round_result> first(3), second(2), third(2);
  round_result newcomer;
  int first_done = 0, second_done = 0, third_done = 0;
  auto third_round_done = [&] {
    if (++third_done == 3) c.shutdown_all();
  };
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      if (i < 2) {
        c.nodes[i]->watch_round([&, i](said) {
          join(*c.nodes[i], second[i], [&, i] {
            c.nodes[i]->watch_round([&, i](said) {
              join(*c.nodes[i], third[i], third_round_done);
            });
            if (++second_done < 2) return;
            // Round 1 runs with the two survivors; the lost node's machine
            // starts a new agent.
            join(add_patient(c, 2, 3), newcomer, third_round_done);
          });
        });
      }
      if (++first_done == 3) c.nodes[2]->shutdown();
    });
  }
  c.io.run();
  CHECK(c.log_count("round 1 is running with 2 of at most 3 nodes; asking to join") == 1);
  CHECK(c.log_count("round 0 is") == 0);
  for (const auto* r : {&third[0], &third[1], &newcomer}) {
    REQUIRE_FALSE(r->error);
    CHECK(r->info.round == 2);
    CHECK(r->info.group_world_size == 3);
  }
}

}  // namespace memory_cluster
