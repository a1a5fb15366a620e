#include "agent/health/storage_probe.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "agent/health/disk_space_check.h"
#include "agent/health/health_command.h"
#include "agent/spec/exit_status.h"
#include "agent/spec/worker_env.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace asio = boost::asio;

namespace {

// $1: the path, $2: the tag. Each step's own exit code names it in the
// finding. Its output goes to /dev/null: what failed is the code.
constexpr const char* probe_script =
    "f=\"$1/.dtrun-storage-probe.$2\"\n"
    "[ -d \"$1\" ] || exit 13\n"
    "dd if=/dev/zero of=\"$f\" bs=4096 count=1 conv=fsync || exit 10\n"
    "cat \"$f\" || exit 11\n"
    "rm -f \"$f\" || exit 12\n";

std::string failed_step(int exit_code) {
  switch (exit_code) {
    case 13: return "is not a folder this node can reach";
    case 10: return "refused a 4 KiB write with fsync";
    case 11: return "could not read back what it wrote";
    case 12: return "could not remove the probe's file";
    default: return fmt::format("failed its probe (exit {})", exit_code);
  }
}

health_finding storage_finding(bool gating) {
  health_finding f;
  f.check = "storage";
  f.gating = gating;
  return f;
}

}  // namespace

health_finding storage_exit_finding(const std::string& path, int exit_code, bool gating) {
  health_finding f = storage_finding(gating);
  if (exit_code == 0) return f;
  f.healthy = false;
  std::string word = shell_word(path);
  f.reason = fmt::format("storage check failed: {} {}; check with: dd if=/dev/zero "
                         "of={}/dtrun-probe bs=4k count=1 conv=fsync",
                         printable(path), failed_step(exit_code), word);
  return f;
}

health_finding storage_stuck_finding(const std::string& path, std::chrono::milliseconds deadline,
                                     pid_t pid, char state, bool repeated, bool gating) {
  health_finding f = storage_finding(gating);
  f.healthy = false;
  f.repeated = repeated;
  // The script's own process: blocked itself (state D) or waiting for the
  // step that is.
  std::string kernel_state = state == 'D' ? ", blocked in the kernel (state D)" : "";
  f.reason = fmt::format("storage check failed: {} did not answer a 4 KiB write, fsync and read "
                         "within {} (probe pid {}{}{}); check with: mount | grep {} and "
                         "dmesg | tail",
                         printable(path), format_check_timeout(deadline), pid, kernel_state,
                         repeated ? "; still stuck, no new probe started" : "",
                         shell_word(path));
  return f;
}

struct storage_probe::probe {
  probe(asio::io_context& io, std::string p) : path(std::move(p)), deadline(io) {}
  std::string path;
  pid_t pid = -1;               // the running probe (its process group too), else -1
  generation_timer deadline;
  bool overdue = false;         // the running probe passed its deadline
  bool reported = false;        // ... and a run already said so
  std::optional<health_finding> result;  // the current run's finding, once known
};

storage_probe::storage_probe(asio::io_context& io, process_runner& runner, worker_group& exits,
                             storage_probe_options options)
    : io_(io), runner_(runner), exits_(exits), options_(std::move(options)) {
  for (const auto& path : options_.paths) probes_.push_back(std::make_unique<probe>(io_, path));
}

storage_probe::~storage_probe() {
  ++*generation_;
  for (auto& p : probes_) {
    p->deadline.cancel();
    if (p->pid <= 0) continue;
    exits_.unwatch_helper(p->pid);
    // Never reaped by us: pending in the kernel until the mount answers.
    runner_.signal_worker(p->pid, SIGKILL);
    runner_.unguard(p->pid);
  }
}

void storage_probe::run(bool gating, std::function<void(std::vector<health_finding>)> done) {
  cancel();
  done_ = std::move(done);
  gating_ = gating;
  std::uint64_t run_generation = ++*generation_;
  for (auto& p : probes_) {
    p->result.reset();
    if (p->pid > 0 && p->overdue) {
      p->result = storage_stuck_finding(p->path, options_.deadline, p->pid,
                                        runner_.state(p->pid), p->reported, gating_);
      p->reported = true;
    } else if (p->pid < 0) {
      start(*p);
    }  // else: a probe a cancelled run started, within its deadline: waited for
  }
  // Never from inside run(): every result may be known already.
  asio::post(io_, [this, generation = generation_, run_generation] {
    if (*generation == run_generation) finish_if_complete();
  });
}

void storage_probe::cancel() {
  ++*generation_;
  done_ = nullptr;
}

std::size_t storage_probe::probes_running() const {
  std::size_t n = 0;
  for (const auto& p : probes_) n += p->pid > 0 ? 1 : 0;
  return n;
}

pid_t storage_probe::probe_pid(const std::string& path) const {
  for (const auto& p : probes_) {
    if (p->path == path) return p->pid;
  }
  return -1;
}

void storage_probe::start(probe& p) {
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) {
    p.result = storage_exit_finding(p.path, 1, gating_);
    return;
  }
  spawn_request request;
  request.program = options_.shell;
  request.args = {"-c", probe_script, "dtrun-storage-probe", p.path, options_.tag};
  request.env = current_environment();
  request.stdin_fd = null_fd;
  request.stdout_fd = null_fd;
  request.stderr_fd = null_fd;
  spawn_result spawned = runner_.spawn(request);
  ::close(null_fd);
  if (!spawned.ok()) {
    health_finding f = storage_finding(gating_);
    f.healthy = false;
    f.reason = fmt::format("storage check of {} could not start its probe: {}", printable(p.path),
                           spawned.error);
    p.result = std::move(f);
    return;
  }
  p.pid = spawned.pid;
  p.overdue = false;
  p.reported = false;
  // Killed with its group should the agent die without this object's end.
  runner_.guard(p.pid);
  // The destructor unwatches, so `this` and `p` are alive when these run.
  exits_.watch_helper(p.pid, [this, &p](int wait_status) { ended(p, wait_status); });
  p.deadline.arm_after(options_.deadline, [this, &p] { overdue(p); });
}

// The probe ended: in time (its verdict), or after its deadline (the path
// answers again; the next run probes it afresh).
void storage_probe::ended(probe& p, int wait_status) {
  p.deadline.cancel();
  runner_.unguard(p.pid);
  p.pid = -1;
  p.overdue = false;
  p.reported = false;
  if (done_ && !p.result) {
    settle(p, storage_exit_finding(p.path, decode_wait_status(wait_status).code, gating_));
  }
}

// Left running: it may be in uninterruptible sleep, where no signal acts.
void storage_probe::overdue(probe& p) {
  p.overdue = true;
  if (!done_ || p.result) return;  // no run waits: the next one reports it
  p.reported = true;
  settle(p, storage_stuck_finding(p.path, options_.deadline, p.pid, runner_.state(p.pid), false,
                                  gating_));
}

void storage_probe::settle(probe& p, health_finding finding) {
  p.result = std::move(finding);
  finish_if_complete();
}

void storage_probe::finish_if_complete() {
  if (!done_) return;
  std::vector<health_finding> findings;
  for (const auto& p : probes_) {
    if (!p->result) return;
    findings.push_back(*p->result);
  }
  ++*generation_;
  // Last: `done` may destroy this object or start the next run.
  auto done = std::exchange(done_, nullptr);
  done(std::move(findings));
}

}  // namespace dtrun::agent
