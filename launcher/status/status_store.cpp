#include "launcher/status/status_store.h"

#include <vector>

#include <fmt/format.h>

#include "rendezvous/algorithm/rendezvous_keys.h"
#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/printable.h"

namespace dtrun::launcher {

namespace {
constexpr int max_nodes = 100'000;  // as --nnodes
}

// The keys the agents publish under (rendezvous_keys, docs/rendezvous.md).
std::string status_count_key(const std::string& run_id) {
  return rendezvous::rendezvous_keys(run_id).status_nodes();
}

std::string status_node_key(const std::string& run_id, int node_rank) {
  return rendezvous::rendezvous_keys(run_id).status_node(node_rank);
}

std::optional<agent::job_status> read_job_status(rendezvous::store& store,
                                                 const std::string& run_id, std::string& error) {
  auto count_key = status_count_key(run_id);
  if (!store.check({count_key})) {
    error = fmt::format("no dtrun agent published a status for run id '{}' in this store "
                        "(is the job running, with this --rdzv-id?)",
                        printable(run_id));
    return std::nullopt;
  }
  auto text = store.get(count_key);
  int count = parse_whole<int>(text).value_or(0);
  if (count < 1 || count > max_nodes) {
    error = fmt::format("{} holds '{}', not a node count in 1..{}", count_key,
                        printable(text.substr(0, 40)), max_nodes);
    return std::nullopt;
  }
  std::vector<std::optional<agent::job_status>> per_node(static_cast<std::size_t>(count));
  for (int rank = 0; rank < count; ++rank) {
    auto key = status_node_key(run_id, rank);
    if (!store.check({key})) continue;
    std::string ignored;
    per_node[static_cast<std::size_t>(rank)] = agent::parse_status(store.get(key), ignored);
  }
  return agent::merge_nodes(per_node);
}

}  // namespace dtrun::launcher
