// --storage-check's probe with real processes on a real event loop, reaped
// by the real posix_process_runner through a worker group, as in the
// agent; the hung path is a real FUSE mount whose daemon stops answering
// (tests/fixtures/fuse/stalling_fs.py): a process that touches it blocks
// in the kernel in uninterruptible sleep, as on an NFS mount whose server
// went away. No sleep synchronises anything: each test runs the loop until
// the probe calls back, with a safety timer that fails it.
#include <signal.h>
#include <sys/mount.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "agent/health/storage_probe.h"
#include "agent/process/posix_process_runner.h"
#include "agent/process/worker_group.h"
#include "rendezvous/base/generation_timer.h"
#include "tests/unit/agent/real_process_loop.h"
#include "tests/unit/agent/test_files.h"

namespace storage_probe_test {

using namespace dtrun::agent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::group_gone_after_reaping;
using testing::real_agent;
using testing::run_until;

storage_probe_options options_for(std::vector<std::string> paths,
                                  std::chrono::milliseconds deadline = 60s) {
  storage_probe_options o;
  o.paths = std::move(paths);
  o.deadline = deadline;
  o.tag = "test." + std::to_string(::getpid());
  return o;
}

// A FUSE mount that answers nothing about the names in it, started and
// torn down by the test itself. `why_not` says why it could not be
// mounted (no /dev/fuse, no fusepy, no permission): the one reason the
// hung-path tests skip.
struct stalling_mount {
  fs::path dir = testing::make_temp_dir("dtrun-stalled");
  pid_t daemon = -1;
  FILE* out = nullptr;  // the daemon's stdout
  std::string why_not;

