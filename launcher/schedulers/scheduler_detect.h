// Which scheduler runs dtrun (a Slurm step, a Kubernetes pod, a platform
// that sets MASTER_ADDR/RANK), and what it says of the flags not given:
// the scheduler readers (slurm_env.h, kubernetes_env.h) behind one call.
// What it returns is scheduler_env.h's.
#pragma once

#include "launcher/cli/launch_options.h"
#include "launcher/schedulers/scheduler_env.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {

// Detects the scheduler from `env` and derives the flags not given in
// `options`. Derives nothing with --no-scheduler-detect or --standalone.
// Throws usage_error when the scheduler's variables contradict each other
// or the flags.
scheduler_env detect_scheduler_env(const launch_options& options, const env_map& env);

}  // namespace dtrun::launcher
