// After a round's workers stopped: rejoin, restart within --max-restarts,
// or fail the job (elastic_agent_impl.h says which file holds what).
#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"

namespace dtrun::agent {

// Every worker of the round has been reaped, or given up on
// (kills_overdue).
void elastic_agent::impl::group_stopped() {
  group_.cancel_stop();
  end_round();
  say_flight_recorder_dumps();
  after_stop();
}

// What follows the round's stop (stop_reason.h's table): leave, finish,
// rejoin or restart.
void elastic_agent::impl::after_stop() {
  auto action = next_action(stop_, stop_facts{job_restarts_.has_value()});
  // Why the round stopped and what follows, as the table decided them (-v).
  log_debug(fmt::format("round {} stopped: {}; next: {}", round_info_.round,
                        stop_ ? stop_name(*stop_) : "no reason", action_name(action)));
  switch (action) {
    case after_stop_action::leave_preempted: return leave_preempted();
    case after_stop_action::finish_signalled: return finish_after_job_stop(128 + stop_signal(stop_));
    case after_stop_action::leave_unclean:
      return leave_unclean(std::get<stop::unkillable_worker>(*stop_).who);
    case after_stop_action::leave_unhealthy:
      return leave_job(std::get<stop::unhealthy>(*stop_).reason);
    case after_stop_action::rejoin: return rejoin();
    // decide_restart() runs when it comes (a held failure: once reported).
    case after_stop_action::await_restart_count: awaiting_restart_count_ = true; return;
    case after_stop_action::decide_restart: return decide_restart();
    case after_stop_action::finish_failed: return finish(1);
  }
}

// The round ended elsewhere (a membership change, or the job's end):
// not our restart. A failure elsewhere still counts for
// --max-no-progress-restarts here, where the progress file may be (a
// shared folder, or rank 0's node); a lost node or a newcomer is not the
// training failing again.
void elastic_agent::impl::rejoin() {
  if (incident_ && is_worker_failure(incident_->klass) && !incident_->ends_job) {
    if (auto stop = no_progress_stop(options_.spec.max_restarts - restarts_seen_)) {
      log_error(*stop);
      auto refusal = failure_record(records::record_kind::job_failed, *stop);
      refusal.refused = true;
      rendezvous_.fail_job(std::move(refusal), [this, stop = *stop] {
        reporter_.job_failed(stop);
        finish(1);
      });
      return;
    }
  }
  after_gpus_reclaimed([this] { start_round(); });
}

// A failure ends the round on every node at once and counts one restart
// for the whole job (the rendezvous keeps the count), so every node
// honours --max-restarts alike.
void elastic_agent::impl::count_restart(records::round_record reported) {
  rendezvous_.report_failure(std::move(reported), [this, t = current_ticket()](
                                                     std::exception_ptr error,
                                                     rendezvous::rendezvous_handler::failure_verdict v) {
    // The agent may have finished meanwhile (a signal, or shutdown()
    // failing this call): nothing to decide any more.
    if (!current(t)) return;
    // The round had ended for a reason that is no failure (elastic_agent_hold.cpp).
    if (!error && v.ended_by) return failure_explained(*v.ended_by);
    if (error) {
      log_error("could not reach the rendezvous to report the failure; not restarting");
      // The count is unknown, not used up: the summary must say so
      // (it said "all N restart(s) used" with none spent; scripts/chaos
      // seeds 52 and 69, a link down while a worker failed).
      unreported_ = true;
      job_restarts_ = options_.spec.max_restarts + 1;
    } else {
      job_restarts_ = v.restarts;
      restarts_seen_ = v.restarts;
    }
    if (awaiting_restart_count_) {
      awaiting_restart_count_ = false;
      decide_restart();
    }
  });
}

void elastic_agent::impl::decide_restart() {
  if (signalled()) {  // a signal came while we waited for the count
    finish_after_job_stop(128 + stop_signal(stop_));
    return;
  }
  int restarts = *job_restarts_;
  bool restarts_left = !failure_->spawn_failed && restarts <= options_.spec.max_restarts;
  auto refused = restart_refused(restarts_left);
  if (refused) log_error(*refused);
  if (restarts_left && !refused) {
    // Unless this machine is quarantined instead (elastic_agent_quarantine.cpp).
    judge_machine_fault([this, restarts] {
      log(fmt::format("restarting the workers (restart {} of {})", restarts,
                      options_.spec.max_restarts));
      reporter_.restart(restarts, options_.spec.max_restarts);
      after_gpus_reclaimed([this] { start_round(); });
    });
    return;
  }
  // Tell the other nodes the job is over, so they do not wait for us;
  // then every node's failures of this round are in the store.
  int code = failure_->status.code;
  bool said_why = failure_->spawn_failed;  // in one line already
  std::string outcome =
      refused ? *refused
      : unreported_ ? std::string("the failure could not be reported to the rendezvous, so no "
                                "restart could be counted")
      : options_.spec.max_restarts == 0
          ? std::string("no restarts allowed: --max-restarts=0")
          : fmt::format("all {} restart(s) used", options_.spec.max_restarts);
  auto failed = failure_record(
      records::record_kind::job_failed,
      refused ? *refused
              : fmt::format("worker rank {} {}", failure_->rank, describe(failure_->status)));
  failed.refused = refused.has_value();
  rendezvous_.fail_job(
      std::move(failed),
      [this, code, said_why, outcome, t = current_ticket()] {
        if (!current(t)) return;  // finished meanwhile
        if (said_why) {
          reporter_.job_failed(outcome);
          return finish(code);
        }
        reporter_.summarize_failure(round_info_.round, failure_context(outcome),
                                    [this, code](int) { finish(code); });
      });
}

// A worker of this node outlived SIGKILL and still holds what it held
// (GPU memory, ports, files): a new round here would start beside it and
// most likely fail the same way, spending the job's restarts on a node
// that cannot clean up (pytorch PR #185414). So this node leaves the job
// with a failure instead, whatever restarts remain; the other nodes see
// it leave as any node loss (its will), and go on without it where
// --nnodes=MIN:MAX allows. Nothing more is counted: a failure of ours
// was counted when it happened.
void elastic_agent::impl::leave_unclean(const std::string& who) {
  auto outcome = fmt::format(
      "not restarted: {} did not die on SIGKILL, so this node cannot clean up and leaves the job",
      who);
  if (!failure_) {
    log_error(fmt::format("{}; exiting with 1", outcome));
    reporter_.job_failed(outcome);
    return finish(1);
  }
  int code = failure_->status.code;
  reporter_.summarize_failure(round_info_.round, failure_context(outcome),
                              [this, code](int) { finish(code); });
}

}  // namespace dtrun::agent
