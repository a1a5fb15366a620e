// event_report's parts, shared by its files (private to launcher/report):
//   event_report_read.cpp    the log's lines: events, the agents that wrote
//                            them, the run chosen
//   event_report_rounds.cpp  the events by round, and the incident that
//                            ended each
//   event_report.cpp         the report: rounds, recovery, time, outcome
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/report/event_report.h"

namespace dtrun::launcher::event_report_parts {

using json = nlohmann::json;

struct event {
  double time = 0;
  std::string name;
  std::string host;
  long pid = 0;
  json fields;
  std::size_t agent = 0;  // index into agents
};

// One agent process (a node) from its agent_started to its agent_exiting.
struct agent_record {
  std::string host;
  long pid = 0;
  std::string run_id;  // empty: its agent_started is not in the log
  double first_time = 0;
  std::optional<double> exited_at;
  std::optional<int> exit_code;
  int nproc_per_node = 0;
  bool has_events = false;
};

// What one node logged of one round.
struct node_round {
  std::size_t agent = 0;
  int nproc = 0;
  int world_size = 0;
  double joined_at = 0;
  std::vector<double> started;
  std::optional<double> running_at() const {
    if (nproc <= 0 || static_cast<int>(started.size()) < nproc) return std::nullopt;
    auto sorted = started;
    std::sort(sorted.begin(), sorted.end());
    return sorted[static_cast<std::size_t>(nproc - 1)];
  }
};

// Everything the log says about one round.
struct round_events {
  std::map<std::size_t, node_round> nodes;  // by agent
  std::vector<const event*> failures;       // worker_failed
  std::vector<const event*> incidents;      // incident (logged by the agents)
  std::vector<const event*> enders;         // hang, membership, stop, health, node_left
  std::vector<double> exits;                // worker_exited
  bool succeeded = false;
  bool job_failed = false;
  std::optional<int> restart;
};

// The label each agent has in the report, by agent.
using node_labels = std::map<std::size_t, std::string>;

// An event's fields, read without trusting the log: nothing (or an empty
// text) when a field is missing or of another type.
std::optional<std::int64_t> integer(const json& j, const char* key);
std::optional<double> number(const json& j, const char* key);

// A duration a log says: a negative one is a corrupt line's, not a time.
std::optional<double> duration(const json& j, const char* key);

std::string text(const json& j, const char* key);
std::optional<double> time_field(const json& j, const char* key);

// A worker's message or a reason as one short line for the tables.
std::string one_line(std::string_view s);

template <typename T>
void keep_min(std::optional<T>& slot, std::optional<T> v) {
  if (v && (!slot || *v < *slot)) slot = v;
}
template <typename T>
void keep_max(std::optional<T>& slot, std::optional<T> v) {
  if (v && (!slot || *v > *slot)) slot = v;
}

// The log read (event_report_read.cpp): the events of one input appended
// to `out`, each line that is not a dtrun event counted in `skipped`.
void read_lines(const report_input& input, std::vector<event>& out, std::size_t& skipped);

// Splits the events by agent: a host and pid, started again when the same
// pair logs a second agent_started (a reused pid in an appended log).
std::vector<agent_record> assign_agents(std::vector<event>& events);

// Agents whose agent_started is not in the log (a log cut at its head)
// have no run id: they belong to the run when the log holds only one.
std::string choose_run(const std::vector<agent_record>& agents, const std::string& wanted,
                       std::vector<std::string>& others);

// The rounds (event_report_rounds.cpp).
std::map<std::int64_t, round_events> gather_rounds(const std::vector<const event*>& run,
                                                   const std::vector<agent_record>& agents);

// The incident that ended a round, from the raw events (no `incident`).
std::optional<report_incident> derive_incident(std::int64_t round, const round_events& r,
                                               const node_labels& labels);

// The incident from the agents' own `incident` events (one per node).
// The node that saw the failure itself knows when it happened (its
// detect_s is set; the others learnt of it later): its event speaks for
// the incident, and its host is the culprit's when it names a rank.
report_incident logged_incident(std::int64_t round, const std::vector<const event*>& events,
                                const node_labels& labels);

}  // namespace dtrun::launcher::event_report_parts
