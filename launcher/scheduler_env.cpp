#include "launcher/scheduler_env.h"

#include <algorithm>

#include <fmt/format.h>

#include "launcher/env_derivation.h"
#include "launcher/kubernetes_env.h"
#include "launcher/launch_config.h"
#include "launcher/slurm_env.h"

namespace dtrun::launcher {


scheduler_env detect_scheduler_env(launch_options& o, const env_map& env) {
  scheduler_env s;
  for (const auto& [flag, source] : o.given) {
    if (source.rfind("PET_", 0) != 0) continue;
    auto it = env.find(source);
    s.from_pet.push_back({flag, it == env.end() ? "" : it->second, source});
  }
  if (o.no_scheduler_detect || o.standalone) return s;
  // Kubeflow's operators before v1.7 spelled it PET_N_PROC_PER_NODE, which
  // torchrun never read.
  auto old = env_derivation::first_of(env, {"PET_N_PROC_PER_NODE"});
  if (old && !env_derivation::given(o, "nproc-per-node")) {
    o.nproc_per_node = old->value;
    s.derived.push_back({"nproc-per-node", old->value, old->name});
  }
  if (in_slurm_step(env)) {
    derive_slurm(o, env, s);
  } else {
    derive_node_env(o, env, s);
  }
  return s;
}

void apply_scheduler_env(const scheduler_env& s, launch_config& c) {
  if (c.multi_node) {
    auto& r = c.multi_node->rendezvous;
    if (s.pinned_group_rank && c.multi_node->backend == "c10d" && r.fixed_rank < 0) {
      r.fixed_rank = *s.pinned_group_rank;
    }
    if (s.host_store) {
      r.host_store = *s.host_store;
      r.join_if_store_port_in_use = false;
      c.multi_node->host_decided_by = s.host_store_because;
    }
  }
  for (int sig : s.extra_signals) {
    if (std::find(c.signals.begin(), c.signals.end(), sig) == c.signals.end()) {
      c.signals.push_back(sig);
    }
  }
  for (const auto& [k, v] : s.worker_env) c.worker_args.env_overrides[k] = v;
  c.warnings.insert(c.warnings.end(), s.warnings.begin(), s.warnings.end());
}

std::vector<std::string> describe(const scheduler_env& s) {
  std::vector<std::string> lines;
  if (s.scheduler.empty() || s.derived.empty()) return lines;
  std::string what = s.style.empty() ? s.scheduler : s.scheduler + ", " + s.style;
  std::vector<std::string> parts;
  for (const auto& d : s.derived) parts.push_back(fmt::format("{}={} ({})", d.setting, d.value, d.source));
  lines.push_back(fmt::format("{}: derived {} (--no-scheduler-detect turns this off)", what,
                              fmt::join(parts, ", ")));
  return lines;
}

void add_scheduler_json(nlohmann::json& out, const scheduler_env& s, const launch_config& c) {
  auto list = [](const std::vector<derived_setting>& settings) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& d : settings) {
      a.push_back({{"setting", d.setting}, {"value", d.value}, {"source", d.source}});
    }
    return a;
  };
  out["scheduler"] = s.scheduler.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.scheduler);
  if (!s.style.empty()) out["scheduler_style"] = s.style;
  out["derived"] = list(s.derived);
  out["from_pet_env"] = list(s.from_pet);

  // The ranks each worker will get, where a fixed node rank and node count
  // decide them (every node running the same number of workers).
  int group_rank = -1;
  int groups = c.nnodes.min == c.nnodes.max ? c.nnodes.max : -1;
  if (!c.multi_node) {
    group_rank = 0;
    groups = 1;
  } else if (c.multi_node->rendezvous.fixed_rank >= 0) {
    group_rank = c.multi_node->rendezvous.fixed_rank;
  }
  for (auto& w : out["workers"]) {
    auto& env = w["env"];
    int local_rank = w["local_rank"].get<int>();
    if (group_rank >= 0 && groups > 0) {
      env["RANK"] = std::to_string(group_rank * c.nproc_per_node + local_rank);
      env["WORLD_SIZE"] = std::to_string(groups * c.nproc_per_node);
      env["GROUP_RANK"] = std::to_string(group_rank);
    }
    for (const auto& [k, v] : c.worker_args.env_overrides) env[k] = v;
    if (c.worker_args.changes_args() || c.worker_args.virtual_local_rank ||
        agent::has_local_rank_macro(c.args)) {
      // This worker's own argv (${local_rank}, --local-rank, placeholders)
      // and virtual local rank, as far as known.
      env_map known;
      for (const auto& [k, v] : env.items()) known[k] = v.get<std::string>();
      std::vector<std::string> args = c.args;
      agent::customize_worker(c.worker_args, args, known);
      for (const auto& [k, v] : known) env[k] = v;
      nlohmann::json argv = nlohmann::json::array({c.program});
      for (const auto& a : args) argv.push_back(a);
      w["argv"] = argv;
    }
  }
}

}  // namespace dtrun::launcher
