// --preload: Python workers forked from a warm interpreter instead of
// started by exec, so a restart does not wait for `import torch`
// (docs/agent.md, "Preload").
//
// A process_runner in front of the real one. The warm interpreter is a
// child of the agent started exactly as a worker would be (the same
// program, flags, script and environment, with DTRUN_PRELOAD naming the
// modules); dtrun's start-up hook (python_preload.cpp) makes it import
// those modules and then fork a worker for each request on a private
// socket (its stdin). Each forked child takes its worker's environment,
// folder, CPUs, stdin/stdout/stderr and arguments, and returns into
// Python's own start-up, which runs the script as a plain start would.
//
// One warm interpreter serves one round: once every worker of the round
// is forked (round_spawned), it forks its successor, a copy that needs no
// import, and exits. Its children then become the agent's (the agent is
// their subreaper), and only then go on: the agent supervises, signals
// and reaps them as any worker, and their parent-death signal is the
// agent's again.
//
// Anything that goes wrong falls back to a plain start, with one line: a
// module that does not import, one that leaves threads running or
// initialises CUDA (a forked copy could not use them), a warm interpreter
// that dies (one more is started; a second death before it is ready turns
// --preload off), a worker whose environment or script differs from the
// warm interpreter's in more than its per-worker variables.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "agent/process/process_runner.h"

namespace dtrun::agent {

class preload_runner : public process_runner {
 public:
  // `modules`: what the warm interpreter imports, in this order.
  // `script_args_at`: where the script's own arguments start in a
  // worker's args (after "-u script" or "-u -m module").
  preload_runner(boost::asio::io_context& io, std::unique_ptr<process_runner> plain,
                 std::vector<std::string> modules, std::size_t script_args_at);
  // Kills a warm interpreter still there (it would also die with the
  // agent: its parent-death signal).
  ~preload_runner() override;

  void start(exit_handler on_exit) override;
  spawn_result spawn(const spawn_request& request) override;
  void guard(pid_t pgid) override { plain_->guard(pgid); }
  void unguard(pid_t pgid) override { plain_->unguard(pgid); }
  void signal_worker(pid_t pid, int sig) override { plain_->signal_worker(pid, sig); }
  void signal_process(pid_t pid, int sig) override { plain_->signal_process(pid, sig); }
  void kill_group(pid_t pgid) override { plain_->kill_group(pgid); }
  char state(pid_t pid) override { return plain_->state(pid); }
  // Keeps the warm interpreters too.
  void kill_adopted(std::vector<pid_t> keep) override;

  void warm_up(const spawn_request& like, const std::string& output_file,
               std::function<void(const std::string&)> warn,
               std::function<void(const std::string&)> debug) override;
  void when_warm(std::function<void()> then) override;
  void round_spawned() override;

 private:
  // lost: its end of the socket closed mid-request (it died); its exit,
  // not yet reaped, starts another (warm_exited).
  enum class warmth { off, starting, ready, lost };

  void start_fresh();
  void read_ready();
  void warm_exited(pid_t pid, int wait_status);
  void turn_off(const std::string& why);
  void became_ready();
  // `fds` and a new "go" pipe's read end attached; on a reply, the write
  // end joins go_. `gone`: the warm interpreter's end closed (it died).
  std::optional<pid_t> request(const std::string& message, std::vector<int> fds,
                               std::string& error, bool& gone);
  void say_once(const std::string& line);

  boost::asio::io_context& io_;
  std::unique_ptr<process_runner> plain_;
  std::vector<std::string> modules_;
  std::size_t script_args_at_;
  spawn_request like_;
  std::string output_file_;
  std::function<void(const std::string&)> say_;
  std::function<void(const std::string&)> debug_;
  // When the warm interpreter being waited for was started or forked.
  std::chrono::steady_clock::time_point started_at_;
  std::set<std::string> said_;

  warmth warmth_ = warmth::off;
  pid_t warm_pid_ = -1;
  // The "go" pipes of what the current warm interpreter forked and told
  // us the pid of (workers, the successor): each such process got the read
  // end of its own pipe and goes on once it reads a byte, which the agent
  // writes once it has reaped the warm interpreter it was forked from (it
  // is the agent's child by then). A process forked for a request whose
  // reply never came (the warm interpreter died first) is no worker of
  // ours: its write end is closed unwritten, and at that end of file it
  // exits.
  std::vector<int> go_;
  // Warm interpreters that handed over or were killed, whose exit is
  // expected, each with the "go" write ends of what it forked.
  std::vector<std::pair<pid_t, std::vector<int>>> retiring_;

  void retire_current();
  // Its request failed because the warm interpreter is gone (lost).
  void lose_current(const std::string& error);
  std::vector<std::pair<pid_t, std::vector<int>>>::iterator find_retiring(pid_t pid);
  std::optional<boost::asio::posix::stream_descriptor> channel_;
  std::vector<std::function<void()>> waiting_;
  bool forked_this_round_ = false;
  int deaths_before_ready_ = 0;
};

}  // namespace dtrun::agent
