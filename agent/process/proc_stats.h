// Per-process figures from /proc for `dtrun status` and the metrics: CPU
// time, resident memory, state and start time of a worker, or of its whole
// process group (a worker and its DataLoader children).
//
// Reads only; never throws. The proc root is a parameter so tests can point
// it at a fake tree.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::agent {

struct proc_sample {
  pid_t pid = 0;
  pid_t pgid = 0;
  char state = '?';          // /proc/pid/stat's state letter (R, S, D, Z, ...)
  double cpu_seconds = 0;    // utime + stime
  std::uint64_t rss_bytes = 0;
  // Start time in clock ticks since boot, as the kernel gives it: with the
  // pid it names one process (a reused pid has another start time).
  std::uint64_t start_ticks = 0;
  double started_at = 0;     // wall clock, Unix seconds; 0 when btime is unreadable
  // sample_group only: the processes summed (the leader first, if alive).
  std::vector<pid_t> members;
};

// One process: <proc_root>/<pid>/stat and statm, and btime from
// <proc_root>/stat for the wall-clock start. nullopt when the process is
// gone or its files do not parse. Parses stat after the last ')', so a
// command name with spaces or parentheses cannot shift the fields.
std::optional<proc_sample> sample_process(pid_t pid, const std::string& proc_root = "/proc");

// The process group `pgid` (a worker is started as its own group leader):
// scans <proc_root> once and sums cpu_seconds and rss_bytes over every
// process whose pgid is `pgid`. pid, state and start time are the
// leader's. nullopt when no process is in the group. A child that has
// already exited no longer counts: the group's CPU time can go down.
std::optional<proc_sample> sample_group(pid_t pgid, const std::string& proc_root = "/proc");

// Turns successive CPU-time readings of one worker into a CPU percentage
// (100 = one core busy) over the wall time between them.
class cpu_meter {
 public:
  using clock = std::chrono::steady_clock;
  // nullopt on the first reading, when no time passed, and when the
  // reading went down (a group member exited; the meter starts over).
  std::optional<double> update(double cpu_seconds, clock::time_point now = clock::now());

 private:
  std::optional<double> last_cpu_;
  clock::time_point last_time_{};
};

}  // namespace dtrun::agent
