// Why a round stops, and what follows (stop_reason.h).
#include "agent/policy/stop_reason.h"

#include <type_traits>

namespace dtrun::agent {
namespace {

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

// Higher decides. A preempted node saves and leaves even when a plain
// signal (a second SIGTERM) comes meanwhile, but a Ctrl-C that stops the
// whole job wins over everything.
int rank_of(const stop_reason& reason) {
  return std::visit(overloaded{
                        [](const stop::membership_change&) { return 0; },
                        [](const stop::job_over&) { return 0; },
                        [](const stop::failure&) { return 1; },
                        [](const stop::unhealthy&) { return 2; },
                        [](const stop::unkillable_worker&) { return 3; },
                        [](const stop::signal& s) { return s.stops_job ? 6 : 4; },
                        [](const stop::preemption&) { return 5; },
                    },
                    reason);
}

}  // namespace

stop_reason decisive(const stop_reason& first, const stop_reason& second) {
  const auto* preempted = std::get_if<stop::preemption>(&first);
  const auto* sig = std::get_if<stop::signal>(&second);
  if (preempted != nullptr && sig != nullptr && !sig->stops_job) {
    return stop::preemption{preempted->number, sig->number};
  }
  return rank_of(second) > rank_of(first) ? second : first;
}

const char* stop_name(const stop_reason& reason) {
  return std::visit(overloaded{
                        [](const stop::failure&) { return "failure"; },
                        [](const stop::membership_change&) { return "membership change"; },
                        [](const stop::job_over&) { return "job over"; },
                        [](const stop::signal&) { return "signal"; },
                        [](const stop::preemption&) { return "preemption"; },
                        [](const stop::unhealthy&) { return "unhealthy"; },
                        [](const stop::unkillable_worker&) { return "unkillable worker"; },
                    },
                    reason);
}

int stop_signal(const std::optional<stop_reason>& reason) {
  if (!reason) return 0;
  if (const auto* s = std::get_if<stop::signal>(&*reason)) return s->number;
  if (const auto* p = std::get_if<stop::preemption>(&*reason)) return p->then;
  return 0;
}

after_stop_action next_action(const std::optional<stop_reason>& reason, const stop_facts& facts) {
  using a = after_stop_action;
  if (!reason) return a::finish_failed;
  return std::visit(overloaded{
                        [](const stop::preemption&) { return a::leave_preempted; },
                        [](const stop::signal&) { return a::finish_signalled; },
                        [](const stop::unkillable_worker&) { return a::leave_unclean; },
                        [](const stop::unhealthy&) { return a::leave_unhealthy; },
                        [](const stop::membership_change&) { return a::rejoin; },
                        [](const stop::job_over&) { return a::rejoin; },
                        [&facts](const stop::failure&) {
                          return facts.restart_count_known ? a::decide_restart
                                                           : a::await_restart_count;
                        },
                    },
                    *reason);
}

const char* action_name(after_stop_action action) {
  switch (action) {
    case after_stop_action::leave_preempted: return "leave preempted";
    case after_stop_action::finish_signalled: return "finish signalled";
    case after_stop_action::leave_unclean: return "leave unclean";
    case after_stop_action::leave_unhealthy: return "leave unhealthy";
    case after_stop_action::rejoin: return "rejoin";
    case after_stop_action::await_restart_count: return "await the restart count";
    case after_stop_action::decide_restart: return "decide the restart";
    case after_stop_action::finish_failed: return "finish failed";
  }
  return "unknown";
}

}  // namespace dtrun::agent
