#include "agent/watch/straggler_codec.h"

#include <catch2/catch.hpp>

namespace straggler_codec_test {

using namespace dtrun::agent;

TEST_CASE("a rank's sample is the median own work of the steps not yet published",
          "[straggler]") {
  const std::vector<timed_step> steps = {
      {20, 900'000'000}, {21, 100'000'000}, {22, 300'000'000}, {23, 0}, {24, 200'000'000}};
  auto sample = summarize_steps(5, 2, steps, 20);
  REQUIRE(sample);
  CHECK(sample->rank == 5);
  CHECK(sample->node_rank == 2);
  CHECK(sample->first_step == 21);
  CHECK(sample->last_step == 24);  // step 23 was not timed: not in the median
  CHECK(sample->own_work_s == Approx(0.2));
  CHECK_FALSE(summarize_steps(5, 2, steps, 24));
  CHECK_FALSE(summarize_steps(5, 2, {{30, 0}}, 0));
}

TEST_CASE("a node's work document reads back as written, and bad entries are left out",
          "[straggler]") {
  std::vector<rank_work_sample> samples = {{0, 0, 21, 30, 0.125}, {1, 0, 21, 29, 0.5}};
  std::string error;
  auto work = decode_work(encode_work("host-a", samples), error);
  CHECK(work.host == "host-a");
  auto& back = work.ranks;
  REQUIRE(back.size() == 2);
  CHECK(back[1].rank == 1);
  CHECK(back[1].last_step == 29);
  CHECK(back[1].own_work_s == 0.5);
  CHECK(error.empty());
  back = decode_work(
      R"({"schema":"dtrun.work/1","ranks":[[0,0,21,30,0.1],[1,0,30,21,0.1],[2,0,1,2,-1],"x",[3,0,1,2,"slow"]]})",
      error).ranks;
  CHECK(back.size() == 1);
  CHECK(decode_work(R"({"schema":"dtrun.work/2","ranks":[]})", error).ranks.empty());
  CHECK(error == "not a dtrun.work/1 document");
  CHECK(decode_work("worker rank 0 exited with code 1 [exit]", error).ranks.empty());
  CHECK(error == "not a JSON object");
}

TEST_CASE("a verdict names each straggler with its host and evidence", "[straggler]") {
  named_straggler named{{2, {4, 5}, true, 0.25, 0.1, 21, 30}, "host-c"};
  std::string error;
  auto back = decode_stragglers(encode_stragglers({named}), error);
  REQUIRE(back.size() == 1);
  CHECK(back[0].host == "host-c");
  CHECK(back[0].finding.ranks == std::vector<int>{4, 5});
  CHECK(back[0].finding.whole_node);
  CHECK(describe(back[0].finding, back[0].host) == describe(named.finding, named.host));
  back = decode_stragglers(
      R"({"schema":"dtrun.stragglers/1","stragglers":[{"node_rank":1},{"node_rank":2,"host":"h","ranks":[3],"own_work_s":1,"job_median_s":0.5,"first_step":21,"last_step":40}]})",
      error);
  REQUIRE(back.size() == 1);
  CHECK(back[0].finding.node_rank == 2);
  CHECK_FALSE(back[0].finding.whole_node);
}

}  // namespace straggler_codec_test
