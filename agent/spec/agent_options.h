// What one agent runs and how: the program, its workers, how they are
// stopped, watched and logged. The launcher fills it (launcher/main.cpp);
// elastic_agent reads it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "agent/spec/log_spec.h"
#include "agent/spec/report_options.h"
#include "agent/spec/restart_policy.h"
#include "agent/spec/section_timeouts.h"
#include "agent/spec/worker_args.h"
#include "agent/spec/worker_env.h"

namespace dtrun::agent {

// --node-health-check and its settings (docs/agent.md, "Node health").
struct node_health_options {
  // The command run by /bin/sh -c; empty: none.
  std::string command;
  // --node-health-check=builtin: a failed built-in check keeps the node
  // out; without it the built-ins only warn.
  bool builtin_gating = false;
  // Between checks while the workers run; 0: only before the first join.
  std::chrono::milliseconds interval = std::chrono::seconds(300);
  // Then the command's process group is killed and the check failed.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // The built-in disk check: free bytes wanted under the log folder.
  std::uint64_t min_free_disk = std::uint64_t{1} << 30;
  // The rendezvous endpoint's host, for the built-in check that it
  // resolves; empty: single node, nothing to resolve.
  std::string endpoint_host;
  // --storage-check: folders that must answer a 4 KiB write, fsync and
  // read within `timeout` (storage_probe.h); empty: none.
  std::vector<std::string> storage_paths;
  // Where the NIC built-in reads the kernel's view of the links
  // (nic_health.h); a fake tree in the tests.
  std::string sysfs_root = "/sys";

  // Whether anything can keep the node out (the built-ins alone only warn).
  bool gating() const { return !command.empty() || builtin_gating; }
};

// --quarantine-after and its settings (docs/agent.md, "Quarantine").
struct quarantine_options {
  // Machine failures in a row (failed health checks, workers killed by
  // SIGBUS...) before the machine is kept out; 0: never.
  int after = 0;
  // The first quarantine's length; each later one doubles, up to `longest`.
  std::chrono::milliseconds cooldown = std::chrono::seconds(60);
  std::chrono::milliseconds longest = std::chrono::hours(1);
  // --quarantine-file: the job's quarantined hosts, one per line; empty:
  // none written.
  std::string file;
  // This machine's key (machine_identity.h); empty: the agent finds it.
  std::string machine_key;

  bool enabled() const { return after > 0; }
};

// --preflight and --preflight-action (docs/agent.md, "Preflight").
enum class preflight_mode {
  off,
  once,         // in the job's first round (round 0) only: later rounds start at once
  every_round,  // before every round's training
};
enum class preflight_action {
  warn,        // name the slow node; it stays
  leave,       // it leaves as an unhealthy node does (a spare or a smaller job)
  quarantine,  // it is quarantined (--quarantine-after's record)
};
// The flags' words for them (--preflight=every-round, --preflight-action=leave).
inline const char* preflight_mode_name(preflight_mode mode) {
  switch (mode) {
    case preflight_mode::off: return "off";
    case preflight_mode::once: return "once";
    case preflight_mode::every_round: return "every-round";
  }
  return "off";
}
inline const char* preflight_action_name(preflight_action action) {
  switch (action) {
    case preflight_action::warn: return "warn";
    case preflight_action::leave: return "leave";
    case preflight_action::quarantine: return "quarantine";
  }
  return "warn";
}
// The end of the line that names a node (the preflight's slow node, a
// straggler): " (kept: --FLAG=warn)", "; it leaves the job
// (--FLAG=leave)", or "; " and why it stays.
inline std::string verdict_consequence(const std::string& flag, preflight_action action,
                                       bool leaves, const std::string& kept_because) {
  const std::string setting = "--" + flag + "=" + preflight_action_name(action);
  if (action == preflight_action::warn) return " (kept: " + setting + ")";
  if (!leaves) return "; " + kept_because;
  return "; it leaves the job (" + setting + ")";
}

struct preflight_options {
  preflight_mode mode = preflight_mode::off;
  preflight_action action = preflight_action::warn;
  // The check's workers and the exchange of figures each get this long;
  // then the training starts without the figures that are missing.
  std::chrono::milliseconds timeout = std::chrono::seconds(120);
  // Each exchange's bytes (each way): enough to measure a link rather than
  // its latency, small enough to take a fraction of a second.
  long long payload_bytes = 4LL << 20;

