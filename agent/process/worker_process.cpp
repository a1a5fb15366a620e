#include "agent/process/worker_process.h"

#include <fcntl.h>
#include <sched.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>

// Boost.Process only offers its vfork path when this is set (its own test
// is for pre-2008 POSIX). vfork lets the worker exec without copying the
// agent's page tables or leaving the agent's pages copy-on-write, which on
// virtual machines costs a TLB flush per page the agent touches afterwards.
#ifndef BOOST_POSIX_HAS_VFORK
#define BOOST_POSIX_HAS_VFORK 1
#endif
#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/error.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/posix.hpp>
#include <fmt/format.h>

#include "agent/spec/exit_status.h"
#include "rendezvous/base/parse_whole.h"

namespace bp = boost::process;

namespace dtrun::agent {
namespace {

// Why exec failed, without strerror (not async-signal-safe).
const char* exec_reason(int error_number) {
  switch (error_number) {
    case ENOENT: return "No such file or directory";
    case ENOTDIR: return "Not a directory";
    case EACCES: return "Permission denied";
    case ENOEXEC: return "Exec format error";
    case EISDIR: return "Is a directory";
    case E2BIG: return "Argument list too long";
    case ENOMEM: return "Out of memory";
    default: return "exec failed";
  }
}

void write_all(int fd, const char* text) {
  std::size_t left = std::strlen(text);
  while (left > 0) {
    ssize_t n = ::write(fd, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
}

// Boost.Process extension. on_exec_setup and on_exec_error run in the
// child between fork and exec, so they make async-signal-safe calls only.
//
// Boost's own error reporting is off (bp::ignore_error; its vfork path has
// none that survives exec). Instead the child reports a failed exec the way a shell does: one line on
// stderr and exit code 127 or 126. The agent checks the program before the
// first spawn, so this only happens when it changes during the run.
struct worker_setup : bp::extend::handler {
  pid_t agent_pid;
  char** envp;
  const char* failure_prefix;  // "dtrun: cannot run <program>: "
  int* fork_errno;
  int stdin_fd;  // -1: keep the agent's
  int stdout_fd;
  int stderr_fd;
  // The worker's CPUs, built before the fork (nullptr: inherit).
  const cpu_set_t* cpus;
  std::size_t cpus_size;

  template <typename Executor>
  void on_setup(Executor& exec) const {
    exec.env = envp;  // our own array: no copy of the agent's environment
  }

  template <typename Executor>
  void on_fork_error(Executor& /*exec*/, const std::error_code& ec) const {
    *fork_errno = ec.value();
  }

  template <typename Executor>
  void on_exec_setup(Executor& /*exec*/) const {
    // Every signal is blocked here (spawn_worker blocked them around the
    // fork): a signal sent to the new worker before it execs must not run
    // the agent's handlers, which would report it as the agent's own. So
    // reset the caught ones to their default first, then unblock (last).
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction current {};
      if (sig == SIGKILL || sig == SIGSTOP || ::sigaction(sig, nullptr, &current) != 0) continue;
      // Ignored signals stay ignored across exec (nohup), except SIGPIPE,
      // which the agent ignores for itself (as Python's subprocess does).
      if (current.sa_handler != SIG_IGN || sig == SIGPIPE) ::signal(sig, SIG_DFL);
    }
    // A session of its own, as torchrun's start_new_session: its own
    // process group (signalled as a whole), and no controlling terminal, so
    // a worker touching the tty is never stopped by SIGTTIN/SIGTTOU.
    if (::setsid() < 0) ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The death signal is only armed from now on: if the agent died before
    // prctl, nobody would kill us, so give up.
    if (::getppid() != agent_pid) ::_exit(1);
    // The worker's own stdin/stdout/stderr (a log file, /dev/null, a pipe
    // to the agent). dup2 clears close-on-exec on the copy; an fd that
    // already is 0, 1 or 2 only needs that flag cleared.
    replace_stdio(stdin_fd, 0);
    replace_stdio(stdout_fd, 1);
    replace_stdio(stderr_fd, 2);
    // Bound before exec, so the program's first thread and every thread
    // it starts run on these CPUs (torch does the same through numactl).
    if (cpus != nullptr && ::sched_setaffinity(0, cpus_size, cpus) != 0) {
      write_all(2, "dtrun: cannot bind the worker to its --numa-binding CPUs: ");
      write_all(2, errno == EINVAL ? "none of them is online or allowed"
                                   : "sched_setaffinity failed");
      write_all(2, "\n");
      ::_exit(1);
    }
    // Only stdio is inherited (as Python's close_fds=True): the store's
    // sockets must not outlive the agent in a worker.
    if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      for (int fd = 3; fd < 4096; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
  }

  static void replace_stdio(int fd, int target) {
    if (fd < 0) return;
    if (fd == target) {
      ::fcntl(fd, F_SETFD, 0);
    } else {
      ::dup2(fd, target);
    }
  }

  template <typename Executor>
  void on_exec_error(Executor& /*exec*/, const std::error_code& ec) const {
    write_all(2, failure_prefix);
    write_all(2, exec_reason(ec.value()));
    write_all(2, "\n");
    ::_exit(exec_failure_code(ec.value()));
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
  std::string failure_prefix = fmt::format("dtrun: cannot run {}: ", request.program);
  // The affinity mask is allocated here: the child may only call
  // sched_setaffinity between fork and exec.
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> cpus(nullptr, [](cpu_set_t* set) {
    if (set != nullptr) CPU_FREE(set);
  });
  std::size_t cpus_size = 0;
  if (!request.cpus.empty()) {
    int highest = *std::max_element(request.cpus.begin(), request.cpus.end());
    cpus.reset(CPU_ALLOC(highest + 1));
    cpus_size = CPU_ALLOC_SIZE(highest + 1);
    CPU_ZERO_S(cpus_size, cpus.get());
    for (int cpu : request.cpus) {
      if (cpu >= 0) CPU_SET_S(static_cast<std::size_t>(cpu), cpus_size, cpus.get());
    }
  }

  int fork_errno = 0;
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &previous);
  bp::child child(bp::exe = request.program, bp::args = request.args, bp::ignore_error,
                  bp::posix::use_vfork,
                  worker_setup{{}, ::getpid(), envp.data(), failure_prefix.c_str(), &fork_errno,
                               request.stdin_fd, request.stdout_fd, request.stderr_fd, cpus.get(),
                               cpus_size});
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  spawn_result result;
  if (child.id() <= 0) {
    result.exit_code = 1;
    result.error = fmt::format("cannot start a worker for {}: fork failed: {}", request.program,
                               std::generic_category().message(fork_errno));
    return result;
  }
  result.pid = child.id();
  // The agent reaps with waitpid(-1); boost must neither wait nor kill.
  child.detach();
  return result;
}

std::optional<spawn_result> check_program(const std::string& path) {
  struct stat st {};
  int error_number = 0;
  if (::stat(path.c_str(), &st) != 0) {
    error_number = errno;
  } else if (S_ISDIR(st.st_mode)) {
    error_number = EISDIR;
  } else if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
    error_number = EACCES;
  } else {
    return std::nullopt;
  }
  spawn_result failure;
  failure.exit_code = exec_failure_code(error_number);
  failure.error = fmt::format("cannot run {}: {}", path, exec_reason(error_number));
  return failure;
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

void signal_worker(pid_t pid, int sig) {
  if (pid <= 0) return;
  // No such group yet: the worker has not reached setsid(). Its signals
  // are blocked until after that, so the signal waits for it there.
  if (::kill(-pid, sig) != 0 && errno == ESRCH) ::kill(pid, sig);
}

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

void kill_adopted_children(const std::vector<pid_t>& keep) {
  // One file per thread; the agent is single-threaded, so the main
  // thread's file lists every child.
  std::ifstream children(fmt::format("/proc/self/task/{}/children", ::getpid()));
  for (std::string word; children >> word;) {  // "123 456 "
    auto pid = parse_whole<pid_t>(word);
    if (pid && *pid > 0 && std::find(keep.begin(), keep.end(), *pid) == keep.end()) {
      // Its process group first, when it leads one (a health check's
      // shell: spawned with setsid): killed alone, its own children (the
      // storage probe's dd, blocked on a hung mount) would come to us only
      // once it has died, after this list was read, and would outlive the
      // agent unsignalled. A child that leads no group: ESRCH, and the
      // pid alone below.
      ::kill(-*pid, SIGKILL);
      ::kill(*pid, SIGKILL);
    }
  }
}

}  // namespace dtrun::agent
