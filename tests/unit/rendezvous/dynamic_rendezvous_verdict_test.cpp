// The round's first end decides what a failure costs, once for every node
// (round_run.cpp, report_failure; issue 49): a failure reported after a
// node's departure ended the round spends no restart, on every survivor;
// a departure after a failure ended it does not undo the restart; and two
// survivors reporting read the same verdict.
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory_cluster.h"
#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/algorithm/rendezvous_keys.h"

namespace memory_cluster {

namespace {

using verdict = rendezvous_handler::failure_verdict;

struct reported {
  bool done = false;
  std::exception_ptr error;
  verdict v;
};

// Every node of a 3-node cluster runs round 0 (`results`, by node); then
// `act` runs.
void three_nodes_running(cluster& c, std::vector<round_result>& results,
                         std::function<void()> act) {
  for (int i = 0; i < 3; ++i) c.add(3, 3);
  results.resize(3);
  auto joined = std::make_shared<int>(0);
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], results[i], [&results, joined, act] {
      if (++*joined < 3) return;
      for (const auto& r : results) REQUIRE_FALSE(r.error);
      act();
    });
  }
}

// Calls `then` once round 0's `over` holds a reason (a client of its own).
void when_over(cluster& c, std::function<void()> then) {
  auto watcher = c.store.client();
  watcher->connect([](store_result) {});
  watcher->wait({rendezvous_keys("job1").over(0)}, std::chrono::seconds(10),
                [watcher, then](store_result r) {
                  REQUIRE_FALSE(r.error);
                  then();
                });
}

void report(cluster& c, int node, reported& out, std::function<void()> then) {
  // "worker rank 0 exited with code 1 [exception:RuntimeError]"
  auto failure = worker_failure("worker rank 0 exited with code 1");
  failure.rank = 0;
  failure.klass = dtrun::records::failure_class::exception;
  failure.exception_type = "RuntimeError";
  c.nodes[node]->report_failure(
      failure, [&out, then](std::exception_ptr e, verdict v) {
        out = {true, e, std::move(v)};
        then();
      });
}

}  // namespace

TEST_CASE("failures reported after a node's departure ended the round spend no restart, on "
          "every survivor",
          "[dynamic_rendezvous]") {
  // The survivors' workers fail after node 2 died (their collective broke):
  // both report, both read the departure, and the job's count stays 0.
  cluster c;
  std::vector<round_result> round0;
  reported first, second;
  three_nodes_running(c, round0, [&] {
    c.nodes[2]->shutdown();  // its will ends the round
    when_over(c, [&] {
      report(c, 0, first, [&] {
        report(c, 1, second, [&] {
          c.nodes[0]->shutdown();
          c.nodes[1]->shutdown();
        });
      });
    });
  });
  c.io.run();
  for (auto* r : {&first, &second}) {
    REQUIRE(r->done);
    REQUIRE_FALSE(r->error);
    REQUIRE(r->v.ended_by);
    auto lost = "node " + std::to_string(round0[2].info.group_rank) + " (";
    CHECK_THAT(said(*r->v.ended_by), Catch::StartsWith(lost) && Catch::EndsWith(") was lost"));
  }
  // Nothing was counted: a later failure of round 0 would be the first.
  auto probe = c.store.client();
  std::int64_t restarts = -1;
  probe->connect([](store_result) {});
  probe->add(rendezvous_keys("job1").restarts(), 0,
             [&](store_result n) { restarts = n.number; });
  c.io.restart();
  c.io.run();
  CHECK(restarts == 0);
}

TEST_CASE("a departure after a failure ended the round does not undo its restart: the two "
          "survivors read one verdict",
          "[dynamic_rendezvous]") {
  // Node 1's failure ends the round first (one restart); node 2 dies then,
  // and its will must not overwrite the round's end; node 0, reporting
  // last, reads the same count and no departure.
  cluster c;
  std::vector<round_result> round0;
  reported on1, on0;
  three_nodes_running(c, round0, [&] {
    report(c, 1, on1, [&] {
      c.nodes[2]->shutdown();
      report(c, 0, on0, [&] {
        c.nodes[0]->shutdown();
        c.nodes[1]->shutdown();
      });
    });
  });
  c.io.run();
  for (auto* r : {&on1, &on0}) {
    REQUIRE(r->done);
    REQUIRE_FALSE(r->error);
    CHECK_FALSE(r->v.ended_by);
    CHECK(r->v.restarts == 1);
  }
  std::string over;
  auto probe = c.store.client();
  probe->connect([](store_result) {});
  probe->read_now({rendezvous_keys("job1").over(0)}, [&](store_result r) {
    if (!r.error && !r.values.empty()) over = said_in_store(r.values[0]);
  });
  c.io.restart();
  c.io.run();
  auto failed = "node " + std::to_string(round0[1].info.group_rank) + ": worker rank 0";
  CHECK_THAT(over, Catch::StartsWith(failed));
}

}  // namespace memory_cluster
