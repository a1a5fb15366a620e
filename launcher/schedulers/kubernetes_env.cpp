#include "launcher/schedulers/kubernetes_env.h"

#include <cstdint>

#include <fmt/format.h>

#include "launcher/schedulers/env_derivation.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {

using namespace env_derivation;

// Kubeflow's PyTorchJob (and platforms like it) give each pod node-level
// MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK; operators from v1.7 also
// PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR/PORT
// (read as flags already). Inside a torchrun/dtrun worker the same names
// are per-process values: LOCAL_RANK and friends tell them apart.
void derive_node_env(launch_options& o, const env_map& env, scheduler_env& s) {
  if (!has(env, "MASTER_ADDR") || !has(env, "MASTER_PORT") || !has(env, "WORLD_SIZE") ||
      !has(env, "RANK")) {
    return;
  }
  if (has(env, "LOCAL_RANK") || has(env, "GROUP_RANK") || has(env, "TORCHELASTIC_RUN_ID")) return;
  s.scheduler = has(env, "KUBERNETES_SERVICE_HOST") ? "kubernetes" : "node-env";
  if (o.rdzv_endpoint.given()) return;  // elastic: PET_RDZV_* decide
  deriver d(o, s);
  variable world{"WORLD_SIZE", env.at("WORLD_SIZE")};
  variable rank{"RANK", env.at("RANK")};
  int world_size = number_of(world);
  if (!o.nnodes.given()) {
    d.nnodes(world_size, "WORLD_SIZE (pods: without PET_NNODES, WORLD_SIZE counts nodes)");
  } else if (const nproc_flag& nproc = o.nproc_per_node.value; nproc.is_number()) {
    // Operators from v1.7 set WORLD_SIZE = pods x nproc; older ones pods.
    int nodes = o.nnodes.value.range().max;
    if (world_size != nodes && static_cast<std::int64_t>(world_size) !=
                                   static_cast<std::int64_t>(nodes) * nproc.count()) {
      s.warnings.push_back(fmt::format(
          "WORLD_SIZE={} is neither --nnodes={} nor nodes x --nproc-per-node={}; the workers get "
          "dtrun's own WORLD_SIZE",
          world_size, o.nnodes.value.text(), nproc.text()));
    }
  }
  d.node_rank(number_of(rank), "RANK (the pod's index)");
  d.master_addr(env.at("MASTER_ADDR"), "MASTER_ADDR");
  d.master_port(number_of({"MASTER_PORT", env.at("MASTER_PORT")}), "MASTER_PORT");
  int nodes = o.nnodes.value.range().max;
  if (o.node_rank.value >= nodes) {
    throw off_hint(fmt::format("this pod's node rank {} is not below the {} nodes (RANK={}, "
                               "WORLD_SIZE={})",
                               o.node_rank.value, nodes, rank.value, world.value));
  }
}

}  // namespace dtrun::launcher
