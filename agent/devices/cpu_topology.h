// The machine's CPUs as NUMA binding needs them: which NUMA node, socket,
// physical core and last-level cache each logical CPU belongs to. Read
// with hwloc, then kept as plain data so the binding rules can be tested
// on any shape of machine.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace dtrun::agent {

struct cpu_topology {
  // NUMA node number (as in /sys/devices/system/node/nodeN) -> its CPUs
  // (Linux CPU numbers), allowed or not.
  std::map<int, std::vector<int>> numa_node_cpus;
  // CPU -> its socket (package); a CPU is missing when the topology has no
  // package level.
  std::map<int, int> package_of;
  // CPU -> the lowest CPU of its physical core (its hyperthread siblings
  // share the key); a CPU without a core level is a core of its own.
  std::map<int, int> core_of;
  // CPU -> the lowest CPU sharing its largest data or unified cache (its
  // "core complex"); missing when the topology lists no cache.
  std::map<int, int> cache_of;
  // The CPUs workers may be bound to: the agent's own affinity when the
  // topology is this machine's, else every CPU of the topology.
  std::vector<int> allowed;
  // Where it came from, for error messages ("this machine",
  // "synthetic topology '...'").
  std::string source = "this machine";
};

// This machine's topology, or the one hwloc is told to load instead by
// HWLOC_SYNTHETIC or HWLOC_XMLFILE. Throws std::runtime_error when hwloc
// fails.
cpu_topology load_cpu_topology();

// hwloc's synthetic description, e.g. "package:2 numa:2 l3:2 core:4 pu:2"
// (CPUs are numbered in order). Throws std::runtime_error on a bad one.
cpu_topology synthetic_cpu_topology(const std::string& description);

}  // namespace dtrun::agent
