// The agent's node-health policy without processes (docs/agent.md, "Node
// health"): a scripted checker, the fake process runner and a scripted
// rendezvous. The checks themselves (a real command, the built-ins) are
// tested in health_command_test and gpu_health_test; real nodes leaving a
// real job in tests/e2e/test_node_health.py.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>

#include "agent/policy/elastic_agent.h"
#include "agent/health/quarantine_record.h"
#include "agent/spec/wall_clock.h"
#include "rendezvous/base/exit_codes.h"
#include "tests/unit/agent/fake_process_runner.h"
#include "tests/unit/agent/scripted_rendezvous.h"

using namespace dtrun;
using namespace dtrun::agent;
using agent::testing::fake_process_runner;
using agent::testing::scripted_rendezvous;
using namespace std::chrono_literals;

namespace {

// Answers each check with the next verdict of its script (the last one
// repeats), posted as the real checker's completion is.
class scripted_checker : public node_health_checker {
 public:
  explicit scripted_checker(boost::asio::io_context& io) : io_(io) {}

  std::vector<health_verdict> verdicts;
  int checks = 0;
  int cancels = 0;
  // Holds the answer back until release() (a check in flight).
  bool hold = false;
  // Called as each check starts, after `checks` counted it.
  std::function<void()> on_check;

  void check(std::function<void(health_verdict)> done) override {
    auto v = verdicts.at(std::min<std::size_t>(static_cast<std::size_t>(checks),
                                               verdicts.size() - 1));
    ++checks;
    if (on_check) on_check();
    pending_ = [done, v] { done(v); };
    if (!hold) release();
  }
  void cancel() override {
    ++cancels;
    pending_ = nullptr;
  }
  void release() {
    if (auto p = std::exchange(pending_, nullptr)) boost::asio::post(io_, p);
  }

 private:
  boost::asio::io_context& io_;
  std::function<void()> pending_;
};

health_verdict healthy() { return {{{"command", true, "", true, {}}}}; }

health_verdict failed_command() {
  return {{{"command", false, "node health check failed: `check-gpus` exited with 3", true,
            {"GPU 2: ECC errors"}}}};
}

health_verdict disk_warning() {
  return {{{"disk", false, "only 0.2 GiB free under /logs (df -h /logs)", false, {}},
           {"command", true, "", true, {}}}};
}

struct health_test {
  boost::asio::io_context io;
  fake_process_runner runner{io};
  scripted_rendezvous rdzv;
  scripted_checker checker{io};
  agent_options options;
  std::vector<std::string> lines;

  explicit health_test(int nproc) : rdzv(io, nproc) {
    options.spec.local_world_size = nproc;
    options.spec.max_restarts = 3;
    options.spec.run_id = "health-test";
    options.program = "/opt/train";  // never executed
    options.control_socket = false;
    options.stop_timeout = 30ms;
    options.health.command = "check-gpus";
    options.health.interval = 20ms;
    options.log = [this](const std::string& line) { lines.push_back(line); };
  }

  // What each worker does when it starts: `workers_(round, local_rank, pid)`.
  std::function<void(int, int, pid_t)> workers_;

  int run() {
    if (workers_) {
      runner.on_spawn = [this](pid_t pid, const spawn_request& request) {
        workers_(std::stoi(request.env.at("TORCHELASTIC_RESTART_COUNT")),
                 std::stoi(request.env.at("LOCAL_RANK")), pid);
      };
    }
    stack_capture_options stacks;
    stacks.native = false;
    elastic_agent agent(io, options, rdzv, runner, stacks, &checker);
    return agent.run();
  }

  bool logged(const std::string& text) const {
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }
};

}  // namespace

TEST_CASE("a node whose health check fails never joins", "[policy][health]") {
  health_test t(2);
  t.checker.verdicts = {failed_command()};
  CHECK(t.run() == exit_node_unhealthy);
  CHECK(t.rdzv.rounds_started == 0);  // never ranked
  CHECK(t.runner.spawned.empty());
  CHECK(t.checker.checks == 1);
  CHECK(t.logged("node health check failed: `check-gpus` exited with 3; this node does not "
                 "join the job (exit 75)"));
}