  stalling_mount() {
    if (::access("/dev/fuse", R_OK | W_OK) != 0) {
      why_not = std::string("/dev/fuse: ") + std::strerror(errno);
      return;
    }
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    std::string script = std::string(DTRUN_FIXTURES) + "/fuse/stalling_fs.py";
    daemon = ::fork();
    REQUIRE(daemon >= 0);
    if (daemon == 0) {
      ::dup2(fds[1], 1);
      ::execl("/usr/bin/python3", "python3", script.c_str(), dir.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(fds[1]);
    // Its first line once the kernel connected to it, or EOF when it died
    // (its error went to the test's stderr).
    out = ::fdopen(fds[0], "r");
    if (next_line() != "mounted\n") {
      why_not = "tests/fixtures/fuse/stalling_fs.py could not mount (python3-fusepy and fuse "
                "installed? scripts/setup-deps); its error is above";
      stop_daemon();
    }
  }
  ~stalling_mount() {
    stop_daemon();
    if (out != nullptr) std::fclose(out);
    ::umount2(dir.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove(dir, ec);
  }
  // The daemon's next line, "" at its end.
  std::string next_line() {
    char line[4096] = {};
    return std::fgets(line, sizeof(line), out) != nullptr ? line : "";
  }
  // Blocks until a request reached the daemon, which will never answer it:
  // the process that made it is blocked in the kernel for good. False
  // when the daemon ended first.
  bool wait_for_stalled_request() {
    for (std::string line = next_line(); !line.empty(); line = next_line()) {
      if (line.rfind("stalled ", 0) == 0) return true;
    }
    return false;
  }
  // SIGKILL closes /dev/fuse: the kernel fails every request left, and
  // the processes blocked on them go on.
  void stop_daemon() {
    if (daemon <= 0) return;
    testing::kill_and_reap(daemon);
    daemon = -1;
  }
};

// The kernel state letters of a process group's members, from /proc.
std::string group_states(pid_t pgid) {
  std::string states;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    std::string stat = testing::slurp((it->path() / "stat").string());
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    int group = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d %d", &state, &ppid, &group) != 3) continue;
    if (group == pgid) states += state;
  }
  return states;
}

TEST_CASE("a folder that answers the probe is healthy, its file removed", "[health][storage]") {
  real_agent agent;
  testing::scoped_temp_dir dir("dtrun-storage");
  storage_probe probe(agent.io, agent.runner, agent.group, options_for({dir.path.string()}));
  std::optional<std::vector<health_finding>> got;
  probe.run(false, [&](std::vector<health_finding> f) { got = std::move(f); });
  CHECK_FALSE(got);  // never from inside run()
  run_until(agent.io, got);
  REQUIRE(got->size() == 1);
  CHECK((*got)[0].check == "storage");
  CHECK((*got)[0].healthy);
  CHECK_FALSE((*got)[0].gating);
  CHECK(probe.probes_running() == 0);
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("a folder that is missing or refuses the write fails, the step named",
          "[health][storage]") {
  real_agent agent;
  storage_probe probe(agent.io, agent.runner, agent.group,
                      options_for({"/nonexistent/dtrun-storage", "/proc"}));
  std::optional<std::vector<health_finding>> got;
  probe.run(true, [&](std::vector<health_finding> f) { got = std::move(f); });
  run_until(agent.io, got);
  REQUIRE(got->size() == 2);
  CHECK_FALSE((*got)[0].healthy);
  CHECK((*got)[0].gating);
  CHECK((*got)[0].reason ==
        "storage check failed: /nonexistent/dtrun-storage is not a folder this node can reach; "
        "check with: dd if=/dev/zero of=/nonexistent/dtrun-storage/dtrun-probe bs=4k count=1 "
        "conv=fsync");
  CHECK((*got)[1].reason.find("/proc refused a 4 KiB write with fsync") != std::string::npos);
}

TEST_CASE("a hung mount fails by its deadline, one stuck probe, said once; the loop goes on",
          "[health][storage][fuse]") {
  stalling_mount mount;
  if (!mount.why_not.empty()) {
    WARN("skipped: cannot mount FUSE here: " << mount.why_not);
    return;
  }
  real_agent agent;
  pid_t stuck = -1;
  {
    // Any deadline shows it: the mount never answers.
    storage_probe probe(agent.io, agent.runner, agent.group,
                        options_for({mount.dir.string()}, 300ms));
    std::optional<std::vector<health_finding>> got;
    probe.run(false, [&](std::vector<health_finding> f) { got = std::move(f); });
    run_until(agent.io, got);
    REQUIRE(got->size() == 1);
    const health_finding& hung = (*got)[0];
    CHECK_FALSE(hung.healthy);
    CHECK_FALSE(hung.repeated);
    stuck = probe.probe_pid(mount.dir.string());
    REQUIRE(stuck > 0);
    CHECK(hung.reason.rfind("storage check failed: " + mount.dir.string() +
                                " did not answer a 4 KiB write, fsync and read within 300 ms "
                                "(probe pid " + std::to_string(stuck),
                            0) == 0);
    CHECK(probe.probes_running() == 1);

    // Still stuck: no second probe, and the finding says it was said.
    got.reset();
    probe.run(false, [&](std::vector<health_finding> f) { got = std::move(f); });
    run_until(agent.io, got, 5s);
    CHECK(probe.probe_pid(mount.dir.string()) == stuck);
    CHECK(probe.probes_running() == 1);
    CHECK((*got)[0].repeated);
    CHECK((*got)[0].reason.find("still stuck, no new probe started") != std::string::npos);
    // The deadline said nothing of how far the probe got (a loaded
    // machine may not have reached the mount in 300 ms); from here on its
    // request is in the daemon's hands.
    REQUIRE(mount.wait_for_stalled_request());
  }
  // Destroyed without waiting: the probe's group got SIGKILL. Its shell
  // dies of it (reaped here: the loop no longer runs); the dd it waited
  // for, blocked on the mount, does not: it sleeps uninterruptibly (state
  // D, or R for the instant between the signal's wake-up and the
  // kernel's uninterruptible wait), neither dead nor a zombie.
  int status = 0;
  REQUIRE(::waitpid(stuck, &status, 0) == stuck);
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  std::string left = group_states(stuck);
  CHECK((left == "D" || left == "R"));
  // The mount goes: the blocked process sees its request fail, dies of the
  // pending SIGKILL, and is reaped (here by the test, the subreaper).
  mount.stop_daemon();
  CHECK(group_gone_after_reaping(stuck));
}

}  // namespace storage_probe_test
