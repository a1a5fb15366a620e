#include "agent/process/kill_watch.h"

#include <algorithm>

#include <fmt/format.h>

#include "agent/process/proc_stats.h"

namespace dtrun::agent {

void kill_watch::killed(pid_t pid, clock::time_point now) {
  deadlines_.try_emplace(pid, now + grace_);
}

std::optional<kill_watch::clock::time_point> kill_watch::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return std::min_element(deadlines_.begin(), deadlines_.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->second;
}

std::vector<pid_t> kill_watch::overdue(clock::time_point now) {
  std::vector<pid_t> late;
  for (auto it = deadlines_.begin(); it != deadlines_.end();) {
    if (it->second <= now) {
      late.push_back(it->first);
      it = deadlines_.erase(it);
    } else {
      ++it;
    }
  }
  return late;
}

char process_state(pid_t pid, const std::string& proc_root) {
  auto sample = sample_process(pid, proc_root);
  return sample ? sample->state : '?';
}

std::string describe_process_state(char state) {
  switch (state) {
    case 'D': return "in uninterruptible sleep (D)";
    case 'R': return "running (R)";
    case 'S': return "sleeping (S)";
    case 'T': return "stopped (T)";
    case 't': return "stopped by a tracer (t)";
    case 'Z': return "a zombie (Z)";
    case 'X': return "dead (X)";
    case '?': return "in a state /proc does not show";
    default: return fmt::format("in state {}", state);
  }
}

std::string unkillable_line(int rank, pid_t pid, char state, std::chrono::milliseconds grace) {
  return fmt::format("rank {} (pid {}) is {} and did not die on SIGKILL within {:g} s; leaving it "
                     "to the kernel",
                     rank, pid, describe_process_state(state),
                     static_cast<double>(grace.count()) / 1000.0);
}

}  // namespace dtrun::agent
