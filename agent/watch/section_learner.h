// `auto` section timeouts (--section-timeouts=step=auto): learned from the
// intervals the workers report on their progress pages (docs/agent.md,
// "Section timeouts").
//
// The rule, for each section on its own:
// - the first `warmup` intervals of each worker process are skipped
//   (torch.compile, CUDA graphs, the allocator and the data loader's first
//   batches make them slow, and a restarted worker compiles again);
// - the last `window` intervals (all the node's ranks together) are kept;
// - with fewer than `min_samples`, nothing is learned yet: the section has
//   no timeout (--hang-timeout, when set, still catches a job-wide hang);
// - then the timeout is the `quantile` (p99, nearest rank) of the window
//   times `margin` (3), and at least `floor` (30 s).
// Why these: a synchronous job's step times are narrow (a few % apart), so
// 3 x p99 is far above any healthy step yet catches a stuck one in a few
// steps' time; the floor keeps fast sections (100 ms steps) from being
// called hung on a pause of the machine (a checkpoint's fsync elsewhere,
// swap, a preempted VM's steal time).
//
// What was learned is kept in the run folder (section_timeouts.json,
// to_json/from_json: one codec), written by the agent as it changes, so a
// restart of the worker group starts with it and people can read it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

struct section_learning {
  std::uint64_t warmup = 5;
  std::size_t min_samples = 20;
  std::size_t window = 1000;
  double quantile = 0.99;
  double margin = 3.0;
  std::chrono::milliseconds floor = std::chrono::seconds(30);
};

// The schema section_learner::to_json writes.
inline constexpr const char* section_learning_schema = "dtrun.section-timeouts/1";

class section_learner {
 public:
  explicit section_learner(section_learning rules = {}) : rules_(rules) {}

  // Interval `index` (1-based, counted by the worker process since it
  // started) of `section` took `interval_ns`. Intervals of the warm-up,
  // and non-positive ones, are not kept.
  void observe(const std::string& section, std::uint64_t index, std::int64_t interval_ns);

  // The learned timeout; nullopt until min_samples intervals are kept.
  std::optional<std::chrono::milliseconds> timeout(const std::string& section) const;

  // The intervals kept for `section`.
  std::size_t samples(const std::string& section) const;

  const section_learning& rules() const { return rules_; }

  // {"schema": ..., "rules": {...}, "sections": {"step": {"timeout_s": x or
  // null, "intervals_s": [...]}}}: the intervals are what is read back.
  nlohmann::ordered_json to_json() const;
  // Reads what to_json wrote (with these rules: the file's are for
  // people). nullopt with `error` (one line) when it is not one.
  static std::optional<section_learner> from_json(const nlohmann::json& document,
                                                  section_learning rules, std::string& error);

 private:
  section_learning rules_;
  std::map<std::string, std::deque<std::int64_t>> intervals_;  // ns, oldest first
};

}  // namespace dtrun::agent
