// Bounds the wait for a worker to die after dtrun sent it SIGKILL.
//
// SIGKILL ends a process only once it runs again: one in uninterruptible
// sleep (D: a hung NFS or FUSE call, a GPU driver call, a frozen cgroup)
// stays until the kernel lets go, which may be never, and an agent that
// waits for its exit waits with it (torchrun before 2.12; pytorch PRs
// #184304 and #185414). The agent notes each SIGKILL here, arms one timer
// for next_deadline(), and gives up on what overdue() returns: it names
// the worker and its state in one line (unkillable_line), stops waiting
// for it and leaves the job instead of restarting (docs/agent.md,
// "Workers that do not die"). Its exit is still reaped whenever it comes:
// the agent's SIGCHLD loop reaps every child.
//
// Pure bookkeeping on the caller's clock, so tests drive it with made-up
// times; process_state reads a proc root a test can fake.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::agent {

class kill_watch {
 public:
  using clock = std::chrono::steady_clock;

  // Ten seconds: a process that is merely slow to die after SIGKILL is
  // one tearing down a large address space or a GPU context (the driver
  // frees its memory as the files close), which takes seconds, not tens
  // of them; giving up on such a worker would fail the job for nothing,
  // so the grace errs long. It adds to --stop-timeout only for a worker
  // that is really stuck.
  static constexpr std::chrono::milliseconds default_grace{10000};

  explicit kill_watch(std::chrono::milliseconds grace = default_grace) : grace_(grace) {}

  std::chrono::milliseconds grace() const { return grace_; }

  // dtrun sent SIGKILL to `pid` at `now`. A second SIGKILL keeps the first
  // deadline: the grace counts from the first.
  void killed(pid_t pid, clock::time_point now);

  // `pid` was reaped: no deadline for it any more.
  void forget(pid_t pid) { deadlines_.erase(pid); }
  void clear() { deadlines_.clear(); }

  // The earliest deadline still watched; nullopt when none.
  std::optional<clock::time_point> next_deadline() const;

  // The pids whose deadline is `now` or earlier, in pid order; they are no
  // longer watched.
  std::vector<pid_t> overdue(clock::time_point now);

 private:
  std::chrono::milliseconds grace_;
  std::map<pid_t, clock::time_point> deadlines_;
};

// The state letter of /proc/<pid>/stat ('?' when it cannot be read).
char process_state(pid_t pid, const std::string& proc_root = "/proc");

// "in uninterruptible sleep (D)", "stopped (T)", "a zombie (Z)", ...
std::string describe_process_state(char state);

// The line the agent prints for a worker that outlived its SIGKILL:
// "rank 3 (pid 1234) is in uninterruptible sleep (D) and did not die on
// SIGKILL within 10 s; leaving it to the kernel".
std::string unkillable_line(int rank, pid_t pid, char state, std::chrono::milliseconds grace);

}  // namespace dtrun::agent
