// Per-worker edits to a worker's command line and environment that only a
// round can decide: torch.distributed.launch's --local-rank argument,
// {rank}-style placeholders in the script's arguments, and fixed variables
// a scheduler dictates (Slurm's one-task-per-worker style).
//
// Applied to each worker's spawn request just before it starts, after the
// agent laid its own variables on top of the inherited environment, so the
// values used are exactly what the worker sees.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "agent/worker_env.h"

namespace dtrun::agent {

struct spawn_request;

enum class local_rank_arg {
  none,        // torchrun: LOCAL_RANK in the environment only
  dash,        // torch.distributed.launch of torch >= 2.0: --local-rank=N
  underscore,  // torch.distributed.launch of torch 1.x: --local_rank=N
};

struct worker_customization {
  // Variables that replace the agent's own (e.g. LOCAL_RANK=SLURM_LOCALID).
  env_map env_overrides;
  // Where the script's own arguments start in the worker's args (after
  // "-u script" for Python); the local-rank argument goes there, as
  // torch.distributed.launch puts it, and only these are templated.
  std::size_t script_args_at = 0;
  local_rank_arg local_rank = local_rank_arg::none;
  // Replace {rank}, {local_rank}, {world_size}, {local_world_size},
  // {group_rank}/{node_rank}, {group_world_size}, {round}/{restart_count}
  // in the script's arguments.
  bool template_args = false;

  bool empty() const {
    return env_overrides.empty() && local_rank == local_rank_arg::none && !template_args;
  }
};

// `text` with the known placeholders replaced from `env` (a worker's final
// environment); anything else in braces is left as it is.
std::string expand_placeholders(const std::string& text, const env_map& env);

// Applies `c` to one worker's request: env overrides first, then the
// arguments, which read the final environment.
void customize_worker(const worker_customization& c, std::vector<std::string>& args,
                      env_map& env);

}  // namespace dtrun::agent
