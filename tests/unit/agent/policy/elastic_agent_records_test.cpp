// The agent decides from round records, never from their words (issue
// 47): a departure whose words read like a worker's failure, tag and all,
// and a job failed elsewhere whose words say "not restarted:" without a
// refusal. Each would be misread if a sentence were parsed again.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/policy/elastic_agent.h"
#include "rendezvous/record/round_record.h"
#include "tests/unit/agent/policy/agent_under_test.h"

using namespace dtrun;
using namespace dtrun::agent;
using agent::testing::fake_process_runner;
using agent::testing::scripted_rendezvous;
using namespace std::chrono_literals;

namespace {

// One node, `max_restarts` restarts, every seam faked (agent_under_test.h).
struct records_test : agent::testing::agent_under_test {
  explicit records_test(int max_restarts) : agent_under_test(1, max_restarts, "records-test") {}
};

}  // namespace

TEST_CASE("a node that left, its health check's last line a worker's failure with a tag: a "
          "health incident, no rank, no restart spent",
          "[policy][records]") {
  records_test t(3);
  t.rdzv.info.group_world_size = 2;
  // The words a sentence parser once took for "[exit]" of worker rank 0.
  auto left = records::leaving(records::failure_class::health,
                               "node health check failed: worker rank 0 exited with code 1 [exit]");
  left.node = 1;
  left.host = "h2";
  t.runner.on_spawn = [&t, left](pid_t pid, const spawn_request& request) {
    if (request.env.at("TORCHELASTIC_RESTART_COUNT") == "0") {
      boost::asio::post(t.io, [&t, left] { t.rdzv.end_round(left); });
    } else {
      t.runner.exit(pid, 0);
    }
  };
  CHECK(t.run() == 0);
  CHECK(t.rdzv.rounds_started == 2);
  CHECK(t.rdzv.failures_reported.empty());
  CHECK(t.rdzv.restarts == 0);
  auto sentence =
      "node 1 (host h2) left the job: node health check failed: worker rank 0 exited with code 1 "
      "[exit]";
  CHECK(t.logged(std::string("the group must restart: ") + sentence));
  auto incidents = t.events_named("incident");
  REQUIRE(incidents.size() == 1);
  CHECK(incidents[0].at("class") == "health");
  CHECK(incidents[0].at("rank").is_null());
  CHECK(incidents[0].at("detail") == sentence);
  auto changes = t.events_named("membership_change");
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].at("reason") == sentence);
  CHECK(changes[0].at("record").at("kind") == "node_left");
  CHECK(changes[0].at("record").at("class") == "health");
}

TEST_CASE("a job failed elsewhere whose words say \"not restarted:\" but whose record is no "
          "refusal: its restarts were used up",
          "[policy][records]") {
  records_test t(3);
  t.rdzv.next_error = std::make_exception_ptr(rendezvous::job_failed_error(
      "the job failed on another node (node 1: worker rank 2 exited with code 1: ValueError: "
      "not restarted: bad input [exception:ValueError]); its restarts (--max-restarts=3) are "
      "used up",
      0, false));
  t.run();
  CHECK(t.logged("failed on another node, --max-restarts=3 used up"));
  CHECK_FALSE(t.logged("not restarted there"));
  auto failed = t.events_named("job_failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].at("reason") == "failed on another node, --max-restarts=3 used up");
}
