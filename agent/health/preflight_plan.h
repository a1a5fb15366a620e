// --preflight's pairing schedule (docs/agent.md, "Preflight"): which node
// exchanges data with which, in O(log n) rounds of the job's n nodes
// instead of the n - 1 rounds every pair would take. Pure: no I/O.
//
// Round k pairs node g with g XOR 2^k (a hypercube, as recursive-doubling
// all-reduce pairs ranks), so after ceil(log2 n) rounds every node met
// partners at distance 1, 2, 4, ... With n not a power of two, g XOR 2^k
// may be no node: those nodes pair among themselves in order, and when an
// odd one is left it meets node (g - 2^k) mod n in a second step of the
// round, so that every node is paired in every round and no node takes
// part in two exchanges at once. A round is then one or two steps.
//
// Nodes, not ranks: local rank l of node g exchanges with local rank l of
// its partner (all of a node's ranks at once), so what is measured is the
// link between the nodes, as the training's collectives load it, and not
// the shared memory within one.
#pragma once

#include <string>
#include <vector>

namespace dtrun::agent {

// One step: every node's partner, or -1 (idle in this step).
struct preflight_step {
  std::vector<int> partner;
};

// The steps of every round, in order: ceil(log2 n) rounds, none for one
// node (nothing to pair).
std::vector<std::vector<preflight_step>> preflight_rounds(int nodes);

// Node `node`'s partners, one per step of every round, in order (-1:
// idle in that step): what its workers are told.
std::vector<int> partners_of(const std::vector<std::vector<preflight_step>>& rounds, int node);

// What the check script is told (JSON, read by the script alone): this
// node's partners by step, how many bytes each exchange sends, how often
// it repeats (the best one counts), where the rank's result goes ("{rank}"
// replaced by the script), the backend ("auto": NCCL when CUDA is there,
// else gloo) and the store prefix its process group meets under.
struct preflight_plan {
  int node = 0;
  int nodes = 1;
  std::vector<int> partners;
  long long payload_bytes = 0;
  int repeats = 3;
  std::string result_path;
  std::string backend = "auto";
  std::string store_prefix;
  // Seconds the process group's set-up and each collective may take.
  double timeout_s = 60;

  std::string to_json() const;
};

}  // namespace dtrun::agent
