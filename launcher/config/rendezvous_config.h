// How a multi-node run meets: torchrun's --rdzv-* and static flags turned
// into the settings of dtrun's rendezvous handler.
//
//   c10d (default when --rdzv-endpoint is given): --nnodes=MIN:MAX, the store
//     on the endpoint, hosted by the node the endpoint names (or is_host=1).
//   etcd-v3 (also "etcd", "etcd-v2"): the same rounds in an etcd cluster,
//     --rdzv-endpoint its members; no node hosts the rendezvous.
//   static (torchrun's default without an endpoint): --nnodes=N,
//     --node-rank=R, the store on --master-addr:--master-port, hosted by
//     node rank 0; ranks are pinned.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "launcher/cli/launch_options.h"
#include "rendezvous/algorithm/dynamic_rendezvous.h"
#include "rendezvous/etcd/etcd_options.h"

namespace dtrun::launcher {

struct node_range;

struct multi_node_config {
  std::string backend;  // "c10d", "etcd-v3" or "static"
  // The rendezvous's settings but two: the run id and the restart budget
  // are the job's, kept once in the agent's options (launch_config's
  // agent.spec) and joined to these by rendezvous_options() (launch_config.h)
  // when the rendezvous is made; here they stay unset.
  rendezvous::dynamic_rendezvous_options rendezvous;
  // The etcd cluster, for etcd-v3 (the rendezvous' store_factory is made
  // from it when the run starts, on the agent's event loop); its run id,
  // likewise, is joined by etcd_options().
  std::optional<rendezvous::etcd_options> etcd;
  // Which setting decided that this node hosts the store, for --dry-run.
  std::string host_decided_by;
  // One line each, said before the launch (a flag that has no effect here).
  std::vector<std::string> warnings;
};

// "k=v,k=v" -> map. Throws usage_error on a malformed pair.
std::map<std::string, std::string> parse_rdzv_conf(const std::string& text);

// The rendezvous's join timeout as --rdzv-conf gives it (join_timeout, or
// torchrun's older `timeout`; 600 s by default). Throws usage_error.
std::chrono::milliseconds rdzv_join_timeout(const std::map<std::string, std::string>& conf);

// The multi-node settings for these flags, or nullopt for a single-node
// run. Throws usage_error with what to change.
std::optional<multi_node_config> resolve_multi_node(const launch_options& options, int min_nodes,
                                                    int max_nodes, int nproc_per_node);

nlohmann::json to_json(const multi_node_config& config);

}  // namespace dtrun::launcher
