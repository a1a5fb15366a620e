// The multi-node side of `dtrun status`: every agent of a job publishes its
// status document (agent/monitor/job_status.h) in the rendezvous store, and this
// reads them back into one merged view.
//
// Keys (as the agents write them, through the same store client and key
// prefix): dtrun/status/<run_id>/nodes holds the number of node slots
// (highest node rank + 1, decimal), dtrun/status/<run_id>/<node_rank>
// each node's document.
#pragma once

#include <optional>
#include <string>

#include "agent/monitor/job_status.h"
#include "rendezvous/store/store.h"

namespace dtrun::launcher {

std::string status_count_key(const std::string& run_id);
std::string status_node_key(const std::string& run_id, int node_rank);

// Reads the count and every node's document without waiting for missing
// keys (check, then get). A node whose key is missing or unreadable shows
// as state "unknown". nullopt, with a one-line `error`, when the count key
// is missing (no agent of that run id published) or not a number in
// 1..100000. Store failures propagate as the store's exceptions.
std::optional<agent::job_status> read_job_status(rendezvous::store& store,
                                                 const std::string& run_id, std::string& error);

}  // namespace dtrun::launcher
