// The node health check's command with real processes, on a real event
// loop, reaped by the real posix_process_runner through a worker_group
// (worker_group::watch_helper), as in the agent. No sleep synchronises
// anything: each test runs the loop until the check calls back, with a
// safety timer that fails it.
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "agent/health/health_command.h"
#include "agent/process/posix_process_runner.h"
#include "agent/process/worker_group.h"
#include "rendezvous/base/generation_timer.h"
#include "rendezvous/base/printable.h"
#include "tests/unit/agent/fake_process_runner.h"
#include "tests/unit/agent/real_process_loop.h"
#include "tests/unit/agent/test_files.h"

using namespace dtrun::agent;
using namespace std::chrono_literals;
using dtrun::agent::testing::group_gone_after_reaping;
using dtrun::agent::testing::real_agent;
using dtrun::agent::testing::run_until;

namespace {

health_command_options options_for(std::string command,
                                   std::chrono::milliseconds timeout = 60s) {
  health_command_options options;
  options.command = std::move(command);
  options.timeout = timeout;
  return options;
}

std::size_t total_bytes(const std::vector<std::string>& lines) {
  std::size_t n = 0;
  for (const auto& l : lines) n += l.size();
  return n;
}

}  // namespace

TEST_CASE("a health check command that exits 0 is healthy, its output kept", "[health]") {
  real_agent agent;
  health_command check(agent.io, agent.runner, agent.group, options_for("echo all good"));
  std::optional<health_finding> got;
  check.run([&](health_finding f) { got = std::move(f); });
  CHECK(check.running());
  CHECK_FALSE(got);  // never from inside run()
  run_until(agent.io, got);
  CHECK(got->check == "command");
  CHECK(got->healthy);
  CHECK(got->gating);
  CHECK(got->reason.empty());
  CHECK(got->output_tail == std::vector<std::string>{"all good"});
  CHECK_FALSE(check.running());
}

TEST_CASE("a health check command that exits 3 is unhealthy, its last line in the reason",
          "[health]") {
  real_agent agent;
  health_command check(agent.io, agent.runner, agent.group,
                       options_for("echo checking; echo 'GPU 2 ECC errors' >&2; exit 3"));
  std::optional<health_finding> got;
  check.run([&](health_finding f) { got = std::move(f); });
  run_until(agent.io, got);
  CHECK_FALSE(got->healthy);
  CHECK(got->gating);
  CHECK(got->reason ==
        "node health check failed: `echo checking; echo 'GPU 2 ECC errors' >&2; exit 3` exited "
        "with 3 (last line: \"GPU 2 ECC errors\")");
  CHECK(got->output_tail == std::vector<std::string>{"checking", "GPU 2 ECC errors"});
}

TEST_CASE("a health check command killed by a signal says which", "[health]") {
  real_agent agent;
  health_command check(agent.io, agent.runner, agent.group, options_for("kill -SEGV $$"));
  std::optional<health_finding> got;
  check.run([&](health_finding f) { got = std::move(f); });
  run_until(agent.io, got);
  CHECK_FALSE(got->healthy);
  CHECK(got->reason == "node health check failed: `kill -SEGV $$` killed by SIGSEGV");
}

TEST_CASE("a health check command that hangs is killed at its timeout, its group with it",
          "[health]") {
  real_agent agent;
  // `; true`: the shell forks sleep, so the group has a second member.
  health_command check(agent.io, agent.runner, agent.group,
                       options_for("echo started; sleep 1000; true", 300ms));
  std::optional<health_finding> got;
  auto began = std::chrono::steady_clock::now();
  check.run([&](health_finding f) { got = std::move(f); });
  pid_t pgid = check.running_pid();
  REQUIRE(pgid > 0);
  run_until(agent.io, got);
  CHECK(std::chrono::steady_clock::now() - began >= 300ms);
  CHECK_FALSE(got->healthy);
  CHECK(got->reason ==
        "node health check failed: `echo started; sleep 1000; true` timed out after 300 ms "
        "(last line: \"started\")");
  CHECK(check.running_pid() == -1);
  CHECK(group_gone_after_reaping(pgid));
}

