#include "agent/process/orphan_guard.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <system_error>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::agent {
namespace {

// The guardian's whole life. Only read(), kill() and _exit(): it is a
// fork of the agent and must not run the agent's destructors or atexit.
[[noreturn]] void guardian_main(int read_fd) {
  std::set<pid_t> groups;
  char buf[512];
  std::string pending;
  for (;;) {
    ssize_t n = ::read(read_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t eol;
    while ((eol = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, eol);
      pending.erase(0, eol + 1);
      if (line.size() < 2) continue;
      pid_t pgid = parse_whole<pid_t>(std::string_view(line).substr(1)).value_or(0);
      if (pgid <= 0) continue;
      if (line[0] == '+') groups.insert(pgid);
      if (line[0] == '-') groups.erase(pgid);
    }
  }
  for (pid_t pgid : groups) ::kill(-pgid, SIGKILL);
  ::_exit(0);
}

// In the guardian, before it unblocks signals. Terminal and job-control
// signals are for the agent, which forwards them (or ignores them, as it
// was started); the guardian must outlive the agent to do its job. So must
// it outlive every signal the agent catches (--signals-to-handle), whose
// inherited handler is the agent's, not the guardian's.
void ignore_signals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
    ::signal(sig, SIG_IGN);
  }
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction current {};
    if (sig == SIGKILL || sig == SIGSTOP || ::sigaction(sig, nullptr, &current) != 0) continue;
    bool caught = (current.sa_flags & SA_SIGINFO) != 0 ||
                  (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN);
    // SIGCHLD (the guardian has no children) just goes back to its default.
    if (caught) ::signal(sig, sig == SIGCHLD ? SIG_DFL : SIG_IGN);
  }
}

}  // namespace

orphan_guard::orphan_guard() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "cannot create the orphan guard's pipe");
  }
  // Blocked around the fork: until the child has dropped the agent's
  // handlers, a signal to it (a terminal's Ctrl-C reaches the whole process
  // group) would run the agent's Asio handler, which writes to the pipe the
  // agent reads: the agent would see that signal twice.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &previous);
  pid_ = ::fork();
  int fork_errno = errno;
  if (pid_ != 0) ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (pid_ < 0) {
    int err = fork_errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::system_error(err, std::generic_category(), "cannot fork the orphan guard");
  }
  if (pid_ == 0) {
    ignore_signals();
    // Keep only the read end: holding the write end (or the store's
    // sockets) would keep the pipe, or a port, open after the agent died.
    ::close(fds[1]);
    // Nor the agent's stdio: whoever reads the agent's output must see EOF
    // when the agent is gone.
    int devnull = ::open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
    }
    if (fds[0] != 3) {
      ::dup2(fds[0], 3);
    }
    ::syscall(SYS_close_range, 4U, ~0U, 0);
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    guardian_main(3);
  }
  ::close(fds[0]);
  write_fd_ = fds[1];
  // A dead guardian must not kill the agent with SIGPIPE; writes then fail.
  ::signal(SIGPIPE, SIG_IGN);
}

orphan_guard::~orphan_guard() {
  if (write_fd_ >= 0) ::close(write_fd_);
  if (pid_ > 0) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void orphan_guard::watch(pid_t pgid) { send('+', pgid); }
void orphan_guard::unwatch(pid_t pgid) { send('-', pgid); }

void orphan_guard::send(char op, pid_t pgid) {
  char line[32];
  int len = std::snprintf(line, sizeof line, "%c%d\n", op, static_cast<int>(pgid));
  // Lines are far below PIPE_BUF, so each write is atomic.
  while (::write(write_fd_, line, static_cast<std::size_t>(len)) < 0 && errno == EINTR) {
  }
}

}  // namespace dtrun::agent