  // Whether round `round`'s training is preceded by the check.
  bool due(std::int64_t round) const {
    return mode == preflight_mode::every_round || (mode == preflight_mode::once && round == 0);
  }
};

// --straggler-action and --worker-timing (docs/stragglers.md): what a node
// named a straggler does (the same three answers as --preflight-action's),
// and whether the workers' start-up hook times their own work per step.
struct straggler_options {
  preflight_action action = preflight_action::warn;
  bool worker_timing = true;
};

struct agent_options {
  worker_group_spec spec;
  // The resolved program and its arguments (argv[1..]).
  std::string program;
  std::vector<std::string> args;
  // The script, module or program as the user named it, for the failure
  // summary; empty: `program`.
  std::string script_name;
  // The interpreter of Python workers and what chose it, for failure
  // hints ("/usr/bin/python3 (python3 on PATH)"); empty: not Python.
  std::string interpreter;
  // Per-worker argument and environment edits (legacy launch, templates).
  worker_customization worker_args;
  // Each local rank's CPUs (--numa-binding); empty: no binding.
  std::vector<std::vector<int>> worker_cpus;
  // Between the first (forwarded) signal and SIGKILL.
  std::chrono::milliseconds stop_timeout = std::chrono::seconds(30);
  // --hang-timeout: this long without progress from any worker of the job
  // is a hang (stacks captured, the group failed); 0: off.
  std::chrono::milliseconds hang_timeout{0};
  // --section-timeouts: how long a rank may stay in a named section
  // (section_timeouts.h); empty: not watched.
  agent::section_timeouts section_timeouts;
  // Load dtrun's start-up hook in the workers (Python workers only), so
  // their Python stacks can be captured.
  bool stack_hook = false;
  // --metrics-port (-1: no server; 0: any free port) and its address.
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  // The control socket `dtrun status` and `dtrun stacks` ask (tests of
  // the agent alone turn it off).
  bool control_socket = true;
  // Signals forwarded to the workers (SIGCHLD is always watched). SIGUSR1
  // and SIGUSR2 are only forwarded (Slurm's preemption notice: the workers
  // checkpoint and decide); the others also stop the workers.
  std::vector<int> signals;
  // Preemption (docs/agent.md, "Preemption"): the signal every worker of
  // the job gets, once per round, when a node is told it goes away (0:
  // off; SIGTERM then stops this node's workers as without it), and the
  // early notice that asks for that checkpoint without stopping (0: none).
  int checkpoint_signal = 0;
  int preempt_notice = 0;
  // Base folder for per-attempt error and log files; empty: a temporary
  // folder, removed when the agent ends unless log files were written.
  std::string log_dir;
  // Where the workers' stdout/stderr go (--redirects, --tee,
  // --local-ranks-filter); the default leaves them on the console.
  log_spec logs;
  // The agent's own one-line messages (default: stderr, "dtrun: " prefix).
  std::function<void(const std::string&)> log;
  // Verbosity and the event log (--quiet, -v, --event-log).
  report_options report;
  // --stop-on-stdin-eof (dtrun --hosts, docs/ssh.md): stdin is the pipe
  // from the launching dtrun, taken by the agent in run() (the workers get
  // /dev/null). A line naming one of `signals` acts as that signal;
  // end-of-file stops the workers as SIGTERM would (the launcher died or
  // the connection dropped).
  bool stop_on_stdin_eof = false;
  // Node health checks: built-ins before the first join (warnings unless
  // gating), the command and gating built-ins also while workers run.
  node_health_options health;
  quarantine_options quarantine;
  preflight_options preflight;
  straggler_options stragglers;
  // --no-restart-on: failures that end the job at once (restart_policy.h).
  std::vector<no_restart_rule> no_restart_on;
  // --preload: the modules Python workers' warm interpreter imports
  // (preload_runner.h); empty: workers start by exec.
  std::vector<std::string> preload;
  // --progress-file and --max-no-progress-restarts (0: never).
  std::string progress_file;
  int max_no_progress_restarts = 3;
  // --gpu-reclaim-timeout: how long the GPUs may take to be given back
  // after a stop before the node leaves; 0: not waited for.
  std::chrono::milliseconds gpu_reclaim_timeout = std::chrono::seconds(30);
};

}  // namespace dtrun::agent
