#include "agent/monitor/job_status.h"

#include "agent/spec/failure_class.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "agent/spec/failure_class.h"

namespace dtrun::agent {

namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

// Bounds on what a hostile or broken document can make us hold.
constexpr std::size_t max_string_bytes = 256;
constexpr std::size_t max_entries = 65536;

template <class T>
ojson optional_value(const std::optional<T>& v) {
  return v ? ojson(*v) : ojson(nullptr);
}

// A finite number within [lo, hi], or nullopt.
std::optional<double> number_in(const json& j, const char* key, double lo, double hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) return std::nullopt;
  return v;
}

// An integer within [lo, hi] (a float with no fraction counts), or nullopt.
std::optional<std::int64_t> integer_in(const json& j, const char* key, std::int64_t lo,
                                       std::int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  if (it->is_number_unsigned()) {
    auto u = it->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi) || static_cast<std::int64_t>(u) < lo) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (it->is_number_integer()) {
    auto v = it->get<std::int64_t>();
    if (v < lo || v > hi) return std::nullopt;
    return v;
  }
  double d = it->get<double>();
  // 2^53: beyond it a double no longer names one integer.
  if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) ||
      d > static_cast<double>(hi) || std::fabs(d) > 9007199254740992.0) {
    return std::nullopt;
  }
  return static_cast<std::int64_t>(d);
}

constexpr std::int64_t int_max = std::numeric_limits<int>::max();
constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();
constexpr double far_future = 1e12;  // wall clock bound (year 33658)

template <class T>
void read_int(const json& j, const char* key, T& out, std::int64_t lo, std::int64_t hi) {
  if (auto v = integer_in(j, key, lo, hi)) out = static_cast<T>(*v);
}

void read_string(const json& j, const char* key, std::string& out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return;
  const auto& s = it->get_ref<const std::string&>();
  out = s.substr(0, max_string_bytes);
}

worker_status worker_from_json(const json& j) {
  worker_status w;
  read_int(j, "rank", w.rank, 0, int_max);
  read_int(j, "local_rank", w.local_rank, 0, int_max);
  read_int(j, "node_rank", w.node_rank, 0, int_max);
  read_int(j, "pid", w.pid, 0, int_max);
  read_string(j, "state", w.state);
  if (auto v = integer_in(j, "exit_code", -int_max, int_max)) w.exit_code = static_cast<int>(*v);
  if (auto v = number_in(j, "started_at", 0, far_future)) w.started_at = *v;
  if (auto v = number_in(j, "cpu_seconds", 0, far_future)) w.cpu_seconds = *v;
  // 1e6 %: ten thousand cores, more than any machine.
  w.cpu_percent = number_in(j, "cpu_percent", 0, 1e6);
  if (auto v = integer_in(j, "rss_bytes", 0, i64_max)) w.rss_bytes = static_cast<std::uint64_t>(*v);
  w.seconds_since_output = number_in(j, "seconds_since_output", 0, far_future);
  if (auto it = j.find("last_output"); it != j.end() && it->is_string()) {
    w.last_output.emplace();
    read_string(j, "last_output", *w.last_output);
  }
  w.gpu_utilization_percent = number_in(j, "gpu_utilization_percent", 0, 100);
  if (auto v = integer_in(j, "gpu_memory_bytes", 0, i64_max)) {
    w.gpu_memory_bytes = static_cast<std::uint64_t>(*v);
  }
  return w;
}

node_status node_from_json(const json& j) {
  node_status n;
  read_int(j, "node_rank", n.node_rank, 0, int_max);
  read_string(j, "host", n.host);
  read_int(j, "agent_pid", n.agent_pid, 0, int_max);
  read_string(j, "state", n.state);
  n.last_heartbeat = number_in(j, "last_heartbeat", 0, far_future);
  return n;
}

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

