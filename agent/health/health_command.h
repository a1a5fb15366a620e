// A node health check's command (--node-health-check CMD): `/bin/sh -c
// CMD` run through the agent's process_runner, healthy iff it exits 0.
//
// The command runs in a session and process group of its own (no
// controlling terminal), with stdin from /dev/null, a parent-death signal
// and the orphan guard (killed with its group should the agent die), and
// its stdout and stderr in one pipe read on the event loop. What it writes
// is kept bounded however much that is (last_lines.h: its last lines,
// printable): binary output, 100 MB of it, or a command that never writes
// cannot stall the loop or grow the agent.
//
// The check ends with the command's exit, as the agent's reaper hands it
// over (worker_group::watch_helper), not with the end of its output: a
// command that leaves a background child holding the pipe must not keep
// the check open. At the exit, the command's process group is SIGKILLed,
// leftovers and all, and what is already in the pipe is read without
// waiting for more. At the timeout the same, and the check ends without
// waiting for the reaper (a command stuck in the kernel would otherwise
// hold the agent up): its exit, when it comes, is reaped and ignored.
//
// Single-threaded, on the agent's event loop. The runner and the group
// must outlive this object. Completion handlers do not throw.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "agent/health/node_health.h"
#include "agent/output/last_lines.h"
#include "agent/process/process_runner.h"
#include "agent/process/worker_group.h"
#include "rendezvous/base/env_map.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {

struct health_command_options {
  std::string command;  // given to `/bin/sh -c`
  std::chrono::milliseconds timeout{60000};  // --node-health-check-timeout
  // The command's complete environment; nullopt: the agent's own.
  std::optional<env_map> env;
  std::string shell = "/bin/sh";
};

// "node health check failed: `CMD` <what>", plus the last output line
// when there is one: the one line the agent logs and the event log keeps.
std::string health_command_failure(const std::string& command, const std::string& what,
                                   const std::vector<std::string>& output_tail);

// "60 s", "1.5 s", "300 ms".
std::string format_check_timeout(std::chrono::milliseconds timeout);

class health_command {
 public:
  health_command(boost::asio::io_context& io, process_runner& runner, worker_group& exits,
                 health_command_options options);
  // cancel().
  ~health_command();

  health_command(const health_command&) = delete;
  health_command& operator=(const health_command&) = delete;

  // Starts the command and calls `done` once, on the loop, never from
  // inside run(): a finding with check "command", gating, healthy iff it
  // exited 0, its output's last lines in output_tail. At most one run at a
  // time; another may start once `done` was called (from `done` too).
  void run(std::function<void(health_finding)> done);

  // Stops a run in flight: its process group is SIGKILLed, and its `done`
  // is never called. Idempotent; harmless when nothing runs.
  void cancel();

  bool running() const { return static_cast<bool>(done_); }
  // The command's pid (its process group too) while it runs, else -1.
  pid_t running_pid() const { return running() ? pid_ : -1; }

 private:
  // How the command's run ended: its exit (a wait status) or its timeout.
  struct ending {
    int wait_status = 0;
    bool timed_out = false;
  };

  void read();
  void drain_now();
  void exited(int wait_status);
  void timed_out();
  void end(ending how);
  health_finding verdict() const;
  // Kills what is left of the command, forgets it, and calls `done` with
  // `finding` (the run's last act: `done` may destroy this object).
  void finish(health_finding finding);
  // SIGKILL to what is left of the command's process group.
  void kill_command();
  void stop_command();
  health_finding failed(const std::string& what) const;

  boost::asio::io_context& io_;
  process_runner& runner_;
  worker_group& exits_;
  health_command_options options_;
  boost::asio::posix::stream_descriptor pipe_;
  generation_timer timeout_;
  std::vector<char> buffer_;
  pid_t pid_ = -1;
  // Set once the command ended; the check then finishes when the read in
  // flight came back (its bytes may be the command's last).
  std::optional<ending> ended_;
  last_lines output_;
  std::function<void(health_finding)> done_;
  // Every run and every cancel() moves it on: a read or a post of an
  // earlier run finds it changed and does nothing. Shared, so a handler
  // queued when this object is destroyed sees the change too.
  std::shared_ptr<std::uint64_t> generation_ = std::make_shared<std::uint64_t>(0);
};

}  // namespace dtrun::agent
