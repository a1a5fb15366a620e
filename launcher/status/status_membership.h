// The spares and quarantined machines of a multi-node job, for `dtrun
// status --rdzv-endpoint` (issue 34, item 5): read from the rendezvous
// keys the agents write (docs/rendezvous.md, "Keys"), rendered as a
// summary line and a section each. Reading costs a few requests for the
// counters and two per listed spare or quarantine record (at most 64
// each): a one-off command's cost, never the agents'.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/health/quarantine_record.h"
#include "rendezvous/store/store.h"

namespace dtrun::launcher {

// A node that arrived after the newest round closed and waits for a place.
struct spare_node {
  int arrival = 0;        // 1-based, in `round`
  std::string host;       // from its descriptor; empty when unreadable
  std::string addr;
  std::int64_t round = 0;  // the round it waits in
};

struct job_membership {
  std::int64_t round = 0;    // the newest round
  std::int64_t members = 0;  // its `closed` count; 0 while it gathers
  std::int64_t spares_total = 0;  // may exceed spares.size() (bounded read)
  std::vector<spare_node> spares;
  std::vector<agent::quarantine_record> quarantined;  // current ones only
};

// Reads the newest round's counters and descriptors and the quarantine
// list; the current quarantines are those with `until` > `now` (Unix s).
// Missing keys read as nothing; store failures throw the store's errors.
job_membership read_membership(rendezvous::store& store, const std::string& run_id, double now);

// "nodes: 4 active, 1 spare, 1 quarantined", then a SPARES and a
// QUARANTINED table when they have rows. `active` is the member count of
// the status view (used when the round has no `closed` count yet).
std::string render_membership(const job_membership& m, int active, double now);

// The same for --json: {"nodes": {"active", "spare", "quarantined"},
// "spares": [...], "quarantined": [...]}, merged into the status document.
void add_membership_json(nlohmann::ordered_json& document, const job_membership& m, int active);

}  // namespace dtrun::launcher
