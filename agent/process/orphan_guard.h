// Kills the workers' process groups when the agent dies, however it dies.
//
// The parent-death signal kills each worker when the agent is SIGKILLed,
// but not the grandchildren a worker spawned (the signal is per process
// and not inherited across fork). So a tiny guardian process, forked from
// the agent before any worker, holds the read end of a pipe on which the
// agent announces each worker's process group. When the agent dies the pipe
// reaches end-of-file and the guardian SIGKILLs every group still
// announced, then exits. No polling: the guardian sleeps in read().
#pragma once

#include <sys/types.h>

namespace dtrun::agent {

class orphan_guard {
 public:
  // Forks the guardian. Throws std::system_error when pipe/fork fail.
  orphan_guard();
  // Closes the pipe (the guardian kills what is still announced, which is
  // nothing after a clean shutdown) and reaps the guardian.
  ~orphan_guard();

  orphan_guard(const orphan_guard&) = delete;
  orphan_guard& operator=(const orphan_guard&) = delete;

  // Announces a worker's process group / withdraws it once the group is
  // gone (so a recycled id is never killed).
  void watch(pid_t pgid);
  void unwatch(pid_t pgid);

  pid_t pid() const { return pid_; }

 private:
  void send(char op, pid_t pgid);

  pid_t pid_ = -1;
  int write_fd_ = -1;
};

}  // namespace dtrun::agent
