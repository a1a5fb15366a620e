// Starting and signalling worker processes; no policy here (when to start,
// stop or restart is the agent's business).
//
// Every worker is started in its own session and process group (so a
// terminal's Ctrl-C reaches the agent first and the agent decides, and so
// signals reach the grandchildren a worker spawns), with a parent-death
// signal, with only stdin/stdout/stderr inherited (each possibly replaced,
// see spawn_request), and with the signal mask cleared.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "rendezvous/base/env_map.h"

namespace dtrun::agent {

struct spawn_request {
  // Absolute or relative path of the program (see resolve_program).
  std::string program;
  // argv[1..]; argv[0] is `program`.
  std::vector<std::string> args;
  // The complete environment of the new process.
  env_map env;
  // The new process's stdout and stderr: -1 keeps the agent's own; else an
  // fd of the agent's (a log file, /dev/null, a pipe's write end) that
  // becomes the worker's fd 1 / 2. The caller still owns and closes it.
  int stdout_fd = -1;
  int stderr_fd = -1;
  // The same for stdin: -1 inherits the agent's (the workers' default, as
  // torchrun's); a node health check gets /dev/null instead.
  int stdin_fd = -1;
  // The CPUs the worker is bound to before it execs (--numa-binding);
  // empty: the agent's own affinity, inherited.
  std::vector<int> cpus;
  // A Python worker that --preload may fork from the warm interpreter
  // (preload_runner.h); false: always started by exec.
  bool python_worker = false;
};

struct spawn_result {
  pid_t pid = -1;           // the worker, also its process group id; -1 on failure
  int exit_code = 0;        // failures only: 127 not found, 126 not executable, 1 other
  std::string error;        // one line naming the program and the reason

  bool ok() const { return pid > 0; }
};

// vforks; the child execs; returns as soon as the child has exec'd (or
// failed to). If the exec fails, the child writes
// "dtrun: cannot run <program>: <reason>" to stderr and exits 127 (not
// found) or 126 (not executable), as a shell would; check_program() before
// the first spawn catches that case up front. Fails here only when fork()
// does. Call only from the agent's single thread.
spawn_result spawn_worker(const spawn_request& request);

// Whether `path` can be executed: nullopt when it can, else the failure
// exec() would give (127 missing, 126 not executable or a directory) with
// a one-line reason.
std::optional<spawn_result> check_program(const std::string& path);

// Finds `name` the way a shell does: names with a '/' are taken as they
// are; others are looked up in `path_list` (colon-separated). Returns the
// first executable match, else the first match that exists (so exec
// reports 126), else nullopt (127).
std::optional<std::string> resolve_program(const std::string& name, const std::string& path_list);

// kill(-pgid, sig), ignoring a group that is already gone.
void signal_group(pid_t pgid, int sig);

// Signals a running (not yet reaped) worker's process group, or the worker
// alone when it has only just been forked and has no group yet.
void signal_worker(pid_t pid, int sig);

// Makes this process the reaper of orphaned descendants, so grandchildren
// left behind by a dead worker are reparented to the agent, which can kill
// and reap them. Returns false when the kernel refuses.
bool become_subreaper();

// Sends SIGKILL to every direct child of this process except `keep` (the
// workers' orphans adopted as subreaper, including ones that left their
// worker's process group; a health check's helpers), and to the process
// group each of them leads, so that their own children die with them.
// Reaping is left to the caller's SIGCHLD loop.
void kill_adopted_children(const std::vector<pid_t>& keep);

}  // namespace dtrun::agent
