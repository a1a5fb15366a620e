// What ended each round and what it cost: one incident from the round's
// end until this node's workers run again (or the job ends), written to
// the event log and counted for /metrics; the time the workers ran is
// the productive time (docs/agent.md, "Incidents and goodput"). And the
// restart policy: whether a failure is worth a restart at all
// (--no-restart-on, --progress-file with --max-no-progress-restarts).
#include <filesystem>

#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"
#include "agent/report/event_log.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace {

using clock = std::chrono::system_clock;

double seconds_between(clock::time_point from, clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

// The first cause of a round's end is its incident; what follows (the
// other workers stopped, a second failure) belongs to it.
void elastic_agent::impl::open_incident(failure_class klass, std::string exception_type,
                                        std::optional<int> rank, std::string detail,
                                        std::optional<clock::time_point> failed_at,
                                        bool here) {
  if (incident_) return;
  incident i;
  i.round = round_info_.round;
  i.klass = klass;
  i.exception_type = std::move(exception_type);
  i.rank = rank;
  i.here = here;
  i.detail = std::move(detail);
  i.detected_at = env_.wall_now();
  i.failed_at = failed_at.value_or(i.detected_at);
  i.failed_at_known = failed_at.has_value();
  i.step = read_step();
  incident_ = std::move(i);
}

// Another node ended the round: its record says why.
void elastic_agent::impl::round_end_incident(const records::round_record& end) {
  open_incident(records::round_end_class(end), end.exception_type, end.rank,
                records::describe(end), std::nullopt, false);
  if (incident_) {
    incident_->ends_job = end.kind == records::record_kind::job_failed;
    incident_->section = end.section;
  }
}

void elastic_agent::impl::workers_running() {
  running_since_ = env_.steady_now();
  close_incident(true);
}

void elastic_agent::impl::workers_stopped() {
  if (!running_since_) return;
  productive_ += env_.steady_now() - *running_since_;
  running_since_.reset();
}

// `resumed`: this node's workers run again; else the job ended with it.
void elastic_agent::impl::close_incident(bool resumed) {
  if (!incident_) return;
  incident i = std::move(*incident_);
  incident_.reset();
  auto now = env_.wall_now();
  std::string name(class_name(i.klass));
  if (resumed) ++restarts_by_class_[name];
  using ojson = nlohmann::ordered_json;
  reporter_.incident(ojson{
      {"round", i.round},
      {"class", name},
      {"exception_type", i.exception_type.empty() ? ojson(nullptr) : ojson(i.exception_type)},
      {"section", i.section.empty() ? ojson(nullptr) : ojson(i.section)},
      {"rank", i.rank ? ojson(*i.rank) : ojson(nullptr)},
      {"culprit_host", i.here ? ojson(reporter_.host()) : ojson(nullptr)},
      {"detail", i.detail},
      // A departure ended the round: the failure here that it caused.
      {"caused", i.caused.empty() ? ojson(nullptr) : ojson(i.caused)},
      {"failed_at", iso8601_utc_ms(i.failed_at)},
      {"detected_at", iso8601_utc_ms(i.detected_at)},
      {"resumed_at", resumed ? ojson(iso8601_utc_ms(now)) : ojson(nullptr)},
      {"detect_s", i.failed_at_known ? ojson(seconds_between(i.failed_at, i.detected_at))
                                     : ojson(nullptr)},
      {"recover_s", resumed ? ojson(seconds_between(i.failed_at, now)) : ojson(nullptr)},
      {"step", i.step ? ojson(*i.step) : ojson(nullptr)},
      // The step the training went back to is the training's to know:
      // dtrun sees one number (docs/agent.md says how to read both).
      {"steps_lost", nullptr},
      {"restart", job_restarts_ ? ojson(*job_restarts_) : ojson(restarts_seen_)}});
}

// After a collective's timeout on a node with the flight recorder on:
// where torch left each rank's last collectives (the rank that never
// entered is the one whose trace stops short).
void elastic_agent::impl::say_flight_recorder_dumps() {
  if (!nccl_traces_ || !failure_ || failure_->klass != failure_class::collective_timeout) return;
  auto dir = std::filesystem::path(run_dir_) / fmt::format("attempt_{}", round_info_.round);
  std::error_code ec;
  std::size_t dumps = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind(nccl_trace_prefix, 0) == 0) ++dumps;
  }
  log_error(fmt::format("collective timeout: {} NCCL flight-recorder dump(s) in {} ({}<rank>; "
                        "torch's `python -m torch.distributed.flight_recorder.fr_trace` reads "
                        "them and names the rank that never entered)",
                        dumps, printable(dir.string()), nccl_trace_prefix));
}

