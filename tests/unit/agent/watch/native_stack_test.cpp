// eu-stack's output is parsed from real text; runs use the real program
// when it is installed (elfutils).
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "agent/process/worker_process.h"
#include "agent/watch/native_stack.h"
#include "tests/unit/agent/test_files.h"

using namespace dtrun::agent;

namespace {

// Captured from `eu-stack -p` on /bin/sleep (elfutils 0.188).
constexpr const char* sleep_stack =
    "PID 24861 - process\n"
    "TID 24861:\n"
    "#0  0x00007f34b8a5e503 clock_nanosleep@GLIBC_2.2.5\n"
    "#1  0x00007f34b8a62e53 __nanosleep\n"
    "#2  0x000056032df054af\n"
    "TID 24862:\n"
    "#0  0x000056032df054af\n"
    "#1  0x00007f34b8a62e53 start_thread\n";

pid_t start_sleep() {
  spawn_request request{"/bin/sleep", {"100"}, {{"PATH", "/bin:/usr/bin"}}};
  spawn_result spawned = spawn_worker(request);
  REQUIRE(spawned.ok());
  return spawned.pid;
}

}  // namespace

TEST_CASE("the innermost native frame is the first named frame of the thread asked for") {
  CHECK(native_innermost(sleep_stack, 24861) == "clock_nanosleep@GLIBC_2.2.5");
  CHECK(native_innermost(sleep_stack, 24862) == "start_thread");
  CHECK(native_innermost("TID 5:\n#0  0x000056032df054af\n", 5) == "0x000056032df054af");
  CHECK(native_innermost(sleep_stack, 1) == "");
  CHECK(native_innermost("eu-stack: dwfl_linux_proc_report pid 9: No such file or directory\n", 9) == "");
}

TEST_CASE("eu-stack is looked for on the given PATH") {
  CHECK_FALSE(find_eu_stack("/nonexistent"));
}

TEST_CASE("a run of eu-stack ends with its output, and a missing program is an error, not a hang") {
  boost::asio::io_context io;
  pid_t target = start_sleep();
  std::optional<native_stack_run::result> got;
  native_stack_run bad(io, target, native_stack_options{"/nonexistent/eu-stack"},
                       [&](native_stack_run::result r) { got = std::move(r); });
  io.run();
  REQUIRE(got);
  // spawn_worker vforks, so a missing program is reported by the child on
  // its stderr (our pipe) and it exits 127.
  CHECK(got->text.find("cannot run") != std::string::npos);
  CHECK(bad.running_pid() == -1);

  auto eu_stack = find_eu_stack("/usr/bin:/bin");
  if (!eu_stack) {
    testing::kill_and_reap(target);
    { WARN("eu-stack not installed"); return; }
  }
  got.reset();
  io.restart();
  native_stack_run run(io, target, native_stack_options{*eu_stack},
                       [&](native_stack_run::result r) { got = std::move(r); });
  CHECK(run.running_pid() > 0);
  io.run();
  REQUIRE(got);
  CHECK_FALSE(got->timed_out);
  CHECK(got->text.find("TID " + std::to_string(target) + ":") != std::string::npos);
  CHECK(native_innermost(got->text, target).find("sleep") != std::string::npos);
  CHECK(::kill(target, 0) == 0);  // detached, still running
  testing::kill_and_reap(target);
}

TEST_CASE("destroying a run kills eu-stack and never calls back") {
  auto eu_stack = find_eu_stack("/usr/bin:/bin");
  if (!eu_stack) { WARN("eu-stack not installed"); return; }
  boost::asio::io_context io;
  pid_t target = start_sleep();
  bool called = false;
  pid_t helper = -1;
  {
    native_stack_run run(io, target, native_stack_options{*eu_stack}, [&](auto) { called = true; });
    helper = run.running_pid();
  }
  io.run();
  CHECK_FALSE(called);
  int status = 0;
  REQUIRE(::waitpid(helper, &status, 0) == helper);
  testing::kill_and_reap(target);
}
