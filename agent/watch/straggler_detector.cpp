#include "agent/watch/straggler_detector.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace dtrun::agent {

double lower_median(std::vector<double> values) {
  auto middle = values.begin() + static_cast<std::ptrdiff_t>((values.size() - 1) / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

std::string per_step_text(double s) {
  if (s >= 0.1) return fmt::format("{:.3f} s", s);
  if (s >= 0.0001) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.0f} us", s * 1e6);
}

bool straggler_detector::slower(double own, double median) const {
  return own > rules_.factor * median && own - median >= rules_.min_excess_s;
}

std::string describe(const straggler_finding& finding, const std::string& host) {
  std::string ranks;
  for (int rank : finding.ranks) {
    ranks += (ranks.empty() ? "" : ",") + std::to_string(rank);
  }
  const double ratio = finding.job_median_s > 0 ? finding.own_work_s / finding.job_median_s : 0;
  return fmt::format(
      "node {} ({}) is a straggler: rank{} {} work{} {} per step against the job's median "
      "{} ({:.2f}x) over steps {}-{}",
      finding.node_rank, host, finding.ranks.size() == 1 ? "" : "s", ranks,
      finding.ranks.size() == 1 ? "s" : "", per_step_text(finding.own_work_s),
      per_step_text(finding.job_median_s), ratio,
      finding.first_step, finding.last_step);
}

// One interval's figures: each rank's and each node's own work, and the
// job's medians over ranks and over nodes.
struct straggler_detector::interval_view {
  std::map<int, rank_work_sample> rank;  // by rank
  std::map<int, double> node_own;        // by node rank
  std::map<int, rank_work_sample> node_span;
  double rank_median = 0;
  double node_median = 0;
};

straggler_detector::straggler_detector(straggler_rules rules) : rules_(rules) {}

void straggler_detector::reset() {
  ranks_.clear();
  nodes_.clear();
}

bool straggler_detector::ready(const streak& s) const {
  return s.samples >= rules_.min_samples && s.last_step - s.first_step + 1 >= rules_.min_slow_steps;
}

void straggler_detector::update(std::map<int, streak>& streaks, int key, bool slow,
                                const rank_work_sample& span, double own, double median) {
  if (!slow) {
    streaks.erase(key);
    return;
  }
  auto [it, fresh] = streaks.try_emplace(key);
  streak& s = it->second;
  if (fresh) {
    s.first_step = span.first_step;
  }
  s.last_step = span.last_step;
  ++s.samples;
  s.own.push_back(own);
  s.medians.push_back(median);
}

std::vector<straggler_finding> straggler_detector::observe(
    const std::vector<rank_work_sample>& samples) {
  interval_view view;
  std::map<int, std::vector<double>> per_node;
  for (const rank_work_sample& sample : samples) {
    if (sample.first_step <= rules_.warmup_steps || sample.last_step < sample.first_step) {
      continue;
    }
    view.rank[sample.rank] = sample;
    per_node[sample.node_rank].push_back(sample.own_work_s);
    auto [span, fresh] = view.node_span.try_emplace(sample.node_rank, sample);
    span->second.first_step = std::min(span->second.first_step, sample.first_step);
    span->second.last_step = std::max(span->second.last_step, sample.last_step);
  }
  // Fewer than two ranks (or nodes) have nobody to be compared with.
  std::vector<double> all;
  for (const auto& [rank, sample] : view.rank) {
    all.push_back(sample.own_work_s);
  }
  std::set<int> seen_ranks;
  std::set<int> seen_nodes;
  if (all.size() >= 2) {
    view.rank_median = lower_median(all);
    for (const auto& [rank, sample] : view.rank) {
      seen_ranks.insert(rank);
      node_of_rank_[rank] = sample.node_rank;
      const bool slow = slower(sample.own_work_s, view.rank_median);
      update(ranks_, rank, slow, sample, sample.own_work_s, view.rank_median);
    }
  }
  std::vector<double> node_figures;
  for (const auto& [node, figures] : per_node) {
    view.node_own[node] = lower_median(figures);
    node_figures.push_back(view.node_own[node]);
  }
  if (node_figures.size() >= 2) {
    view.node_median = lower_median(node_figures);
    for (const auto& [node, own] : view.node_own) {
      seen_nodes.insert(node);
      const bool slow = slower(own, view.node_median);
      update(nodes_, node, slow, view.node_span[node], own, view.node_median);
    }
  }
  // A rank or node absent from this interval breaks its streak.
  std::erase_if(ranks_, [&](const auto& entry) { return !seen_ranks.contains(entry.first); });
  std::erase_if(nodes_, [&](const auto& entry) { return !seen_nodes.contains(entry.first); });
  ranks_of_node_.clear();
  for (const auto& [rank, sample] : view.rank) {
    ranks_of_node_[sample.node_rank].push_back(rank);
  }
  std::vector<straggler_finding> named = findings(true);
  for (auto* streaks : {&ranks_, &nodes_}) {
    for (auto& [key, s] : *streaks) {
      s.named = s.named || ready(s);
    }
  }
  return named;
}

std::vector<straggler_finding> straggler_detector::current() const {
  return findings(false);
}

namespace {

// The finding's figures over a streak: the medians of what it measured and
// of the job's medians, interval by interval.
void fill_evidence(straggler_finding& finding, const std::vector<double>& own,
                   const std::vector<double>& medians, std::int64_t first, std::int64_t last) {
  finding.own_work_s = lower_median(own);
  finding.job_median_s = lower_median(medians);
  finding.first_step = first;
  finding.last_step = last;
}

}  // namespace

std::vector<straggler_finding> straggler_detector::findings(bool only_new) const {
  std::map<int, straggler_finding> by_node;
  auto node_finding = [&](int node) -> straggler_finding& {
    straggler_finding& finding = by_node[node];
    finding.node_rank = node;
    return finding;
  };
  // A node is named once while any of its streaks lasts: a second rank of
  // it whose streak is ready an interval later (its first sample straddled
  // the warm-up) widens the finding that `current()` shows, not a new line.
  std::set<int> new_nodes;
  std::set<int> named_nodes;
  auto note = [&](int node, const streak& s) {
    (s.named ? named_nodes : new_nodes).insert(node);
  };
  for (const auto& [rank, s] : ranks_) {
    if (!ready(s)) {
      continue;
    }
    const int node = node_of_rank_.at(rank);
    straggler_finding& finding = node_finding(node);
    if (finding.ranks.empty()) {
      fill_evidence(finding, s.own, s.medians, s.first_step, s.last_step);
    }
    finding.ranks.push_back(rank);
    note(node, s);
  }
  for (const auto& [node, s] : nodes_) {
    if (!ready(s)) {
      continue;
    }
    straggler_finding& finding = node_finding(node);
    finding.whole_node = true;
    fill_evidence(finding, s.own, s.medians, s.first_step, s.last_step);
    if (finding.ranks.empty() && ranks_of_node_.contains(node)) {
      finding.ranks = ranks_of_node_.at(node);
    }
    note(node, s);
  }
  std::vector<straggler_finding> out;
  for (auto& [node, finding] : by_node) {
    if (!only_new || (new_nodes.contains(node) && !named_nodes.contains(node))) {
      out.push_back(std::move(finding));
    }
  }
  return out;
}

}  // namespace dtrun::agent
