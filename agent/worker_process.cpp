#include "agent/worker_process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <system_error>

#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <fmt/format.h>

#include "agent/exit_status.h"

namespace bp = boost::process;

namespace dtrun::agent {
namespace {

// Boost.Process extension: runs in the child between fork and exec, so it
// may only make async-signal-safe calls.
struct worker_setup : bp::extend::handler {
  pid_t agent_pid;
  char** envp;

  template <typename Executor>
  void on_setup(Executor& exec) const {
    exec.env = envp;  // our own array: no copy of the agent's environment
  }

  template <typename Executor>
  void on_exec_setup(Executor& /*exec*/) const {
    // A session of its own, as torchrun's start_new_session: its own
    // process group (signalled as a whole), and no controlling terminal, so
    // a worker touching the tty is never stopped by SIGTTIN/SIGTTOU.
    if (::setsid() < 0) ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The death signal is only armed from now on: if the agent died before
    // prctl, nobody would kill us, so give up.
    if (::getppid() != agent_pid) ::_exit(1);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    // Only stdio is inherited (as Python's close_fds=True): the store's
    // sockets must not outlive the agent in a worker. CLOEXEC rather than
    // close, so Boost's exec-error pipe (already CLOEXEC) keeps working.
    if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      for (int fd = 3; fd < 4096; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
};

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

spawn_result spawn_worker(const spawn_request& request) {
  std::vector<std::string> entries;
  entries.reserve(request.env.size());
  for (const auto& [key, value] : request.env) entries.push_back(key + "=" + value);
  std::vector<char*> envp;
  envp.reserve(entries.size() + 1);
  for (auto& entry : entries) envp.push_back(entry.data());
  envp.push_back(nullptr);

  std::error_code ec;
  bp::child child(bp::exe = request.program, bp::args = request.args,
                  worker_setup{{}, ::getpid(), envp.data()}, ec);
  spawn_result result;
  if (ec) {
    result.exit_code = exec_failure_code(ec.value());
    result.error = fmt::format("cannot run {}: {}", request.program, ec.message());
    return result;
  }
  result.pid = child.id();
  // The agent reaps with waitpid(-1); boost must neither wait nor kill.
  child.detach();
  return result;
}

std::optional<std::string> resolve_program(const std::string& name, const std::string& path_list) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) return name;
  std::optional<std::string> first_existing;
  std::stringstream dirs(path_list);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    if (!first_existing && exists(candidate)) first_existing = candidate;
  }
  return first_existing;
}

void signal_group(pid_t pgid, int sig) {
  if (pgid > 0) ::kill(-pgid, sig);
}

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

void kill_adopted_children(const std::vector<pid_t>& keep) {
  // One file per thread; the agent is single-threaded, so the main
  // thread's file lists every child.
  std::ifstream children(fmt::format("/proc/self/task/{}/children", ::getpid()));
  pid_t pid = 0;
  while (children >> pid) {
    if (std::find(keep.begin(), keep.end(), pid) == keep.end()) ::kill(pid, SIGKILL);
  }
}

}  // namespace dtrun::agent
