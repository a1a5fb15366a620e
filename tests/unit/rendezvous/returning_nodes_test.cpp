// Who can come to a restart round (returning_nodes.h): which reasons name
// a node as gone, the count fixed for the next round, the close count.
#include <catch2/catch.hpp>

#include "rendezvous/algorithm/returning_nodes.h"
#include "rendezvous/record/round_record.h"

using namespace dtrun::rendezvous;

namespace {

using namespace dtrun::records;

// A round's end as the store holds it, read back: departed_rank reads the
// record, never the words.
std::optional<int> departed_in(const round_record& end) {
  return departed_rank(record_from_text(to_text(end)));
}
std::optional<int> departed_in(std::string_view stored) {
  return departed_rank(record_from_text(stored));
}

round_record left_job(int node, std::string host, std::string why) {
  auto r = leaving(failure_class::health, std::move(why));
  r.node = node;
  r.host = std::move(host);
  return r;
}

round_record worker_end(int node, std::string words) {
  round_record r;
  r.kind = record_kind::worker_failed;
  r.node = node;
  r.detail = std::move(words);
  return r;
}

}  // namespace

TEST_CASE("a loss, a silence and a departure name the node that is gone", "[returning_nodes]") {
  CHECK(departed_in(node_lost(2, "10.77.0.3")) == 2);
  CHECK(departed_in(node_lost(0, "::1")) == 0);
  CHECK(departed_in(node_silent(7)) == 7);
  CHECK(departed_in(left_job(3, "h4", "its GPUs were not given back (2 of 8)")) == 3);
  // The words are the ones the round's end has always carried (the tests
  // and dtrun status read them too).
  CHECK(describe(node_lost(2, "10.77.0.3")) == "node 2 (10.77.0.3) was lost");
  CHECK(describe(node_silent(7)) == "node 7 stopped sending heartbeats");
  CHECK(describe(left_job(3, "h4", "x")) == "node 3 (host h4) left the job: x");
}

TEST_CASE("other ends of a round name no one: every member can come back",
          "[returning_nodes]") {
  // A worker failure ("node K: ..."), even one whose text mentions a loss.
  CHECK_FALSE(departed_in(worker_end(1, "worker 3 exited with 1")));
  CHECK_FALSE(departed_in(worker_end(1, "worker 0 (pid 4) was lost")));
  CHECK_FALSE(departed_in(newcomer()));
  CHECK_FALSE(departed_in(finished()));
  round_record stop;
  stop.kind = record_kind::job_stopped;
  stop.node = 0;
  stop.host = "h1";
  stop.detail = "by SIGINT (Ctrl-C there)";
  CHECK_FALSE(departed_in(stop));
  round_record store_gone;
  store_gone.kind = record_kind::store_lost;
  store_gone.detail = "the connection to the rendezvous store was lost";
  CHECK_FALSE(departed_in(store_gone));
  // Words are never read: an older dtrun's sentences, however they read,
  // name no one (the next round's close refuses that dtrun anyway).
  CHECK_FALSE(departed_in(""));
  CHECK_FALSE(departed_in("node -1 stopped sending heartbeats"));
  CHECK_FALSE(departed_in("node x (a) was lost"));
  CHECK_FALSE(departed_in("node 2 stopped sending heartbeats, then more"));
  CHECK_FALSE(departed_in("node 2 (10.77.0.3) was lost"));
  // A node with no rank (-1) names no one either.
  CHECK_FALSE(departed_in(node_silent(-1)));
}

TEST_CASE("the nodes expected back are round r-1's arrivals less the gone one",
          "[returning_nodes]") {
  returning_nodes three_one_gone{3, 1};
  CHECK(three_one_gone.expected() == 2);
  CHECK(three_one_gone.expects(1, 0));
  CHECK_FALSE(three_one_gone.expects(2, 1));  // the gone node, should it come back
  CHECK(three_one_gone.expects(3, 2));
  CHECK_FALSE(three_one_gone.expects(4, -1));  // arrived after the count: a newcomer
  CHECK_FALSE(three_one_gone.expects(0, -1));  // in no round before
  // A spare (no rank there) within the count is expected, whatever the
  // gone node's rank.
  returning_nodes with_spare{4, 0};
  CHECK(with_spare.expected() == 3);
  CHECK(with_spare.expects(4, -1));
  returning_nodes nobody_gone{3, -1};
  CHECK(nobody_gone.expected() == 3);
  CHECK(nobody_gone.expects(2, 1));
}

TEST_CASE("the count fixed for the next round reads back as written", "[returning_nodes]") {
  for (auto n : {returning_nodes{3, 1}, returning_nodes{1, -1}, returning_nodes{0, -1}}) {
    auto back = returning_nodes::from_text(n.to_text());
    REQUIRE(back);
    CHECK(back->arrivals == n.arrivals);
    CHECK(back->departed == n.departed);
  }
  for (auto bad : {"", "3", "3 ", " 1", "3 -2", "-1 0", "3 1 2", "a b", "3  1"}) {
    CAPTURE(bad);
    CHECK_FALSE(returning_nodes::from_text(bad));
  }
}

TEST_CASE("a round closes with at most MAX nodes, in whole units", "[returning_nodes]") {
  CHECK(closing_count(2, 3, 1) == 2);
  CHECK(closing_count(5, 3, 1) == 3);
  CHECK(closing_count(7, 16, 4) == 4);
  CHECK(closing_count(9, 8, 4) == 8);
  CHECK(closing_count(3, 3, 0) == 3);  // no unit given
}

TEST_CASE("a failure's end names the failed node, and no other end does", "[returning_nodes]") {
  CHECK(describe(worker_end(1, "worker rank 3 exited with code 1")) ==
        "node 1: worker rank 3 exited with code 1");
  auto failure_in = [](const round_record& end) {
    auto back = record_from_text(to_text(end));
    return is_failure(back) ? std::optional<int>(back.node) : std::nullopt;
  };
  CHECK(failure_in(worker_end(1, "worker rank 3 exited with code 1")) == 1);
  auto refusal = worker_end(0, "out of restarts: node 2 (10.0.0.3) was lost");
  refusal.kind = record_kind::job_failed;
  CHECK(failure_in(refusal) == 0);
  // Departures, newcomers, stops and the barrier's release are no failure:
  // a failure reported after them spends no restart (report_failure).
  CHECK_FALSE(failure_in(node_lost(2, "10.77.0.3")));
  CHECK_FALSE(failure_in(node_silent(7)));
  auto preempted = leaving(failure_class::preemption, "preempted: SIGTERM");
  preempted.node = 3;
  preempted.host = "h4";
  CHECK_FALSE(failure_in(preempted));
  CHECK_FALSE(failure_in(newcomer()));
  CHECK_FALSE(failure_in(finished()));
  round_record stop;
  stop.kind = record_kind::job_stopped;
  stop.node = 0;
  stop.host = "h1";
  CHECK_FALSE(failure_in(stop));
  // An older dtrun's sentence is no record: no failure is read from it.
  CHECK_FALSE(is_failure(record_from_text("node 1: worker 3 exited")));
  CHECK_FALSE(is_failure(record_from_text("")));
}
