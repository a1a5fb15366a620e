#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>

#include <catch2/catch.hpp>

#include "agent/process/kill_watch.h"
#include "tests/unit/agent/fake_proc.h"

using namespace dtrun::agent;
using dtrun::agent::testing::fake_proc;
using namespace std::chrono_literals;

namespace {
const kill_watch::clock::time_point t0{};
}

TEST_CASE("a killed worker is overdue only once its grace has passed") {
  kill_watch watch(10s);
  CHECK(!watch.next_deadline());
  watch.killed(42, t0);
  watch.killed(43, t0 + 2s);
  REQUIRE(watch.next_deadline() == t0 + 10s);
  CHECK(watch.overdue(t0 + 9s).empty());
  CHECK(watch.overdue(t0 + 10s) == std::vector<pid_t>{42});
  // Given up on: not returned twice; the other one is still watched.
  CHECK(watch.next_deadline() == t0 + 12s);
  CHECK(watch.overdue(t0 + 11s).empty());
  CHECK(watch.overdue(t0 + 30s) == std::vector<pid_t>{43});
  CHECK(!watch.next_deadline());
}

TEST_CASE("a second SIGKILL keeps the first deadline; a reaped worker is forgotten") {
  kill_watch watch(5s);
  watch.killed(7, t0);
  watch.killed(7, t0 + 4s);  // a second Ctrl-C, say
  CHECK(watch.next_deadline() == t0 + 5s);
  watch.killed(8, t0);
  watch.forget(7);
  CHECK(watch.overdue(t0 + 6s) == std::vector<pid_t>{8});
  watch.killed(9, t0);
  watch.clear();
  CHECK(watch.overdue(t0 + 60s).empty());
}

TEST_CASE("the line names the rank, the pid and the state /proc shows") {
  fake_proc proc;
  proc.add(1234, "python3 (train) x", 1234, 1, 1, 1, 10, 'D');
  proc.add(1235, "python3", 1235, 1, 1, 1, 10, 'T');
  char d = process_state(1234, proc.root.string());
  CHECK(d == 'D');
  CHECK(unkillable_line(3, 1234, d, 10s) ==
        "rank 3 (pid 1234) is in uninterruptible sleep (D) and did not die on SIGKILL within "
        "10 s; leaving it to the kernel");
  CHECK(describe_process_state(process_state(1235, proc.root.string())) == "stopped (T)");
  // Gone meanwhile: the line still comes, saying /proc did not show it.
  CHECK(process_state(999, proc.root.string()) == '?');
  CHECK(unkillable_line(0, 999, '?', 2500ms) ==
        "rank 0 (pid 999) is in a state /proc does not show and did not die on SIGKILL within "
        "2.5 s; leaving it to the kernel");
}

TEST_CASE("a real process's state is read from /proc") {
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ::kill(child, SIGSTOP);
  int status = 0;
  REQUIRE(::waitpid(child, &status, WUNTRACED) == child);  // stopped now, not sleeping
  CHECK(process_state(child) == 'T');
  ::kill(child, SIGKILL);
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(process_state(child) == '?');
}
