// The agent's human-readable messages: one line each on stderr, every line
// prefixed "dtrun: ", filtered by the verbosity the user chose.
//
//   quiet    errors and the failure summary only (--quiet)
//   normal   plus what the agent is doing: rounds, restarts, warnings
//   verbose  plus debug detail: worker pids, error-file paths (-v)
//
// Machine-readable events go to the event log instead (event_log.h).
//
// Every line is escaped with dtrun::printable on its way out: messages
// carry outside text (a worker's error message, a peer's reason, a
// hostname from the store), and a control character in it must neither
// drive the terminal nor start a line that reads as dtrun's. Callers
// escape too, where they build the text (escaping twice changes nothing).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "agent/spec/report_options.h"

namespace dtrun::agent {

class agent_log {
 public:
  // Where finished lines go (default: stderr). Tests pass a collector.
  using sink = std::function<void(const std::string& line)>;

  explicit agent_log(verbosity level = verbosity::normal, sink out = {});

  // One line each; a '\n' inside `message` is shown as "\n".
  void error(std::string_view message) const;  // always shown
  void info(std::string_view message) const;   // not with --quiet
  void debug(std::string_view message) const;  // only with -v
  // A multi-line block (the failure summary): always shown, each line
  // escaped and prefixed, written at once so concurrent agents do not
  // interleave it.
  void block(std::string_view text) const;

  verbosity level() const { return level_; }

  static constexpr std::string_view prefix = "dtrun: ";

 private:
  void emit(std::string_view message) const;

  verbosity level_;
  sink out_;
};

}  // namespace dtrun::agent