// " [exception:TypeError]": this node's failure's class, as the event
// log's `caused` shows it (rendered, never read back).
std::string elastic_agent::impl::failure_tag() const {
  return failure_ ? " " + class_tag(failure_->klass, failure_->exception_type) : std::string();
}

records::round_record elastic_agent::impl::failure_record(records::record_kind kind,
                                                         std::string detail) const {
  records::round_record r;
  r.kind = kind;
  r.detail = std::move(detail);
  if (!failure_) return r;
  r.rank = failure_->rank;
  r.klass = failure_->klass;
  r.exception_type = failure_->exception_type;
  r.section = failure_->section;
  r.exit_code = failure_->status.code;
  if (failure_->status.signal != 0) r.signal = failure_->status.signal;
  return r;
}

// --progress-file's step now; a problem is said once until it changes.
std::optional<std::int64_t> elastic_agent::impl::read_step() {
  if (options_.progress_file.empty()) return std::nullopt;
  std::string problem;
  auto step = env_.progress_step(options_.progress_file, problem);
  if (!step && problem != progress_problem_) {
    log(fmt::format("warning: --progress-file {}: {}; ignored this time",
                    printable(options_.progress_file), problem));
  }
  progress_problem_ = problem;
  return step;
}

// Why this failure must not be restarted (the one line to say), or
// nullopt to restart. `restarts_left`: --max-restarts would allow one.
std::optional<std::string> elastic_agent::impl::restart_refused(bool restarts_left) {
  if (!failure_ || failure_->spawn_failed) return std::nullopt;
  int left = std::max(0, options_.spec.max_restarts - *job_restarts_ + 1);
  failure_facts facts{failure_->klass, failure_->exception_type, failure_->status.code,
                      failure_->status.signal};
  if (const auto* rule = matching_rule(options_.no_restart_on, facts)) {
    std::string what(class_name(failure_->klass));
    if (!failure_->exception_type.empty()) what += " " + failure_->exception_type;
    return fmt::format("not restarted: --no-restart-on={} matched the failure of rank {} ({}, "
                       "{}); {} restart(s) left unused",
                       printable(rule->text), failure_->rank, what, describe(failure_->status),
                       left);
  }
  if (!restarts_left) return std::nullopt;
  return no_progress_stop(left);
}

// Counts this failed round for --max-no-progress-restarts; the line that
// stops the job once the step stood still that many times in a row.
std::optional<std::string> elastic_agent::impl::no_progress_stop(int restarts_left) {
  if (options_.progress_file.empty() || options_.max_no_progress_restarts == 0) {
    return std::nullopt;
  }
  if (!progress_stalls_) progress_stalls_.emplace(std::nullopt);
  auto step = incident_ && incident_->step ? incident_->step : read_step();
  progress_stalls_->restarted(step);
  if (progress_stalls_->stalls() < options_.max_no_progress_restarts) return std::nullopt;
  return fmt::format(
      "not restarted: no progress: the step in {} stayed at {} over {} failed round(s) in a row "
      "(--max-no-progress-restarts={}); {} restart(s) left unused",
      printable(options_.progress_file),
      progress_stalls_->best() ? std::to_string(*progress_stalls_->best()) : "?",
      progress_stalls_->stalls(), options_.max_no_progress_restarts, restarts_left);
}

}  // namespace dtrun::agent
