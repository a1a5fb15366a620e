// --preflight's pure parts: the pairing schedule, the result and figure
// codecs, the node figures and the verdict (docs/agent.md, "Preflight").
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/health/preflight_plan.h"
#include "agent/health/preflight_result.h"
#include "agent/health/preflight_verdict.h"

namespace preflight_test {

using namespace dtrun::agent;
using dtrun::rendezvous::preflight_room;

int ceil_log2(int n) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds;
}

TEST_CASE("the pairs take ceil(log2 n) rounds, every node paired in each, none twice at once",
          "[preflight]") {
  for (int n = 1; n <= 130; ++n) {
    CAPTURE(n);
    auto rounds = preflight_rounds(n);
    CHECK(static_cast<int>(rounds.size()) == ceil_log2(n));
    for (const auto& round : rounds) {
      REQUIRE(!round.empty());
      CHECK(round.size() <= 2);
      std::vector<int> paired(static_cast<std::size_t>(n), 0);
      for (const auto& step : round) {
        REQUIRE(step.partner.size() == static_cast<std::size_t>(n));
        for (int g = 0; g < n; ++g) {
          int p = step.partner[static_cast<std::size_t>(g)];
          if (p < 0) continue;
          // Symmetric, never itself: one exchange per node per step.
          CHECK(p != g);
          REQUIRE(p < n);
          CHECK(step.partner[static_cast<std::size_t>(p)] == g);
          ++paired[static_cast<std::size_t>(g)];
        }
      }
      for (int g = 0; g < n; ++g) CHECK(paired[static_cast<std::size_t>(g)] >= 1);
    }
  }
}

TEST_CASE("a power of two is the hypercube: round k pairs g with g XOR 2^k", "[preflight]") {
  auto rounds = preflight_rounds(8);
  REQUIRE(rounds.size() == 3);
  for (int k = 0; k < 3; ++k) {
    REQUIRE(rounds[static_cast<std::size_t>(k)].size() == 1);
    for (int g = 0; g < 8; ++g) {
      CHECK(rounds[static_cast<std::size_t>(k)][0].partner[static_cast<std::size_t>(g)] ==
            (g ^ (1 << k)));
    }
  }
  CHECK(partners_of(rounds, 5) == std::vector<int>{4, 7, 1});
}

TEST_CASE("from three nodes on, every node meets at least two others, so one slow link is "
          "told apart from its partners",
          "[preflight]") {
  for (int n = 3; n <= 130; ++n) {
    CAPTURE(n);
    auto rounds = preflight_rounds(n);
    for (int g = 0; g < n; ++g) {
      std::set<int> met;
      for (int p : partners_of(rounds, g)) {
        if (p >= 0) met.insert(p);
      }
      CHECK(met.size() >= 2);
    }
  }
  // Three nodes: the hypercube's pairs, and the odd one out in a second step.
  auto three = preflight_rounds(3);
  CHECK(partners_of(three, 0) == std::vector<int>{1, -1, 2, -1});
  CHECK(partners_of(three, 1) == std::vector<int>{0, 2, -1, 2});
  CHECK(partners_of(three, 2) == std::vector<int>{-1, 1, 0, 1});
  CHECK(preflight_rounds(1).empty());
}

preflight_rank_result rank_result(int rank, int node, double compute,
                                  std::vector<preflight_exchange> exchanges) {
  preflight_rank_result r;
  r.rank = rank;
  r.node = node;
  r.local_rank = rank % 2;
  r.backend = "gloo";
  r.device = "cpu";
  r.compute_s = compute;
  r.exchanges = std::move(exchanges);
  r.total_s = 1.5;
  return r;
}

TEST_CASE("a rank's result survives its codec; anything else is refused with a reason",
          "[preflight]") {
  auto r = rank_result(3, 1, 0.002, {{0, 0, 4194304, 0.01}, {2, 2, 4194304, 0.5}});
  std::string error;
  auto back = preflight_rank_result::parse(r.to_json(), error);
  REQUIRE(back);
  CHECK(back->rank == 3);
  CHECK(back->node == 1);
  CHECK(back->compute_s == 0.002);
  REQUIRE(back->exchanges.size() == 2);
  CHECK(back->exchanges[1].partner_node == 2);
  CHECK(back->exchanges[1].bytes == 4194304);
  CHECK(back->exchanges[1].seconds == 0.5);
  for (const char* junk : {"", "{", "[]", "{\"version\": 1}", "{\"version\": 2}", "\xff\xfe"}) {
    error.clear();
    CHECK_FALSE(preflight_rank_result::parse(junk, error));
    CHECK_FALSE(error.empty());
  }
}

TEST_CASE("a node's figures: its slowest rank's compute, its best step's bytes over the "
          "slowest time",
          "[preflight]") {
  // Two ranks; in step 0 they moved 2 x 4 MB in at most 0.02 s (400 MB/s),
  // in step 1 in 0.5 s.
  std::vector<preflight_rank_result> ranks{
      rank_result(0, 0, 0.002, {{0, 1, 4000000, 0.01}, {1, 2, 4000000, 0.5}}),
      rank_result(1, 0, 0.003, {{0, 1, 4000000, 0.02}, {1, 2, 4000000, 0.4}})};
  auto f = node_figures(0, "h1", ranks, 2.5, "");
  CHECK(f.ranks == 2);
  REQUIRE(f.compute_s);
  CHECK(*f.compute_s == 0.003);
  REQUIRE(f.bandwidth_bps);
  CHECK(*f.bandwidth_bps == Approx(400e6));
  CHECK(f.problem.empty());
  auto back = preflight_node_figures::parse(f.to_json());
  REQUIRE(back);
  CHECK(back->host == "h1");
  CHECK(*back->bandwidth_bps == Approx(400e6));
  CHECK(back->seconds == 2.5);

  auto nothing = node_figures(1, "h2", {}, 0.5, "");
  CHECK_FALSE(nothing.compute_s);
  CHECK_FALSE(nothing.bandwidth_bps);
  CHECK(nothing.problem == "no rank measured anything");
  CHECK(preflight_node_figures::parse(nothing.to_json())->problem == nothing.problem);
  CHECK_FALSE(preflight_node_figures::parse("{\"version\": 1}"));
}

