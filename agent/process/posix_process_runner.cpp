#include "agent/process/posix_process_runner.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <utility>

#include "agent/process/kill_watch.h"

namespace dtrun::agent {

process_runner::~process_runner() = default;

posix_process_runner::posix_process_runner(boost::asio::io_context& io) : sigchld_(io) {}

void posix_process_runner::start(exit_handler on_exit) {
  on_exit_ = std::move(on_exit);
  // Orphaned grandchildren come to us, so we can kill and reap them.
  become_subreaper();
  sigchld_.add(SIGCHLD);
  wait_for_child();
  guard_.emplace();
}

void posix_process_runner::wait_for_child() {
  sigchld_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    wait_for_child();  // re-arm first: coalesced signals are reaped in a loop
    reap();
  });
}

// waitpid(-1) in a loop: SIGCHLDs coalesce, and adopted orphans are reaped
// here too.
void posix_process_runner::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    on_exit_(pid, status);
  }
}

spawn_result posix_process_runner::spawn(const spawn_request& request) {
  return spawn_worker(request);
}

void posix_process_runner::guard(pid_t pgid) {
  if (guard_) guard_->watch(pgid);
}

void posix_process_runner::unguard(pid_t pgid) {
  if (guard_) guard_->unwatch(pgid);
}

void posix_process_runner::signal_worker(pid_t pid, int sig) { agent::signal_worker(pid, sig); }

void posix_process_runner::signal_process(pid_t pid, int sig) {
  if (pid > 0) ::kill(pid, sig);
}

void posix_process_runner::kill_group(pid_t pgid) { signal_group(pgid, SIGKILL); }

char posix_process_runner::state(pid_t pid) { return process_state(pid); }

void posix_process_runner::kill_adopted(std::vector<pid_t> keep) {
  if (guard_) keep.push_back(guard_->pid());
  kill_adopted_children(keep);
}

}  // namespace dtrun::agent
