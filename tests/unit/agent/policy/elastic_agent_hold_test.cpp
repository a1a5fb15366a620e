// The held decision (elastic_agent_hold.cpp, docs/agent.md "A failure a
// departure explains"; issue 49) without processes: a worker failure that
// a lost peer can cause waits, up to the rendezvous's departure bound, for
// the round's end; a departure within it is a membership change (no
// restart), none within it counts the failure, and a failure that no lost
// peer causes is decided at once. The verdict itself (the round's first
// end, the same for every node) is the rendezvous's:
// tests/unit/rendezvous/dynamic_rendezvous_verdict_test.cpp.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>

#include "agent/policy/elastic_agent.h"
#include "tests/unit/agent/policy/agent_under_test.h"

using namespace dtrun;
using namespace dtrun::agent;
using agent::testing::fake_process_runner;
using agent::testing::scripted_rendezvous;
using namespace std::chrono_literals;

namespace {

// What gloo's worker raises when its peer's node died (torch 1.13).
constexpr const char* gloo_peer_closed =
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by "
    "peer [10.0.0.3]:47100";

// One node of a 2-node job (one worker), its round 0 worker failing with
// `message` in its error file (as torch's @record writes it), its round 1
// worker succeeding.
struct hold_test : agent::testing::agent_under_test {
  // Called with each line the agent logs (after it is recorded).
  std::function<void(const std::string&)> on_line;

  explicit hold_test(std::string message) : agent_under_test(1, 3, "hold-test") {
    rdzv.info.group_world_size = 2;
    rdzv.info.world_size = 2;
    options.log = [this](const std::string& line) {
      lines.push_back(line);
      if (on_line) on_line(line);
    };
    runner.on_spawn = [this, message](pid_t pid, const spawn_request& request) {
      if (request.env.at("TORCHELASTIC_RESTART_COUNT") != "0") return runner.exit(pid, 0);
      std::ofstream(request.env.at("TORCHELASTIC_ERROR_FILE"))
          << R"({"message": {"message": ")" << message
          << R"(", "extraInfo": {"timestamp": "1700000000"}}})";
      runner.exit(pid, 1);
    };
  }

  // Another node ends the round once the agent says it holds the failure.
  void end_round_when_held(const records::round_record& end) {
    on_line = [this, end](const std::string& line) {
      if (line.find("holding the restart decision") != std::string::npos) {
        boost::asio::post(io, [this, end] { rdzv.end_round(end); });
      }
    };
  }
};

using steady = std::chrono::steady_clock;

}  // namespace

TEST_CASE("a broken collective, then another node's departure within the bound: a membership "
          "change, no restart spent",
          "[policy]") {
  hold_test t(gloo_peer_closed);
  t.rdzv.bound = 60s;  // never waited for: the departure ends the hold
  t.end_round_when_held(records::node_lost(1, "10.0.0.3"));
  auto start = steady::now();
  CHECK(t.run() == 0);
  CHECK(steady::now() - start < 30s);
  CHECK(t.logged("worker rank 0 failed as a lost peer makes it fail; holding the restart "
                 "decision up to 60.0 s"));
  CHECK(t.logged("the round ended before the failure was counted: node 1 (10.0.0.3) was lost"));
  CHECK(t.rdzv.restarts == 0);
  CHECK(t.rdzv.rounds_started == 2);
  // Reported once the round had ended: the rendezvous's verdict decided.
  REQUIRE(t.rdzv.failures_reported.size() == 1);
  CHECK_FALSE(t.logged("restarting the workers"));
}

TEST_CASE("a broken collective and no departure within the bound: the failure counts",
          "[policy]") {
  hold_test t(gloo_peer_closed);
  t.rdzv.bound = 50ms;
  auto start = steady::now();
  CHECK(t.run() == 0);
  CHECK(steady::now() - start >= 50ms);  // held the whole bound
  CHECK(t.logged("holding the restart decision"));
  CHECK(t.logged("no node departed within"));
  CHECK(t.rdzv.restarts == 1);
  CHECK(t.logged("restarting the workers (restart 1 of 3)"));
  CHECK(t.rdzv.rounds_started == 2);
}

TEST_CASE("a broken collective, then another node's failure ends the round: its restart, "
          "counted once",
          "[policy]") {
  hold_test t(gloo_peer_closed);
  t.rdzv.bound = 60s;
  t.rdzv.restarts = 1;  // the other node counted its failure
  records::round_record failure;  // "node 1: worker rank 1 exited with code 1 [exception:TypeError]"
  failure.kind = records::record_kind::worker_failed;
  failure.node = 1;
  failure.rank = 1;
  failure.klass = records::failure_class::exception;
  failure.exception_type = "TypeError";
  failure.exit_code = 1;
  failure.detail = "worker rank 1 exited with code 1";
  t.end_round_when_held(failure);
  CHECK(t.run() == 0);
  CHECK(t.rdzv.restarts == 1);
  CHECK(t.logged("restarting the workers (restart 1 of 3)"));
  CHECK_FALSE(t.logged("the round ended before the failure was counted"));
}

TEST_CASE("a training-code exception is decided at once, a departure bound or not", "[policy]") {
  hold_test t("TypeError: unsupported operand type(s) for +: 'int' and 'str'");
  t.rdzv.bound = 60s;
  auto start = steady::now();
  CHECK(t.run() == 0);
  CHECK(steady::now() - start < 30s);
  CHECK_FALSE(t.logged("holding the restart decision"));
  CHECK(t.rdzv.restarts == 1);
  CHECK(t.logged("restarting the workers (restart 1 of 3)"));
}

TEST_CASE("a single node holds nothing: no other node can depart", "[policy]") {
  hold_test t(gloo_peer_closed);
  t.rdzv.bound = 60s;
  t.rdzv.info.group_world_size = 1;
  CHECK(t.run() == 0);
  CHECK_FALSE(t.logged("holding the restart decision"));
  CHECK(t.rdzv.restarts == 1);
}
