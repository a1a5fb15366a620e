// `dtrun report`'s model: a job's timeline and goodput, computed from the
// agents' event logs (--event-log, docs/agent.md "Event log"). Pure: text
// in, a job_report out; the command (report_command.h) reads the files and
// prints it (report_text.h), the SVG comes from report_svg.h.
//
// Definitions (docs/observability.md, "dtrun report"):
// - a round runs from the moment every node's workers of that round have
//   started to the moment it ended (the first failure, a membership
//   change, the last worker's successful exit);
// - productive time is the sum of the rounds' running times; total time is
//   the first agent's start to the last agent's exit; goodput is their
//   ratio;
// - an incident is what ended a round other than success. `incident`
//   events (written by the agents) are used where the log has them; else
//   the incident is derived from the raw events, its class "unknown" where
//   they cannot tell it.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dtrun::launcher {

// The log cannot be used (no dtrun event in it, or no such run); what()
// is one line saying what to do.
struct report_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One file's text and the name to show for it.
struct report_input {
  std::string name;
  std::string text;
};

// One agent (one node of the job).
struct report_node {
  std::string label;  // the host, or host/pid where one host ran several agents
  std::string host;
  long agent_pid = 0;
  double started_at = 0;             // seconds since the epoch
  std::optional<double> exited_at;   // agent_exiting
  std::optional<int> exit_code;
};

// One node's part of a round: when its workers all ran.
struct report_span {
  std::string node;  // report_node::label
  std::optional<double> running_at;
  double ended_at = 0;
};

struct report_round {
  std::int64_t round = 0;
  int world_size = 0;
  int nodes = 0;                     // the agents that joined it
  std::optional<double> running_at;  // every node's workers had started
  double ended_at = 0;
  // "incident", "succeeded", "stopped", or "log ends" (no ending logged).
  std::string ended_by;
  std::vector<report_span> spans;
  double running_s() const;  // 0 when it never ran in full
};

struct report_incident {
  std::int64_t round = 0;  // the round it ended
  std::string incident_class = "unknown";
  std::optional<int> rank;  // the culprit rank
  std::optional<std::string> culprit_host;
  std::optional<std::string> culprit_node;  // its report_node::label (host/pid on a shared host)
  std::string detail;
  std::string exception_type;       // an exception's type, when the agent logged it
  std::optional<std::int64_t> step;  // the --progress-file step when it happened
  double failed_at = 0;
  std::optional<double> detected_at;
  std::optional<double> resumed_at;  // every node's workers ran again; none: the job ended
  std::optional<double> detect_s;
  std::optional<double> recover_s;
  std::optional<std::int64_t> steps_lost;
  std::optional<int> restart;
  bool logged = false;  // from `incident` events (else derived from the raw events)
  std::string section;  // a hang of this section (--section-timeouts), when one
};

// A straggler node 0 named (its `straggler` event; docs/stragglers.md).
struct report_straggler {
  std::int64_t round = 0;
  double named_at = 0;
  std::string host;        // the straggler's (straggler_host)
  std::vector<int> ranks;  // its slow ranks
  double own_work_s = 0;
  double job_median_s = 0;
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
  std::string action;      // --straggler-action
  bool leaves = false;
};

struct report_outcome {
  std::string state = "unknown";  // "succeeded", "failed", "stopped", "unknown"
  std::optional<int> exit_code;   // the first non-zero agent exit code, else 0
  std::string reason;             // one line
};

struct job_report {
  std::string run_id;
  std::vector<std::string> other_runs;  // runs in the log that were not reported
  std::vector<std::string> files;
  std::size_t events = 0;
  std::size_t skipped_lines = 0;  // not a JSON object with a time and an event
  std::vector<report_node> nodes;
  double started_at = 0;  // the first agent's start
  double ended_at = 0;    // the last agent's exit (or the last event)
  bool end_logged = false;  // every agent logged its exit
  std::vector<report_round> rounds;
  std::vector<report_incident> incidents;
  std::vector<report_straggler> stragglers;  // in the order named
  int restarts = 0;
  report_outcome outcome;
  double productive_s = 0;
  double total_s = 0;
  double goodput = 0;  // productive_s / total_s, 0 for an empty run
  // Where the rest of the time went, in order of first appearance:
  // "start-up", an incident class, "unknown", "shutdown".
  std::vector<std::pair<std::string, double>> lost_s;
};

// Builds the report of one run out of the inputs' lines. run_id chooses
// the run when the log holds several (default: the last one started).
// Throws report_error when nothing usable is there.
job_report build_report(const std::vector<report_input>& inputs, const std::string& run_id = "");

// "2026-11-22T20:31:07.435Z" (also +HH:MM offsets, any fraction) as
// seconds since the epoch; nullopt when it is not such a time.
std::optional<double> parse_iso8601(const std::string& text);

}  // namespace dtrun::launcher
