// Per-worker edits to a worker's command line and environment that only a
// round can decide: torchrun's `${local_rank}` macro (always),
// torch.distributed.launch's --local-rank argument, {rank}-style
// placeholders in the script's arguments, fixed variables a scheduler
// dictates (Slurm's one-task-per-worker style), and --virtual-local-rank.
//
// Applied to each worker's spawn request just before it starts, after the
// agent laid its own variables on top of the inherited environment, so the
// values used are exactly what the worker sees.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/base/env_map.h"

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
  // --virtual-local-rank: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES naming the
  // worker's one device, mapped through `parent_visible_devices` (the
  // agent's CUDA_VISIBLE_DEVICES when the launch was resolved; nullopt:
  // unset), see agent/spec/virtual_local_rank.h.
  bool virtual_local_rank = false;
  std::optional<std::string> parent_visible_devices;
  // The list came from HIP_VISIBLE_DEVICES (torch 2.15): the worker gets its
  // device in HIP_VISIBLE_DEVICES too.
  bool parent_is_hip = false;

  // Whether a worker's arguments may differ from the common ones (the
  // `${local_rank}` macro is checked separately: has_local_rank_macro).
  bool changes_args() const { return local_rank != local_rank_arg::none || template_args; }
};

// `text` with the known placeholders replaced from `env` (a worker's final
// environment); anything else in braces is left as it is.
std::string expand_placeholders(const std::string& text, const env_map& env);

// Whether any of `args` contains a '$' (where the `${local_rank}` macro
// could be).
bool has_local_rank_macro(const std::vector<std::string>& args);

// Applies `c` to one worker's request, in torchrun's order: env overrides
// first; then, with the worker's local rank (env's LOCAL_RANK), the
// `${local_rank}` macro in every argument (torchrun substitutes them all,
// script path included), the placeholders, the --local-rank argument; last
// --virtual-local-rank's LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES, so the
// arguments name the real local rank as with torchrun. Throws
// no_visible_device (agent/spec/virtual_local_rank.h).
void customize_worker(const worker_customization& c, std::vector<std::string>& args,
                      env_map& env);

}  // namespace dtrun::agent
