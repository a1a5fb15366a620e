// The real process_runner: fork and exec (worker_process.h), signals,
// SIGCHLD through the event loop and waitpid(-1), the orphan guard.
#pragma once

#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "agent/process/orphan_guard.h"
#include "agent/process/process_runner.h"

namespace dtrun::agent {

class posix_process_runner : public process_runner {
 public:
  explicit posix_process_runner(boost::asio::io_context& io);

  void start(exit_handler on_exit) override;
  spawn_result spawn(const spawn_request& request) override;
  void guard(pid_t pgid) override;
  void unguard(pid_t pgid) override;
  void signal_worker(pid_t pid, int sig) override;
  void signal_process(pid_t pid, int sig) override;
  void kill_group(pid_t pgid) override;
  char state(pid_t pid) override;
  void kill_adopted(std::vector<pid_t> keep) override;

 private:
  void wait_for_child();
  void reap();

  boost::asio::signal_set sigchld_;
  exit_handler on_exit_;
  // Started with the runner (a process of its own): the agent's tests of
  // policy use the fake runner and start none.
  std::optional<orphan_guard> guard_;
};

}  // namespace dtrun::agent
