// Straggler detection on the agent's loop (issue 48, item 2;
// docs/stragglers.md): every interval of a running round, this node shares
// its ranks' work figures and reads the job's verdict; the round's node 0
// also reads every node's figures, runs the straggler_detector and writes
// the verdict. The rendezvous and the workers' pages are behind hooks, so
// the watch is tested without either.
//
// Interval: 1 s, and 1 ms per node above 1,000 nodes (10 s at 10,000), so
// that node 0 reads at most about 1,000 nodes' figures a second. A
// straggler is named within the detector's bound (straggler_detector.h)
// plus one interval for node 0 to read the figures and one for the others
// to read its verdict.
//
// Single-threaded: every call and callback on the io_context's thread;
// nothing runs after stop() or the watch's destruction.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "agent/watch/straggler_codec.h"
#include "agent/watch/straggler_detector.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {

// The room a round has to lose a node (rendezvous_handler's
// preflight_room): a spare takes a leaver's place, else the job goes on
// smaller down to min_nodes.
struct straggler_room {
  int members = 1;
  int spares = 0;
  int min_nodes = 1;
};

class straggler_watch {
 public:
  using share_done = std::function<void(std::vector<std::string> per_node, std::string verdict,
                                        straggler_room room)>;
  struct hooks {
    // This node's ranks' figures over the steps they finished since the
    // last call (ranks without a timed step left out).
    std::function<std::vector<rank_work_sample>()> samples;
    // rendezvous_handler::share_work and ::publish_stragglers.
    std::function<void(std::string node_work, bool gather, share_done done)> share;
    std::function<void(std::string verdict)> publish;
    // Node 0 only: stragglers named in this interval for the first time.
    std::function<void(const std::vector<named_straggler>&)> named;
    // Every node: the job's verdict as last read (empty: nobody is slow).
    std::function<void(const std::vector<named_straggler>&)> verdict;
    // A one-line problem (a figures document that does not read).
    std::function<void(const std::string&)> debug;
  };

  // `send_away`: a straggler leaves when the room allows
  // (--straggler-action leave or quarantine); else every one stays.
  // `interval`: 0 for interval_for(members) (tests give their own).
  straggler_watch(boost::asio::io_context& io, straggler_rules rules, bool send_away, hooks h,
                  std::chrono::milliseconds interval = std::chrono::milliseconds(0));
  // A share still in flight completes into nothing.
  ~straggler_watch() { stop(); }
  straggler_watch(const straggler_watch&) = delete;
  straggler_watch& operator=(const straggler_watch&) = delete;

  // A round's workers run: this node is `group_rank` of `members`, on
  // `host`. Forgets the last round's streaks (step numbers start again).
  void start_round(int group_rank, int members, std::string host);
  // The round's workers stop: no more ticks until the next start_round().
  void stop();

  static std::chrono::milliseconds interval_for(int members);

 private:
  void arm();
  void tick();
  void judge(const std::vector<std::string>& per_node, const straggler_room& room);
  void decide(named_straggler& named, const straggler_room& room);
  void read_verdict(const std::string& verdict);

  hooks hooks_;
  std::chrono::milliseconds interval_;
  straggler_detector detector_;
  generation_timer timer_;
  int group_rank_ = 0;
  int members_ = 1;
  std::string host_;
  std::vector<std::string> hosts_;  // by group rank, from their figures
  bool send_away_ = false;
  // A share not answered yet, and the intervals skipped since.
  static constexpr int max_skipped = 5;
  bool in_flight_ = false;
  int skipped_ = 0;
  // This round's decisions by node (a named node's stays as first made)
  // and the room they used.
  std::map<int, std::pair<bool, std::string>> decided_;
  int leavers_ = 0;
  // Outlives a pending share: a completion after stop() finds it stale.
  std::shared_ptr<std::uint64_t> generation_ = std::make_shared<std::uint64_t>(0);
};

}  // namespace dtrun::agent
