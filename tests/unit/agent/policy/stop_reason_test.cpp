// The agent's stop table (stop_reason.h): every reason, with the restart
// count known and not, to its next action; and which reason decides when
// two come while the workers stop.
#include "agent/policy/stop_reason.h"

#include <signal.h>

#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace dtrun::agent {
namespace stop_reason_test {

struct row {
  std::optional<stop_reason> reason;
  after_stop_action unknown_count;  // the failure's count not back yet
  after_stop_action known_count;
};

TEST_CASE("stop table: every reason to the agent's next action") {
  using a = after_stop_action;
  const std::vector<row> table = {
      {std::nullopt, a::finish_failed, a::finish_failed},
      {stop::failure{}, a::await_restart_count, a::decide_restart},
      {stop::membership_change{}, a::rejoin, a::rejoin},
      {stop::job_over{}, a::rejoin, a::rejoin},
      {stop::signal{SIGTERM}, a::finish_signalled, a::finish_signalled},
      {stop::signal{SIGINT, true, true}, a::finish_signalled, a::finish_signalled},
      {stop::preemption{SIGTERM}, a::leave_preempted, a::leave_preempted},
      {stop::unhealthy{"gpu 0: ECC errors"}, a::leave_unhealthy, a::leave_unhealthy},
      {stop::unkillable_worker{"rank 3 (pid 12)"}, a::leave_unclean, a::leave_unclean},
  };
  // Every alternative of the variant has a row (a new reason needs one).
  std::set<std::size_t> kinds;
  for (const auto& r : table) {
    if (r.reason) kinds.insert(r.reason->index());
  }
  REQUIRE(kinds.size() == std::variant_size_v<stop_reason>);
  for (const auto& r : table) {
    INFO((r.reason ? stop_name(*r.reason) : "no reason"));
    CHECK(action_name(next_action(r.reason, stop_facts{false})) ==
          std::string(action_name(r.unknown_count)));
    CHECK(action_name(next_action(r.reason, stop_facts{true})) ==
          std::string(action_name(r.known_count)));
  }
}

// The reasons from weakest to strongest: any later one decides over any
// earlier one, whichever came first.
TEST_CASE("stop table: the decisive reason when two come, in either order") {
  const std::vector<stop_reason> weakest_first = {
      stop::membership_change{},
      stop::failure{},
      stop::unhealthy{"disk full"},
      stop::unkillable_worker{"rank 0 (pid 7)"},
      stop::signal{SIGTERM},
      stop::preemption{SIGTERM},
      stop::signal{SIGINT, true},
  };
  for (std::size_t i = 0; i < weakest_first.size(); ++i) {
    for (std::size_t j = i + 1; j < weakest_first.size(); ++j) {
      INFO(stop_name(weakest_first[i]) << " then " << stop_name(weakest_first[j]));
      CHECK(decisive(weakest_first[i], weakest_first[j]).index() == weakest_first[j].index());
      CHECK(decisive(weakest_first[j], weakest_first[i]).index() == weakest_first[j].index());
    }
  }
}

TEST_CASE("stop table: a preempted node leaves even when a second SIGTERM comes") {
  auto r = decisive(stop::preemption{SIGTERM}, stop::signal{SIGTERM});
  CHECK(next_action(r, {}) == after_stop_action::leave_preempted);
}

TEST_CASE("stop table: a signal during a preemption is remembered (the next one kills, a worker "
          "it ends is no failure)") {
  CHECK(stop_signal(stop_reason{stop::preemption{SIGTERM}}) == 0);  // the preemption's own: none
  auto r = decisive(stop::preemption{SIGTERM}, stop::signal{SIGHUP});
  REQUIRE(std::holds_alternative<stop::preemption>(r));
  CHECK(stop_signal(r) == SIGHUP);
  CHECK(next_action(r, {}) == after_stop_action::leave_preempted);
  // A Ctrl-C that then stops the job ends it, with the remembered code.
  auto stopped = decisive(r, stop::signal{stop_signal(r), true});
  CHECK(next_action(stopped, {}) == after_stop_action::finish_signalled);
  CHECK(stop_signal(stopped) == SIGHUP);
}

TEST_CASE("stop table: a Ctrl-C that stops the job wins over a preemption") {
  auto r = decisive(stop::preemption{SIGTERM}, stop::signal{SIGINT, true});
  CHECK(next_action(r, {}) == after_stop_action::finish_signalled);
  CHECK(stop_signal(r) == SIGINT);
}

TEST_CASE("stop table: equal reasons keep the first (another node's Ctrl-C stays its own)") {
  auto r = decisive(stop::signal{SIGINT, true, true}, stop::signal{SIGINT, true, false});
  CHECK(std::get<stop::signal>(r).from_elsewhere);
  CHECK(stop_signal(std::nullopt) == 0);
  CHECK(stop_signal(stop_reason{stop::failure{}}) == 0);
}

}  // namespace stop_reason_test
}  // namespace dtrun::agent
