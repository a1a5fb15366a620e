// One round's workers on this node: started through the process_runner,
// reaped as they end (once their last output is read), stopped in two
// phases (the signal, then SIGKILL when the grace period ends), and given
// up on when they outlive a SIGKILL (kill_watch.h). What a worker's end
// means for the job is the agent's policy (elastic_agent), not this
// class's.
//
// Single-threaded, on the agent's event loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "agent/process/kill_watch.h"
#include "agent/process/process_runner.h"
#include "agent/spec/exit_status.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {

enum class worker_state {
  running,     // not reaped yet: its pid is still its own
  draining,    // reaped; its last output is still being read
  exited,      // reaped and drained
  unkillable,  // outlived its SIGKILL by kill_watch's grace: not waited for
};

struct worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;  // also its process group id
  worker_state state = worker_state::running;
  std::string error_file;
  std::chrono::system_clock::time_point started_at{};
  std::optional<int> exit_code;  // once reaped
  // The file-timer watchdog sent it `watchdog_signal`: why, for the summary.
  int watchdog_signal = 0;
  std::string watchdog;
  // dtrun killed it after a hang (--hang-timeout): where it was stuck;
  // and for a section's hang (--section-timeouts), the section.
  std::string hang;
  std::string hang_section;

  bool alive() const { return state == worker_state::running; }
  // The group still waits for it (its exit, or its output after it).
  bool waited_for() const {
    return state == worker_state::running || state == worker_state::draining;
  }
  bool reaped() const {
    return state == worker_state::draining || state == worker_state::exited;
  }
};

class worker_group {
 public:
  struct unkillable_worker {
    worker* w;
    char state;  // the kernel's state letter when given up on
  };
  struct hooks {
    // A worker was reaped and its output drained; `at` is when it was
    // reaped (the root cause is chosen by it).
    std::function<void(worker&, const exit_status&, std::chrono::system_clock::time_point at)>
        exited;
    // Workers that outlived their SIGKILL by the grace, now unkillable.
    std::function<void(const std::vector<unkillable_worker>&)> unkillable;
    // Calls `then` once local_rank's output is all read
    // (worker_output::when_drained).
    std::function<void(int local_rank, std::function<void()> then)> drain;
    // A worker's pid is no longer its own (reaped).
    std::function<void(pid_t)> reaped;
    std::function<void(const std::string&)> log;
  };

  worker_group(boost::asio::io_context& io, process_runner& runner, hooks h,
               std::chrono::milliseconds kill_grace = kill_watch::default_grace);

  // Once, before the first spawn (process_runner::start).
  void start();

  // A new round: forgets the previous round's workers, and any stop or
  // SIGKILL deadline still pending for them.
  void clear();

  // Starts one worker; on success it joins the group.
  spawn_result spawn(int local_rank, int rank, const spawn_request& request,
                     std::string error_file);

  // The two-phase stop: `sig` (and SIGCONT, so stopped workers can act on
  // it) now, SIGKILL to those still running when `grace` ends.
  void stop(int sig, std::chrono::milliseconds grace);
  void cancel_stop();
  // The agent is done: no stop's SIGKILL and no SIGKILL deadline acts any
  // more.
  void cancel_timers();

  // `sig` to every live worker's process group.
  void signal_all(int sig);
  // `sig` to one live worker alone (the watchdog; a hang's culprit).
  void signal_one(worker& w, int sig);

  // A live worker (not reaped, so its pid cannot have been reused), or null.
  worker* live(pid_t pid);
  // Workers the group still waits for.
  std::size_t waited_for() const;
  // How long a SIGKILLed worker may take to die before it is unkillable.
  std::chrono::milliseconds kill_grace() const { return kills_.grace(); }

  // Leaves nothing of the round behind: SIGKILL to the workers' process
  // groups (grandchildren still in them) and to the orphans that left
  // them, except `keep` and the watched helpers.
  void end_round(std::vector<pid_t> keep);

  // A helper process of the agent's own, not a worker (a node health
  // check's command): the reaper hands its exit to `on_exit` (once, then
  // the pid is forgotten) instead of ignoring it, and end_round's sweep
  // spares it. Helpers outlive rounds: clear() keeps them. `on_exit` runs
  // on the loop, from the SIGCHLD reaper; it must not throw.
  void watch_helper(pid_t pid, std::function<void(int wait_status)> on_exit);
  // Its exit, should it still come, is ignored again. Harmless when the
  // pid is not watched.
  void unwatch_helper(pid_t pid);

  const std::vector<worker>& workers() const { return workers_; }
  std::vector<worker>& workers() { return workers_; }

 private:
  void on_exit(pid_t pid, int wait_status);
  void watch_kill(pid_t pid);
  void arm_kill_timer();
  void kills_overdue();

  process_runner& runner_;
  hooks hooks_;
  std::vector<worker> workers_;
  // Only this stop's grace period: an expiry queued before cancel_stop()
  // must not SIGKILL the workers of a later stop before their grace.
  generation_timer stop_timer_;
  // The deadlines of the SIGKILLs sent to workers and their one timer.
  kill_watch kills_;
  generation_timer kill_timer_;
  // watch_helper()'s pids and what their exit calls; a handful at most.
  std::vector<std::pair<pid_t, std::function<void(int)>>> helpers_;
};

}  // namespace dtrun::agent
