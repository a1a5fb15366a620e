// Real children: spawning is about fork/exec, so fakes would prove nothing.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/process/worker_process.h"
#include "agent/spec/exit_status.h"
#include "rendezvous/base/parse_whole.h"

using namespace dtrun::agent;

namespace {

exit_status wait_for(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return decode_wait_status(status);
}

}  // namespace

TEST_CASE("programs are found on PATH like a shell finds them") {
  CHECK(resolve_program("sh", "/nonexistent:/bin:/usr/bin") == std::optional<std::string>("/bin/sh"));
  CHECK(resolve_program("./x", "") == std::optional<std::string>("./x"));
  CHECK_FALSE(resolve_program("no-such-program-dtrun", "/bin:/usr/bin"));
  CHECK_FALSE(resolve_program("", "/bin"));
  // A match that exists but is not executable is still returned (exec then
  // says 126), but an executable one later in PATH wins.
  CHECK(resolve_program("passwd", "/etc") == std::optional<std::string>("/etc/passwd"));
}

TEST_CASE("a worker gets exactly the given environment and its own process group") {
  spawn_request request{"/bin/sh",
                        {"-c", "test \"$ONLY\" = yes && test -z \"$HOME\" && "
                               "test \"$(ps -o pgid= -p $$ | tr -d ' ')\" = $$"},
                        {{"ONLY", "yes"}, {"PATH", "/bin:/usr/bin"}}};
  spawn_result spawned = spawn_worker(request);
  REQUIRE(spawned.ok());
  CHECK(wait_for(spawned.pid).code == 0);
}

TEST_CASE("a failed exec makes the child exit 127 or 126, like a shell") {
  spawn_result missing = spawn_worker({"/nonexistent/program", {}, {}});
  REQUIRE(missing.ok());
  CHECK(wait_for(missing.pid).code == 127);
  spawn_result not_executable = spawn_worker({"/etc/passwd", {}, {}});
  REQUIRE(not_executable.ok());
  CHECK(wait_for(not_executable.pid).code == 126);
}

TEST_CASE("programs are checked before the first spawn") {
  CHECK_FALSE(check_program("/bin/sh"));
  auto missing = check_program("/nonexistent/program");
  REQUIRE(missing);
  CHECK(missing->exit_code == 127);
  CHECK(missing->error == "cannot run /nonexistent/program: No such file or directory");
  auto not_executable = check_program("/etc/passwd");
  REQUIRE(not_executable);
  CHECK(not_executable->exit_code == 126);
  CHECK(not_executable->error.find("Permission denied") != std::string::npos);
  auto directory = check_program("/tmp");
  REQUIRE(directory);
  CHECK(directory->exit_code == 126);
}

TEST_CASE("a worker signalled at once dies of it, even before its exec") {
  spawn_result spawned = spawn_worker({"/bin/sleep", {"100"}, {}});
  REQUIRE(spawned.ok());
  signal_worker(spawned.pid, SIGTERM);
  exit_status status = wait_for(spawned.pid);
  CHECK(status.signal == SIGTERM);
  CHECK(status.code == 128 + SIGTERM);
}

TEST_CASE("a worker given CPUs runs on exactly those from its first instruction") {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  REQUIRE(::sched_getaffinity(0, sizeof(mine), &mine) == 0);
  int last = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mine)) last = cpu;
  }
  REQUIRE(last >= 0);
  spawn_request request{"/bin/sh",
                        {"-c", "grep -qx \"Cpus_allowed_list:[[:space:]]*" + std::to_string(last) +
                                   "\" /proc/self/status"},
                        {{"PATH", "/bin:/usr/bin"}}};
  request.cpus = {last};
  spawn_result spawned = spawn_worker(request);
  REQUIRE(spawned.ok());
  CHECK(wait_for(spawned.pid).code == 0);

  // Without CPUs the agent's own affinity is inherited unchanged.
  request.cpus.clear();
  request.args = {"-c", "test \"$(grep Cpus_allowed_list /proc/self/status)\" = \"$(grep "
                        "Cpus_allowed_list /proc/$PPID/status)\""};
  spawned = spawn_worker(request);
  REQUIRE(spawned.ok());
  CHECK(wait_for(spawned.pid).code == 0);
}

TEST_CASE("a worker whose CPUs cannot be used exits 1 before it execs") {
  // A CPU number no machine here has: sched_setaffinity refuses it.
  spawn_request request{"/bin/true", {}, {}};
  request.cpus = {8000};
  spawn_result spawned = spawn_worker(request);
  REQUIRE(spawned.ok());
  CHECK(wait_for(spawned.pid).code == 1);
}

TEST_CASE("sweeping the children kills the group each one leads, its own children too") {
  // What a health check leaves: a shell in its own group (spawn_worker's
  // setsid) waiting for its child, as the storage probe's shell waits for
  // a dd blocked on a hung mount. Killed alone, the shell would hand its
  // child to us only once dead, after the sweep read the list of children.
  REQUIRE(become_subreaper());  // the orphaned child comes here, to be reaped
  std::vector<pid_t> before;    // this test binary's other children: kept
  {
    std::ifstream children("/proc/self/task/" + std::to_string(::getpid()) + "/children");
    for (pid_t pid = 0; children >> pid;) before.push_back(pid);
  }
  int input[2];
  int output[2];
  REQUIRE(::pipe(input) == 0);
  REQUIRE(::pipe(output) == 0);
  // Fd 3: an asynchronous list's stdin is /dev/null in a shell without job
  // control. The cat reads until we close `input`, or dies of the sweep.
  spawn_request request{"/bin/sh", {"-c", "exec 3<&0; cat <&3 & echo $!; wait"},
                        {{"PATH", "/bin:/usr/bin"}}};
  request.stdin_fd = input[0];
  request.stdout_fd = output[1];
  spawn_result shell = spawn_worker(request);
  ::close(input[0]);
  ::close(output[1]);
  REQUIRE(shell.ok());
  std::string line;
  char c = 0;
  while (::read(output[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(output[0]);
  auto child = dtrun::parse_whole<pid_t>(line);
  REQUIRE(child);

  kill_adopted_children(before);
  CHECK(wait_for(shell.pid).signal == SIGKILL);
  // Unkilled, the cat would now end on its own, at end of file.
  ::close(input[1]);
  CHECK(wait_for(*child).signal == SIGKILL);
}