preflight_node_figures figures(int node, double compute, double bandwidth) {
  preflight_node_figures f;
  f.node = node;
  f.host = "h" + std::to_string(node + 1);
  f.ranks = 1;
  f.compute_s = compute;
  f.bandwidth_bps = bandwidth;
  f.seconds = 1.0 + node;
  return f;
}

TEST_CASE("a node under a third of the median bandwidth is named with both figures",
          "[preflight]") {
  std::vector<std::optional<preflight_node_figures>> nodes{
      figures(0, 0.002, 400e6), figures(1, 0.002, 380e6), figures(2, 0.002, 1.2e6),
      figures(3, 0.0021, 410e6)};
  auto v = judge_preflight(nodes, preflight_room{4, 0, 4}, false);
  CHECK(v.measured == 4);
  CHECK(*v.median_bandwidth_bps == Approx(390e6));
  CHECK(v.seconds == 4.0);
  REQUIRE(v.slow.size() == 1);
  CHECK(v.slow[0].node == 2);
  CHECK(v.slow[0].figure == "bandwidth");
  CHECK_FALSE(v.slow[0].leaves);
  CHECK(describe(v.slow[0]) ==
        "node 2 (host h3) is slow: bandwidth 1.2 MB/s against the job's median 390 MB/s "
        "(under 1/3 of it)");
  CHECK(summary_line(v) ==
        "preflight: 4 of 4 node(s) measured in 4.0 s, median compute 2 ms, median bandwidth "
        "390 MB/s; 1 node(s) far below the median");
  auto back = preflight_verdict::parse(v.to_json());
  REQUIRE(back);
  REQUIRE(back->named(2));
  CHECK(back->named(2)->value == 1.2e6);
  CHECK_FALSE(back->named(0));
}

TEST_CASE("a node over twice the median compute time is named; the noise below is not",
          "[preflight]") {
  std::vector<std::optional<preflight_node_figures>> nodes{
      figures(0, 0.0020, 400e6), figures(1, 0.0035, 400e6), figures(2, 0.0021, 150e6),
      figures(3, 0.0060, 400e6)};
  auto v = judge_preflight(nodes, preflight_room{4, 0, 1}, false);
  // Median compute 2.8 ms: 3.5 ms is within 2x, 6 ms is not; 150 MB/s is
  // above a third of 400.
  REQUIRE(v.slow.size() == 1);
  CHECK(v.slow[0].node == 3);
  CHECK(describe(v.slow[0]) ==
        "node 3 (host h4) is slow: compute 6 ms per product against the job's median 2.8 ms "
        "(over 2x)");
}

TEST_CASE("named nodes leave while a spare waits or --nnodes allows a smaller job, the "
          "slowest first",
          "[preflight]") {
  std::vector<std::optional<preflight_node_figures>> nodes{
      figures(0, 0.002, 400e6), figures(1, 0.002, 100e6), figures(2, 0.002, 1e6),
      figures(3, 0.002, 400e6), figures(4, 0.002, 400e6)};
  SECTION("room for one: the slowest leaves, the other stays, saying why") {
    auto v = judge_preflight(nodes, preflight_room{5, 0, 4}, true);
    REQUIRE(v.slow.size() == 2);
    CHECK(v.named(2)->leaves);
    CHECK_FALSE(v.named(1)->leaves);
    CHECK(v.kept_because ==
          "no spare node waits and --nnodes needs at least 4 node(s), so it stays (warned "
          "only)");
  }
  SECTION("a spare makes room") {
    auto v = judge_preflight(nodes, preflight_room{5, 1, 4}, true);
    CHECK(v.named(2)->leaves);
    CHECK(v.named(1)->leaves);
    CHECK(v.kept_because.empty());
  }
  SECTION("no room: warned only") {
    auto v = judge_preflight(nodes, preflight_room{5, 0, 5}, true);
    CHECK_FALSE(v.named(2)->leaves);
    CHECK_FALSE(v.kept_because.empty());
  }
  SECTION("warn never sends a node away") {
    auto v = judge_preflight(nodes, preflight_room{5, 3, 1}, false);
    CHECK_FALSE(v.named(2)->leaves);
    CHECK(v.kept_because.empty());
  }
}

TEST_CASE("fewer than three measured nodes name nobody, and nodes without figures are "
          "listed",
          "[preflight]") {
  preflight_node_figures broken;
  broken.node = 2;
  broken.host = "h3";
  broken.problem = "rank 2's check exited with code 1";
  std::vector<std::optional<preflight_node_figures>> nodes{
      figures(0, 0.002, 400e6), figures(1, 0.002, 1e6), broken, std::nullopt};
  auto v = judge_preflight(nodes, preflight_room{4, 0, 1}, true);
  CHECK(v.measured == 2);
  CHECK(v.slow.empty());
  CHECK(v.unmeasured == std::vector<std::string>{"node 2: rank 2's check exited with code 1",
                                                 "node 3: no figures came"});
  CHECK(summary_line(v).find("no verdict: fewer than 3 nodes measured") != std::string::npos);
  CHECK_FALSE(preflight_verdict::parse("{\"version\": 1}"));
  CHECK_FALSE(preflight_verdict::parse("not json"));
}

}  // namespace preflight_test
