// Who can come to a restart round (docs/rendezvous.md, "Closing a restart
// round at once"): the arrivals of the round before, less the one node the
// round's end says is gone. Pure: no store, no timer, so the rule is tested
// alone (returning_nodes_test.cpp) and the algorithm only asks it.
//
// The reasons a round ends with when a node goes are spelled here, beside
// their parser, so the words the will, the heartbeat ring and leave_job
// write and the words read back cannot drift apart.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dtrun::rendezvous {

// `r/<r>/over` when node `rank` is gone: its connection closed with its
// will standing, its ring predecessor saw it stop beating, or it left.
std::string node_lost_reason(int rank, std::string_view addr);
std::string node_silent_reason(int rank);
std::string node_left_reason(int rank, std::string_view host, std::string_view why);

// The group rank a round's end names as gone, if it is one of the three
// reasons above; nullopt for every other reason (a worker failure, a
// newcomer, the job's end), after which every member can come back.
std::optional<int> departed_rank(std::string_view over);

// `r/<r>/over` when node `rank`'s workers failed (report_failure) or it
// failed the job (fail_job): "node K: <why>".
std::string node_failed_reason(int rank, std::string_view why);
// The group rank of a failure's end as node_failed_reason spells it;
// nullopt for every other reason.
std::optional<int> failed_rank(std::string_view over);

// What the first node back from round r fixes for round r+1 (one
// compare_set, so every node counts with the same numbers): how many
// arrivals round r had when it looked, and the group rank its end named as
// gone (-1: none). The nodes that can come are those arrivals (members and
// spares alike) less the gone one; a node that arrived at round r later
// than the count was taken is a newcomer to r+1, not awaited.
struct returning_nodes {
  int arrivals = 0;
  int departed = -1;

  int expected() const { return arrivals - (departed >= 0 ? 1 : 0); }
  // Arrival `arrival` of round r, ranked `rank` there (-1: a spare), is
  // one of the nodes expected back.
  bool expects(int arrival, int rank) const {
    return arrival >= 1 && arrival <= arrivals && !(departed >= 0 && rank == departed);
  }
  std::string to_text() const;
  // nullopt for anything to_text() did not write.
  static std::optional<returning_nodes> from_text(std::string_view text);
};

// The member count a round closes with when `here` nodes have arrived:
// at most `max_nodes`, in whole units of `node_unit` (the arrivals beyond
// wait as spares).
int closing_count(long long here, int max_nodes, int node_unit);

}  // namespace dtrun::rendezvous
