#include "launcher/scheduler_env.h"

#include <fmt/format.h>

#include "launcher/env_derivation.h"
#include "launcher/kubernetes_env.h"
#include "launcher/slurm_env.h"

namespace dtrun::launcher {

scheduler_env detect_scheduler_env(const launch_options& options, const env_map& env) {
  scheduler_env s;
  for (const auto& [flag, source] : options.given) {
    if (source.rfind("PET_", 0) != 0) continue;
    auto it = env.find(source);
    s.from_pet.push_back({flag, it == env.end() ? "" : it->second, source});
  }
  if (options.no_scheduler_detect || options.standalone) return s;
  // The derivation reads what it derived so far: a working copy of the
  // flags, with each override applied as it is made (env_derivation.h).
  launch_options o = options;
  // Kubeflow's operators before v1.7 spelled it PET_N_PROC_PER_NODE, which
  // torchrun never read.
  auto old = env_derivation::first_of(env, {"PET_N_PROC_PER_NODE"});
  if (old && !env_derivation::given(o, "nproc-per-node")) {
    env_derivation::deriver(o, s).nproc(old->value, old->name);
  }
  if (in_slurm_step(env)) {
    derive_slurm(o, env, s);
  } else {
    derive_node_env(o, env, s);
  }
  return s;
}

launch_options with_overrides(launch_options o, const flag_overrides& f) {
  if (f.nnodes) o.nnodes = std::to_string(*f.nnodes);
  if (f.node_rank) o.node_rank = *f.node_rank;
  if (f.nproc_per_node) o.nproc_per_node = *f.nproc_per_node;
  if (f.rdzv_backend) {
    o.rdzv_backend = *f.rdzv_backend;
    o.rdzv_backend_given = true;
  }
  if (f.rdzv_endpoint) o.rdzv_endpoint = *f.rdzv_endpoint;
  if (f.rdzv_id) o.rdzv_id = *f.rdzv_id;
  if (f.master_addr) o.master_addr = *f.master_addr;
  if (f.master_port) {
    o.master_port = *f.master_port;
    o.master_port_given = true;
  }
  return o;
}

std::vector<std::string> describe(const scheduler_report& s) {
  std::vector<std::string> lines;
  if (s.scheduler.empty() || s.derived.empty()) return lines;
  std::string what = s.style.empty() ? s.scheduler : s.scheduler + ", " + s.style;
  std::vector<std::string> parts;
  for (const auto& d : s.derived) parts.push_back(fmt::format("{}={} ({})", d.setting, d.value, d.source));
  lines.push_back(fmt::format("{}: derived {} (--no-scheduler-detect turns this off)", what,
                              fmt::join(parts, ", ")));
  return lines;
}

}  // namespace dtrun::launcher
