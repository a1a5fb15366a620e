// Real children: spawning is about fork/exec, so fakes would prove nothing.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "agent/exit_status.h"
#include "agent/worker_process.h"

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
  CHECK(::getpgid(spawned.pid) == spawned.pid);
  CHECK(wait_for(spawned.pid).code == 0);
}

TEST_CASE("exec failures are reported with 127 or 126 and the reason") {
  spawn_result missing = spawn_worker({"/nonexistent/program", {}, {}});
  CHECK_FALSE(missing.ok());
  CHECK(missing.exit_code == 127);
  CHECK(missing.error.find("/nonexistent/program") != std::string::npos);

  spawn_result not_executable = spawn_worker({"/etc/passwd", {}, {}});
  CHECK_FALSE(not_executable.ok());
  CHECK(not_executable.exit_code == 126);
  // Boost's child exits after reporting; reap it so no zombie stays.
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

TEST_CASE("signalling a group reaches the worker") {
  spawn_result spawned = spawn_worker({"/bin/sleep", {"100"}, {}});
  REQUIRE(spawned.ok());
  signal_group(spawned.pid, SIGTERM);
  exit_status status = wait_for(spawned.pid);
  CHECK(status.signal == SIGTERM);
  CHECK(status.code == 128 + SIGTERM);
}
