// dtrun's own exit codes, the way shells and tini report them (the
// agent's exit_status.h decodes a worker's: 128+n for signal n).
#pragma once

namespace dtrun {

inline constexpr int exit_usage = 2;            // a command line dtrun cannot run
// This node's health check failed (docs/agent.md, "Node health"): it did
// not join, or it left; the job may go on without it. EX_TEMPFAIL of
// sysexits.h: the node may take part again once repaired.
inline constexpr int exit_node_unhealthy = 75;
inline constexpr int exit_not_executable = 126;  // the program exists but cannot be executed
inline constexpr int exit_not_found = 127;       // the program was not found

}  // namespace dtrun
