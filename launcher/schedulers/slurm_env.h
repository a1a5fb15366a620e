// Inside a Slurm step (srun's tasks): derive the rendezvous from the
// step's variables, one agent per node or one worker per task
// (docs/schedulers.md).
#pragma once

#include "launcher/cli/launch_options.h"
#include "launcher/schedulers/scheduler_env.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {

// A parallel step, not an sbatch/salloc shell outside one.
bool in_slurm_step(const env_map& env);

// Fills in the flags not given; throws usage_error on contradictory
// variables.
void derive_slurm(launch_options& options, const env_map& env, scheduler_env& sched);

}  // namespace dtrun::launcher
