// The agent's policy without processes: the production elastic_agent
// driven through a fake process runner (no fork, no exec, no kill of
// anything real) and a scripted rendezvous. What happens to real
// processes, terminals and PyTorch is tested end to end in tests/e2e.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "agent/policy/elastic_agent.h"
#include "tests/unit/agent/policy/agent_under_test.h"

using namespace dtrun;
using namespace dtrun::agent;
using agent::testing::fake_process_runner;
using agent::testing::scripted_rendezvous;
using namespace std::chrono_literals;

namespace {

// One agent on one loop, every seam faked (agent_under_test.h).
struct policy_test : agent::testing::agent_under_test {
  policy_test(int nproc, int max_restarts) : agent_under_test(nproc, max_restarts, "policy-test") {}

  // What each worker does when it starts: `script(round, local_rank, pid)`.
  template <typename Script>
  void workers(Script script) {
    runner.on_spawn = [script](pid_t pid, const spawn_request& request) {
      int round = std::stoi(request.env.at("TORCHELASTIC_RESTART_COUNT"));
      int local_rank = std::stoi(request.env.at("LOCAL_RANK"));
      script(round, local_rank, pid);
    };
  }

  // The workers of round `round`, by local rank.
  std::vector<pid_t> round_pids(int round) const {
    std::vector<pid_t> pids;
    for (const auto& w : runner.spawned) {
      if (w.env("TORCHELASTIC_RESTART_COUNT") == std::to_string(round)) pids.push_back(w.pid);
    }
    return pids;
  }
};

// A worker script for run_script(): its exit code in each round.
int run_script(int nproc, int max_restarts, int (*code)(int round, int local_rank)) {
  policy_test t(nproc, max_restarts);
  t.workers([&t, code](int round, int local_rank, pid_t pid) {
    int c = code(round, local_rank);
    if (c >= 0) t.runner.exit(pid, c);  // < 0: runs until stopped
  });
  return t.run();
}

}  // namespace

TEST_CASE("the agent returns 0 when every worker exits 0", "[policy]") {
  CHECK(run_script(3, 0, [](int, int) { return 0; }) == 0);
}

TEST_CASE("the agent returns the failing worker's code after its restarts", "[policy]") {
  CHECK(run_script(3, 0, [](int, int local_rank) { return local_rank == 1 ? 4 : -1; }) == 4);
  // Fails in rounds 0 and 1, succeeds in round 2.
  CHECK(run_script(2, 2, [](int round, int) { return round < 2 ? 4 : 0; }) == 0);
  CHECK(run_script(2, 1, [](int round, int) { return round < 2 ? 4 : 0; }) == 4);
}

TEST_CASE("a worker failure restarts the group, and the restart count reaches the workers",
          "[policy]") {
  policy_test t(2, 1);
  t.workers([&t](int round, int local_rank, pid_t pid) {
    if (round == 0 && local_rank == 1) t.runner.exit(pid, 4);
    if (round == 1) t.runner.exit(pid, 0);
  });
  CHECK(t.run() == 0);
  REQUIRE(t.runner.spawned.size() == 4);
  auto first = t.round_pids(0);
  auto second = t.round_pids(1);
  REQUIRE(first.size() == 2);
  REQUIRE(second.size() == 2);
  for (const auto& w : t.runner.spawned) {
    CHECK(w.env("TORCHELASTIC_MAX_RESTARTS") == "1");
  }
  // The survivor of round 0 was stopped: the signal, then SIGCONT so a
  // stopped worker can act on it.
  CHECK(t.runner.signals_to(first[0]) == std::vector<int>{SIGTERM, SIGCONT});
  CHECK(t.rdzv.failures_reported.size() == 1);
  CHECK(t.rdzv.failures_reported[0].find("worker rank 1") == 0);
  CHECK(t.rdzv.job_failures.empty());
  CHECK(t.logged("restarting the workers (restart 1 of 1)"));
  // Nothing of a round is left: every worker's group was killed after it.
  for (pid_t pid : first) {
    CHECK(std::count(t.runner.groups_killed.begin(), t.runner.groups_killed.end(), pid) >= 1);
  }
  CHECK(t.runner.guarded.empty());
}

