// A join whose store session was lost (etcd: the agent's lease expired,
// because the agent was stopped or cut off for longer than lease_ttl, and
// the other nodes rightly counted it gone): take a new session and go on
// joining, within the join timeout, instead of ending the agent. The keys
// the old session held are gone (its will, its ADD stamps); the round's
// counters and this node's description are the job's and stay.
#include <fmt/format.h>

#include "rendezvous/algorithm/dynamic_rendezvous_impl.h"
#include "rendezvous/store/round_store.h"

namespace dtrun::rendezvous {

namespace {

// A store that drops sessions at once, every time, would otherwise keep a
// join busy until its deadline.
constexpr int max_sessions_per_join = 3;

}  // namespace

// True when the join goes on with a new session (the failure is not the
// round's end); false when `why` ends the join as before.
bool dynamic_rendezvous::impl::join_again(const std::exception_ptr& why) {
  if (phase_ != round_phase::joining || kind_of(why) != store_error_kind::session_lost) {
    return false;
  }
  if (sessions_taken_ >= max_sessions_per_join ||
      std::chrono::steady_clock::now() >= join_deadline_) {
    return false;
  }
  ++sessions_taken_;
  log(fmt::format("round {}: the rendezvous store dropped this agent's session ({}); joining "
                  "again with a new one",
                  round_, error_message(why)));
  // Every callback of the old session's clients is stale from here on.
  ++epoch_;
  ring_->stop();
  deadline_timer_.cancel();
  auto r = round_;
  auto index = arrived_round_ == round_ ? arrival_ : 0;
  reconnect([self = shared_from_this(), t = ticket(), r, index](std::exception_ptr error) {
    if (!self->current(t)) return;
    if (error) return self->fail(error);
    // Arrived already: the same arrival, not a second one (a ghost the
    // round would count and then wait for).
    if (index > 0) return self->resume_arrival(r, index);
    self->read_job(t);
  });
  return true;
}

// Arrival `index` of round r, on the new session: what joined() set going
// that the old session carried (the heartbeats, the last call's timer,
// closing a full round) starts again; the node's description and the
// workers' store it names are still the round's.
void dynamic_rendezvous::impl::resume_arrival(std::int64_t r, int index) {
  ring_->start(ops_, keys_.heartbeat(r, index));
  if (index == options_.max_nodes) {
    close_round(r, index);
  } else if (index == options_.min_nodes) {
    arm_last_call(r);
  }
  await_close(r);
}

}  // namespace dtrun::rendezvous