TEST_CASE("a warning of a built-in check does not keep the node out", "[policy][health]") {
  health_test t(1);
  t.checker.verdicts = {disk_warning()};
  t.options.health.interval = 0ms;  // before the first join only
  t.runner.on_spawn = [&t](pid_t pid, const spawn_request&) { t.runner.exit(pid, 0); };
  CHECK(t.run() == 0);
  CHECK(t.rdzv.rounds_started == 1);
  CHECK(t.checker.checks == 1);
  CHECK(t.logged("warning: only 0.2 GiB free under /logs (df -h /logs) (not keeping this node "
                 "out: pass --node-health-check=builtin for that)"));
}

TEST_CASE("a watch that only warns says a lasting failure once, however many checks find it",
          "[policy][health]") {
  health_test t(1);
  t.options.health.command.clear();  // nothing gates: the links and storage are only watched
  health_finding stuck{"storage", false, "storage check failed: /mnt/shared did not answer",
                       false, {}};
  health_finding still = stuck;
  still.repeated = true;
  t.checker.verdicts = {{{stuck}}, {{still}}};
  pid_t worker = -1;
  t.runner.on_spawn = [&worker](pid_t pid, const spawn_request&) { worker = pid; };
  // The check before joining, then three while the worker runs.
  t.checker.on_check = [&t, &worker] {
    if (t.checker.checks == 4) t.runner.exit(worker, 0);
  };
  CHECK(t.run() == 0);
  CHECK(t.checker.checks == 4);
  CHECK(std::count_if(t.lines.begin(), t.lines.end(), [](const std::string& l) {
          return l.find("storage check failed: /mnt/shared") != std::string::npos;
        }) == 1);
}

TEST_CASE("a node that turns unhealthy stops its workers and leaves without spending a restart",
          "[policy][health]") {
  health_test t(2);
  // Healthy before joining and at the first periodic check; then not.
  t.checker.verdicts = {healthy(), healthy(), failed_command()};
  CHECK(t.run() == exit_node_unhealthy);
  CHECK(t.checker.checks == 3);
  CHECK(t.rdzv.rounds_started == 1);
  CHECK(t.rdzv.failures_reported.empty());  // the others rejoin: a membership change
  CHECK(t.rdzv.job_failures.empty());
  REQUIRE(t.rdzv.departures.size() == 1);
  CHECK(t.rdzv.departures[0] == "node health check failed: `check-gpus` exited with 3");
  for (const auto& w : t.runner.spawned) {
    CHECK(t.runner.signals_to(w.pid) == std::vector<int>{SIGTERM, SIGCONT});
  }
  CHECK(t.logged("stopping this node's workers and leaving the job"));
}

TEST_CASE("no check runs on the restart path, and a check in flight at a round's end is dropped",
          "[policy][health]") {
  health_test t(1);
  t.checker.verdicts = {healthy(), failed_command()};
  t.checker.hold = false;
  // Round 0: the first periodic check is held in flight when the worker
  // fails; round 1's worker succeeds at once.
  t.runner.on_spawn = [&t](pid_t pid, const spawn_request& request) {
    if (request.env.at("TORCHELASTIC_RESTART_COUNT") == "0") {
      t.checker.hold = true;
      // After the periodic check started (its timer is 20 ms), fail.
      auto timer = std::make_shared<boost::asio::steady_timer>(t.io, 60ms);
      timer->async_wait([&t, pid, timer](const boost::system::error_code&) {
        t.runner.exit(pid, 4);
      });
    } else {
      t.runner.exit(pid, 0);
    }
  };
  CHECK(t.run() == 0);
  // The check before joining and the one in flight in round 0: the
  // restart did not check again, and the failed verdict never arrived.
  CHECK(t.checker.checks == 2);
  CHECK(t.checker.cancels >= 1);
  CHECK(t.rdzv.rounds_started == 2);
  CHECK(t.rdzv.departures.empty());
  CHECK(t.rdzv.failures_reported.size() == 1);
}

