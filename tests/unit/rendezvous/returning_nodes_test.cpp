// Who can come to a restart round (returning_nodes.h): which reasons name
// a node as gone, the count fixed for the next round, the close count.
#include <catch2/catch.hpp>

#include "rendezvous/algorithm/returning_nodes.h"

using namespace dtrun::rendezvous;

TEST_CASE("a loss, a silence and a departure name the node that is gone", "[returning_nodes]") {
  CHECK(departed_rank(node_lost_reason(2, "10.77.0.3")) == 2);
  CHECK(departed_rank(node_lost_reason(0, "::1")) == 0);
  CHECK(departed_rank(node_silent_reason(7)) == 7);
  CHECK(departed_rank(node_left_reason(3, "h4", "its GPUs were not given back (2 of 8)")) == 3);
  // The words are the ones the round's end has always carried (the tests
  // and dtrun status read them too).
  CHECK(node_lost_reason(2, "10.77.0.3") == "node 2 (10.77.0.3) was lost");
  CHECK(node_silent_reason(7) == "node 7 stopped sending heartbeats");
  CHECK(node_left_reason(3, "h4", "x") == "node 3 (host h4) left the job: x");
}

TEST_CASE("other ends of a round name no one: every member can come back",
          "[returning_nodes]") {
  // A worker failure ("node K: ..."), even one whose text mentions a loss.
  CHECK_FALSE(departed_rank("node 1: worker 3 exited with 1"));
  CHECK_FALSE(departed_rank("node 1: worker 0 (pid 4) was lost"));
  CHECK_FALSE(departed_rank("a node is waiting to join"));
  CHECK_FALSE(departed_rank("every node finished"));
  CHECK_FALSE(departed_rank("job stopped on node 0 (host h1) by SIGINT (Ctrl-C there)"));
  CHECK_FALSE(departed_rank("the connection to the rendezvous store was lost"));
  CHECK_FALSE(departed_rank(""));
  CHECK_FALSE(departed_rank("node -1 stopped sending heartbeats"));
  CHECK_FALSE(departed_rank("node x (a) was lost"));
  CHECK_FALSE(departed_rank("node 2 stopped sending heartbeats, then more"));
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
  CHECK(node_failed_reason(1, "worker rank 3 exited with code 1") ==
        "node 1: worker rank 3 exited with code 1");
  CHECK(failed_rank(node_failed_reason(1, "worker rank 3 exited with code 1")) == 1);
  CHECK(failed_rank(node_failed_reason(0, "out of restarts: node 2 (10.0.0.3) was lost")) == 0);
  // Departures, newcomers, stops and the barrier's release are no failure:
  // a failure reported after them spends no restart (report_failure).
  CHECK_FALSE(failed_rank(node_lost_reason(2, "10.77.0.3")));
  CHECK_FALSE(failed_rank(node_silent_reason(7)));
  CHECK_FALSE(failed_rank(node_left_reason(3, "h4", "preempted: SIGTERM")));
  CHECK_FALSE(failed_rank("a node is waiting to join"));
  CHECK_FALSE(failed_rank("every node finished"));
  CHECK_FALSE(failed_rank("job stopped on node 0 (host h1) by SIGINT (Ctrl-C there)"));
  CHECK_FALSE(failed_rank("node x: worker 3 exited"));
  CHECK_FALSE(failed_rank(""));
}
