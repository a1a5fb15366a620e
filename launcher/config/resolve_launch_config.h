// The one step of the launcher's configuration pipeline (docs/design.md):
// the flags as given, with what scheduler detection derived, resolved into
// the launch_config the agent and the rendezvous are built from.
#pragma once

#include "launcher/cli/launch_options.h"
#include "launcher/config/launch_config.h"
#include "launcher/schedulers/scheduler_env.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {

// Validates and interprets the flags, with what scheduler detection
// derived (its flag overrides applied first, then its settings no flag
// gives). `env` is the agent's environment (for OMP_NUM_THREADS, the NCCL
// defaults and CUDA_VISIBLE_DEVICES). Throws usage_error.
launch_config resolve_launch_config(const launch_options& options, const env_map& env,
                                    const scheduler_env& scheduler = scheduler_env());

}  // namespace dtrun::launcher
