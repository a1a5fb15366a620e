// torch.distributed.launch's ways, opt-in (docs/schedulers.md):
// --legacy-launch passes --local-rank=N (or --local_rank=N) to each worker
// right after the script, unless --use-env; --template-args fills in
// {rank}-style placeholders in the script's arguments.
#pragma once

#include "agent/worker_args.h"
#include "launcher/cli.h"

namespace dtrun::launcher {

// Throws usage_error for combinations torch.distributed.launch refuses.
agent::worker_customization resolve_worker_args(const launch_options& options);

}  // namespace dtrun::launcher