TEST_CASE("when the restarts run out the job fails with the culprit's exit code", "[policy]") {
  policy_test t(3, 2);
  t.workers([&t](int, int local_rank, pid_t pid) {
    if (local_rank == 1) t.runner.exit(pid, 4);
  });
  CHECK(t.run() == 4);
  CHECK(t.rdzv.rounds_started == 3);
  CHECK(t.rdzv.failures_reported.size() == 3);
  REQUIRE(t.rdzv.job_failures.size() == 1);
  CHECK(t.rdzv.job_failures[0].find("worker rank 1") == 0);
  CHECK(t.logged("all 2 restart(s) used"));
  CHECK(t.rdzv.was_shut_down);
}

TEST_CASE("a signal stops the workers in two phases: the signal, SIGKILL after --stop-timeout",
          "[policy]") {
  policy_test t(2, 3);
  t.options.signals = {SIGTERM};
  t.runner.survives = {SIGTERM};  // workers that ignore it
  t.workers([](int, int local_rank, pid_t) {
    if (local_rank == 1) std::raise(SIGTERM);  // to the agent, through its signal_set
  });
  CHECK(t.run() == 128 + SIGTERM);
  for (pid_t pid : t.round_pids(0)) {
    CHECK(t.runner.signals_to(pid) == std::vector<int>{SIGTERM, SIGCONT, SIGKILL});
  }
  CHECK(t.logged("workers still running 30 ms after the stop signal; sending SIGKILL"));
  CHECK(t.rdzv.failures_reported.empty());  // a signal is not a failure: no restart counted
  CHECK(t.rdzv.rounds_started == 1);
}

TEST_CASE("Ctrl-C stops the job on every node", "[policy]") {
  policy_test t(1, 3);
  t.options.signals = {SIGINT};
  t.workers([](int, int, pid_t) { std::raise(SIGINT); });
  CHECK(t.run() == 128 + SIGINT);
  REQUIRE(t.rdzv.stops.size() == 1);
  CHECK(t.rdzv.stops[0] == "by SIGINT (Ctrl-C there)");
  CHECK(t.runner.signals_to(t.round_pids(0)[0]).front() == SIGINT);
}

TEST_CASE("a stop's SIGKILL belongs to its own round: the next round's workers never get it",
          "[policy]") {
  // Round 0 fails; its survivor dies of the SIGTERM at once, so the stop's
  // grace (30 ms) is still ahead when round 1 starts. Round 1's workers
  // run for several graces before they finish.
  policy_test t(2, 1);
  boost::asio::steady_timer later(t.io);
  t.workers([&t, &later](int round, int local_rank, pid_t pid) {
    if (round == 0 && local_rank == 1) t.runner.exit(pid, 4);
    if (round == 1 && local_rank == 1) {
      later.expires_after(10 * t.options.stop_timeout);
      later.async_wait([&t](const boost::system::error_code&) {
        for (pid_t worker : t.round_pids(1)) t.runner.exit(worker, 0);
      });
    }
  });
  CHECK(t.run() == 0);
  for (pid_t pid : t.round_pids(1)) CHECK(t.runner.signals_to(pid).empty());
}

TEST_CASE("a hang: the culprits are killed and the group fails as after a worker failure",
          "[policy]") {
  policy_test t(2, 0);
  t.options.hang_timeout = 100ms;
  // Workers that never print, touch their heartbeat or exit.
  CHECK(t.run() == 128 + SIGKILL);
  CHECK(t.logged("hang: no progress from any worker for"));
  // No stack tells them apart (the fake has none): every live worker is a
  // culprit, killed alone (its group follows with the stop).
  for (pid_t pid : t.round_pids(0)) {
    auto it = std::find_if(t.runner.signals.begin(), t.runner.signals.end(),
                           [pid](const fake_process_runner::sent& s) { return s.pid == pid; });
    REQUIRE(it != t.runner.signals.end());
    CHECK(it->sig == SIGKILL);
    CHECK(it->alone);
  }
  REQUIRE(t.rdzv.job_failures.size() == 1);
  CHECK(t.logged("no restarts allowed: --max-restarts=0"));
}

