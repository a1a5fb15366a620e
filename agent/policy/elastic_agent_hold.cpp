// A failure that a departure may explain (docs/agent.md, "A failure a
// departure explains"; issue 49). When a node dies, its peers' workers see
// their collective break and fail, often before the rendezvous knows the
// node is gone (on etcd, its lease expires seconds later). Counted at
// once, such a failure spends a restart on a node's loss. So a failure that
// a lost peer can cause is held, up to the rendezvous's departure bound,
// and reported when the round ends or the bound passes; the rendezvous
// then says, once for every node, whether the round's first end was a
// failure (a restart) or a departure (a membership change).
#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {

// The failure of this round (failure_, `reported` its record): reported
// now, or held when a lost peer can cause it and another node can be lost.
void elastic_agent::impl::count_or_hold(records::round_record reported) {
  auto bound = rendezvous_.departure_bound();
  if (!failure_ || !failure_->lost_peer || bound <= std::chrono::milliseconds::zero() ||
      round_info_.group_world_size <= 1) {
    return count_restart(std::move(reported));
  }
  double bound_s = std::chrono::duration<double>(bound).count();
  log(fmt::format("worker rank {} failed as a lost peer makes it fail; holding the restart "
                  "decision up to {:.1f} s for another node's departure",
                  failure_->rank, bound_s));
  held_ = std::move(reported);
  hold_timer_.arm_after(bound, [this, bound_s] {
    if (!held_) return;
    log(fmt::format("no node departed within {:.1f} s: the failure counts", bound_s));
    end_hold();
  });
}

// The round ended (watch_round) or the bound passed: the held failure is
// reported, and the rendezvous's verdict decides (count_restart).
// A signal meanwhile: nothing is restarted, so nothing is reported (the
// stop ends the round for the others); after_stop() finishes.
void elastic_agent::impl::end_hold() {
  if (!held_) return;
  hold_timer_.cancel();
  auto reported = std::move(*held_);
  held_.reset();
  if (!signalled()) return count_restart(std::move(reported));
  if (awaiting_restart_count_) {
    awaiting_restart_count_ = false;
    after_stop();
  }
}

// The round had already ended for a reason that is no failure when this
// node's failure was reported: a node departed (the failure is what its
// loss caused), a newcomer asked in, or the job was stopped. No restart is
// counted; the incident is the round's end, with the failure it caused.
void elastic_agent::impl::failure_explained(const records::round_record& ended_by) {
  if (ended_by.kind == records::record_kind::job_stopped) {
    return stopped_elsewhere(records::stopped_by(ended_by));
  }
  auto reason = records::describe(ended_by);
  log(fmt::format("the round ended before the failure was counted: {}; the failure is what it "
                  "caused, not a restart",
                  printable(reason)));
  reporter_.membership_change(ended_by);
  if (incident_) {
    incident_->caused = incident_->detail + failure_tag();
    incident_->klass = records::round_end_class(ended_by);
    incident_->exception_type = ended_by.exception_type;
    incident_->rank.reset();
    incident_->here = false;
    incident_->detail = reason;
  } else {
    round_end_incident(ended_by);
  }
  failure_.reset();
  // No longer this node's failure; a stronger reason (a signal) stays.
  if (!stop_ || stopping_for<stop::failure>()) {
    stop_ = round_end_reason(ended_by);
  } else {
    stop_because(round_end_reason(ended_by));
  }
  if (awaiting_restart_count_) {  // the workers are stopped already
    awaiting_restart_count_ = false;
    after_stop();
  }
}

}  // namespace dtrun::agent
