// A node health check's built-in (--storage-check=PATH,..., docs/agent.md
// "Node health"): each named path answers a small write, fsync and read
// (then unlink) within a deadline. A shared file system that hangs (an
// NFS server gone, a FUSE daemon stuck) stalls every worker that touches
// it, at the next checkpoint, with nothing to say why.
//
// The probe is a child process (`/bin/sh -c`: dd with conv=fsync, cat, rm
// on PATH/.dtrun-storage-probe.TAG), started through the agent's
// process_runner in its own process group and reaped through the worker
// group (worker_group::watch_helper), never waited for: a process blocked
// on a hung mount sleeps uninterruptibly (state D) and can be neither
// killed nor reaped until the mount answers or goes. So at the deadline
// the probe is left running and the path is failed; while that probe
// lives, a later run starts none for the path but reports it still stuck
// (`repeated`: said once). When it ends, the next run probes again. When
// the agent ends, each probe still running gets SIGKILL, to its whole
// process group (the agent's sweep of its children, kill_adopted, or this
// object's end, whichever comes first): the signal waits in the kernel,
// and the process dies (and is reaped by init, or by the subreaper above
// the agent) once its mount answers or is aborted; the agent does not
// wait for it.
//
// Single-threaded, on the agent's event loop. Completion handlers do not
// throw. The runner and the group must outlive this object.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "agent/health/node_health.h"
#include "agent/process/process_runner.h"
#include "agent/process/worker_group.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {

struct storage_probe_options {
  std::vector<std::string> paths;  // --storage-check
  // Each probe's deadline (--node-health-check-timeout).
  std::chrono::milliseconds deadline{60000};
  // In the probe file's name, so that nodes sharing a file system do not
  // touch each other's: "HOST.PID".
  std::string tag = "probe";
  std::string shell = "/bin/sh";
};

// The finding (check "storage") of a probe of `path` that exited with
// `exit_code` (0: healthy; the script's codes name the step that failed).
health_finding storage_exit_finding(const std::string& path, int exit_code, bool gating);
// The finding of a probe of `path` that passed its `deadline` (pid `pid`,
// in kernel state `state`, as /proc says: 'D' uninterruptible).
health_finding storage_stuck_finding(const std::string& path, std::chrono::milliseconds deadline,
                                     pid_t pid, char state, bool repeated, bool gating);

class storage_probe {
 public:
  storage_probe(boost::asio::io_context& io, process_runner& runner, worker_group& exits,
                storage_probe_options options);
  // SIGKILL to every probe still running, not waited for (above).
  ~storage_probe();

  storage_probe(const storage_probe&) = delete;
  storage_probe& operator=(const storage_probe&) = delete;

  // Probes every path (a path whose probe is still running from before is
  // not probed again) and calls `done` once, on the loop, never from
  // inside run(), with one finding per path in the options' order, once
  // each probe ended or passed its deadline. At most one run at a time;
  // a new run cancels the one before.
  void run(bool gating, std::function<void(std::vector<health_finding>)> done);
  // `done` is not called; the probes in flight go on (their ends are
  // watched, and the next run sees them). Idempotent.
  void cancel();

  // How many probes are running now (stuck ones included).
  std::size_t probes_running() const;
  // The pid of `path`'s running probe, else -1.
  pid_t probe_pid(const std::string& path) const;

 private:
  struct probe;
  void start(probe& p);
  void ended(probe& p, int wait_status);
  void overdue(probe& p);
  void settle(probe& p, health_finding finding);
  void finish_if_complete();

  boost::asio::io_context& io_;
  process_runner& runner_;
  worker_group& exits_;
  storage_probe_options options_;
  std::vector<std::unique_ptr<probe>> probes_;  // one per path, in order
  std::function<void(std::vector<health_finding>)> done_;
  bool gating_ = false;
  // Moved on by every run, cancel() and destruction: a post of an earlier
  // run finds it changed.
  std::shared_ptr<std::uint64_t> generation_ = std::make_shared<std::uint64_t>(0);
};

}  // namespace dtrun::agent