TEST_CASE("a signal during the check before joining ends the run without joining",
          "[policy][health]") {
  health_test t(1);
  t.options.signals = {SIGTERM};
  t.checker.verdicts = {healthy()};
  t.checker.hold = true;
  boost::asio::post(t.io, [] { std::raise(SIGTERM); });
  CHECK(t.run() == 128 + SIGTERM);
  CHECK(t.rdzv.rounds_started == 0);
  CHECK(t.checker.cancels >= 1);  // its command is killed
}

// --- quarantine (docs/agent.md, "Quarantine") -------------------------------

namespace {

std::vector<quarantine_record> records_of(const scripted_rendezvous& rdzv) {
  std::vector<quarantine_record> out;
  for (const auto& text : rdzv.quarantine_records) {
    auto r = quarantine_record::parse(text);
    REQUIRE(r);
    out.push_back(*r);
  }
  return out;
}

struct quarantine_test : health_test {
  explicit quarantine_test(int nproc) : health_test(nproc) {
    options.quarantine.after = 2;
    options.quarantine.cooldown = 60s;
    options.quarantine.machine_key = "machine-a";
    options.health.interval = 5s;
  }
};

}  // namespace

TEST_CASE("a machine failing its check --quarantine-after times in a row is quarantined, each "
          "cooldown twice the last",
          "[policy][health][quarantine]") {
  quarantine_test t(1);
  // Out (1 of 2), quarantined, back on probation, quarantined again, back.
  t.checker.verdicts = {failed_command(), failed_command(), failed_command(), healthy()};
  t.options.health.interval = 0ms;  // no periodic check: the workers succeed
  t.runner.on_spawn = [&t](pid_t pid, const spawn_request&) { t.runner.exit(pid, 0); };
  CHECK(t.run() == 0);
  CHECK(t.checker.checks == 4);
  CHECK(t.rdzv.rounds_started == 1);
  auto records = records_of(t.rdzv);
  REQUIRE(records.size() == 2);
  CHECK(records[0].machine == "machine-a");
  CHECK(records[0].quarantines == 1);
  CHECK(records[0].cooldown_s == 60);
  CHECK(records[0].fault == "health");
  CHECK(records[1].quarantines == 2);
  CHECK(records[1].cooldown_s == 120);
  // Out for the check interval (the cooldown when there is none), then
  // each cooldown.
  CHECK(t.rdzv.outside_waits == std::vector<std::chrono::milliseconds>{60s, 60s, 120s});
  CHECK(t.logged("quarantining this machine for 60 s (2 failure(s) in a row, quarantine 1"));
  CHECK(t.logged("(1 of 2 failures in a row before quarantine)"));
}

TEST_CASE("workers killed by SIGBUS in a row quarantine the machine; exceptions never do",
          "[policy][health][quarantine]") {
  SECTION("SIGBUS twice: quarantined, then back once the cooldown passed") {
    quarantine_test t(2);
    t.checker.verdicts = {healthy()};
    t.options.health.interval = 0ms;
    t.workers_ = [&t](int round, int local_rank, pid_t pid) {
      if (round < 2 && local_rank == 1) t.runner.die(pid, SIGBUS);
      if (round == 2) t.runner.exit(pid, 0);
    };
    CHECK(t.run() == 0);
    auto records = records_of(t.rdzv);
    REQUIRE(records.size() == 1);
    CHECK(records[0].fault == "SIGBUS");
    CHECK(records[0].rank == 1);
    CHECK(t.rdzv.quarantine_reasons[0].find("quarantined for 60 s: worker rank 1") == 0);
    CHECK(t.rdzv.outside_waits == std::vector<std::chrono::milliseconds>{60s});
    CHECK(t.rdzv.rounds_started == 3);
  }
  SECTION("an ordinary failure twice: restarts, never a quarantine") {
    quarantine_test t(2);
    t.checker.verdicts = {healthy()};
    t.options.health.interval = 0ms;
    t.workers_ = [&t](int round, int local_rank, pid_t pid) {
      if (round < 2 && local_rank == 1) t.runner.exit(pid, 1);
      if (round == 2) t.runner.exit(pid, 0);
    };
    CHECK(t.run() == 0);
    CHECK(t.rdzv.quarantine_records.empty());
    CHECK(t.rdzv.outside_waits.empty());
  }
}

