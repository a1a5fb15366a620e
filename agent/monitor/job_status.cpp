#include "agent/monitor/job_status.h"

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
// A health finding's reason names a path or an interface and the command
// to check it by hand: longer than other strings, and whole in --json.
constexpr std::size_t max_reason_bytes = 1024;
// A health command's output tail (last_lines.h keeps 10).
constexpr std::size_t max_tail_lines = 16;

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

void read_string(const json& j, const char* key, std::string& out,
                 std::size_t max_bytes = max_string_bytes) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return;
  const auto& s = it->get_ref<const std::string&>();
  out = s.substr(0, max_bytes);
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
  w.step = integer_in(j, "step", 0, i64_max);
  if (auto it = j.find("section"); it != j.end() && it->is_string()) {
    w.section.emplace();
    read_string(j, "section", *w.section);
  }
  w.section_seconds = number_in(j, "section_seconds", 0, far_future);
  return w;
}

health_status health_from_json(const json& j) {
  health_status h;
  read_int(j, "node_rank", h.node_rank, 0, int_max);
  read_string(j, "check", h.check);
  read_string(j, "reason", h.reason, max_reason_bytes);
  if (auto it = j.find("gating"); it != j.end() && it->is_boolean()) h.gating = it->get<bool>();
  if (auto it = j.find("output_tail"); it != j.end() && it->is_array()) {
    for (const auto& line : *it) {
      if (h.output_tail.size() == max_tail_lines) break;
      if (!line.is_string()) continue;
      h.output_tail.push_back(line.get_ref<const std::string&>().substr(0, max_string_bytes));
    }
  }
  return h;
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

}  // namespace

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
  ojson health = ojson::array();
  for (const auto& h : s.health) {
    health.push_back({{"node_rank", h.node_rank},
                      {"check", h.check},
                      {"reason", h.reason},
                      {"gating", h.gating},
                      {"output_tail", h.output_tail}});
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
                       {"last_output", optional_value(w.last_output)},
                       {"step", optional_value(w.step)},
                       {"section", optional_value(w.section)},
                       {"section_seconds", optional_value(w.section_seconds)}});
  }
  ojson stragglers = ojson::array();
  for (const auto& named : s.stragglers) stragglers.push_back(ojson(straggler_json(named)));
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
               {"preflight", s.preflight ? s.preflight->to_json_value() : json(nullptr)},
               {"stragglers", std::move(stragglers)},
               {"health", std::move(health)},
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
  if (auto it = j.find("preflight"); it != j.end() && it->is_object()) {
    s.preflight = preflight_verdict::from_json_value(*it);
  }
  if (auto it = j.find("stragglers"); it != j.end() && it->is_array()) {
    for (const auto& entry : *it) {
      if (s.stragglers.size() == status_max_entries) break;
      if (auto named = straggler_from_json(entry)) s.stragglers.push_back(std::move(*named));
    }
  }
  if (auto it = j.find("health"); it != j.end() && it->is_array()) {
    for (const auto& h : *it) {
      if (s.health.size() == status_max_entries) break;
      if (h.is_object()) s.health.push_back(health_from_json(h));
    }
  }
  if (auto it = j.find("nodes"); it != j.end() && it->is_array()) {
    for (const auto& n : *it) {
      if (s.nodes.size() == status_max_entries) break;
      if (n.is_object()) s.nodes.push_back(node_from_json(n));
    }
  }
  if (auto it = j.find("workers"); it != j.end() && it->is_array()) {
    for (const auto& w : *it) {
      if (s.workers.size() == status_max_entries) break;
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

}  // namespace dtrun::agent
