// Synthetic event logs written the way the agent writes them
// (docs/agent.md, "Event log"), for dtrun report's tests.
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/report/event_report.h"

namespace dtrun::launcher::report_test {

using ojson = nlohmann::ordered_json;

// 2026-11-22T20:00:00Z, the base of every synthetic time.
inline constexpr double base = 1795377600;

inline std::string at(double s) {
  auto ms = static_cast<long>(s * 1000 + 0.5);
  return fmt::format("2026-11-22T20:{:02}:{:02}.{:03}Z", ms / 60000, ms / 1000 % 60, ms % 1000);
}

// One line of host's agent (pid) at base + s.
inline std::string line(double s, const std::string& event, const std::string& host, long pid,
                 ojson fields = ojson::object()) {
  ojson j{{"time", at(s)}, {"event", event}, {"host", host}, {"agent_pid", pid}};
  for (auto& [k, v] : fields.items()) j[k] = v;
  return j.dump() + "\n";
}

struct node_log {
  std::string host;
  long pid;
  int first_rank;
  int nproc;
  std::string text;
  void add(double s, const std::string& event, ojson fields = ojson::object()) {
    text += line(s, event, host, pid, std::move(fields));
  }
  void started(double s, const std::string& run = "job1") {
    add(s, "agent_started", {{"run_id", run}, {"nproc_per_node", nproc}});
  }
  void round(double s, int round, int world) {
    add(s, "rendezvous_completed", {{"round", round},
                                    {"ranks", {first_rank, first_rank + nproc - 1}},
                                    {"world_size", world}});
    for (int l = 0; l < nproc; ++l) {
      add(s + 0.1 * (l + 1), "worker_started",
          {{"round", round}, {"local_rank", l}, {"rank", first_rank + l}, {"pid", 1000 + l}});
    }
  }
  void exits_ok(double s, int round) {
    for (int l = 0; l < nproc; ++l) {
      add(s, "worker_exited", {{"round", round}, {"rank", first_rank + l}, {"exit_code", 0},
                               {"signal", nullptr}, {"stopped_by_dtrun", false}});
    }
  }
  void failed(double s, int round, int rank, ojson message = nullptr, ojson signal = nullptr) {
    add(s, "worker_failed", {{"round", round}, {"host", host}, {"rank", rank}, {"exit_code", 1},
                             {"signal", signal}, {"exit_time", at(s)}, {"message", message}});
  }
};

inline double total_lost(const job_report& r) {
  double sum = 0;
  for (const auto& [cause, s] : r.lost_s) sum += s;
  return sum;
}

// One node, 2 workers: round 0 fails at 5 s, round 1 succeeds.
inline node_log one_node_restart() {
  node_log n{"vm", 41, 0, 2, ""};
  n.started(0);
  n.round(1, 0, 2);  // all running at 1.2
  n.failed(5, 0, 1);
  n.add(5, "group_stopping", {{"round", 0}, {"reason", "worker rank 1 exited with code 1"}});
  n.add(5.1, "restart", {{"count", 1}, {"max", 2}, {"after_round", 0}});
  n.round(6, 1, 2);  // all running at 6.2
  n.exits_ok(10, 1);
  n.add(10, "job_succeeded", {{"round", 1}});
  n.add(10.5, "agent_exiting", {{"exit_code", 0}});
  return n;
}

// Two nodes (2 workers each) in one job: rank 3 on h2 raises in round 0,
// h1 hears of it through the rendezvous; round 1 succeeds.
inline std::pair<node_log, node_log> two_nodes() {
  node_log a{"h1", 10, 0, 2, ""}, b{"h2", 20, 2, 2, ""};
  a.started(0);
  b.started(0.5);
  a.round(1, 0, 4);  // 1.2
  b.round(1.1, 0, 4);  // 1.3: all running
  b.failed(4, 0, 3, "RuntimeError: boom\nTraceback ...");
  b.add(4, "group_stopping", {{"round", 0}, {"reason", "worker rank 3 exited with code 1"}});
  a.add(4.2, "membership_change", {{"round", 0}, {"reason", "node 1: worker rank 3 exited"}});
  b.add(4.3, "restart", {{"count", 1}, {"max", 3}, {"after_round", 0}});
  a.round(5, 1, 4);    // 5.2
  b.round(5.5, 1, 4);  // 5.7: all running
  a.exits_ok(9, 1);
  b.exits_ok(9.5, 1);
  a.add(9.6, "job_succeeded", {{"round", 1}});
  b.add(9.6, "job_succeeded", {{"round", 1}});
  a.add(9.8, "agent_exiting", {{"exit_code", 0}});
  b.add(10, "agent_exiting", {{"exit_code", 0}});
  return {a, b};
}

}  // namespace dtrun::launcher::report_test