TEST_CASE("a health check reading a FIFO nobody writes is killed at its timeout", "[health]") {
  testing::scoped_temp_dir dir("dtrun-health");
  std::string fifo = (dir.path / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  real_agent agent;
  health_command check(agent.io, agent.runner, agent.group,
                       options_for("cat '" + fifo + "'; true", 300ms));
  std::optional<health_finding> got;
  check.run([&](health_finding f) { got = std::move(f); });
  pid_t pgid = check.running_pid();
  run_until(agent.io, got);
  CHECK_FALSE(got->healthy);
  CHECK(got->reason.find("timed out after 300 ms") != std::string::npos);
  CHECK(group_gone_after_reaping(pgid));
}

TEST_CASE("100 MB of health check output is read and dropped, its tail bounded", "[health]") {
  real_agent agent;
  SECTION("short lines") {
    health_command check(agent.io, agent.runner, agent.group,
                         options_for("yes | head -c 100000000"));
    std::optional<health_finding> got;
    check.run([&](health_finding f) { got = std::move(f); });
    run_until(agent.io, got);
    CHECK(got->healthy);
    REQUIRE(got->output_tail.size() == 10);
    for (const auto& line : got->output_tail) CHECK(line == "y");
  }
  SECTION("one line without an end") {
    health_command check(agent.io, agent.runner, agent.group,
                         options_for("head -c 100000000 /dev/zero; exit 1"));
    std::optional<health_finding> got;
    check.run([&](health_finding f) { got = std::move(f); });
    run_until(agent.io, got);
    CHECK_FALSE(got->healthy);
    REQUIRE(got->output_tail.size() == 1);
    const std::string& line = got->output_tail.front();
    CHECK(line.substr(0, 8) == "\\x00\\x00");
    CHECK(line.find(" ... (100000000 bytes)") != std::string::npos);
    CHECK(line.size() <= 250);
    CHECK(got->reason.size() < 400);
  }
}

TEST_CASE("a health check's last output is never lost to its exit", "[health]") {
  // The exit and the last bytes race to the loop (SIGCHLD against the
  // pipe's read); whichever comes first, the last line is the last line.
  real_agent agent;
  health_command check(agent.io, agent.runner, agent.group,
                       options_for("yes | head -c 1000000; echo the last line; exit 3"));
  for (int i = 0; i < 20; ++i) {
    std::optional<health_finding> got;
    check.run([&](health_finding f) { got = std::move(f); });
    run_until(agent.io, got);
    REQUIRE_FALSE(got->output_tail.empty());
    CHECK(got->output_tail.back() == "the last line");
  }
}

TEST_CASE("binary health check output comes out printable", "[health]") {
  real_agent agent;
  health_command check(agent.io, agent.runner, agent.group,
                       options_for("head -c 4096 /dev/urandom; exit 1"));
  std::optional<health_finding> got;
  check.run([&](health_finding f) { got = std::move(f); });
  run_until(agent.io, got);
  CHECK_FALSE(got->healthy);
  CHECK(got->output_tail.size() <= 10);
  CHECK(total_bytes(got->output_tail) <= 4096);
  for (const auto& line : got->output_tail) {
    CHECK(dtrun::printable(line) == line);  // nothing left to escape
  }
  CHECK(dtrun::printable(got->reason) == got->reason);
}

TEST_CASE("a health check ends with its command's exit, not with the end of its output",
          "[health]") {
  real_agent agent;
  // The background sleep holds the pipe open for 100 s.
  health_command check(agent.io, agent.runner, agent.group,
                       options_for("sleep 100 & echo started"));
  std::optional<health_finding> got;
  auto began = std::chrono::steady_clock::now();
  check.run([&](health_finding f) { got = std::move(f); });
  pid_t pgid = check.running_pid();
  run_until(agent.io, got);
  CHECK(std::chrono::steady_clock::now() - began < 30s);
  CHECK(got->healthy);
  CHECK(got->output_tail == std::vector<std::string>{"started"});
  // The leftover went with the group.
  CHECK(group_gone_after_reaping(pgid));
}

TEST_CASE("a health check runs without a terminal: its own session, stdin from /dev/null",
          "[health]") {
  real_agent agent;
  // /proc/PID/stat's fields 6 and 7: the session and the controlling tty.
  health_command check(
      agent.io, agent.runner, agent.group,
      options_for("readlink /proc/$$/fd/0; echo $$; cut -d' ' -f6,7 /proc/$$/stat"));
  std::optional<health_finding> got;
  check.run([&](health_finding f) { got = std::move(f); });
  pid_t pid = check.running_pid();
  run_until(agent.io, got);
  CHECK(got->healthy);
  CHECK(got->output_tail ==
        std::vector<std::string>{"/dev/null", std::to_string(pid), std::to_string(pid) + " 0"});
}

TEST_CASE("a cancelled health check never calls back, and its group is killed", "[health]") {
  real_agent agent;
  health_command check(agent.io, agent.runner, agent.group,
                       options_for("sleep 1000; true"));
  int first_calls = 0;
  check.run([&](health_finding) { ++first_calls; });
  pid_t pgid = check.running_pid();
  REQUIRE(pgid > 0);
  check.cancel();
  check.cancel();  // idempotent
  CHECK_FALSE(check.running());
  CHECK(check.running_pid() == -1);
  CHECK(group_gone_after_reaping(pgid));
  // Another check on the same loop completes; the first never reported,
  // whatever of it was still queued.
  health_command next(agent.io, agent.runner, agent.group, options_for("true"));
  std::optional<health_finding> got;
  next.run([&](health_finding f) { got = std::move(f); });
  run_until(agent.io, got);
  CHECK(first_calls == 0);
  CHECK(got->healthy);
}

TEST_CASE("a health check runs again, from its own completion too", "[health]") {
  real_agent agent;
  health_command check(agent.io, agent.runner, agent.group, options_for("echo $$"));
  std::optional<health_finding> first;
  std::optional<health_finding> second;
  check.run([&](health_finding f) {
    first = std::move(f);
    check.run([&](health_finding g) { second = std::move(g); });
  });
  run_until(agent.io, second);
  REQUIRE(first);
  CHECK(first->healthy);
  CHECK(second->healthy);
  REQUIRE(first->output_tail.size() == 1);
  REQUIRE(second->output_tail.size() == 1);
  CHECK(first->output_tail != second->output_tail);  // two processes, two pids
}

TEST_CASE("a health check destroyed while it runs never calls back, and its group is killed",
          "[health]") {
  real_agent agent;
  bool called = false;
  pid_t pgid = -1;
  {
    health_command check(agent.io, agent.runner, agent.group, options_for("sleep 1000; true"));
    check.run([&](health_finding) { called = true; });
    pgid = check.running_pid();
  }
  CHECK(group_gone_after_reaping(pgid));
  // A second check on the same loop completes; the first one's reads and
  // exit, queued or not, reach nothing.
  health_command next(agent.io, agent.runner, agent.group, options_for("true"));
  std::optional<health_finding> got;
  next.run([&](health_finding f) { got = std::move(f); });
  run_until(agent.io, got);
  CHECK_FALSE(called);
  CHECK(got->healthy);
}

TEST_CASE("a health check whose shell cannot be run fails, naming why", "[health]") {
  real_agent agent;
  auto options = options_for("true");
  options.shell = "/nonexistent/sh";
  health_command check(agent.io, agent.runner, agent.group, options);
  std::optional<health_finding> got;
  check.run([&](health_finding f) { got = std::move(f); });
  run_until(agent.io, got);
  CHECK_FALSE(got->healthy);
  INFO(got->reason);
  // spawn_worker vforks: the child reports the failed exec and exits 127.
  CHECK(got->reason.find("exited with 127") != std::string::npos);
  CHECK(got->reason.find("cannot run /nonexistent/sh") != std::string::npos);
}

TEST_CASE("a health check that cannot start reports it from the loop", "[health]") {
  boost::asio::io_context io;
  testing::fake_process_runner runner(io);
  worker_group group(io, runner, worker_group::hooks{});
  group.start();
  runner.spawn_error = spawn_result{-1, 1, "fork failed: Resource temporarily unavailable"};
  health_command check(io, runner, group, options_for("true"));
  std::optional<health_finding> got;
  check.run([&](health_finding f) { got = std::move(f); });
  CHECK_FALSE(got);
  run_until(io, got);
  CHECK_FALSE(got->healthy);
  CHECK(got->reason ==
        "node health check failed: `true` could not start: fork failed: Resource temporarily "
        "unavailable");
}

TEST_CASE("the worker group hands a watched helper's exit over and spares it at a round's end",
          "[health]") {
  real_agent agent;
  spawn_request request{"/bin/sleep", {"1000"}, {{"PATH", "/bin:/usr/bin"}}};
  spawn_result spawned = agent.runner.spawn(request);
  REQUIRE(spawned.ok());
  std::optional<int> status;
  agent.group.watch_helper(spawned.pid, [&](int wait_status) { status = wait_status; });
  agent.group.end_round({});
  CHECK(::kill(spawned.pid, 0) == 0);  // spared by the sweep
  ::kill(spawned.pid, SIGTERM);
  run_until(agent.io, status);
  CHECK(WIFSIGNALED(*status));
  CHECK(WTERMSIG(*status) == SIGTERM);

  // Unwatched, a helper is one more adopted child to the sweep.
  spawned = agent.runner.spawn(request);
  REQUIRE(spawned.ok());
  agent.group.watch_helper(spawned.pid, [](int) {});
  agent.group.unwatch_helper(spawned.pid);
  agent.group.end_round({});
  int wait_status = 0;
  REQUIRE(::waitpid(spawned.pid, &wait_status, 0) == spawned.pid);
  CHECK(WIFSIGNALED(wait_status));
  CHECK(WTERMSIG(wait_status) == SIGKILL);
}

TEST_CASE("a health check's timeout reads as a person would write it", "[health]") {
  CHECK(format_check_timeout(60s) == "60 s");
  CHECK(format_check_timeout(1500ms) == "1.5 s");
  CHECK(format_check_timeout(300ms) == "300 ms");
}
