// torch.distributed.launch's ways, opt-in (docs/schedulers.md):
// --legacy-launch passes --local-rank=N (or --local_rank=N) to each worker
// right after the script, unless --use-env; --template-args fills in
// {rank}-style placeholders in the script's arguments. Also torchrun 2.10's
// --virtual-local-rank, which is applied at the same place.
#pragma once

#include "agent/spec/agent_options.h"
#include "agent/spec/worker_args.h"
#include "launcher/cli/launch_options.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {

// Throws usage_error for combinations torch.distributed.launch refuses.
// `env` is the agent's environment (its CUDA_VISIBLE_DEVICES, for
// --virtual-local-rank).
agent::worker_customization resolve_worker_args(const launch_options& options,
                                                const env_map& env = {});

// Applies the agent's worker customization to each local rank once, before
// anything starts, so what would fail a worker at spawn time (a local rank
// with no device under --virtual-local-rank) is one usage_error instead.
void check_worker_args(const agent::agent_options& options);

}  // namespace dtrun::launcher