TEST_CASE("a membership change restarts the group without spending a restart", "[policy]") {
  policy_test t(1, 0);
  t.workers([&t](int round, int, pid_t pid) {
    if (round == 0) {
      // Once the agent watches the round (after its workers started).
      boost::asio::post(t.io, [&t] { t.rdzv.end_round(records::newcomer()); });
    } else {
      t.runner.exit(pid, 0);
    }
  });
  CHECK(t.run() == 0);
  CHECK(t.rdzv.rounds_started == 2);
  CHECK(t.rdzv.failures_reported.empty());
  CHECK(t.logged("the group must restart: a node is waiting to join; stopping the workers to rejoin"));
  CHECK(t.runner.signals_to(t.round_pids(0)[0]) == std::vector<int>{SIGTERM, SIGCONT});
}

TEST_CASE("with -v the agent says why each round stopped and what follows", "[policy]") {
  policy_test t(2, 1);
  t.options.report.level = verbosity::verbose;
  t.workers([&t](int round, int local_rank, pid_t pid) {
    if (round == 0 && local_rank == 1) t.runner.exit(pid, 4);
    if (round == 1) boost::asio::post(t.io, [&t] { t.rdzv.end_round(records::newcomer()); });
    if (round == 2) t.runner.exit(pid, 0);
  });
  CHECK(t.run() == 0);
  CHECK(t.logged("round 0 stopped: failure; next: decide the restart"));
  CHECK(t.logged("round 1 stopped: membership change; next: rejoin"));
}

TEST_CASE("exit codes: killed by signal n is 128+n; a program that cannot start is not restarted",
          "[policy]") {
  {
    policy_test t(1, 0);
    t.workers([&t](int, int, pid_t pid) { t.runner.die(pid, SIGUSR2); });
    CHECK(t.run() == 128 + SIGUSR2);
  }
  {
    policy_test t(2, 3);
    t.runner.spawn_error = spawn_result{-1, 127, "dtrun: cannot run /opt/train: not found"};
    CHECK(t.run() == 127);
    CHECK(t.rdzv.rounds_started == 1);  // restarting would not help
    CHECK(t.logged("dtrun: cannot run /opt/train: not found"));
    CHECK(t.rdzv.job_failures.size() == 1);
  }
}

TEST_CASE("a failure the rendezvous could not count is not reported as restarts used up",
          "[policy]") {
  // scripts/chaos seeds 52 and 69: a link down while a worker failed.
  policy_test t(1, 3);
  t.rdzv.failure_reports_fail = true;
  t.workers([&t](int, int, pid_t pid) { t.runner.exit(pid, 4); });
  CHECK(t.run() == 4);
  CHECK(t.logged("could not reach the rendezvous to report the failure; not restarting"));
  CHECK(t.logged("the failure could not be reported to the rendezvous"));
  CHECK_FALSE(t.logged("restart(s) used"));
  CHECK(t.rdzv.rounds_started == 1);
}

TEST_CASE("restarts used up or not allowed: the worker's code, each round counted", "[policy]") {
  SECTION("--max-restarts=1") {
    policy_test t(3, 1);
    t.workers([&t](int, int local_rank, pid_t pid) {
      if (local_rank == 1) t.runner.exit(pid, 3);
    });
    CHECK(t.run() == 3);
    CHECK(t.rdzv.rounds_started == 2);
    CHECK(t.logged("all 1 restart(s) used"));
  }
  SECTION("--max-restarts=0") {
    policy_test t(3, 0);
    t.workers([&t](int, int local_rank, pid_t pid) {
      if (local_rank == 1) t.runner.exit(pid, 3);
    });
    CHECK(t.run() == 3);
    CHECK(t.rdzv.rounds_started == 1);
    CHECK(t.logged("--max-restarts=0"));
  }
}

TEST_CASE("the first failure wins when the others are stopped", "[policy]") {
  // Rank 1 fails; the others die of the stop's SIGTERM (128+15), which
  // must not hide the root cause.
  policy_test t(3, 0);
  t.workers([&t](int, int local_rank, pid_t pid) {
    if (local_rank == 1) t.runner.exit(pid, 5);
  });
  CHECK(t.run() == 5);
  CHECK(t.logged("worker local_rank=1 (rank 1, pid "));
  CHECK(t.logged(") exited with code 5; stopping the other workers"));
}
