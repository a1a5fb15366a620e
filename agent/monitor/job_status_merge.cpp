#include "agent/monitor/job_status.h"

#include <algorithm>
#include <map>

namespace dtrun::agent {

job_status merge_nodes(const std::vector<std::optional<job_status>>& per_node) {
  job_status merged;
  bool have_job = false;
  for (std::size_t i = 0; i < per_node.size(); ++i) {
    node_status node;
    node.node_rank = static_cast<int>(i);
    const auto& s = per_node[i];
    if (!s) {
      node.state = "unknown";
      merged.nodes.push_back(std::move(node));
      continue;
    }
    if (!have_job) {
      // The nodes before this one (unknown ones) are kept.
      auto nodes = std::move(merged.nodes);
      merged = *s;
      merged.nodes = std::move(nodes);
      merged.workers.clear();
      merged.health.clear();
      merged.hangs_detected = merged.failures = 0;
      have_job = true;
    }
    // Counters are per node: the job's are their sum; rounds are shared.
    merged.hangs_detected += s->hangs_detected;
    merged.failures += s->failures;
    merged.restarts_used = std::max(merged.restarts_used, s->restarts_used);
    merged.round = std::max(merged.round, s->round);
    node.host = s->host;
    node.agent_pid = s->agent_pid;
    node.state = s->phase;
    if (s->generated_at > 0) node.last_heartbeat = s->generated_at;
    merged.nodes.push_back(std::move(node));
    for (auto w : s->workers) {
      w.node_rank = static_cast<int>(i);
      merged.workers.push_back(std::move(w));
    }
    for (auto h : s->health) {  // per node, in node order
      h.node_rank = static_cast<int>(i);
      merged.health.push_back(std::move(h));
    }
  }
  merged.nnodes = std::max<int>(merged.nnodes, static_cast<int>(per_node.size()));
  std::stable_sort(merged.workers.begin(), merged.workers.end(),
                   [](const worker_status& a, const worker_status& b) { return a.rank < b.rank; });
  return merged;
}

std::vector<job_status> merge_runs(std::vector<job_status> agents) {
  std::vector<std::vector<job_status>> runs;
  for (auto& s : agents) {
    auto run = std::find_if(runs.begin(), runs.end(),
                            [&](const auto& r) { return r.front().run_id == s.run_id; });
    if (run == runs.end()) {
      runs.emplace_back().push_back(std::move(s));
    } else {
      run->push_back(std::move(s));
    }
  }
  std::vector<job_status> out;
  for (auto& run : runs) {
    std::size_t size = 0;
    std::vector<int> ranks;
    for (const auto& s : run) {
      size = std::max({size, static_cast<std::size_t>(s.nnodes),
                       static_cast<std::size_t>(s.node_rank) + 1});
      ranks.push_back(s.node_rank);
    }
    std::sort(ranks.begin(), ranks.end());
    bool distinct = std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end();
    // Bounded: a document's nnodes is any int; the nodes table lists each.
    if (run.size() == 1 || !distinct || size > status_max_entries) {
      for (auto& s : run) out.push_back(std::move(s));
      continue;
    }
    std::vector<std::optional<job_status>> per_node(size);
    for (auto& s : run) per_node[static_cast<std::size_t>(s.node_rank)] = std::move(s);
    out.push_back(merge_nodes(per_node));
  }
  return out;
}

}  // namespace dtrun::agent
