// --preflight's verdict (docs/agent.md, "Preflight"): the nodes far below
// the job's median, with the evidence, and which of them leave. Computed
// once per round by the round's node 0 from every node's figures, stored
// in the rendezvous as JSON (one codec), read by every node. Pure: no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/health/preflight_result.h"
#include "rendezvous/algorithm/rendezvous_handler.h"

namespace dtrun::agent {

// A node is named when its compute time is over twice the job's median or
// its bandwidth under a third of it. Far out on purpose: the preflight
// takes a short sample, on machines whose neighbours add noise, so it
// names only what is unmistakable (a link that negotiated a lower speed,
// a GPU stuck in a low clock, a congested port), and leaves the 20-30 %
// straggler to the training's own step times, measured over many steps.
// Best-of-N timings (preflight_result.h) keep a healthy node's noise from
// reaching the factor.
inline constexpr double preflight_compute_factor = 2.0;
inline constexpr double preflight_bandwidth_factor = 3.0;
// A median of fewer nodes cannot tell which one is slow (of two, either).
inline constexpr int preflight_min_nodes_to_judge = 3;

struct preflight_slow_node {
  int node = 0;
  std::string host;
  std::string figure;  // "compute" or "bandwidth"
  double value = 0;    // seconds per product, or bytes per second
  double median = 0;
  bool leaves = false;  // with --preflight-action=leave|quarantine, room allowing
};

struct preflight_verdict {
  int nodes = 0;     // in the round
  int measured = 0;  // that gave figures
  std::optional<double> median_compute_s;
  std::optional<double> median_bandwidth_bps;
  std::vector<preflight_slow_node> slow;
  // Nodes without figures, with their problem ("node 1: ...").
  std::vector<std::string> unmeasured;
  // Set when a named node stays because the job has no room to lose it.
  std::string kept_because;
  double seconds = 0;  // the slowest node's preflight time

  // The one codec: as a JSON value (inside `dtrun status`'s document) and
  // as text (the rendezvous store). Reading never throws: nullopt for
  // what is no verdict of this version.
  nlohmann::json to_json_value() const;
  static std::optional<preflight_verdict> from_json_value(const nlohmann::json& j);
  std::string to_json() const { return to_json_value().dump(); }
  static std::optional<preflight_verdict> parse(const std::string& text);
  // The named node `node`, or null.
  const preflight_slow_node* named(int node) const;
};

// The verdict on the round's nodes (by group rank; nullopt: no figures
// came). `may_leave`: the action is leave or quarantine; then named nodes
// leave while a spare waits for each or the round keeps at least
// room.min_nodes, the slowest first.
preflight_verdict judge_preflight(const std::vector<std::optional<preflight_node_figures>>& nodes,
                                  rendezvous::preflight_room room, bool may_leave);

// "node 2 (host h3) is slow: bandwidth 1.1 MB/s against the job's median
// 420 MB/s (under a third of it)".
std::string describe(const preflight_slow_node& slow);

// The verdict in one line for the log: nodes measured, the medians, the
// time, and how many were named.
std::string summary_line(const preflight_verdict& verdict);

}  // namespace dtrun::agent
