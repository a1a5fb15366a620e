// Zero-flag runs under a scheduler: inside a Slurm step, or in a pod that a
// Kubernetes operator (Kubeflow's PyTorchJob) or a similar platform gave
// node-level MASTER_ADDR / MASTER_PORT / WORLD_SIZE / RANK, dtrun derives
// the flags the user did not give. Explicit flags (and PET_* variables,
// which torchrun reads as flags) always win. What is derived from what is
// in docs/schedulers.md; --dry-run lists it under "derived".
//
// Here: what detection found, as values (its typed flag overrides and the
// settings no flag gives). Detection itself (scheduler_detect.h) reads the
// flags and returns them; the overrides are applied once, by
// resolve_launch_config (resolve_launch_config.h), before it resolves
// anything.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/cli/launch_options.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {

// One setting dtrun filled in, and the variable(s) it came from.
struct derived_setting {
  std::string setting;  // a flag name ("nnodes") or a worker variable ("LOCAL_RANK")
  std::string value;
  std::string source;
};

// What detection says it did: kept in the resolved configuration, printed
// before a launch (describe) and by --dry-run.
struct scheduler_report {
  // "slurm", "kubernetes", "node-env" (MASTER_ADDR/WORLD_SIZE/RANK set by
  // some platform) or "" when none was detected.
  std::string scheduler;
  // Slurm: "agent-per-node" or "task-per-worker".
  std::string style;
  std::vector<derived_setting> derived;
  // Settings read from PET_* variables (torchrun's own environment flags).
  std::vector<derived_setting> from_pet;
};

// The flags a scheduler fills in, each set only when the user gave no
// value (on the command line or as PET_*).
struct flag_overrides {
  std::optional<int> nnodes;
  std::optional<int> node_rank;
  // A count, or PET_N_PROC_PER_NODE's text as the operator wrote it
  // (parsed once, here).
  std::optional<nproc_flag> nproc_per_node;
  std::optional<std::string> rdzv_backend;
  std::optional<std::string> rdzv_endpoint;
  std::optional<std::string> rdzv_id;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

struct scheduler_env : scheduler_report {
  flag_overrides flags;
  std::vector<std::string> warnings;
  // Settings no flag gives:
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

// Sets the flags that `flags` overrides, typed, marked derived: the one
// place an override is applied (detection's working copy, and
// resolve_launch_config).
void apply_overrides(launch_options& options, const flag_overrides& flags);

// `options` with the scheduler's flag overrides applied.
launch_options with_overrides(launch_options options, const flag_overrides& flags);

// One line per derived setting, for stderr before a launch.
std::vector<std::string> describe(const scheduler_report& report);

}  // namespace dtrun::launcher
