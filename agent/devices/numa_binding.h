// torchrun's --numa-binding (torch/numa/binding.py): each local rank n is
// bound to CPUs near GPU n, the device torch.cuda numbers n. The modes:
//   node          every allowed CPU of GPU n's NUMA node
//   socket        every allowed CPU of the NUMA nodes on that node's socket
//   exclusive     the node's physical cores split evenly among the GPUs on
//                 that node (the lowest-numbered GPUs get one extra core
//                 when it does not divide), whole cores with their
//                 hyperthreads
//   core-complex  one group of CPUs sharing a last-level cache on the
//                 node: the node's groups sorted largest first, GPU number
//                 k on the node gets group k modulo their count
// "Allowed" is the agent's own affinity: dtrun started under taskset or in
// a cgroup binds within it, as torch does.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "agent/devices/cpu_topology.h"

namespace dtrun::agent {

enum class numa_affinity { node, socket, exclusive, core_complex };

// "node", "socket", "exclusive", "core-complex"; nullopt for others.
std::optional<numa_affinity> parse_numa_affinity(std::string_view text);
const char* to_string(numa_affinity mode);

// A binding that cannot be made; what() is one line saying what to do.
class numa_binding_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Each local rank's CPUs (sorted Linux CPU numbers), for `local_world_size`
// workers. gpu_numa_nodes[i] is the NUMA node of GPU i, for every GPU the
// workers see (the exclusive and core-complex modes share a node among
// all of its GPUs). Throws numa_binding_error when a rank has no GPU, a
// GPU's node is not in the topology, the topology lacks the level the mode
// needs, or a rank would get no CPU.
std::vector<std::vector<int>> numa_binding_cpus(numa_affinity mode, const cpu_topology& topology,
                                                const std::vector<int>& gpu_numa_nodes,
                                                int local_world_size);

}  // namespace dtrun::agent
