// Node health (docs/agent.md, "Node health"): the check before the first
// join, the periodic check while the workers run, and leaving the job
// when the node is unhealthy (elastic_agent_impl.h says which file holds
// what). Never on the restart path: a check would add the slowest node's
// check time to every restart of the job.
#include <signal.h>

#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"
#include "rendezvous/base/exit_codes.h"

namespace dtrun::agent {

// Before the first join: an unhealthy node is never ranked, so the job
// starts on the others (or waits for a spare) instead of failing on it.
void elastic_agent::impl::check_health_then_join() {
  if (health_ == nullptr) return start_round();
  health_->check([this](health_verdict verdict) {
    note_health(verdict);
    // A signal ended the run meanwhile (or will, once the store has it).
    if (phase_ != phase::starting || signalled()) return;
    if (report_health(verdict, "before joining")) return start_round();
    auto reason = verdict.first_reason();
    if (options_.quarantine.enabled()) return machine_failed(reason, -1, "health");
    log_error(fmt::format("{}; this node does not join the job (exit {})", reason,
                          exit_node_unhealthy));
    reporter_.node_left(reason);
    finish(exit_node_unhealthy);
  });
}

namespace {

// A failure not reported before.
bool has_news(const health_verdict& verdict) {
  for (const auto& f : verdict.findings) {
    if (!f.healthy && !f.repeated) return true;
  }
  return false;
}

}  // namespace

// Each finding in one line (and the command's last lines at debug level),
// and the event. Returns whether the node may join or stay.
bool elastic_agent::impl::report_health(const health_verdict& verdict, const char* when) {
  for (const auto& f : verdict.findings) {
    if (f.healthy || f.repeated) continue;  // a lasting problem is said once
    if (!f.gating) log(fmt::format("warning: {} (not keeping this node out: pass "
                                   "--node-health-check=builtin for that)",
                                   f.reason));
    for (const auto& line : f.output_tail) log_debug(fmt::format("  {}", line));
  }
  reporter_.node_health(verdict, when);
  return verdict.healthy();
}

// What `dtrun status` shows: each check's latest failures, news or not (a
// warning said once in the log shows there for as long as it lasts). A
// check that did not run this time (the GPU, disk and endpoint built-ins
// run at the first check only, unless they keep the node out) keeps what
// it found last; every check that runs gives at least one finding.
void elastic_agent::impl::note_health(const health_verdict& verdict) {
  std::set<std::string> ran;
  for (const auto& f : verdict.findings) ran.insert(f.check);
  std::erase_if(health_failing_, [&](const health_finding& f) { return ran.count(f.check) > 0; });
  for (const auto& f : verdict.findings) {
    if (!f.healthy) health_failing_.push_back(f);
  }
}

// While the workers run: the command (and gating built-ins) every
// --node-health-check-interval, and the watches of the links and storage
// paths, which run gating or not. The timer is armed when a round's
// workers start and cancelled when the round ends (end_round), so a check
// never delays a restart.
void elastic_agent::impl::arm_health_check() {
  if (health_ == nullptr || options_.health.interval.count() <= 0) return;
  health_timer_.arm_after(options_.health.interval, [this] {
    if (phase_ != phase::running) return;
    health_->check([this](health_verdict verdict) {
      note_health(verdict);
      if (phase_ != phase::running) return;  // the round ended meanwhile: dropped
      // A watch that only warns writes an event only with news: not one
      // per interval for hours of a healthy job.
      if (!options_.health.gating() && !has_news(verdict)) return arm_health_check();
      if (report_health(verdict, "while running")) return arm_health_check();
      leave_unhealthy(verdict.first_reason());
    });
  });
}

// The check in flight (its command killed) and the next one: at the end of
// a round, and when the agent finishes.
void elastic_agent::impl::cancel_health_check() {
  health_timer_.cancel();
  if (health_ != nullptr) health_->cancel();
}

// The node turned unhealthy under running workers: tell the others, then
// stop ours and leave. The other nodes see a membership change (no restart
// spent) and go on without this node, or with a spare in its group rank.
// Told first: stopped first, our workers would break the others'
// collectives, and their workers' failures would spend a restart before
// their agents learnt why. From now on a worker's end here is no failure.
void elastic_agent::impl::leave_unhealthy(const std::string& reason) {
  log_error(fmt::format("{}; stopping this node's workers and leaving the job", reason));
  reporter_.group_stopping(reason);
  stop_because(stop::unhealthy{reason});
  departed_ = false;
  phase_ = phase::stopping;
  if (progress_) progress_->stop();
  rendezvous_.leave_job(records::leaving(failure_class::health, reason), [this] {
    departed_ = true;
    if (phase_ != phase::stopping) return;
    begin_stop(SIGTERM);
  });
}

// After leave_unhealthy's stop (group_stopped), once the others were told.
void elastic_agent::impl::leave_job(const std::string& reason) {
  if (!departed_) return;  // the workers ended first: the telling's callback comes back here
  if (stragglers_.quarantine) return enter_quarantine(reason, -1, "straggler");
  if (options_.quarantine.enabled()) return machine_failed(reason, -1, "health");
  reporter_.node_left(reason);
  finish(exit_node_unhealthy);
}

}  // namespace dtrun::agent
