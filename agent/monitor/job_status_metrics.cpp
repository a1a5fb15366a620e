#include "agent/monitor/job_status.h"

#include <cmath>

#include <fmt/format.h>

#include "agent/spec/failure_class.h"

namespace dtrun::agent {
namespace {

// Prometheus sample values: integers as integers, the rest in the
// shortest form that reads back exactly.
std::string value_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

class exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(std::string_view name, const std::string& labels, std::string_view value) {
    out_ += fmt::format("{}{{{}}} {}\n", name, labels, value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string label(std::string_view name, std::string_view value) {
  return fmt::format("{}=\"{}\"", name, escape_label_value(value));
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// The agent's phases (elastic_agent_watch.cpp, phase_name).
constexpr std::string_view agent_phases[] = {"starting", "rendezvous", "running", "stopping",
                                             "exiting", "reclaiming", "outside", "succeeded",
                                             "failed"};

// This node's phase, one sample per phase (1 for the current one), so a
// node that is "outside" (unhealthy or in quarantine) can be alerted on.
void write_node_state(exposition& out, const std::string& job, const std::string& phase) {
  out.family("dtrun_node_state", "gauge", "1 for this node's phase, 0 for the others.");
  bool known = false;
  for (auto p : agent_phases) {
    known = known || p == phase;
    out.sample("dtrun_node_state", job + "," + label("state", p), p == phase ? "1" : "0");
  }
  if (!known && !phase.empty()) {
    out.sample("dtrun_node_state", job + "," + label("state", phase), "1");
  }
}

// The job's stragglers as this agent last read them: one sample per named
// node of its own work and of the job's median (docs/stragglers.md); the
// families stay (HELP and TYPE) when nobody is slow.
void write_stragglers(exposition& out, const std::string& job,
                      const std::vector<named_straggler>& stragglers) {
  auto who = [&job](const named_straggler& named) {
    std::string ranks;
    for (int r : named.finding.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    return job + "," + label("straggler_node_rank", std::to_string(named.finding.node_rank)) +
           "," + label("straggler_host", named.host) + "," + label("straggler_ranks", ranks);
  };
  out.family("dtrun_straggler_own_work_seconds", "gauge",
             "A straggler's own work per step (median over its streak); labels name it.");
  for (const auto& named : stragglers) {
    out.sample("dtrun_straggler_own_work_seconds", who(named),
               value_text(named.finding.own_work_s));
  }
  out.family("dtrun_straggler_job_median_seconds", "gauge",
             "The job's median own work per step over the same steps as the straggler's.");
  for (const auto& named : stragglers) {
    out.sample("dtrun_straggler_job_median_seconds", who(named),
               value_text(named.finding.job_median_s));
  }
}

// The job's and this agent's metrics, one sample each.
void write_job_metrics(exposition& out, const job_status& s) {
  std::string job = label("run_id", s.run_id) + "," + label("node_rank", std::to_string(s.node_rank));

  out.family("dtrun_job_info", "gauge", "Always 1; labels name this agent's host and phase.");
  out.sample("dtrun_job_info", job + "," + label("host", s.host) + "," + label("phase", s.phase), "1");
  struct job_metric {
    const char* name;
    const char* type;
    const char* help;
    std::string value;
  };
  const job_metric job_metrics[] = {
      {"dtrun_agent_start_time_seconds", "gauge", "When the agent started, Unix time.",
       value_text(s.started_at)},
      {"dtrun_round", "gauge", "The current rendezvous round.", std::to_string(s.round)},
      {"dtrun_restarts_used", "gauge", "Worker group restarts the job used (--max-restarts).",
       std::to_string(s.restarts_used)},
      {"dtrun_max_restarts", "gauge", "Worker group restarts allowed (--max-restarts).",
       std::to_string(s.max_restarts)},
      {"dtrun_rounds_total", "counter", "Worker groups started.", std::to_string(s.rounds)},
      {"dtrun_worker_failures_total", "counter", "Workers that failed, all rounds.",
       std::to_string(s.failures)},
      {"dtrun_hangs_total", "counter", "Hangs detected (--hang-timeout).",
       std::to_string(s.hangs_detected)},
  };
  for (const auto& m : job_metrics) {
    out.family(m.name, m.type, m.help);
    out.sample(m.name, job, m.value);
  }

  // Active: this round's members; the others only once read from the store.
  out.family("dtrun_nodes", "gauge", "Nodes of the job by state: active, spare, quarantined.");
  out.sample("dtrun_nodes", job + "," + label("state", "active"), std::to_string(s.nnodes));
  if (s.spare_nodes) {
    out.sample("dtrun_nodes", job + "," + label("state", "spare"), std::to_string(*s.spare_nodes));
  }
  if (s.quarantined_nodes) {
    out.sample("dtrun_nodes", job + "," + label("state", "quarantined"),
               std::to_string(*s.quarantined_nodes));
  }
  write_node_state(out, job, s.phase);
  write_stragglers(out, job, s.stragglers);

  // Every class is written, 0 included (a series that appears only at
  // its first incident cannot be rated).
  out.family("dtrun_restarts_total", "counter",
             "Restarts of this node's workers by what ended the round (failure class).");
  for (auto name : class_names()) {
    auto it = s.restarts_by_class.find(std::string(name));
    out.sample("dtrun_restarts_total", job + "," + label("class", name),
               std::to_string(it == s.restarts_by_class.end() ? 0 : it->second));
  }
  if (s.productive_seconds) {
    out.family("dtrun_productive_seconds_total", "counter",
               "Seconds this node's workers ran, all rounds.");
    out.sample("dtrun_productive_seconds_total", job, value_text(*s.productive_seconds));
  }
  if (s.lost_seconds) {
    out.family("dtrun_lost_seconds_total", "counter",
               "Seconds since the agent started that its workers did not run (rendezvous, "
               "restarts, stops).");
    out.sample("dtrun_lost_seconds_total", job, value_text(*s.lost_seconds));
  }

  // Every state is written, 0 included, so a series does not vanish when
  // its count drops to nothing.
  out.family("dtrun_workers", "gauge", "Workers of this node by state.");
  for (std::string_view state : {"running", "stopping", "exited"}) {
    auto n = std::count_if(s.workers.begin(), s.workers.end(),
                           [&](const worker_status& w) { return w.state == state; });
    out.sample("dtrun_workers", job + "," + label("state", state), std::to_string(n));
  }
}

// One sample per worker and metric, where the metric is known.
// The section each worker is in, as a label: one sample per worker that
// is in one (dtrun.section(), or "step").
void write_section_metric(exposition& out, const job_status& s,
                          const std::vector<std::string>& worker_labels) {
  bool any = false;
  for (std::size_t i = 0; i < s.workers.size(); ++i) {
    const auto& w = s.workers[i];
    if (!w.section || !w.section_seconds) continue;
    if (!any) {
      out.family("dtrun_worker_section_seconds", "gauge",
                 "Seconds the worker has been in the section it is in now (dtrun.section()).");
    }
    any = true;
    out.sample("dtrun_worker_section_seconds", worker_labels[i] + "," + label("section", *w.section),
               value_text(*w.section_seconds));
  }
}

void write_worker_metrics(exposition& out, const job_status& s) {
  // One agent's own view (no merged nodes): its workers are on its node.
  auto node_rank_of = [&](const worker_status& w) { return s.nodes.empty() ? s.node_rank : w.node_rank; };
  std::vector<std::string> worker_labels;
  worker_labels.reserve(s.workers.size());
  for (const auto& w : s.workers) {
    worker_labels.push_back(label("run_id", s.run_id) + "," +
                            label("node_rank", std::to_string(node_rank_of(w))) + "," +
                            label("rank", std::to_string(w.rank)) + "," +
                            label("local_rank", std::to_string(w.local_rank)) + "," +
                            label("pid", std::to_string(w.pid)));
  }
  // One family at a time (the format wants a family's samples together).
  auto per_worker = [&](std::string_view name, std::string_view type, std::string_view help,
                        auto value_of) {
    bool any = false;
    for (std::size_t i = 0; i < s.workers.size(); ++i) {
      std::optional<std::string> v = value_of(s.workers[i]);
      if (!v) continue;
      if (!any) out.family(name, type, help);
      any = true;
      out.sample(name, worker_labels[i], *v);
    }
  };
  using opt = std::optional<std::string>;
  per_worker("dtrun_worker_start_time_seconds", "gauge", "When the worker started, Unix time.",
             [](const worker_status& w) -> opt {
               return w.started_at > 0 ? opt(value_text(w.started_at)) : std::nullopt;
             });
  per_worker("dtrun_worker_cpu_seconds_total", "counter",
             "User and system CPU time of the worker's process group.",
             [](const worker_status& w) -> opt { return value_text(w.cpu_seconds); });
  per_worker("dtrun_worker_rss_bytes", "gauge",
             "Resident memory of the worker's process group.",
             [](const worker_status& w) -> opt { return std::to_string(w.rss_bytes); });
  per_worker("dtrun_worker_seconds_since_output", "gauge",
             "Seconds since the worker last wrote a line (only when dtrun sees its output).",
             [](const worker_status& w) -> opt {
               return w.seconds_since_output ? opt(value_text(*w.seconds_since_output))
                                             : std::nullopt;
             });
  per_worker("dtrun_worker_gpu_utilization_ratio", "gauge",
             "The worker's share of GPU SM time, 0 to 1 (NVML).",
             [](const worker_status& w) -> opt {
               return w.gpu_utilization_percent
                          ? opt(value_text(*w.gpu_utilization_percent / 100.0))
                          : std::nullopt;
             });
  per_worker("dtrun_worker_gpu_memory_bytes", "gauge", "GPU memory the worker uses (NVML).",
             [](const worker_status& w) -> opt {
               return w.gpu_memory_bytes ? opt(std::to_string(*w.gpu_memory_bytes)) : std::nullopt;
             });
  per_worker("dtrun_worker_step", "gauge",
             "The worker's training step (dtrun.step(), else --progress-file).",
             [](const worker_status& w) -> opt {
               return w.step ? opt(std::to_string(*w.step)) : std::nullopt;
             });
  write_section_metric(out, s, worker_labels);
}

}  // namespace

std::string to_prometheus(const job_status& s) {
  exposition out;
  write_job_metrics(out, s);
  write_worker_metrics(out, s);
  return out.take();
}

}  // namespace dtrun::agent
