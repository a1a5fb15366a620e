// What --preflight measures (docs/agent.md, "Preflight"), as typed values
// with one codec each: a rank's result, which dtrun's check script writes
// as JSON in the rank's folder, and a node's figures, which the agent
// makes from its ranks' results and publishes through the rendezvous.
// Pure: no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dtrun::agent {

// One exchange of a rank with the same local rank of a partner node: the
// bytes sent each way and the best of the repeats' times (both ways at
// once, so a link slow in either direction shows).
struct preflight_exchange {
  int step = 0;
  int partner_node = -1;
  long long bytes = 0;
  double seconds = 0;
};

struct preflight_rank_result {
  int rank = 0;
  int node = 0;
  int local_rank = 0;
  std::string backend;  // gloo, nccl
  std::string device;   // cpu, cuda:0
  // The best time of a fixed matrix product (the fastest of a few: noise
  // only adds time, so the best is what the hardware can do).
  double compute_s = 0;
  std::vector<preflight_exchange> exchanges;
  double total_s = 0;  // the script's own time, set-up included

  std::string to_json() const;
  // nullopt, with `error` saying why, for text that is no such result.
  static std::optional<preflight_rank_result> parse(const std::string& text, std::string& error);
};

// A node's figures: its slowest rank's compute time (the node goes at the
// pace of its slowest device), and its bandwidth: per step the bytes its
// ranks moved at once, over the slowest of their times, and of the steps
// the best. A pair goes at the pace of its slower end, so the best pair a
// node had is a lower bound of its own link; a node all of whose pairs
// were slow is the slow end. Nodes that measured nothing say why
// (`problem`).
struct preflight_node_figures {
  int node = 0;
  std::string host;
  int ranks = 0;
  std::optional<double> compute_s;
  std::optional<double> bandwidth_bps;  // bytes per second, one way
  double seconds = 0;                   // the preflight's time on this node
  std::string problem;                  // empty: measured

  std::string to_json() const;
  static std::optional<preflight_node_figures> parse(const std::string& text);
};

// The figures of node `node` from its ranks' results; `problem` is kept
// (a rank that wrote nothing) and set when no rank measured anything.
preflight_node_figures node_figures(int node, std::string host,
                                    const std::vector<preflight_rank_result>& results,
                                    double seconds, std::string problem);

}  // namespace dtrun::agent
