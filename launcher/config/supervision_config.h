// The part of resolve_launch_config (launch_config.h) that says how the
// agent supervises its workers: the worker group, restarts and their
// limits, timeouts, the stack hook, node health checks, metrics, the
// signals handled and preemption, the log folder and verbosity.
#pragma once

#include "launcher/config/launch_config.h"
#include "launcher/schedulers/scheduler_env.h"

namespace dtrun::launcher {

// Fills config.agent's supervision fields from `options` (already merged
// with the scheduler's flags) and `sched`; throws usage_error on a value
// out of range or flags that contradict each other.
void resolve_supervision(const launch_options& options, const scheduler_env& sched,
                         launch_config& config);

}  // namespace dtrun::launcher
