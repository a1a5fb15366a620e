#include "agent/devices/cpu_topology.h"

#include <hwloc.h>
#include <sched.h>

#include <functional>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

namespace dtrun::agent {
namespace {

using topology_ptr = std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)>;

// The first CPU of an object (its key), by Linux number.
int first_cpu(hwloc_const_cpuset_t set) { return hwloc_bitmap_first(set); }

std::vector<int> cpus_of(hwloc_const_cpuset_t set) {
  std::vector<int> cpus;
  int cpu = -1;
  hwloc_bitmap_foreach_begin(cpu, set) { cpus.push_back(cpu); }
  hwloc_bitmap_foreach_end();
  return cpus;
}

bool is_data_cache(hwloc_obj_type_t type) {
  return type == HWLOC_OBJ_L1CACHE || type == HWLOC_OBJ_L2CACHE || type == HWLOC_OBJ_L3CACHE ||
         type == HWLOC_OBJ_L4CACHE || type == HWLOC_OBJ_L5CACHE;
}

std::vector<int> current_affinity() {
  std::vector<int> cpus;
  // Big enough for any machine Linux supports (CONFIG_NR_CPUS <= 8192).
  constexpr int max_cpus = 8192;
  cpu_set_t* set = CPU_ALLOC(max_cpus);
  std::size_t size = CPU_ALLOC_SIZE(max_cpus);
  CPU_ZERO_S(size, set);
  if (::sched_getaffinity(0, size, set) == 0) {
    for (int cpu = 0; cpu < max_cpus; ++cpu) {
      if (CPU_ISSET_S(static_cast<std::size_t>(cpu), size, set)) cpus.push_back(cpu);
    }
  }
  CPU_FREE(set);
  return cpus;
}

cpu_topology extract(hwloc_topology_t topo, std::string source) {
  cpu_topology out;
  out.source = std::move(source);
  int numa_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < numa_nodes; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    int number = node->os_index == HWLOC_UNKNOWN_INDEX ? static_cast<int>(node->logical_index)
                                                       : static_cast<int>(node->os_index);
    out.numa_node_cpus[number] = cpus_of(node->cpuset);
  }
  int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  for (int i = 0; i < pus; ++i) {
    hwloc_obj_t pu = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PU, static_cast<unsigned>(i));
    int cpu = static_cast<int>(pu->os_index);
    out.core_of[cpu] = cpu;
    unsigned cache_depth = 0;
    for (hwloc_obj_t up = pu->parent; up != nullptr; up = up->parent) {
      if (up->type == HWLOC_OBJ_CORE && out.core_of[cpu] == cpu) {
        out.core_of[cpu] = first_cpu(up->cpuset);
      } else if (up->type == HWLOC_OBJ_PACKAGE) {
        out.package_of[cpu] = up->os_index == HWLOC_UNKNOWN_INDEX
                                  ? static_cast<int>(up->logical_index)
                                  : static_cast<int>(up->os_index);
      } else if (is_data_cache(up->type) && up->attr->cache.depth > cache_depth) {
        cache_depth = up->attr->cache.depth;
        out.cache_of[cpu] = first_cpu(up->cpuset);
      }
    }
  }
  if (hwloc_topology_is_thissystem(topo)) {
    out.allowed = current_affinity();
  } else {
    out.allowed = cpus_of(hwloc_topology_get_allowed_cpuset(topo));
  }
  return out;
}

cpu_topology load(const std::function<int(hwloc_topology_t)>& configure, std::string source) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw std::runtime_error("hwloc: cannot initialise");
  topology_ptr topo(raw, hwloc_topology_destroy);
  // Keep the CPUs and NUMA nodes our cgroup excludes: a GPU's node outside
  // the cgroup is then "no allowed CPU", not "no such node". What may be
  // used is decided by our affinity (cpu_topology::allowed).
  hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  if (configure && configure(raw) != 0) {
    throw std::runtime_error(fmt::format("hwloc cannot read {}", source));
  }
  if (hwloc_topology_load(raw) != 0) {
    throw std::runtime_error(fmt::format("hwloc cannot load {}", source));
  }
  if (!hwloc_topology_is_thissystem(raw) && source == "this machine") {
    source = "the topology set by HWLOC_SYNTHETIC or HWLOC_XMLFILE";
  }
  return extract(raw, std::move(source));
}

}  // namespace

cpu_topology load_cpu_topology() { return load(nullptr, "this machine"); }

cpu_topology synthetic_cpu_topology(const std::string& description) {
  return load(
      [&](hwloc_topology_t t) { return hwloc_topology_set_synthetic(t, description.c_str()); },
      fmt::format("synthetic topology '{}'", description));
}

}  // namespace dtrun::agent
