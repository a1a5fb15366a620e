// Which failures are worth a restart (docs/agent.md, "Restart policy"):
//   --no-restart-on LIST   failures that end the job at once, whatever
//                          --max-restarts says: classes (failure_class.h),
//                          exception:TypeName, exit:N, signal:NAME
//   --progress-file PATH + --max-no-progress-restarts N
//                          the job stops after N failed rounds in a row
//                          that did not move the training's step
// Both are pure here; the agent asks them when a round failed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/spec/failure_class.h"

namespace dtrun::agent {

// One entry of --no-restart-on.
struct no_restart_rule {
  std::optional<failure_class> klass;  // a class, or exception with `exception_type`
  std::string exception_type;          // exception:TypeName
  std::optional<int> exit_code;        // exit:N
  int signal = 0;                      // signal:NAME
  std::string text;                    // as the user wrote it, for the one line
};

// Parses a comma-separated list (blanks around entries ignored; empty:
// no rules). Throws usage_error naming the entry and what is accepted.
std::vector<no_restart_rule> parse_no_restart_on(const std::string& list);

// The failure a rule is matched against.
struct failure_facts {
  failure_class klass = failure_class::exit;
  std::string exception_type;
  int exit_code = 0;
  int signal = 0;
};

// The first rule that matches, or nullptr.
const no_restart_rule* matching_rule(const std::vector<no_restart_rule>& rules,
                                     const failure_facts& failure);

// The training's step, read from --progress-file: a regular file of at
// most 64 bytes holding one whole number (blanks around it allowed).
// nullopt, with `problem` saying why, otherwise (missing, a FIFO, too
// big, not a number): the caller warns and ignores the read.
std::optional<std::int64_t> read_progress_file(const std::string& path, std::string& problem);

// Failed rounds in a row without progress. `restarted(step)` is called once
// per failed round before its restart, with the step read then (nullopt:
// unreadable, which neither counts nor resets).
class progress_tracker {
 public:
  // `start`: the step before the first round (nullopt: the file is not
  // there yet, so any step counts as progress).
  explicit progress_tracker(std::optional<std::int64_t> start) : best_(start) {}

  void restarted(std::optional<std::int64_t> step) {
    if (!step) return;
    if (!best_ || *step > *best_) {
      best_ = step;
      stalls_ = 0;
    } else {
      ++stalls_;
    }
  }

  int stalls() const { return stalls_; }
  std::optional<std::int64_t> best() const { return best_; }

 private:
  std::optional<std::int64_t> best_;
  int stalls_ = 0;
};

}  // namespace dtrun::agent