nlohmann::ordered_json to_json(const job_status& s) {
  ojson restarts_by_class = ojson::object();
  for (const auto& [name, count] : s.restarts_by_class) restarts_by_class[name] = count;
  ojson nodes = ojson::array();
  for (const auto& n : s.nodes) {
    nodes.push_back({{"node_rank", n.node_rank},
                     {"host", n.host},
                     {"agent_pid", n.agent_pid},
                     {"state", n.state},
                     {"last_heartbeat", optional_value(n.last_heartbeat)}});
  }
  ojson workers = ojson::array();
  for (const auto& w : s.workers) {
    workers.push_back({{"rank", w.rank},
                       {"local_rank", w.local_rank},
                       {"node_rank", w.node_rank},
                       {"pid", w.pid},
                       {"state", w.state},
                       {"exit_code", optional_value(w.exit_code)},
                       {"started_at", w.started_at},
                       {"cpu_seconds", w.cpu_seconds},
                       {"cpu_percent", optional_value(w.cpu_percent)},
                       {"rss_bytes", w.rss_bytes},
                       {"seconds_since_output", optional_value(w.seconds_since_output)},
                       {"gpu_utilization_percent", optional_value(w.gpu_utilization_percent)},
                       {"gpu_memory_bytes", optional_value(w.gpu_memory_bytes)},
                       {"last_output", optional_value(w.last_output)}});
  }
  return ojson{{"schema", status_schema},
               {"run_id", s.run_id},
               {"round", s.round},
               {"restarts_used", s.restarts_used},
               {"max_restarts", s.max_restarts},
               {"host", s.host},
               {"agent_pid", s.agent_pid},
               {"node_rank", s.node_rank},
               {"nnodes", s.nnodes},
               {"phase", s.phase},
               {"started_at", s.started_at},
               {"generated_at", s.generated_at},
               {"hangs_detected", s.hangs_detected},
               {"failures", s.failures},
               {"rounds", s.rounds},
               {"restarts_by_class", restarts_by_class},
               {"productive_seconds", optional_value(s.productive_seconds)},
               {"lost_seconds", optional_value(s.lost_seconds)},
               {"spare_nodes", optional_value(s.spare_nodes)},
               {"quarantined_nodes", optional_value(s.quarantined_nodes)},
               {"nodes", std::move(nodes)},
               {"workers", std::move(workers)}};
}

std::optional<job_status> from_json(const nlohmann::json& j, std::string& error) {
  if (!j.is_object()) {
    error = "the status is not a JSON object";
    return std::nullopt;
  }
  if (auto schema = j.find("schema"); schema != j.end()) {
    if (!schema->is_string() || schema->get_ref<const std::string&>() != status_schema) {
      // Anything but a string is named by its type: dump() recurses, and a
      // hostile document nests deeper than the stack (parse() does not).
      std::string shown = std::string("of type ") + schema->type_name();
      if (schema->is_string()) {
        shown = schema->dump(-1, ' ', true, json::error_handler_t::replace).substr(0, 80);
      }
      error = fmt::format("unknown status schema {} (this dtrun reads {})", shown, status_schema);
      return std::nullopt;
    }
  }
  job_status s;
  read_string(j, "run_id", s.run_id);
  read_int(j, "round", s.round, 0, i64_max);
  read_int(j, "restarts_used", s.restarts_used, 0, i64_max);
  read_int(j, "max_restarts", s.max_restarts, 0, i64_max);
  read_string(j, "host", s.host);
  read_int(j, "agent_pid", s.agent_pid, 0, int_max);
  read_int(j, "node_rank", s.node_rank, 0, int_max);
  read_int(j, "nnodes", s.nnodes, 1, int_max);
  read_string(j, "phase", s.phase);
  if (auto v = number_in(j, "started_at", 0, far_future)) s.started_at = *v;
  if (auto v = number_in(j, "generated_at", 0, far_future)) s.generated_at = *v;
  read_int(j, "hangs_detected", s.hangs_detected, 0, i64_max);
  read_int(j, "failures", s.failures, 0, i64_max);
  read_int(j, "rounds", s.rounds, 0, i64_max);
  if (auto it = j.find("restarts_by_class"); it != j.end() && it->is_object()) {
    for (const auto& [name, count] : it->items()) {
      // Only the names dtrun writes: a label value is not for a stranger.
      if (!parse_class(name) || !count.is_number_unsigned()) continue;
      s.restarts_by_class[name] = count.get<std::uint64_t>();
    }
  }
  if (auto v = number_in(j, "productive_seconds", 0, far_future)) s.productive_seconds = *v;
  if (auto v = number_in(j, "lost_seconds", 0, far_future)) s.lost_seconds = *v;
  if (auto v = integer_in(j, "spare_nodes", 0, i64_max)) s.spare_nodes = *v;
  if (auto v = integer_in(j, "quarantined_nodes", 0, i64_max)) s.quarantined_nodes = *v;
  if (auto it = j.find("nodes"); it != j.end() && it->is_array()) {
    for (const auto& n : *it) {
      if (s.nodes.size() == max_entries) break;
      if (n.is_object()) s.nodes.push_back(node_from_json(n));
    }
  }
  if (auto it = j.find("workers"); it != j.end() && it->is_array()) {
    for (const auto& w : *it) {
      if (s.workers.size() == max_entries) break;
      if (w.is_object()) s.workers.push_back(worker_from_json(w));
    }
  }
  return s;
}

std::optional<job_status> parse_status(std::string_view text, std::string& error) {
  auto document = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) {
    error = "the status is not valid JSON";
    return std::nullopt;
  }
  return from_json(document, error);
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
}

}  // namespace

std::string to_prometheus(const job_status& s) {
  exposition out;
  write_job_metrics(out, s);
  write_worker_metrics(out, s);
  return out.take();
}

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
    if (run.size() == 1 || !distinct || size > max_entries) {
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
