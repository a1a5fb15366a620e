// Stragglers named (issue 48): which rank or node works slower than the
// rest of the job, from each rank's own work per step.
//
// In synchronous training every rank's step lasts as long as the slowest
// rank's, so a step time names nobody. What is compared is a rank's own
// work per step: the wall time of a step less the time the rank spent
// waiting in collectives for the others. A straggler's own work is long;
// the ranks that wait for it show short own work and long waits.
//
// Each agent summarises its ranks' recent steps into one rank_work_sample
// per rank and publish interval (bounded bytes per node); the detector sees
// every node's samples of one interval together and compares:
// - each rank's own work with the job's median over ranks;
// - each node's own work (the median of its ranks') with the median over
//   nodes, so that a node whose every rank is slow is named as a node.
// A rank or node whose figure is above `factor` times the median is slow in
// that interval; it is named once it has been slow in `min_samples`
// consecutive intervals that together cover at least `min_slow_steps`
// steps, all after the first `warmup_steps` (compilation and the first
// collectives make the first steps slow everywhere). So it is named within
// max(min_slow_steps steps, min_samples intervals) plus one interval of the
// slowness starting. A name stays until the rank is fast again for one
// interval; it is then named again only after a new streak.
//
// The median is the lower median (the smaller middle value of an even
// count): in a job of two nodes where one is slow, the slow one is named.
//
// Pure: no clock, no I/O; the caller says which interval is which.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::agent {

// One rank's figures over the steps it finished in one publish interval.
struct rank_work_sample {
  int rank = 0;
  int node_rank = 0;
  std::int64_t first_step = 0;  // the steps the figure covers, inclusive
  std::int64_t last_step = 0;
  double own_work_s = 0;        // median own-work seconds per step over them
};

struct straggler_rules {
  // 1.4: nvidia-resiliency-ext's straggler detection reports a rank whose
  // relative performance score is under 0.7 (1 / 0.7 = 1.43 times the
  // reference), and a 30% slow GPU shows about 1.4 times the own work; the
  // noise between ranks of a CPU-bound job on a loaded machine stays under
  // 1.2 (docs/stragglers.md).
  double factor = 1.4;
  std::int64_t warmup_steps = 20;
  std::int64_t min_slow_steps = 10;
  int min_samples = 2;
  // And at least this much longer than the median: a step of a few
  // microseconds (a micro-batch's forward) is all noise in relative terms,
  // and 2 ms a step costs a job little.
  double min_excess_s = 0.002;
};

// A rank or node named slow, with the evidence.
struct straggler_finding {
  int node_rank = 0;
  std::vector<int> ranks;     // the node's slow ranks (all of its ranks when
                              // only the node as a whole is slow)
  bool whole_node = false;    // the node's own figure is slow too
  double own_work_s = 0;      // its figure over the streak (median)
  double job_median_s = 0;    // the job's median over the same intervals
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
};

// "node 2 (host-c) is a straggler: ranks 4,5 work 0.412 s per step against
// the job's median 0.201 s (2.05x) over steps 21-48"
std::string describe(const straggler_finding& finding, const std::string& host);

// Seconds per step as a reader takes them in: "0.240 s", "51.9 ms", "40 us"
// (the agent's line and dtrun report's stragglers table say it alike).
std::string per_step_text(double seconds);

class straggler_detector {
 public:
  explicit straggler_detector(straggler_rules rules = {});

  // One interval's samples from the whole job (any order; a rank missing
  // from an interval breaks its streak). Returns the findings named in this
  // interval for the first time in their streak, ordered by node.
  std::vector<straggler_finding> observe(const std::vector<rank_work_sample>& samples);

  // The findings whose streak still holds (named and not fast since).
  std::vector<straggler_finding> current() const;

  // A new round: step numbers start again, so every streak ends.
  void reset();

  const straggler_rules& rules() const { return rules_; }

 private:
  bool slower(double own, double median) const;
  struct streak {
    std::int64_t first_step = 0;
    std::int64_t last_step = 0;
    int samples = 0;
    std::vector<double> own;      // the figure in each interval of the streak
    std::vector<double> medians;  // the job's median in each
    bool named = false;
  };
  struct interval_view;

  void update(std::map<int, streak>& streaks, int key, bool slow, const rank_work_sample& span,
              double own, double median);
  bool ready(const streak& s) const;
  std::vector<straggler_finding> findings(bool only_new) const;

  straggler_rules rules_;
  std::map<int, streak> ranks_;  // by rank
  std::map<int, streak> nodes_;  // by node rank
  std::map<int, int> node_of_rank_;
  std::map<int, std::vector<int>> ranks_of_node_;
};

// The lower median of `values` (not empty).
double lower_median(std::vector<double> values);

}  // namespace dtrun::agent
