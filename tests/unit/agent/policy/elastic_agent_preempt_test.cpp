// The agent's preemption policy without processes (docs/agent.md,
// "Preemption"): the fake process runner and a scripted rendezvous. Real
// nodes checkpointing real gloo DDP in tests/e2e/test_preemption.py.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>

#include "agent/policy/elastic_agent.h"
#include "rendezvous/base/exit_codes.h"
#include "tests/unit/agent/policy/agent_under_test.h"

using namespace dtrun;
using namespace dtrun::agent;
using agent::testing::fake_process_runner;
using agent::testing::scripted_rendezvous;
using namespace std::chrono_literals;

namespace {

// One agent with --checkpoint-signal=SIGUSR1, every seam faked.
struct preempt_test : agent::testing::agent_under_test {
  explicit preempt_test(int nproc) : agent_under_test(nproc, 3, "preempt-test") {
    options.signals = {SIGTERM, SIGINT, SIGUSR1};
    options.checkpoint_signal = SIGUSR1;
  }

  // Once every worker of round 0 runs: `then()`, posted.
  void when_running(std::function<void()> then) {
    runner.on_spawn = [this, then](pid_t, const spawn_request& request) {
      bool last = std::stoi(request.env.at("LOCAL_RANK")) == options.spec.local_world_size - 1;
      if (last && request.env.at("TORCHELASTIC_RESTART_COUNT") == "0") {
        boost::asio::post(io, then);
      }
    };
  }

  // Workers that save and exit 0 on the checkpoint signal (the pattern).
  void workers_save_on_checkpoint_signal() {
    runner.on_signal = [this](pid_t pid, int sig) {
      if (sig == SIGUSR1) runner.exit(pid, 0);
    };
  }

  int checkpoint_signals(pid_t pid) const {
    auto s = runner.signals_to(pid);
    return static_cast<int>(std::count(s.begin(), s.end(), SIGUSR1));
  }
};

}  // namespace

TEST_CASE("SIGTERM with --checkpoint-signal: the job checkpoints, the workers save and exit, "
          "the node leaves as preempted without spending a restart",
          "[policy][preempt]") {
  preempt_test t(2);
  t.workers_save_on_checkpoint_signal();
  t.when_running([] { std::raise(SIGTERM); });
  CHECK(t.run() == exit_preempted);
  REQUIRE(t.rdzv.checkpoint_requests.size() == 1);
  CHECK(t.rdzv.checkpoint_requests[0] == "was preempted (SIGTERM)");
  CHECK(t.rdzv.departures == std::vector<std::string>{"preempted"});
  CHECK(t.rdzv.failures_reported.empty());
  CHECK(t.rdzv.stops.empty());
  for (const auto& w : t.runner.spawned) {
    // The checkpoint signal only: they left by themselves.
    CHECK(t.runner.signals_to(w.pid) == std::vector<int>{SIGUSR1});
  }
  CHECK(t.logged("this node is preempted"));
}

TEST_CASE("on SIGTERM this node's workers get the checkpoint signal even when the store never "
          "answers",
          "[policy][preempt]") {
  preempt_test t(2);
  t.rdzv.checkpoint_store_lost = true;
  t.workers_save_on_checkpoint_signal();
  t.when_running([] { std::raise(SIGTERM); });
  CHECK(t.run() == exit_preempted);
  for (const auto& w : t.runner.spawned) {
    CHECK(t.runner.signals_to(w.pid) == std::vector<int>{SIGUSR1});
  }
  CHECK(t.rdzv.departures == std::vector<std::string>{"preempted"});
}

TEST_CASE("workers that do not exit after the checkpoint signal are killed after --stop-timeout",
          "[policy][preempt]") {
  preempt_test t(1);
  t.when_running([] { std::raise(SIGTERM); });
  CHECK(t.run() == exit_preempted);
  REQUIRE(t.runner.spawned.size() == 1);
  CHECK(t.runner.signals_to(t.runner.spawned[0].pid) == std::vector<int>{SIGUSR1, SIGKILL});
  CHECK(t.rdzv.departures == std::vector<std::string>{"preempted"});
}

TEST_CASE("without --checkpoint-signal SIGTERM stops the workers as always: exit 143",
          "[policy][preempt]") {
  preempt_test t(2);
  t.options.checkpoint_signal = 0;
  t.when_running([] { std::raise(SIGTERM); });
  CHECK(t.run() == 128 + SIGTERM);
  CHECK(t.rdzv.checkpoint_requests.empty());
  CHECK(t.rdzv.departures.empty());
  for (const auto& w : t.runner.spawned) {
    CHECK(t.runner.signals_to(w.pid) == std::vector<int>{SIGTERM, SIGCONT});
  }
}

TEST_CASE("another node's request reaches every worker here once per round; workers that then "
          "exit 0 end the job as preempted",
          "[policy][preempt]") {
  preempt_test t(2);
  t.when_running([&t] {
    t.rdzv.request_checkpoint_elsewhere("node 1 (host h2) was preempted (SIGTERM)");
    // A second word of the same round (a late watch) changes nothing.
    t.rdzv.request_checkpoint_elsewhere("node 2 (host h3) was preempted (SIGTERM)");
  });
  t.workers_save_on_checkpoint_signal();
  CHECK(t.run() == exit_preempted);
  for (const auto& w : t.runner.spawned) CHECK(t.checkpoint_signals(w.pid) == 1);
  CHECK(t.rdzv.checkpoint_requests.empty());  // this node asked nothing
  CHECK(t.rdzv.departures.empty());           // nor left: the job ended
  CHECK(t.logged("a checkpoint was asked for by node 1 (host h2) was preempted (SIGTERM)"));
}

TEST_CASE("the preemption notice, twice, is one request and one checkpoint signal per worker",
          "[policy][preempt]") {
  preempt_test t(2);
  t.options.preempt_notice = SIGUSR1;
  // The second notice once the first one's signal reached the workers;
  // once it was turned down, the workers finish (a notice stops nothing).
  t.when_running([] { std::raise(SIGUSR1); });
  t.runner.on_signal = [&t](pid_t pid, int sig) {
    if (sig == SIGUSR1 && pid == t.runner.spawned.back().pid) {
      boost::asio::post(t.io, [] { std::raise(SIGUSR1); });
    }
  };
  t.options.log = [&t](const std::string& line) {
    t.lines.push_back(line);
    if (line.find("not asking again") == std::string::npos) return;
    for (const auto& w : t.runner.spawned) t.runner.exit(w.pid, 0);
  };
  CHECK(t.run() == exit_preempted);
  for (const auto& w : t.runner.spawned) CHECK(t.checkpoint_signals(w.pid) == 1);
  CHECK(t.rdzv.checkpoint_requests.size() == 2);
  CHECK(t.rdzv.departures.empty());
  CHECK(t.logged("received SIGUSR1, the preemption notice"));
}

TEST_CASE("workers that succeed in a round without a checkpoint end the job with 0",
          "[policy][preempt]") {
  preempt_test t(1);
  t.runner.on_spawn = [&t](pid_t pid, const spawn_request&) { t.runner.exit(pid, 0); };
  CHECK(t.run() == 0);
  CHECK(t.rdzv.checkpoint_requests.empty());
}
