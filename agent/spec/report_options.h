// How much the agent says, and where its event log goes (--quiet, -v,
// --event-log). A header of its own so the launcher can fill it in
// without knowing the reporter.
#pragma once

#include <string>

namespace dtrun::agent {

// quiet: errors and the failure summary only; normal: plus what the agent
// does (rounds, restarts, warnings); verbose: plus debug detail.
enum class verbosity { quiet, normal, verbose };

struct report_options {
  verbosity level = verbosity::normal;
  std::string event_log;  // a path, "-" for stderr, "" for none
};

}  // namespace dtrun::agent
