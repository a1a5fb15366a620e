// The rendezvous algorithm's exit barrier and the end of a job (the
// fixture and what it fakes: memory_cluster.h; the other scenarios:
// dynamic_rendezvous_test.cpp). No socket: runs inside `unshare -n`.
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

TEST_CASE("the exit barrier releases every node when the last one finishes",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(3, 3);
  std::vector<round_result> results(3);
  int joined = 0, finished = 0;
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++joined < 3) return;
      for (auto& n : c.nodes) {
        n->finish([&](std::exception_ptr e) {
          CHECK_FALSE(e);
          if (++finished == 3) c.shutdown_all();
        });
      }
    });
  }
  c.io.run();
  CHECK(finished == 3);
}

TEST_CASE("a node lost during the exit barrier ends it with the loss, not a release",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 3; ++i) c.add(3, 3);
  std::vector<round_result> results(3);
  std::vector<std::string> errors;
  int joined = 0;
  for (int i = 0; i < 3; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++joined < 3) return;
      // Nodes 0 and 1 finish; node 2 dies before it does.
      for (int n = 0; n < 2; ++n) {
        c.nodes[n]->finish([&](std::exception_ptr e) {
          errors.push_back(e ? message_of(e) : "released");
          if (errors.size() == 2) c.shutdown_all();
        });
      }
      boost::asio::post(c.io, [&] { c.nodes[2]->shutdown(); });
    });
  }
  c.io.run();
  REQUIRE(errors.size() == 2);
  for (const auto& e : errors) {
    CHECK_THAT(e, Catch::Contains("ended before every node finished") &&
                      Catch::Contains("was lost"));
  }
}

TEST_CASE("the exit barrier lets a node go alone after exit_barrier_timeout",
          "[dynamic_rendezvous]") {
  cluster c;
  c.add_with(2, 2, [](dynamic_rendezvous_options& o) { o.exit_barrier_timeout = 200ms; });
  c.add(2, 2);
  std::vector<round_result> results(2);
  std::optional<std::string> outcome;
  int joined = 0;
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], results[i], [&] {
      if (++joined < 2) return;
      // Node 1 is still training.
      c.nodes[0]->finish([&](std::exception_ptr e) {
        outcome = e ? message_of(e) : "";
        c.shutdown_all();
      });
    });
  }
  c.io.run();
  REQUIRE(outcome);
  CHECK(outcome->empty());
  CHECK(std::count_if(c.log.begin(), c.log.end(), [](const std::string& l) {
          return l.find("exit barrier: not every node finished within") != std::string::npos;
        }) == 1);
}

// A failure elsewhere ends node 0's exit barrier and both nodes rejoin.
// The barrier's timeout belongs to that barrier: armed in round 0, it must
// not fire in round 1, where it stopped node 0's heartbeats (its ring
// predecessor then declared it lost) and could have let it leave alone.
TEST_CASE("an exit barrier that a failure ended does not time out in the next round",
          "[dynamic_rendezvous]") {
  cluster c;
  c.add_with(2, 2, [](dynamic_rendezvous_options& o) {
    o.exit_barrier_timeout = 50ms;
    o.keep_alive_interval = 10ms;
  });
  c.add_with(2, 2, [](dynamic_rendezvous_options& o) {
    o.exit_barrier_timeout = 3s;  // bounds the test if round 1 goes wrong
    o.keep_alive_interval = 10ms;
  });
  std::vector<round_result> first(2), second(2);
  std::vector<std::string> round1_over, released;
  std::optional<std::string> barrier0;
  int first_done = 0, second_done = 0;
  boost::asio::steady_timer later(c.io);
  auto start_second = [&](int i) {
    join(*c.nodes[i], second[i], [&, i] {
      REQUIRE_FALSE(second[i].error);
      c.nodes[i]->watch_round([&](said why) { round1_over.push_back(why); });
      if (++second_done < 2) return;
      // Round 1 runs well past node 0's round-0 barrier timeout, then both
      // nodes finish.
      later.expires_after(250ms);
      later.async_wait([&](const boost::system::error_code&) { c.finish_all(2, released); });
    });
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      REQUIRE_FALSE(first[i].error);
      if (i == 0) c.nodes[0]->watch_round([&](said) { start_second(0); });
      if (++first_done < 2) return;
      // Node 0's workers succeed; node 1's fail.
      c.nodes[0]->finish([&](std::exception_ptr e) { barrier0 = e ? message_of(e) : ""; });
      c.nodes[1]->report_failure(worker_failure("worker exited with 1"), [&](std::exception_ptr e, auto) {
        REQUIRE_FALSE(e);
        start_second(1);
      });
    });
  }
  c.io.run();
  REQUIRE(barrier0);
  CHECK_THAT(*barrier0, Catch::Contains("ended before every node finished"));
  CHECK(std::count_if(c.log.begin(), c.log.end(), [](const std::string& l) {
          return l.find("exit barrier: not every node finished") != std::string::npos;
        }) == 0);
  CHECK(round1_over.empty());
  CHECK(released == std::vector<std::string>{"", ""});
}

