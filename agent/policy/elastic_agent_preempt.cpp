// Preemption (docs/agent.md, "Preemption"): a job-wide checkpoint before a
// node goes away. With --checkpoint-signal, SIGTERM (the node is preempted
// or drained) or the --preempt-notice signal (Slurm's early warning, sent
// to every node at once) asks the job, through the rendezvous, for one
// checkpoint of the round; every node's agent sends the checkpoint signal
// to its live workers once per round, whichever node asked and however
// many did. On SIGTERM this node's workers then get --stop-timeout to save
// and exit, the rest are killed, and the node leaves the job as an
// unhealthy one does (the others go on without it, spending no restart)
// with exit_preempted.
#include <signal.h>

#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"
#include "rendezvous/base/exit_codes.h"

namespace dtrun::agent {

// on_signal's first question: whether `sig` is this file's to handle.
// Without --checkpoint-signal nothing is, and SIGTERM stops the workers as
// it always did; outside a running round too (no workers to save).
bool elastic_agent::impl::preemption_signal(int sig) {
  if (options_.checkpoint_signal == 0 || phase_ == phase::done) return false;
  if (options_.preempt_notice != 0 && sig == options_.preempt_notice) {
    log(fmt::format("received {}, the preemption notice; asking every node for a checkpoint",
                    signal_name(sig)));
    request_checkpoint(fmt::format("got the preemption notice {}", signal_name(sig)));
    return true;
  }
  if (sig != SIGTERM || stopping_for<stop::preemption>() || phase_ != phase::running) {
    return false;
  }
  begin_preemption(sig);
  return true;
}

// One request per round, the first wins (rendezvous_handler::
// request_checkpoint); every node's watch then signals its workers. Ours
// are signalled here too when this request was the first, without waiting
// for the watch's word (on SIGTERM, begin_preemption does not even wait
// for the store); checkpoint_requested sends it once per round either way.
void elastic_agent::impl::request_checkpoint(const std::string& why) {
  if (phase_ != phase::running) {
    log(fmt::format("no workers are running; no checkpoint asked for ({})", why));
    return;
  }
  auto round = round_info_.round;
  rendezvous_.request_checkpoint(why, [this, round, why, t = current_ticket()](bool first) {
    if (!current(t)) return;
    if (first) return checkpoint_requested(fmt::format("this node: {}", why));
    if (checkpoint_round_ == round && !stopping_for<stop::preemption>()) {
      log(fmt::format("round {}: the workers were already asked for a checkpoint in this "
                      "round; not asking again",
                      round));
    }
  });
}

// Each round's watch (start_workers), when --checkpoint-signal is given.
void elastic_agent::impl::watch_checkpoints() {
  if (options_.checkpoint_signal == 0) return;
  rendezvous_.watch_checkpoint([this, t = current_ticket()](std::string who) {
    if (!current(t)) return;
    checkpoint_requested(who);
  });
}

// The checkpoint signal to every live worker, once per round.
void elastic_agent::impl::checkpoint_requested(const std::string& who) {
  // While preempted, until they are gone: they are saving.
  bool workers_run = phase_ == phase::running ||
                     (phase_ == phase::stopping && stopping_for<stop::preemption>() &&
                      group_.waited_for() > 0);
  if (!workers_run || checkpoint_round_ == round_info_.round) return;
  checkpoint_round_ = round_info_.round;
  auto sig = signal_name(options_.checkpoint_signal);
  log(fmt::format("round {}: a checkpoint was asked for by {}; sending {} to the workers",
                  round_info_.round, who, sig));
  reporter_.checkpoint_requested(who, sig);
  group_.signal_all(options_.checkpoint_signal);
}

// SIGTERM while the workers run: the job checkpoints, our workers get
// --stop-timeout to save and exit by themselves, then the rest are
// killed; group_stopped() then comes to leave_preempted(). From now on a
// worker's end here is no failure (the phase is stopping).
void elastic_agent::impl::begin_preemption(int sig) {
  auto grace = options_.stop_timeout;
  log(fmt::format("received {}: this node is preempted; asking every node for a checkpoint "
                  "and giving the workers here {} s to save and exit",
                  signal_name(sig), static_cast<double>(grace.count()) / 1000.0));
  auto why = fmt::format("was preempted ({})", signal_name(sig));
  request_checkpoint(why);
  workers_stopped();  // saving and stopping is lost time, as any stop
  stop_because(stop::preemption{sig});
  phase_ = phase::stopping;
  if (progress_) progress_->stop();
  reporter_.group_stopping(fmt::format("preempted ({})", signal_name(sig)));
  // Ours at once, not after the store's answer: a store that is slow or
  // gone must not eat into the time they have to save.
  checkpoint_requested(fmt::format("this node: {}", why));
  preempt_timer_.arm_after(grace, [this, grace] {
    if (phase_ != phase::stopping || group_.waited_for() == 0) return;
    log(fmt::format("workers still running {} s after the checkpoint signal; sending SIGKILL",
                    static_cast<double>(grace.count()) / 1000.0));
    group_.signal_all(SIGKILL);
  });
}

// Our workers are gone: tell the others (a membership change, as an
// unhealthy node's leaving: they rejoin without this node, or with a
// spare, and spend no restart), then exit with exit_preempted.
void elastic_agent::impl::leave_preempted() {
  preempt_timer_.cancel();
  phase_ = phase::stopping;  // until the others are told: no round, no rejoin
  rendezvous_.leave_job(records::leaving(failure_class::preemption, "preempted"), [this] {
    log(fmt::format("left the job: preempted (exit {}: requeue)", exit_preempted));
    reporter_.node_left("preempted");
    finish(exit_preempted);
  });
}

// The workers all succeeded and every node finished: done (0), unless the
// round's workers were asked for a checkpoint, which they ended the job
// with: preempted, to be requeued from that checkpoint.
int elastic_agent::impl::exit_code_after_success() {
  if (checkpoint_round_ < 0 || checkpoint_round_ != round_info_.round) return 0;
  log(fmt::format("the workers exited after the checkpoint of round {}: the job was preempted "
                  "(exit {}: requeue it to resume)",
                  checkpoint_round_, exit_preempted));
  return exit_preempted;
}

}  // namespace dtrun::agent
