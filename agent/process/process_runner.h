// What the agent asks of the operating system about its worker processes,
// behind one seam (as ninja's CommandRunner): start one, signal it, learn
// that it ended, and sweep up what a round left behind. The real runner
// (posix_process_runner) forks, signals and reaps; the agent's unit tests
// drive the same elastic_agent with a fake that creates no process
// (tests/unit/agent/fake_process_runner.h). elastic_agent.cpp itself
// contains no fork, exec, waitpid or kill.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "agent/process/worker_process.h"

namespace dtrun::agent {

class process_runner {
 public:
  // A child ended: its pid and its wait status (as waitpid gives it).
  // Workers and orphans the agent adopted alike; the caller tells them
  // apart.
  using exit_handler = std::function<void(pid_t pid, int wait_status)>;

  virtual ~process_runner();

  // Once, before the first spawn: from now on every child that ends is
  // handed to `on_exit`, on the event loop (a child that ends before the
  // caller listens must not be missed). Also makes this process the
  // subreaper of what its workers leave behind.
  virtual void start(exit_handler on_exit) = 0;

  // Starts one worker in its own process group (worker_process.h).
  virtual spawn_result spawn(const spawn_request& request) = 0;

  // Killed with its group should the agent die without stopping it
  // (orphan_guard.h), until unguard().
  virtual void guard(pid_t pgid) = 0;
  virtual void unguard(pid_t pgid) = 0;

  // `sig` to the worker's process group (the worker itself before its
  // group exists).
  virtual void signal_worker(pid_t pid, int sig) = 0;
  // `sig` to the worker alone (the file-timer watchdog, as torch's).
  virtual void signal_process(pid_t pid, int sig) = 0;
  // SIGKILL to what is left of a worker's process group.
  virtual void kill_group(pid_t pgid) = 0;

  // The kernel's state letter of `pid` ('D': uninterruptible sleep;
  // kill_watch.h), '?' when unknown.
  virtual char state(pid_t pid) = 0;

  // SIGKILL to every child this process adopted (as subreaper) except
  // `keep` and the runner's own helpers, and to the process group each of
  // them leads (a helper's own children die with it).
  virtual void kill_adopted(std::vector<pid_t> keep) = 0;

  // --preload (preload_runner.h); a runner without it does nothing here.
  // Starts the warm interpreter that Python workers like `like` are then
  // forked from (its own output to `output_file`; `warn` gets its one-line
  // warnings, `debug` what it does: for -v).
  virtual void warm_up(const spawn_request& /*like*/, const std::string& /*output_file*/,
                       std::function<void(const std::string&)> /*warn*/,
                       std::function<void(const std::string&)> /*debug*/) {}
  // `then`, once a warm interpreter is ready or cannot be (at once when
  // none is being started).
  virtual void when_warm(std::function<void()> then) { then(); }
  // Every worker of a round was spawned (or the round gave up starting
  // them): workers forked from the warm interpreter go on once it hands
  // over to its successor.
  virtual void round_spawned() {}
};

}  // namespace dtrun::agent
