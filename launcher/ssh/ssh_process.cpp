#include "launcher/ssh/ssh_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

extern char** environ;

namespace dtrun::launcher {
namespace {

// The signals whose default action the ssh children must get back: this
// process handles or ignores them, and an exec'd child inherits "ignored".
constexpr std::array reset_in_child = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

}  // namespace

ssh_pipe make_ssh_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
  }
  return {fds[0], fds[1]};
}

spawned_ssh spawn_ssh(const std::vector<std::string>& argv, int in, int out, int err) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  // dup2 clears close-on-exec on the copies; every other pipe end of ours
  // is close-on-exec, so ssh holds no other host's pipe (a host's stdin
  // must reach EOF as soon as this dtrun dies).
  ::posix_spawn_file_actions_adddup2(&actions, in, 0);
  ::posix_spawn_file_actions_adddup2(&actions, out, 1);
  ::posix_spawn_file_actions_adddup2(&actions, err, 2);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : reset_in_child) sigaddset(&defaults, sig);
  sigset_t none;
  sigemptyset(&none);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);
  ::posix_spawnattr_setsigmask(&attr, &none);
  // Own process group: Ctrl-C on the terminal reaches this dtrun, which
  // stops the hosts in order, and not ssh, which would just drop them.
  ::posix_spawnattr_setpgroup(&attr, 0);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  spawned_ssh result;
  result.error = ::posix_spawnp(&result.pid, args[0], &actions, &attr, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  return result;
}

bool ignored_at_start(int sig) {
  struct sigaction current {};
  return ::sigaction(sig, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) == 0 &&
         current.sa_handler == SIG_IGN;
}

}  // namespace dtrun::launcher
