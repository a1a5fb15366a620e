// What the job remembers of a machine it kept out (docs/agent.md,
// "Quarantine"): one JSON record per machine in the rendezvous store, the
// cooldown that doubles with each quarantine, and which worker failures
// follow the machine rather than the rank. Pure: no I/O.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "agent/spec/exit_status.h"

namespace dtrun::agent {

struct quarantine_record {
  std::string machine;  // the machine key (machine_identity.h)
  std::string host;     // the host name when it was quarantined, for people
  int quarantines = 0;  // how many times this machine was quarantined in the job
  double since = 0;     // wall clock, seconds since the epoch (this machine's)
  double until = 0;
  double cooldown_s = 0;
  std::string reason;  // one line
  // A worker failure's global rank and fault ("SIGBUS"); -1 and "health"
  // for a failed health check.
  int rank = -1;
  std::string fault = "health";

  std::string to_json() const;
  // nullopt for text that is not such a record (corrupt, or another
  // version's): ignored, with the caller's warning.
  static std::optional<quarantine_record> parse(const std::string& text);
};

// The records among `texts` (the store's list), in order; the rest skipped.
std::vector<quarantine_record> parse_records(const std::vector<std::string>& texts);

// The cooldown of a machine's next quarantine: `first` doubled for each
// earlier one, at most `longest`.
std::chrono::milliseconds next_cooldown(int earlier_quarantines, std::chrono::milliseconds first,
                                        std::chrono::milliseconds longest);

// A worker failure that follows the machine, not the program: SIGBUS (a
// bad memory page, a device that fell off the bus), or an uncorrectable
// ECC error in its error message. Empty: an ordinary failure (an
// exception, an exit code, another signal), which never quarantines.
std::string machine_fault(const exit_status& status, const std::string& message);

// Whether rank `rank`'s `fault` already got another machine than
// `machine` quarantined: then it follows the rank (its data, its part of
// the model), and quarantining this machine too would only shrink the job.
bool follows_the_rank(const std::vector<quarantine_record>& list, const std::string& machine,
                      int rank, const std::string& fault);

// The --quarantine-file text: one host name per line, each once, in the
// order quarantined (what Slurm's `--exclude=<file>` reads). A record whose
// host is not a host name (letters, digits, '-', '.', '_') is left out.
std::string exclude_list(const std::vector<quarantine_record>& list);

}  // namespace dtrun::agent
