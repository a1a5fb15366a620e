// The agent's policy where it asks the machine (agent_env.h), against a
// fake one: incidents timed on the agent's clock, the no-progress count
// from --progress-file's step, the OOM killer's proof, and GPUs that are
// not given back after a stop. No file, cgroup or GPU is touched.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>

#include "rendezvous/base/exit_codes.h"
#include "rendezvous/record/round_record.h"
#include "tests/unit/agent/policy/agent_under_test.h"
#include "tests/unit/agent/fake_nvml_functions.h"

namespace dtrun::agent {
namespace agent_env_test {

using testing::agent_under_test;
using records::failure_class;
using namespace std::chrono_literals;

TEST_CASE("agent env: an incident's recovery is timed on the agent's clock, from the round's "
          "end to the workers running again",
          "[policy][env]") {
  agent_under_test t(1, 3, "env-incident");
  t.rdzv.info.group_world_size = 2;
  t.runner.on_spawn = [&t](pid_t pid, const spawn_request& request) {
    if (request.env.at("TORCHELASTIC_RESTART_COUNT") == "0") {
      boost::asio::post(t.io, [&t] { t.rdzv.end_round(records::node_lost(1, "10.0.0.3")); });
      return;
    }
    t.env.advance(7s);  // the new round's start, before its workers run
    t.runner.exit(pid, 0);
  };
  CHECK(t.run() == 0);
  auto incidents = t.events_named("incident");
  REQUIRE(incidents.size() == 1);
  CHECK(incidents[0].at("class") == "node");
  CHECK(incidents[0].at("detected_at") == "2023-11-14T22:13:20.000Z");
  CHECK(incidents[0].at("resumed_at") == "2023-11-14T22:13:27.000Z");
  CHECK(incidents[0].at("recover_s") == 7.0);
  CHECK(incidents[0].at("detect_s").is_null());  // when the node died is not known here
}

TEST_CASE("agent env: productive time is the workers' running time on the agent's clock, "
          "lost time the rest",
          "[policy][env]") {
  agent_under_test t(1, 3, "env-goodput");
  t.rdzv.info.group_world_size = 2;  // several nodes: the status is published each round
  t.runner.on_spawn = [&t](pid_t pid, const spawn_request& request) {
    bool first = request.env.at("TORCHELASTIC_RESTART_COUNT") == "0";
    t.env.advance(first ? 2s : 3s);  // starting up (before they run): lost
    boost::asio::post(t.io, [&t, pid, first] {
      if (first) t.env.advance(10s);  // running: productive
      t.runner.exit(pid, first ? 1 : 0);
    });
  };
  CHECK(t.run() == 0);
  // Published as round 1's workers start: 10 s productive in round 0; 2 s
  // before it and 3 s before round 1 lost.
  REQUIRE(t.rdzv.statuses.size() >= 2);
  auto status = nlohmann::json::parse(t.rdzv.statuses.back());
  CHECK(status.at("round") == 1);
  CHECK(status.at("productive_seconds") == 10.0);
  CHECK(status.at("lost_seconds") == 5.0);
}

TEST_CASE("agent env: a --progress-file step that never moves stops the job after "
          "--max-no-progress-restarts failed rounds, restarts left",
          "[policy][env]") {
  agent_under_test t(1, 5, "env-no-progress");
  t.options.progress_file = "/nowhere/progress";  // never opened: the env answers
  t.options.max_no_progress_restarts = 2;
  t.env.step = [] { return std::optional<std::int64_t>(100); };
  t.runner.on_spawn = [&t](pid_t pid, const spawn_request&) { t.runner.exit(pid, 3); };
  CHECK(t.run() == 3);
  CHECK(t.rdzv.rounds_started == 2);
  CHECK(t.logged("not restarted: no progress: the step in /nowhere/progress stayed at 100 over "
                 "2 failed round(s) in a row (--max-no-progress-restarts=2)"));
  CHECK(t.env.step_reads >= 3);  // before the first round, and at each failure
}

TEST_CASE("agent env: a step that moves between failures spends every restart", "[policy][env]") {
  agent_under_test t(1, 2, "env-progress");
  t.options.progress_file = "/nowhere/progress";
  t.options.max_no_progress_restarts = 1;
  std::int64_t step = 0;
  t.env.step = [&step] { return std::optional<std::int64_t>(step += 10); };
  t.runner.on_spawn = [&t](pid_t pid, const spawn_request&) { t.runner.exit(pid, 3); };
  CHECK(t.run() == 3);
  CHECK(t.rdzv.rounds_started == 3);  // the first round and both restarts
  CHECK_FALSE(t.logged("no progress"));
}

// The worker dies of a SIGKILL dtrun did not send; `oom_after` is the
// cgroup's OOM count then (3 when the round started).
failure_class class_of_sigkill(std::uint64_t oom_after) {
  agent_under_test t(1, 0, "env-oom");
  std::uint64_t kills = 3;
  t.env.oom = [&kills] { return std::optional<std::uint64_t>(kills); };
  t.runner.on_spawn = [&t, &kills, oom_after](pid_t pid, const spawn_request&) {
    boost::asio::post(t.io, [&t, &kills, oom_after, pid] {
      kills = oom_after;
      t.runner.die(pid, SIGKILL);
    });
  };
  CHECK(t.run() == 128 + SIGKILL);
  REQUIRE(t.rdzv.failure_records.size() == 1);
  return t.rdzv.failure_records[0].klass.value_or(failure_class::exit);
}

TEST_CASE("agent env: a SIGKILL while the cgroup's OOM count rose is the OOM killer's",
          "[policy][env]") {
  CHECK(class_of_sigkill(4) == failure_class::oom_kill);
  CHECK(class_of_sigkill(3) == failure_class::signal);  // no new OOM kill: a signal
}

TEST_CASE("agent env: a GPU the stopped workers still hold makes the node leave, not restart",
          "[policy][env][gpu-health]") {
  agent_under_test t(1, 3, "env-reclaim");
  t.env.gpus = fake_nvml_functions::functions(1);
  t.options.gpu_reclaim_timeout = 100ms;
  bool released = GENERATE(false, true);
  t.runner.on_spawn = [&t, released](pid_t pid, const spawn_request& request) {
    if (request.env.at("TORCHELASTIC_RESTART_COUNT") != "0") return t.runner.exit(pid, 0);
    auto& gpu = fake_nvml_functions::state().gpus[0];
    gpu.processes = {{static_cast<unsigned int>(pid), 0, 0xffffffffu, 0xffffffffu}};
    boost::asio::post(t.io, [&t, &gpu, pid, released] {
      if (released) gpu.processes.clear();
      t.runner.exit(pid, 1);
    });
  };
  int code = t.run();
  if (released) {
    CHECK(code == 0);
    CHECK(t.rdzv.rounds_started == 2);
  } else {
    CHECK(code == exit_node_unhealthy);
    CHECK(t.rdzv.rounds_started == 1);
    REQUIRE(t.rdzv.departures.size() == 1);
    CHECK(t.rdzv.departures[0].rfind("GPU 0 still held by pid", 0) == 0);
  }
}

}  // namespace agent_env_test
}  // namespace dtrun::agent
