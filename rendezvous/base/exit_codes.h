// dtrun's own exit codes, the way shells and tini report them (the
// agent's exit_status.h decodes a worker's: 128+n for signal n).
#pragma once

namespace dtrun {

inline constexpr int exit_usage = 2;            // a command line dtrun cannot run
// This node's health check failed (docs/agent.md, "Node health"): it did
// not join, or it left; the job may go on without it. EX_TEMPFAIL of
// sysexits.h: the node may take part again once repaired.
inline constexpr int exit_node_unhealthy = 75;
// Preempted (docs/agent.md, "Preemption"): this node was stopped (SIGTERM
// with --checkpoint-signal) after its workers were asked to save, or the
// job's workers all exited after a checkpoint asked for by a preemption
// notice. Requeue the job: it resumes from that checkpoint. Not a failure
// (1, or a worker's code) and not done (0).
inline constexpr int exit_preempted = 76;
inline constexpr int exit_not_executable = 126;  // the program exists but cannot be executed
inline constexpr int exit_not_found = 127;       // the program was not found

}  // namespace dtrun
