// Starting and signalling worker processes; no policy here (when to start,
// stop or restart is the agent's business).
//
// Every worker is started in its own session and process group (so a
// terminal's Ctrl-C reaches the agent first and the agent decides, and so
// signals reach the grandchildren a worker spawns), with a parent-death
// signal, with only stdin/stdout/stderr inherited, and with the signal mask
// cleared.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "agent/worker_env.h"

namespace dtrun::agent {

struct spawn_request {
  // Absolute or relative path of the program (see resolve_program).
  std::string program;
  // argv[1..]; argv[0] is `program`.
  std::vector<std::string> args;
  // The complete environment of the new process.
  env_map env;
};

struct spawn_result {
  pid_t pid = -1;           // the worker, also its process group id; -1 on failure
  int exit_code = 0;        // 127 not found, 126 not executable (failures only)
  std::string error;        // one line naming the program and the reason

  bool ok() const { return pid > 0; }
};

// Forks and execs. Returns once exec() has succeeded or failed, so a
// failure is reported here with the reason (never as a mystery exit 1).
// Call only from the agent's single thread.
spawn_result spawn_worker(const spawn_request& request);

// Finds `name` the way a shell does: names with a '/' are taken as they
// are; others are looked up in `path_list` (colon-separated). Returns the
// first executable match, else the first match that exists (so exec
// reports 126), else nullopt (127).
std::optional<std::string> resolve_program(const std::string& name, const std::string& path_list);

// kill(-pgid, sig), ignoring a group that is already gone.
void signal_group(pid_t pgid, int sig);

// Makes this process the reaper of orphaned descendants, so grandchildren
// left behind by a dead worker are reparented to the agent, which can kill
// and reap them. Returns false when the kernel refuses.
bool become_subreaper();

// Sends SIGKILL to every direct child of this process except `keep` (the
// workers' orphans adopted as subreaper, including ones that left their
// worker's process group). Reaping is left to the caller's SIGCHLD loop.
void kill_adopted_children(const std::vector<pid_t>& keep);

}  // namespace dtrun::agent
