// The agent's signals: forwarded to the workers, stopping them, Ctrl-C
// stopping the job on every node, and the launching dtrun's pipe
// (dtrun --hosts).
#include <signal.h>

#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {

// dtrun --hosts: the launching dtrun forwards signals as lines on our
// stdin, and its end-of-file means it is gone (ssh signals nothing), so
// the workers are stopped as on SIGTERM; a second one (a signal line,
// then EOF) kills them at once, as a second Ctrl-C does.
void elastic_agent::impl::watch_launcher() {
  if (!options_.stop_on_stdin_eof) return;
  stdin_watch::hooks hooks;
  hooks.on_signal = [this](int sig) {
    if (std::find(options_.signals.begin(), options_.signals.end(), sig) ==
        options_.signals.end()) {
      log_error(fmt::format("the launching dtrun sent {}, which is not handled here; ignored",
                            signal_name(sig)));
      return;
    }
    on_signal(sig);
  };
  hooks.on_eof = [this] {
    if (phase_ == phase::done) return;  // the agent's end closed it
    log("the launching dtrun is gone (its connection closed); stopping the workers");
    on_signal(SIGTERM);
  };
  hooks.on_junk = [this](const std::string& line) {
    log_error(fmt::format("ignoring a line from the launching dtrun: {}", printable(line)));
  };
  launcher_.emplace(io_, take_stdin(), std::move(hooks));
}

void elastic_agent::impl::wait_for_signal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    wait_for_signal();
    on_signal(sig);
  });
}

void elastic_agent::impl::on_signal(int sig) {
  if (preemption_signal(sig)) return;  // elastic_agent_preempt.cpp
  if (sig == SIGUSR1 || sig == SIGUSR2) {  // a notice for the workers, not a stop
    log(fmt::format("received {}; forwarding it to the workers", signal_name(sig)));
    group_.signal_all(sig);
    return;
  }
  // Ctrl-C is a person stopping the job: every node stops, not just this
  // one (docs/agent.md, "Signals on several nodes"). Other signals make
  // this node leave, as torchrun's.
  if (sig == SIGINT && phase_ != phase::done && !job_stop_sent_) stop_the_job(sig);
  switch (phase_) {
    case phase::preflight:
      // The check's workers stop as the training's would; after their
      // verdict, none run and the agent exits as between rounds.
      if (group_.waited_for() == 0) {
        log(fmt::format("received {}; exiting", signal_name(sig)));
        stop_because(stop::signal{sig, job_stop_sent_});
        finish_after_job_stop(128 + sig);
        break;
      }
      [[fallthrough]];
    case phase::running:
      stop_because(stop::signal{sig, job_stop_sent_});
      log(fmt::format("received {}; forwarding it to the workers and stopping them",
                      signal_name(sig)));
      reporter_.group_stopping(fmt::format("received {}", signal_name(sig)));
      begin_stop(sig);
      break;
    case phase::stopping:
      if (signalled_here()) {
        // A second Ctrl-C means "now". The first signal's code stands; a
        // Ctrl-C that stopped the job meanwhile ends a preemption too.
        log(fmt::format("received {} again; killing the workers", signal_name(sig)));
        stop_because(stop::signal{stop_signal(stop_), job_stop_sent_});
        group_.signal_all(SIGKILL);
      } else {
        // Already stopping after a failure or for a new round: no
        // restart any more, and the user sees that the signal arrived.
        log(fmt::format("received {}; forwarding it to the stopping workers and exiting "
                        "after them",
                        signal_name(sig)));
        stop_because(stop::signal{sig, job_stop_sent_});
        // The next one here means "now" (even after another node's Ctrl-C).
        if (auto* s = std::get_if<stop::signal>(&*stop_)) *s = stop::signal{sig, job_stop_sent_};
        group_.signal_all(sig);
      }
      end_hold();  // a held failure (elastic_agent_hold.cpp): not restarted now
      break;
    case phase::starting:
    case phase::rendezvous:
    case phase::exiting:
    case phase::reclaiming:
    case phase::outside:
      log(fmt::format("received {}; exiting", signal_name(sig)));
      stop_because(stop::signal{sig, job_stop_sent_});
      finish_after_job_stop(128 + sig);
      break;
    case phase::done:
      break;
  }
}

// Tells every other node that a person stopped the job here; finishing
// waits until the store has it (finish_after_job_stop), so the store's
// host does not close the store first.
void elastic_agent::impl::stop_the_job(int sig) {
  job_stop_sent_ = true;
  job_stop_stored_ = false;
  rendezvous_.stop_job(fmt::format("by {} (Ctrl-C there)", signal_name(sig)), [this] {
    job_stop_stored_ = true;
    if (finish_pending_) finish(*std::exchange(finish_pending_, std::nullopt));
  });
}

void elastic_agent::impl::finish_after_job_stop(int code) {
  if (job_stop_sent_ && !job_stop_stored_) {
    finish_pending_ = code;
    return;
  }
  finish(code);
}

// Another node's Ctrl-C ended the job: stop ours and exit as it did.
void elastic_agent::impl::stopped_elsewhere(const std::string& who) {
  log(fmt::format("the job was stopped on {}; stopping the workers", printable(who)));
  reporter_.group_stopping(fmt::format("stopped on {}", who));
  // Not this node's Ctrl-C: a signal here is not a second one.
  stop_because(stop::signal{SIGINT, true, true});
  // Finishing waits until the store counts us in (finish_after_job_stop):
  // the node that stopped the job keeps the store for us until then.
  job_stop_sent_ = true;
  job_stop_stored_ = false;
  rendezvous_.stop_seen([this] {
    job_stop_stored_ = true;
    if (finish_pending_) finish(*std::exchange(finish_pending_, std::nullopt));
  });
  // The workers get the Ctrl-C itself, as the stopped node's do: one
  // signal for the whole job, whichever reaches this node first (with
  // --hosts the launcher also forwards the SIGINT to every host, and the
  // store's word may come before it).
  if (phase_ == phase::running || (phase_ == phase::preflight && group_.waited_for() > 0)) {
    begin_stop(SIGINT);
  } else if (phase_ != phase::stopping || group_.waited_for() == 0) {
    // (Stopping, a held failure's verdict: group_stopped finishes.)
    finish_after_job_stop(128 + SIGINT);
  }
}

}  // namespace dtrun::agent
