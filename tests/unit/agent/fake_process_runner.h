// A process_runner that starts no process, for the agent's policy tests
// (elastic_agent_test.cpp). Each "worker" is a pid from a range no real
// process is given here; what the agent asks is recorded, and a worker
// ends when the test says so or when a signal it does not ignore reaches
// it. Its end reaches the agent through the event loop, as SIGCHLD would.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "agent/process/process_runner.h"

namespace dtrun::agent::testing {

class fake_process_runner : public process_runner {
 public:
  struct sent {
    pid_t pid;
    int sig;
    bool alone;  // signal_process (the worker alone), not its group
  };

  explicit fake_process_runner(boost::asio::io_context& io) : io_(io) {}

  // --- what the agent asks -------------------------------------------
  void start(exit_handler on_exit) override { on_exit_ = std::move(on_exit); }

  spawn_result spawn(const spawn_request& request) override {
    if (spawn_error) return *spawn_error;
    pid_t pid = next_pid_++;
    spawned.push_back({pid, request});
    running_.insert(pid);
    if (on_spawn) on_spawn(pid, request);
    return {pid, 0, {}};
  }

  void guard(pid_t pgid) override { guarded.insert(pgid); }
  void unguard(pid_t pgid) override { guarded.erase(pgid); }

  void signal_worker(pid_t pid, int sig) override { deliver(pid, sig, false); }
  void signal_process(pid_t pid, int sig) override { deliver(pid, sig, true); }
  void kill_group(pid_t pgid) override { groups_killed.push_back(pgid); }
  char state(pid_t) override { return 'D'; }
  void kill_adopted(std::vector<pid_t>) override { ++sweeps; }

  // --- what the test does ---------------------------------------------
  // The worker exits with `code` (posted, as a SIGCHLD is).
  void exit(pid_t pid, int code) { end(pid, W_EXITCODE(code, 0)); }
  // The worker dies of `sig`.
  void die(pid_t pid, int sig) { end(pid, sig); }

  // Signals a worker survives (as a program that handles them would);
  // SIGCONT, SIGUSR1 and SIGUSR2 are always survived.
  std::set<int> survives;

  // Instead of starting anything, spawn() fails with this.
  std::optional<spawn_result> spawn_error;

  // Called for each signal sent to a worker (after it is recorded), before
  // the worker dies of it: a worker that reacts (saves, then exits).
  std::function<void(pid_t, int)> on_signal;

  // Called for each spawned worker (after it is recorded).
  std::function<void(pid_t, const spawn_request&)> on_spawn;

  struct spawned_worker {
    pid_t pid;
    spawn_request request;
    std::string env(const std::string& name) const {
      auto it = request.env.find(name);
      return it == request.env.end() ? std::string("<unset>") : it->second;
    }
  };
  std::vector<spawned_worker> spawned;
  std::vector<sent> signals;
  std::vector<pid_t> groups_killed;
  std::set<pid_t> guarded;
  int sweeps = 0;

  bool is_running(pid_t pid) const { return running_.count(pid) > 0; }

  // The signals `pid` got, in order.
  std::vector<int> signals_to(pid_t pid) const {
    std::vector<int> out;
    for (const auto& s : signals) {
      if (s.pid == pid) out.push_back(s.sig);
    }
    return out;
  }

 private:
  void deliver(pid_t pid, int sig, bool alone) {
    signals.push_back({pid, sig, alone});
    if (on_signal) on_signal(pid, sig);
    if (!is_running(pid)) return;
    bool harmless = sig == SIGCONT || sig == SIGUSR1 || sig == SIGUSR2;
    if (harmless || (sig != SIGKILL && survives.count(sig) > 0)) return;
    die(pid, sig);
  }

  void end(pid_t pid, int wait_status) {
    if (running_.erase(pid) == 0) return;
    boost::asio::post(io_, [this, pid, wait_status] {
      if (on_exit_) on_exit_(pid, wait_status);
    });
  }

  boost::asio::io_context& io_;
  exit_handler on_exit_;
  // Far above any pid this machine hands out (pid_max is at most 2^22),
  // so a stray real signal could not reach anyone.
  pid_t next_pid_ = 5'000'001;
  std::set<pid_t> running_;
};

}  // namespace dtrun::agent::testing
