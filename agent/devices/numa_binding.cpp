#include "agent/devices/numa_binding.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "agent/devices/cpu_list.h"

namespace dtrun::agent {
namespace {

// The allowed CPUs of one NUMA node (torch's
// _get_allowed_logical_cpu_indices_for_numa_node).
std::vector<int> allowed_cpus_of_node(const cpu_topology& t, int node) {
  auto it = t.numa_node_cpus.find(node);
  if (it == t.numa_node_cpus.end()) return {};
  std::vector<int> members = it->second;
  std::vector<int> allowed = t.allowed;
  std::sort(members.begin(), members.end());
  std::sort(allowed.begin(), allowed.end());
  std::vector<int> cpus;
  std::set_intersection(members.begin(), members.end(), allowed.begin(), allowed.end(),
                        std::back_inserter(cpus));
  return cpus;
}

// CPUs grouped by a key (their core, their cache), groups ordered by key.
std::map<int, std::vector<int>> group_by(const std::vector<int>& cpus,
                                         const std::map<int, int>& key_of) {
  std::map<int, std::vector<int>> groups;
  for (int cpu : cpus) {
    auto key = key_of.find(cpu);
    groups[key == key_of.end() ? cpu : key->second].push_back(cpu);
  }
  return groups;
}

// GPU `gpu`'s index among the GPUs on its node (sorted), and their count.
std::pair<std::size_t, std::size_t> place_on_node(const std::vector<int>& gpu_numa_nodes,
                                                  std::size_t gpu) {
  std::size_t before = 0;
  std::size_t total = 0;
  for (std::size_t i = 0; i < gpu_numa_nodes.size(); ++i) {
    if (gpu_numa_nodes[i] != gpu_numa_nodes[gpu]) continue;
    if (i < gpu) ++before;
    ++total;
  }
  return {before, total};
}

std::vector<int> socket_cpus(const cpu_topology& t, int node, const char* mode) {
  // As torch: a node's socket is the socket of its lowest allowed CPU.
  auto socket_of_node = [&](int n) -> std::optional<int> {
    std::vector<int> cpus = allowed_cpus_of_node(t, n);
    if (cpus.empty()) return std::nullopt;
    auto package = t.package_of.find(cpus.front());
    if (package == t.package_of.end()) {
      throw numa_binding_error(fmt::format(
          "--numa-binding={}: {} has no socket (package) level; use --numa-binding=node", mode,
          t.source));
    }
    return package->second;
  };
  auto socket = socket_of_node(node);
  if (!socket) return {};
  std::vector<int> cpus;
  for (const auto& [n, all] : t.numa_node_cpus) {
    // Nodes without allowed CPUs (memory-only, or outside our affinity)
    // have no socket to compare; they add no CPU either.
    if (socket_of_node(n) == socket) {
      std::vector<int> more = allowed_cpus_of_node(t, n);
      cpus.insert(cpus.end(), more.begin(), more.end());
    }
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::vector<int> exclusive_cpus(const cpu_topology& t, int node,
                                const std::vector<int>& gpu_numa_nodes, std::size_t gpu) {
  auto [index, gpus_on_node] = place_on_node(gpu_numa_nodes, gpu);
  auto cores = group_by(allowed_cpus_of_node(t, node), t.core_of);
  std::size_t per_gpu = cores.size() / gpus_on_node;
  std::size_t extra = cores.size() % gpus_on_node;
  if (per_gpu < 1) {
    throw numa_binding_error(fmt::format(
        "--numa-binding=exclusive: NUMA node {} has {} allowed physical core(s) for {} GPUs; use "
        "--numa-binding=node or give dtrun more CPUs",
        node, cores.size(), gpus_on_node));
  }
  std::size_t start = index * per_gpu + std::min(index, extra);
  std::size_t end = start + per_gpu + (index < extra ? 1 : 0);
  std::vector<int> cpus;
  std::size_t i = 0;
  for (const auto& [key, members] : cores) {
    if (i >= start && i < end) cpus.insert(cpus.end(), members.begin(), members.end());
    ++i;
  }
  return cpus;
}

std::vector<int> core_complex_cpus(const cpu_topology& t, int node,
                                   const std::vector<int>& gpu_numa_nodes, std::size_t gpu) {
  std::vector<int> allowed = allowed_cpus_of_node(t, node);
  if (allowed.empty()) return {};
  for (int cpu : allowed) {
    if (!t.cache_of.count(cpu)) {
      throw numa_binding_error(fmt::format(
          "--numa-binding=core-complex: {} lists no cache for CPU {}; use --numa-binding=node",
          t.source, cpu));
    }
  }
  auto by_cache = group_by(allowed, t.cache_of);
  std::vector<std::pair<int, std::vector<int>>> groups(by_cache.begin(), by_cache.end());
  // Largest groups first, then by lowest CPU (torch's order).
  std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return a.second.size() > b.second.size();
  });
  std::size_t index = place_on_node(gpu_numa_nodes, gpu).first;
  return groups[index % groups.size()].second;
}

}  // namespace

std::optional<numa_affinity> parse_numa_affinity(std::string_view text) {
  if (text == "node") return numa_affinity::node;
  if (text == "socket") return numa_affinity::socket;
  if (text == "exclusive") return numa_affinity::exclusive;
  if (text == "core-complex") return numa_affinity::core_complex;
  return std::nullopt;
}

const char* to_string(numa_affinity mode) {
  switch (mode) {
    case numa_affinity::node: return "node";
    case numa_affinity::socket: return "socket";
    case numa_affinity::exclusive: return "exclusive";
    case numa_affinity::core_complex: return "core-complex";
  }
  return "node";
}

std::vector<std::vector<int>> numa_binding_cpus(numa_affinity mode, const cpu_topology& topology,
                                                const std::vector<int>& gpu_numa_nodes,
                                                int local_world_size) {
  const char* name = to_string(mode);
  if (gpu_numa_nodes.empty()) {
    throw numa_binding_error(fmt::format(
        "--numa-binding={} binds local rank n near GPU n, but no GPU is visible; drop "
        "--numa-binding on machines without GPUs",
        name));
  }
  if (local_world_size > static_cast<int>(gpu_numa_nodes.size())) {
    throw numa_binding_error(fmt::format(
        "--numa-binding={}: local rank {} has no GPU {} ({} visible); run at most {} workers "
        "(--nproc-per-node=gpu) or drop --numa-binding",
        name, gpu_numa_nodes.size(), gpu_numa_nodes.size(), gpu_numa_nodes.size(),
        gpu_numa_nodes.size()));
  }
  std::vector<std::vector<int>> per_rank;
  for (int rank = 0; rank < local_world_size; ++rank) {
    auto gpu = static_cast<std::size_t>(rank);
    int node = gpu_numa_nodes[gpu];
    if (!topology.numa_node_cpus.count(node)) {
      throw numa_binding_error(fmt::format(
          "--numa-binding={}: GPU {} is on NUMA node {}, which {} does not have; drop "
          "--numa-binding",
          name, rank, node, topology.source));
    }
    std::vector<int> cpus;
    switch (mode) {
      case numa_affinity::node: cpus = allowed_cpus_of_node(topology, node); break;
      case numa_affinity::socket: cpus = socket_cpus(topology, node, name); break;
      case numa_affinity::exclusive:
        cpus = exclusive_cpus(topology, node, gpu_numa_nodes, gpu);
        break;
      case numa_affinity::core_complex:
        cpus = core_complex_cpus(topology, node, gpu_numa_nodes, gpu);
        break;
    }
    if (cpus.empty()) {
      auto all = topology.numa_node_cpus.at(node);
      throw numa_binding_error(fmt::format(
          "--numa-binding={}: none of NUMA node {}'s CPUs ({}) is allowed to dtrun (allowed: {}); "
          "widen dtrun's CPU affinity or drop --numa-binding",
          name, node, all.empty() ? "none" : format_cpu_list(all),
          format_cpu_list(topology.allowed)));
    }
    per_rank.push_back(std::move(cpus));
  }
  return per_rank;
}

}  // namespace dtrun::agent