TEST_CASE("a spare waiting for the next round of a job that finishes is told it was not needed",
          "[dynamic_rendezvous]") {
  cluster c;
  c.add(2, 2);
  c.add(2, 2);
  std::vector<round_result> first(2);
  round_result newcomer;
  int joined = 0, released = 0;
  auto end_when_all_told = [&] {
    if (released == 2 && newcomer.done) c.shutdown_all();
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&] {
      if (++joined < 2) return;
      // The job runs with its two nodes, the most it takes; a third
      // arrives and waits; then both finish.
      auto& third = c.add_with(2, 2, [&](dynamic_rendezvous_options& o) {
        o.log = [&](const std::string& line) {
          if (line.find("is full") == std::string::npos) return;
          for (int n = 0; n < 2; ++n) {
            c.nodes[n]->finish([&](std::exception_ptr e) {
              CHECK_FALSE(e);
              ++released;
              end_when_all_told();
            });
          }
        };
      });
      join(third, newcomer, end_when_all_told);
    });
  }
  c.io.run();
  CHECK(released == 2);
  REQUIRE(newcomer.error);
  // No failure: the agent exits 0 on it (docs/rendezvous.md, "Spare nodes").
  CHECK_THROWS_AS(std::rethrow_exception(newcomer.error), job_finished_error);
  CHECK_THAT(message_of(newcomer.error),
             Catch::Contains("the job finished (round 0) without needing this spare node"));
}

// Below MAX a latecomer asks to be let in by ending the round; once every
// node finished, that must neither overwrite the release in `over` nor
// leave the latecomer waiting join_timeout for a round nobody will join.
TEST_CASE("a node arriving below MAX after every node finished is told the job finished",
          "[dynamic_rendezvous]") {
  cluster c;
  c.add(2, 3);
  c.add(2, 3);
  std::vector<round_result> first(2);
  round_result newcomer;
  int joined = 0, released = 0;
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&] {
      if (++joined < 2) return;
      for (int n = 0; n < 2; ++n) {
        c.nodes[n]->finish([&](std::exception_ptr e) {
          CHECK_FALSE(e);
          if (++released < 2) return;
          // The job is over (the host's store is still up); a third node
          // arrives, with room for it below MAX.
          auto& third = c.add_with(2, 3, [](dynamic_rendezvous_options& o) {
            o.join_timeout = 3s;  // bounds the test when it waits wrongly
          });
          join(third, newcomer, [&] { c.shutdown_all(); });
        });
      }
    });
  }
  c.io.run();
  CHECK(released == 2);
  REQUIRE(newcomer.done);
  REQUIRE(newcomer.error);
  CHECK_THAT(message_of(newcomer.error),
             Catch::Contains("the job finished (round 0) before this node could join"));
  // The release stays in `over`: the latecomer's request did not cover it.
  CHECK(said_in_store(c.store.value(rendezvous_keys("job1").over(0)).value_or("(absent)")) ==
        "every node finished");
}

TEST_CASE("failure reports reach every node, and the store's host waits until all read them",
          "[dynamic_rendezvous]") {
  // The failing node is the host (node 0): it must not finish reading (and
  // so leave, taking the store along) before node 1 has read the reports.
  cluster c;
  for (int i = 0; i < 2; ++i) c.add_with(2, 2, [](auto& o) { o.max_restarts = 0; });
  std::vector<round_result> first(2), second(2);
  std::vector<std::string> order;
  std::vector<std::vector<std::string>> read(2);
  std::vector<std::size_t> totals(2);
  std::int64_t failed_round = -1;
  int first_done = 0;
  auto read_failures = [&](int i, std::int64_t round) {
    c.nodes[i]->round_failures(round, [&, i](std::vector<std::string> records, std::size_t total) {
      read[i] = std::move(records);
      totals[i] = total;
      order.push_back("node " + std::to_string(i) + " read");
      if (order.size() == 2) c.shutdown_all();
    });
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      if (i == 1) {
        c.nodes[1]->watch_round([&](said) {
          join(*c.nodes[1], second[1], [&] {
            try {
              std::rethrow_exception(second[1].error);
            } catch (const job_failed_error& e) {
              failed_round = e.round;
            } catch (...) {
            }
            read_failures(1, failed_round);
          });
        });
      }
      if (++first_done < 2) return;
      c.nodes[0]->publish_failure(0, R"({"rank": 1, "message": "boom 42"})", [&] {
        c.nodes[0]->publish_failure(0, R"({"rank": 0, "message": "later"})", [&] {
          c.nodes[0]->report_failure(worker_failure("worker rank 1 exited with code 1"),
                                     [&](std::exception_ptr, auto) {
                                       c.nodes[0]->fail_job(job_failure("out of restarts"),
                                                            [&] { read_failures(0, 0); });
                                     });
        });
      });
    });
  }
  c.io.run();
  CHECK(failed_round == 0);
  CHECK(order == std::vector<std::string>{"node 1 read", "node 0 read"});
  for (int i = 0; i < 2; ++i) {
    CHECK(totals[i] == 2);
    REQUIRE(read[i].size() == 2);
    CHECK(read[i][0] == R"({"rank": 1, "message": "boom 42"})");
  }
}


