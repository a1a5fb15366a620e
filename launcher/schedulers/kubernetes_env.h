// In a Kubernetes training pod (Kubeflow's PyTorchJob) or on a platform
// that sets node-level MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK: derive a
// static rendezvous from them (docs/schedulers.md).
#pragma once

#include "launcher/cli/launch_options.h"
#include "launcher/schedulers/scheduler_env.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {

// Does nothing when the four variables are not all set, or are a torchrun
// worker's. Throws usage_error on contradictory values.
void derive_node_env(launch_options& options, const env_map& env, scheduler_env& sched);

}  // namespace dtrun::launcher