TEST_CASE("a fault that already got another machine quarantined for the same rank follows the "
          "rank: no quarantine",
          "[policy][health][quarantine]") {
  quarantine_test t(2);
  quarantine_record elsewhere;
  elsewhere.machine = "machine-b";
  elsewhere.host = "h7";
  elsewhere.quarantines = 1;
  elsewhere.rank = 1;
  elsewhere.fault = "SIGBUS";
  elsewhere.reason = "worker rank 1 was killed by SIGBUS";
  t.rdzv.quarantine_records.push_back(elsewhere.to_json());
  t.checker.verdicts = {healthy()};
  t.options.health.interval = 0ms;
  t.workers_ = [&t](int round, int local_rank, pid_t pid) {
    if (round < 2 && local_rank == 1) t.runner.die(pid, SIGBUS);
    if (round == 2) t.runner.exit(pid, 0);
  };
  CHECK(t.run() == 0);
  CHECK(t.rdzv.quarantine_records.size() == 1);  // only machine-b's
  CHECK(t.logged("rank 1 failed with SIGBUS on another machine too: the failure follows the "
                 "rank, not this machine; not quarantining it"));
}

TEST_CASE("an agent started again on a quarantined machine waits out the rest of its cooldown",
          "[policy][health][quarantine]") {
  quarantine_test t(1);
  quarantine_record earlier;
  earlier.machine = "machine-a";
  earlier.host = "h1";
  earlier.quarantines = 1;
  earlier.since = wall_clock_seconds() - 30;
  earlier.until = earlier.since + 60;
  earlier.cooldown_s = 60;
  earlier.reason = "node health check failed";
  t.rdzv.machines["machine-a"] = earlier.to_json();
  t.checker.verdicts = {healthy()};
  t.options.health.interval = 0ms;
  t.runner.on_spawn = [&t](pid_t pid, const spawn_request&) { t.runner.exit(pid, 0); };
  CHECK(t.run() == 0);
  REQUIRE(t.rdzv.outside_waits.size() == 1);
  CHECK(t.rdzv.outside_waits[0] > 28s);
  CHECK(t.rdzv.outside_waits[0] <= 30s);
  CHECK(t.logged("this machine is in quarantine for"));
}

TEST_CASE("the job ending while the machine is in quarantine ends its agent with 75",
          "[policy][health][quarantine]") {
  quarantine_test t(1);
  t.options.quarantine.after = 1;
  t.options.quarantine.file = "quarantine-test-hosts.txt";
  t.rdzv.job_ends_outside = true;
  t.checker.verdicts = {failed_command()};
  CHECK(t.run() == exit_node_unhealthy);
  CHECK(t.rdzv.rounds_started == 0);
  CHECK(t.logged("the job finished while this node was out of it; exiting with 75"));
  std::ifstream file("quarantine-test-hosts.txt");
  std::string host;
  std::getline(file, host);
  CHECK(!host.empty());  // this machine's host name, one per line
  std::remove("quarantine-test-hosts.txt");
}

TEST_CASE("a signal while the machine is out of the job ends the run at once",
          "[policy][health][quarantine]") {
  quarantine_test t(1);
  t.options.quarantine.after = 1;
  t.options.signals = {SIGTERM};
  t.rdzv.outside_never_ends = true;
  t.checker.verdicts = {failed_command()};
  auto timer = std::make_shared<boost::asio::steady_timer>(t.io, 50ms);
  timer->async_wait([](const boost::system::error_code&) { std::raise(SIGTERM); });
  CHECK(t.run() == 128 + SIGTERM);
  CHECK(t.rdzv.outside_waits.size() == 1);
  CHECK(t.logged("received SIGTERM; exiting"));
}
