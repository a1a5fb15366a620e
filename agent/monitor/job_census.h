// Who the job has besides its active nodes (issue 34: "spares and units
// you can see"): the spares that wait for a place, the machines in
// quarantine. Pure: the agent's /metrics and `dtrun status --rdzv-endpoint`
// both count them the same way from what the store holds.
#pragma once

#include <cstdint>
#include <vector>

#include "agent/health/quarantine_record.h"

namespace dtrun::agent {

// Nodes that joined a round after it closed (arrivals beyond `closed`):
// at --nnodes MAX they wait as spares. `closed` 0 or less (absent, or the
// 0 a stop writes to wake the joiners) means the round has no spares.
std::int64_t spare_count(std::int64_t joined, std::int64_t closed);

// The records still current at `now` (until > now), one per machine: a
// machine quarantined twice is judged by its latest record (most
// quarantines, then latest since). Oldest first, as the store's list.
std::vector<quarantine_record> current_quarantines(const std::vector<quarantine_record>& list,
                                                   double now);

}  // namespace dtrun::agent
