// The agent's process machinery for tests that run real children: a real
// event loop, SIGCHLD reaped on it by the real posix_process_runner, and
// helpers' exits handed over by a worker group (worker_group::watch_helper),
// as in the agent. No sleep synchronises anything: run_until() runs the
// loop until a callback set the result, with a safety timer that fails
// the test.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "agent/process/posix_process_runner.h"
#include "agent/process/worker_group.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent::testing {

struct real_agent {
  boost::asio::io_context io;
  posix_process_runner runner{io};
  worker_group group{io, runner, worker_group::hooks{}};
  real_agent() { group.start(); }
};

// Runs the loop until `got` is set; fails the test if that takes longer
// than `limit` (which only a broken check would).
template <typename T>
void run_until(boost::asio::io_context& io, const std::optional<T>& got,
               std::chrono::seconds limit = std::chrono::seconds(60)) {
  dtrun::generation_timer safety(io);
  bool expired = false;
  safety.arm_after(limit, [&] {
    expired = true;
    io.stop();
  });
  while (!got && !expired) io.run_one();
  io.restart();
  REQUIRE_FALSE(expired);
}

// Reaps what is left of a process group whose members were all SIGKILLed
// (a blocking wait for the kill, not a poll: the test process is the
// subreaper of its children's orphans), then whether the group is gone.
inline bool group_gone_after_reaping(pid_t pgid) {
  while (::waitpid(-pgid, nullptr, 0) > 0) {
  }
  return ::kill(-pgid, 0) == -1 && errno == ESRCH;
}

}  // namespace dtrun::agent::testing
