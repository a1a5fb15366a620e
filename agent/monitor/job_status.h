// What `dtrun status` shows and what `--metrics-port` serves: a snapshot of
// one agent's job, its nodes and its workers, as plain structs.
//
// The agent fills a job_status from its own state (and proc_stats,
// gpu_stats); to_json() is the versioned wire form other dtrun processes
// read back with from_json(), and to_prometheus() the scrape form.
// docs/observability.md lists every field and metric.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/health/preflight_verdict.h"
#include "agent/watch/straggler_codec.h"

namespace dtrun::agent {

// The schema to_json() writes. from_json() reads any "dtrun.status/1"
// document and, best effort, documents without a schema field; a later
// incompatible change bumps the number.
inline constexpr std::string_view status_schema = "dtrun.status/1";

// One worker process of this node. Times are seconds since the Unix epoch
// (wall clock), durations seconds.
struct worker_status {
  int rank = 0;        // global rank
  int local_rank = 0;
  int node_rank = 0;   // the node it runs on (filled when nodes are merged)
  std::int64_t pid = 0;
  std::string state = "running";  // "running", "stopping" or "exited"
  std::optional<int> exit_code;   // when exited: the code, or 128+signal
  double started_at = 0;          // wall clock; 0 when unknown
  double cpu_seconds = 0;         // user+system, the process group summed
  std::optional<double> cpu_percent;  // over the last sampling interval; 100 = one core
  std::uint64_t rss_bytes = 0;        // resident memory, the process group summed
  // Since the worker last wrote a line; unknown when the agent does not see
  // its output (the default: output goes straight to the terminal).
  std::optional<double> seconds_since_output;
  // Its last output line (output_tail.h), printable; unknown under the
  // same condition. Added to dtrun.status/1 after the first release.
  std::optional<std::string> last_output;
  std::optional<double> gpu_utilization_percent;  // 0..100, NVML's per-process SM use
  std::optional<std::uint64_t> gpu_memory_bytes;  // NVML's per-process used memory
  // Its training step: dtrun.step()'s (the progress page), else the
  // job's --progress-file; unknown without either. The section it is in
  // (dtrun.section(), or "step" between steps outside any section) and
  // for how long. Added to dtrun.status/1 after the first release.
  std::optional<std::int64_t> step;
  std::optional<std::string> section;
  std::optional<double> section_seconds;
};

// One failing node health check (node_health.h's health_finding, the
// healthy ones left out), as the node's latest check found it: a link
// down, a storage path that hangs, a GPU, the disk, the command.
struct health_status {
  int node_rank = 0;   // the node it failed on (filled when nodes are merged)
  std::string check;   // "command", "disk", "endpoint", "gpu", "nic", "storage"
  std::string reason;  // one line, as the agent's log said it
  bool gating = true;  // it keeps the node out (else the agent only warned)
  // --node-health-check's command: its last output lines; empty otherwise.
  std::vector<std::string> output_tail;
};

// One node of a multi-node job, as the merged view sees it.
struct node_status {
  int node_rank = 0;
  std::string host;
  std::int64_t agent_pid = 0;
  std::string state;  // the node agent's phase, or "unknown" when it published nothing
  std::optional<double> last_heartbeat;  // wall clock of its last published status
};

struct job_status {
  std::string run_id;
  std::int64_t round = 0;         // rendezvous round (restart generation)
  std::int64_t restarts_used = 0;
  std::int64_t max_restarts = 0;
  std::string host;               // this agent's host name
  std::int64_t agent_pid = 0;
  int node_rank = 0;
  int nnodes = 1;
  // What the agent does now: "rendezvous", "starting", "running",
  // "stopping", "restarting", "succeeded", "failed" (free text on the wire).
  std::string phase;
  double started_at = 0;           // when the agent started, wall clock
  double generated_at = 0;         // when this snapshot was taken, wall clock
  std::uint64_t hangs_detected = 0;
  std::uint64_t failures = 0;      // worker failures seen, all rounds
  std::uint64_t rounds = 0;        // worker groups started, all rounds
  // This node's restarts by incident class (failure_class.h names), and
  // the seconds its workers ran (productive) or not (lost) since the
  // agent started; unknown from agents before them. Added to
  // dtrun.status/1 after the first release.
  std::map<std::string, std::uint64_t> restarts_by_class;
  std::optional<double> productive_seconds;
  std::optional<double> lost_seconds;
  // The job's spare nodes (waiting at --nnodes MAX) and machines in
  // quarantine, as this agent last read them from the store (at its status
  // publishing rate, several nodes only); unknown until then. Added to
  // dtrun.status/1 after the first release.
  std::optional<std::int64_t> spare_nodes;
  std::optional<std::int64_t> quarantined_nodes;
  // --preflight's last verdict (docs/agent.md, "Preflight"); unknown
  // without one. Added to dtrun.status/1 after the first release.
  std::optional<preflight_verdict> preflight;
  // The job's stragglers as this agent last read the verdict
  // (docs/stragglers.md); empty when nobody is slow or nobody judges.
  // Added to dtrun.status/1 after the first release.
  std::vector<named_straggler> stragglers;
  // The failing checks of the node's latest health check (every node's,
  // merged); empty when all passed or none ran. Added to dtrun.status/1
  // after the first release.
  std::vector<health_status> health;
  std::vector<node_status> nodes;  // empty for one node
  std::vector<worker_status> workers;
};

// The most entries a list of a status document holds (from_json cuts
// longer ones; a merge keeps no more).
inline constexpr std::size_t status_max_entries = 65536;

// The versioned JSON form; keys in a fixed order, unknown optionals as null.
nlohmann::ordered_json to_json(const job_status& status);

// Reads a document that another dtrun process wrote. Never throws: a
// missing or ill-typed field keeps its default, numbers out of range or not
// finite are dropped, strings are cut at 256 bytes and lists at 65536
// entries. Returns nullopt (and says why in `error`) only when `document`
// is not an object or names another schema.
std::optional<job_status> from_json(const nlohmann::json& document, std::string& error);
// The same for raw text (one JSON document).
std::optional<job_status> parse_status(std::string_view text, std::string& error);

// Prometheus text exposition format 0.0.4: HELP and TYPE for every family,
// labels run_id and node_rank on each sample, plus rank, local_rank and
// pid on the worker ones. Unknown optionals are left out, not written as 0.
std::string to_prometheus(const job_status& status);

// Escapes a label value for the exposition format: backslash, double quote
// and newline.
std::string escape_label_value(std::string_view value);

// One view of a multi-node job from each node's own status (any order,
// nullopt for a node that published nothing): the job fields come from the
// lowest node that has them, `nodes` lists every node 0..n-1, `workers`
// every node's workers with node_rank set, ordered by rank, and `health`
// every node's failing checks with node_rank set, in node order.
job_status merge_nodes(const std::vector<std::optional<job_status>>& per_node);

// One status per run from the agents found on this machine (any order):
// agents with the same run id and distinct node ranks (a multi-node job
// started on one host, as the tests do) become one merge_nodes() view
// sized to the job's nnodes (nodes not here show as "unknown"); an agent
// alone in its run stays as it is. Agents of one run id that claim the
// same node rank (two jobs that share the default id, or one still in
// its rendezvous) are not one job for sure: each stays a block of its
// own. Runs keep the order of their first agent.
std::vector<job_status> merge_runs(std::vector<job_status> agents);

}  // namespace dtrun::agent
