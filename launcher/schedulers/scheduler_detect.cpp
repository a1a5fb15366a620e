#include "launcher/schedulers/scheduler_detect.h"

#include "launcher/schedulers/env_derivation.h"
#include "launcher/schedulers/kubernetes_env.h"
#include "launcher/schedulers/slurm_env.h"

namespace dtrun::launcher {

scheduler_env detect_scheduler_env(const launch_options& options, const env_map& env) {
  scheduler_env s;
  for (const auto& [flag, variable] : options.from_variables) {
    auto it = env.find(variable);
    s.from_pet.push_back({flag, it == env.end() ? "" : it->second, variable});
  }
  if (options.no_scheduler_detect || options.standalone) return s;
  // The derivation reads what it derived so far: a working copy of the
  // flags, with each override applied as it is made (env_derivation.h).
  launch_options o = options;
  // Kubeflow's operators before v1.7 spelled it PET_N_PROC_PER_NODE, which
  // torchrun never read.
  auto old = env_derivation::first_of(env, {"PET_N_PROC_PER_NODE"});
  if (old && !o.nproc_per_node.given()) {
    env_derivation::deriver(o, s).nproc(old->value, old->name);
  }
  if (in_slurm_step(env)) {
    derive_slurm(o, env, s);
  } else {
    derive_node_env(o, env, s);
  }
  return s;
}

}  // namespace dtrun::launcher
