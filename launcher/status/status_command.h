// `dtrun status` and `dtrun stacks`: ask running agents what they do.
//
// Local agents are found through their control sockets
// (agent/monitor/control_client.h); a multi-node job through the rendezvous store
// (status_store.h). Exit codes: 0 done, 2 usage, 3 no running dtrun job
// found, 1 an agent could not be asked.
#pragma once

#include <optional>
#include <string>

namespace dtrun::launcher {

inline constexpr int exit_no_job = 3;

struct status_options {
  bool json = false;
  bool watch = false;
  double watch_seconds = 2;
  std::optional<int> agent_pid;  // ask only this agent
  std::string rdzv_endpoint;     // HOST:PORT: read the job from its store
  std::string rdzv_id;
};

// Parses `dtrun status` arguments (argv[0] is the command's name, e.g.
// "dtrun status"). Returns nullopt to go on, or the exit code to return
// with `output` holding what to print (help: 0, usage error: 2).
std::optional<int> parse_status_args(int argc, const char* const* argv, status_options& options,
                                     std::string& output);

// `dtrun status [--json] [--watch [SECONDS]] [--agent PID]
// [--rdzv-endpoint HOST:PORT --rdzv-id ID]`; argv as above. --json prints
// a JSON array with one dtrun.status/1 document per agent (one merged
// document for a store).
int run_status_command(int argc, char** argv);

// `dtrun stacks [--agent PID] [--json]`: asks each local agent (or one)
// for its workers' stacks ({"op":"stacks"}) and prints the reply's
// "summary" text and "files" list (--json: the reply as it came).
int run_stacks_command(int argc, char** argv);

}  // namespace dtrun::launcher
