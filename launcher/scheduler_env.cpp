#include "launcher/scheduler_env.h"

#include <fmt/format.h>

#include "launcher/env_derivation.h"
#include "launcher/kubernetes_env.h"
#include "launcher/slurm_env.h"

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

namespace {

// A typed override, set as it is (no text to parse again).
template <typename T, typename U>
void override_with(given_value<T>& flag, const std::optional<U>& value) {
  if (!value) return;
  flag.value = T(*value);
  flag.derived = true;
}

}  // namespace

void apply_overrides(launch_options& o, const flag_overrides& f) {
  override_with(o.nnodes, f.nnodes);
  override_with(o.node_rank, f.node_rank);
  override_with(o.nproc_per_node, f.nproc_per_node);
  override_with(o.rdzv_backend, f.rdzv_backend);
  override_with(o.rdzv_endpoint, f.rdzv_endpoint);
  override_with(o.rdzv_id, f.rdzv_id);
  override_with(o.master_addr, f.master_addr);
  override_with(o.master_port, f.master_port);
}

launch_options with_overrides(launch_options o, const flag_overrides& f) {
  apply_overrides(o, f);
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
