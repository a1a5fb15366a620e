// Who can come to a restart round (docs/rendezvous.md, "Closing a restart
// round at once"): the arrivals of the round before, less the one node the
// round's end says is gone (its record: round_record.h, departed_rank).
// Pure: no store, no timer, so the rule is tested alone
// (returning_nodes_test.cpp) and the algorithm only asks it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dtrun::rendezvous {

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
