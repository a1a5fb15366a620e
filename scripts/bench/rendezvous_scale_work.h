// rendezvous_scale --work-intervals K: the stragglers' traffic (issue 48,
// item 2; docs/stragglers.md) after a round of N nodes. Each interval, every
// node but node 0 calls dynamic_rendezvous::share_work with the document a
// node of 8 ranks writes (encode_work of summarize_steps' samples), all
// together; then node 0 shares its own, gathers every node's figures, runs
// the straggler detector over them, publishes the verdict, as the agent's
// straggler_watch does. One node is 1.5 times slow, so the verdict names it
// from the second interval on and the others read it from the third.
//
// The two phases run one after the other (in a job they overlap), so that
// the store's counters split into what the other nodes cost and what node 0
// costs. Written bytes are the store's own count of what it received;
// read bytes are the replies' size as the wire codec encodes them (the
// store counts what it sent only when the write completes, which may be
// after the client has read it).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "agent/watch/straggler_detector.h"
#include "rendezvous/algorithm/dynamic_rendezvous.h"

namespace scale_work {

using agents_t = std::vector<std::unique_ptr<dtrun::rendezvous::dynamic_rendezvous>>;

inline constexpr int ranks_per_node = 8;
inline constexpr int steps_per_interval = 10;

// The node named slow among `nodes`: the middle one (never node 0, which
// judges; none in a job of one node).
int slow_node_of(int nodes);

// The "dtrun.work/1" document group rank `node` writes in interval
// `interval` (0-based): its 8 ranks' median own work over 10 steps, about
// 0.1 s each with a few % noise, 1.5 times that on `slow_node`.
std::string work_document(int node, int interval, int slow_node);

// A MULTI_GET reply's bytes on the wire for these values.
std::uint64_t reply_bytes(const std::vector<std::string>& values);

// Every agent's share_work() of one interval (none of them node 0), on the
// loop that runs them. `done(answered, read_bytes)` once every agent has
// its answer, or when `deadline` passes first (answered is then short).
void share_all(boost::asio::io_context& io, agents_t& agents, const std::vector<int>& group_ranks,
               int interval, int slow_node, std::chrono::seconds deadline,
               std::function<void(int answered, std::uint64_t read_bytes)> done);

// Node 0's side of one interval, timed.
struct node0_figures {
  std::size_t document_bytes = 0;  // its own work document
  std::uint64_t read_bytes = 0;    // the gather's reply: every node's figures and the verdict
  std::size_t documents_read = 0;  // non-empty figures among them
  std::size_t verdict_bytes = 0;   // what it published
  std::size_t named = 0;           // stragglers the verdict names
  double gather_wall_s = 0;        // share_work() called to its answer
  double judge_wall_s = 0;         // decode, detect, encode the verdict
  double judge_cpu_s = 0;
  double decode_cpu_s = 0;         // of which decoding the figures
  double loop_cpu_s = 0;           // node 0's loop thread, call to publish acknowledged
};

// Node 0's judge: the detector's state lives across intervals.
class node0_judge {
 public:
  explicit node0_judge(dtrun::rendezvous::dynamic_rendezvous& node0) : node0_(node0) {}
  // Shares, gathers, judges and publishes; then a census read (one
  // request, which the caller subtracts) whose answer says the store has
  // the verdict. `done` on the loop; not called on a store error.
  void run(int interval, int nodes, int slow_node, std::function<void(node0_figures)> done);

 private:
  std::string judge(const std::vector<std::string>& per_node, node0_figures& f);

  dtrun::rendezvous::dynamic_rendezvous& node0_;
  dtrun::agent::straggler_detector detector_;
};

// The store's counters as its host's loop sees them (called off the loop).
dtrun::rendezvous::store_server_stats stats_on_loop(boost::asio::io_context& io,
                                                    dtrun::rendezvous::dynamic_rendezvous& node0);

// The parent's side: `intervals` intervals after the round, one JSON line
// each on stdout, with the loop running `node0` on a thread of its own
// (this is called on another). `others_share(interval)` has every other
// node share (in the client processes) and returns how many answered and
// the bytes they read. 0 when every node was answered every time.
int measure_intervals(boost::asio::io_context& io, dtrun::rendezvous::dynamic_rendezvous& node0,
                      int nodes, int intervals,
                      const std::function<std::pair<int, std::uint64_t>(int)>& others_share);

}  // namespace scale_work