// Ctrl-C on the store's host: the round ends with who stopped it, the host
// keeps its store up until every node has seen the stop, and a node that
// comes later reads `stopped` instead of joining.
TEST_CASE("a stop on the host ends the round everywhere and the host waits until all saw it",
          "[dynamic_rendezvous]") {
  cluster c;
  for (int i = 0; i < 2; ++i) c.add(2, 2);
  std::vector<round_result> first(2);
  round_result later;
  std::string told;
  std::vector<std::string> order;
  int joined = 0;
  auto both_done = [&](const std::string& who) {
    order.push_back(who);
    if (order.size() < 2) return;
    join(c.add(2, 2), later, [&] { c.shutdown_all(); });
  };
  for (int i = 0; i < 2; ++i) {
    join(*c.nodes[i], first[i], [&, i] {
      REQUIRE_FALSE(first[i].error);
      if (i == 1) {
        c.nodes[1]->watch_round([&](said why) {
          told = why;
          c.nodes[1]->stop_seen([&] { both_done("node 1 saw the stop"); });
        });
      }
      if (++joined < 2) return;
      c.nodes[0]->stop_job("by SIGINT (Ctrl-C there)", [&] { both_done("host left"); });
    });
  }
  c.io.run();
  auto who = fmt::format("node {} (host host0) by SIGINT (Ctrl-C there)",
                         first[0].info.group_rank);
  CHECK(told == "job stopped on " + who);
  CHECK(order == std::vector<std::string>{"node 1 saw the stop", "host left"});
  CHECK(c.log_count("keeping the store up until the other nodes have seen the stop") == 1);
  REQUIRE(later.error);
  CHECK(message_of(later.error) == "the job was stopped on " + who);
}

// Ctrl-C on a node while its round still gathers (2 of 3 nodes here): the
// other node waits for `closed`, not `over`, and used to learn of the stop
// only at its join timeout. It must learn at once, whichever node stopped.
TEST_CASE("a stop while the round gathers reaches the node that joined with it at once",
          "[dynamic_rendezvous]") {
  for (std::size_t stopper : {0u, 1u}) {  // the store's host, then the other node
    INFO("node " << stopper << " stops the job");
    cluster c;
    std::size_t other = 1 - stopper;
    // Shut down once both sides are through: the stopper left, and the
    // other node counted itself in (as the agent does with a stop).
    int through = 0;
    auto settle = [&c, &through](const std::string& what) {
      c.log.push_back(what);
      if (++through == 2) c.shutdown_all();
    };
    for (std::size_t i = 0; i < 2; ++i) {
      c.add_with(3, 3, [&c, &settle, stopper](dynamic_rendezvous_options& o) {
        o.join_timeout = 5s;  // bounds the test where the stop is not seen
        // When the second arrival says what it waits for, both have
        // joined round 0, which waits for a third node.
        o.log = [&c, &settle, stopper](const std::string& line) {
          c.log.push_back(line);
          if (line.find("round 0: 2 of at least 3") != std::string::npos) {
            c.nodes[stopper]->stop_job("by SIGINT (Ctrl-C there)",
                                       [&settle] { settle("stopper left"); });
          }
        };
      });
    }
    round_result stopped, waiting;
    join(*c.nodes[stopper], stopped);
    join(*c.nodes[other], waiting,
         [&] { c.nodes[other]->stop_seen([&] { settle("other saw the stop"); }); });
    c.io.run();
    REQUIRE(waiting.done);
    REQUIRE(waiting.error);
    CHECK(message_of(waiting.error) == fmt::format("the job was stopped on host host{} by SIGINT "
                                                   "(Ctrl-C there)",
                                                   stopper));
    CHECK(c.log_count("did not gather") == 0);
    // The stopper's own pending round is dropped, never called.
    CHECK_FALSE(stopped.done);
    // The host keeps its store up until the other node counted itself in.
    auto saw = std::find(c.log.begin(), c.log.end(), "other saw the stop");
    auto left = std::find(c.log.begin(), c.log.end(), "stopper left");
    REQUIRE(saw != c.log.end());
    REQUIRE(left != c.log.end());
    if (stopper == 0) CHECK(saw < left);
  }
}

}  // namespace memory_cluster
