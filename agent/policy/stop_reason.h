// Why a round's workers are stopping, as one value (issue 47), and what
// the agent does once they are all gone: a pure function of that value and
// two facts, so the whole table is one unit test
// (tests/unit/agent/stop_reason_test.cpp) instead of a priority chain over
// flags spread through elastic_agent's files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

namespace dtrun::agent {
namespace stop {

// A worker of this node failed (the agent's failure record says which).
struct failure {};
// The round ended elsewhere: a node joined, left, was lost, or failed and
// restarts remain. Not this node's restart.
struct membership_change {};
// Another node failed the job (no restart left there, or refused): the
// rejoin learns that the job is over.
struct job_over {};
// A signal here, or another node's Ctrl-C. `stops_job`: the job's stop
// was sent to (or seen from) the others; `from_elsewhere`: not this node's
// signal, so the next signal here is not a second Ctrl-C.
struct signal {
  int number = 0;
  bool stops_job = false;
  bool from_elsewhere = false;
};
// SIGTERM with --checkpoint-signal: the workers save, the node leaves.
// `then`: a signal that came meanwhile and does not stop the job (a second
// SIGTERM, SIGHUP): forwarded, remembered (the next one kills; a worker it
// ends is no failure), but the node still leaves preempted.
struct preemption {
  int number = 0;
  int then = 0;
};
// A health check failed while the workers ran: the node leaves.
struct unhealthy {
  std::string reason;
};
// A worker outlived SIGKILL ("rank 3 (pid 1234)"): the node cannot clean
// up, so it leaves.
struct unkillable_worker {
  std::string who;
};

}  // namespace stop

using stop_reason = std::variant<stop::failure, stop::membership_change, stop::job_over,
                                 stop::signal, stop::preemption, stop::unhealthy,
                                 stop::unkillable_worker>;

// Which of two reasons decides the stop, when a second comes while the
// workers stop: a signal that stops the job, then preemption, any other
// signal, an unkillable worker, leaving unhealthy, this node's failure,
// and last the round's end elsewhere. Equal ranks keep the first. A
// preemption keeps a later signal that does not stop the job in `then`.
stop_reason decisive(const stop_reason& first, const stop_reason& second);

// The reason's name for the agent's log (-v: "round 2 stopped: failure;
// next: decide the restart"): "failure", "signal"...
const char* stop_name(const stop_reason& reason);

// The signal that stops the workers (a signal's number, or the one a
// preemption remembered), else 0.
int stop_signal(const std::optional<stop_reason>& reason);

// What the agent does once every worker of the stopped round is gone.
enum class after_stop_action : std::uint8_t {
  leave_preempted,        // tell the others, exit with exit_preempted
  finish_signalled,       // exit 128+signal (once the job's stop is stored)
  leave_unclean,          // an unkillable worker: leave with a failure
  leave_unhealthy,        // tell the others (if not yet), leave or sit out
  rejoin,                 // a new round (after the no-progress check)
  await_restart_count,    // the rendezvous's count of the failure first
  decide_restart,         // restart within --max-restarts, or fail the job
  finish_failed,          // no reason known: cannot happen; exit 1
};

// The facts besides the reason that decide.
struct stop_facts {
  // The rendezvous has counted this node's failure (failure_verdict).
  bool restart_count_known = false;
};

after_stop_action next_action(const std::optional<stop_reason>& reason, const stop_facts& facts);

// The action's name for the same line ("decide the restart").
const char* action_name(after_stop_action action);

}  // namespace dtrun::agent
