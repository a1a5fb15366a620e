// What dtrun tells the user when a job fails: one record per failed
// worker (built on the node where it ran, publishable through the store
// as JSON), the choice of the root cause, and the one-screen summary.
//
// Root cause: the earliest failure of the failed round, by the time its
// agent saw the worker exit (that node's system clock, ms). Ties (or clocks
// that agree to the ms) go to the lower node rank, then the lower global
// rank, so every node names the same one. Workers that dtrun itself
// stopped (after the first failure, or because the round ended) are not
// failures; the summary lists them apart.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/report/error_file.h"
#include "agent/report/failure_record.h"
#include "agent/spec/exit_status.h"

namespace dtrun::agent {

// The worker's exit, as its agent saw it.
struct worker_exit {
  std::int64_t round = 0;
  std::string host;
  int node_rank = 0;
  int local_rank = 0;
  int rank = 0;
  long pid = -1;
  exit_status status;
  std::chrono::system_clock::time_point time;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE given to the worker
  std::string rank_dir;    // <attempt dir>/<local_rank>, where stderr.log may be
  // Set when the file-timer watchdog sent the signal that ended it: the
  // expired deadline ("scope train.py#42 expired 1.0 s ago, SIGKILL sent").
  std::string watchdog;
  // Set when dtrun killed it after detecting a hang: where it was stuck and
  // where its stacks are.
  std::string hang;
  // The interpreter that ran it and what chose it ("/usr/bin/python3
  // (python3 on PATH)"); empty for --no-python programs.
  std::string interpreter;
  // Its memory cgroup's OOM-kill count rose while it ran (oom_count.h).
  bool oom_killed = false;
  // With `hang`: the section it overstayed (--section-timeouts); empty
  // for a job-wide hang.
  std::string hang_section;
};

// Builds the record: reads the error file and, when there is none, the
// tail of <rank_dir>/stderr.log if the output was redirected there.
failure_record make_failure_record(const worker_exit& exit, const error_file_limits& limits = {});

// The last `max_lines` lines of the file, reading at most `max_bytes` from
// its end. Empty when the file is missing, empty, or not a regular file
// (a FIFO, a directory, a symbolic link: never opened for a read that
// could block).
std::vector<std::string> read_log_tail(const std::string& path, std::size_t max_lines = 8,
                                       std::size_t max_bytes = 2048);

// Index of the root cause in `failures` (see above); failures is non-empty.
std::size_t root_cause_index(const std::vector<failure_record>& failures);

// "exit code 3" / "signal 11 (SIGSEGV), exit code 139".
std::string describe_exit(int exit_code, int signal);

struct summary_context {
  std::string program;  // the script or program, as the user named it
  std::string run_id;
  std::string outcome;  // "no restarts allowed: --max-restarts=0", "all 2 restart(s) used", ...
  // Workers of this node that dtrun stopped in the failed round (global ranks).
  std::vector<int> stopped_ranks;
  std::string this_host;
  int this_node_rank = 0;
  std::size_t published = 0;  // failures counted job-wide (may exceed those read)
};

// The one-screen summary (lines without the "dtrun: " prefix, which the
// agent's log adds). `failures` is non-empty.
std::string format_summary(const std::vector<failure_record>& failures, const summary_context& ctx);

}  // namespace dtrun::agent
