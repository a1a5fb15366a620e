// Zero-flag runs under a scheduler: inside a Slurm step, or in a pod that a
// Kubernetes operator (Kubeflow's PyTorchJob) or a similar platform gave
// node-level MASTER_ADDR / MASTER_PORT / WORLD_SIZE / RANK, dtrun derives
// the flags the user did not give. Explicit flags (and PET_* variables,
// which torchrun reads as flags) always win. What is derived from what is
// in docs/schedulers.md; --dry-run lists it under "derived".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/worker_env.h"
#include "launcher/cli.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {

struct launch_config;

// One setting dtrun filled in, and the variable(s) it came from.
struct derived_setting {
  std::string setting;  // a flag name ("nnodes") or a worker variable ("LOCAL_RANK")
  std::string value;
  std::string source;
};

struct scheduler_env {
  // "slurm", "kubernetes", "node-env" (MASTER_ADDR/WORLD_SIZE/RANK set by
  // some platform) or "" when none was detected.
  std::string scheduler;
  // Slurm: "agent-per-node" or "task-per-worker".
  std::string style;
  std::vector<derived_setting> derived;
  // Settings read from PET_* variables (torchrun's own environment flags).
  std::vector<derived_setting> from_pet;
  std::vector<std::string> warnings;

  // Applied to the resolved configuration (apply_scheduler_env):
  // c10d rendezvous with this node's group rank pinned (SLURM_NODEID).
  std::optional<int> pinned_group_rank;
  // Who hosts the store, decided by the scheduler's node id instead of
  // matching host names.
  std::optional<bool> host_store;
  std::string host_store_because;
  // Worker variables dtrun sets instead of its own (task-per-worker).
  env_map worker_env;
  // Signals forwarded on top of the defaults (SIGUSR1/SIGUSR2 under Slurm).
  std::vector<int> extra_signals;
};

// Detects the scheduler from `env` and fills in the options not given.
// Does nothing with --no-scheduler-detect or --standalone. Throws
// usage_error when the scheduler's variables contradict each other or the
// flags.
scheduler_env detect_scheduler_env(launch_options& options, const env_map& env);

// The parts that live in the resolved configuration.
void apply_scheduler_env(const scheduler_env& sched, launch_config& config);

// One line per derived setting, for stderr before a launch.
std::vector<std::string> describe(const scheduler_env& sched);

// For --dry-run: adds "scheduler" and "derived" to `out` (to_json's
// output), and the worker variables and expected ranks to its workers.
void add_scheduler_json(nlohmann::json& out, const scheduler_env& sched,
                        const launch_config& config);

}  // namespace dtrun::launcher
