// Everything the agent tells the user and the event log about a run, so
// the supervision loop (elastic_agent.cpp) only calls hooks: the agent's
// messages at their verbosity, the JSON event log, failure records
// (published through the rendezvous so every node sees every node's), and
// the failure summary at the end.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/health/node_health.h"
#include "agent/health/preflight_verdict.h"
#include "agent/health/quarantine_record.h"
#include "agent/report/agent_log.h"
#include "agent/report/event_log.h"
#include "agent/report/failure_report.h"
#include "agent/spec/exit_status.h"
#include "agent/spec/report_options.h"
#include "rendezvous/algorithm/rendezvous_handler.h"
#include "rendezvous/record/round_record.h"

namespace dtrun::agent {

class run_reporter {
 public:
  // `sink` as for agent_log (empty: stderr). Throws std::system_error when
  // the event log cannot be opened.
  run_reporter(const report_options& options, agent_log::sink sink,
               rendezvous::rendezvous_handler& rendezvous);

  const agent_log& log() const { return log_; }
  const event_log& events() const { return events_; }
  const std::string& host() const { return host_; }

  // agent_started: the config summary given.
  void agent_started(nlohmann::ordered_json config);
  void rendezvous_started();
  // `info` is read by reference from then on: the agent's own copy of the
  // round's facts, which outlives the round.
  void rendezvous_completed(const rendezvous::rendezvous_info& info, int first_rank);
  void worker_started(int local_rank, int rank, long pid);

  // A worker exited. `stopping`: dtrun was stopping the group (then only
  // a worker that left an error file or died of a signal dtrun did not
  // send counts as a failure; the others were stopped). Returns the
  // failure's record when it is one; it is kept for the summary and
  // published for the other nodes (`published` is called once stored).
  std::optional<failure_record> worker_exited(const worker_exit& exit, bool stopping,
                                              int stop_signal, std::function<void()> published);

  // --hang-timeout: no progress anywhere for `fields.idle_s` seconds;
  // `fields` names the stuck locations and the stack files.
  void hang_detected(nlohmann::ordered_json fields);
  // Node 0 named a straggler (docs/stragglers.md): `fields` say which node
  // (straggler_host, straggler_ranks) with the evidence; the event's own
  // host is this writer's.
  void straggler(nlohmann::ordered_json fields);
  // A worker outlived its SIGKILL (kill_watch): the agent stopped waiting
  // for it. `state` is its /proc state letter ('?': unreadable).
  void worker_unkillable(int local_rank, int rank, long pid, char state);
  void restart(int count, int max);
  void group_stopping(std::string_view reason);
  // Another node ended the round (or a departure explained this node's
  // failure): its record, and the sentence it renders (docs/agent.md,
  // "The event log"; `dtrun report` reads the record).
  void membership_change(const records::round_record& end);
  // A node health check's findings (node_health.h); `when`: "before
  // joining" or "while running".
  void node_health(const health_verdict& verdict, std::string_view when);
  // This node left the job on its own (unhealthy): the others go on.
  void node_left(std::string_view reason);
  // A job-wide checkpoint reached this node's workers (--checkpoint-signal):
  // who asked and why ("node 1 (host h2) was preempted (SIGTERM)"), and
  // the signal they were sent.
  void checkpoint_requested(std::string_view by, std::string_view signal);
  // A spare took a free group rank.
  void promoted(std::int64_t round, int group_rank);
  // --preflight's verdict, as every node read it, and the action taken
  // ("warn", "leave", "quarantine"): the `preflight` event.
  void preflight(const preflight_verdict& verdict, std::string_view action);
  // This machine is kept out of the job for a cooldown.
  void quarantined(const quarantine_record& record);

  // Reads every node's failures of `round`, prints the summary and emits
  // job_failed; then done(root cause's exit code, or 1 without one).
  void summarize_failure(std::int64_t round, summary_context context,
                         std::function<void(int code)> done);

  // The rendezvous ended the run with an error (not a failed job).
  void rendezvous_failed(std::string_view reason);
  // The job failed with nothing to summarize (the program could not start).
  void job_failed(std::string_view reason);
  void job_succeeded();
  // What ended a round and what it cost (elastic_agent_incidents.cpp).
  void incident(nlohmann::ordered_json fields);
  void agent_exiting(int code);

 private:
  agent_log log_;
  event_log events_;
  rendezvous::rendezvous_handler& rendezvous_;
  std::string host_;
  // The round's facts, read from the agent's copy of the rendezvous
  // result (rendezvous_completed); null before the first round.
  const rendezvous::rendezvous_info* round_info_ = nullptr;
  std::int64_t current_round() const { return round_info_ != nullptr ? round_info_->round : -1; }
  int current_node_rank() const { return round_info_ != nullptr ? round_info_->group_rank : 0; }
  std::chrono::steady_clock::time_point rendezvous_start_;
  std::vector<failure_record> local_failures_;  // this node's, of round_
  std::vector<int> stopped_ranks_;
};

}  // namespace dtrun::agent
