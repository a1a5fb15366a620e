// --numa-binding's modes on synthetic hwloc topologies with made-up GPU to
// NUMA node maps; expected sets follow torch/numa/binding.py.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/devices/cpu_list.h"
#include "agent/devices/cpu_topology.h"
#include "agent/devices/numa_binding.h"

using namespace dtrun::agent;

namespace {

// 2 sockets x 2 NUMA nodes x 2 L3 caches x 4 cores x 2 hyperthreads: 64
// CPUs, 16 per NUMA node, 8 per L3.
const std::string two_sockets = "package:2 numa:2 l3:2 core:4 pu:2";

std::vector<std::string> lists(numa_affinity mode, const cpu_topology& t,
                               const std::vector<int>& gpu_nodes, int ranks) {
  std::vector<std::string> out;
  for (const auto& cpus : numa_binding_cpus(mode, t, gpu_nodes, ranks)) {
    out.push_back(format_cpu_list(cpus));
  }
  return out;
}

using strings = std::vector<std::string>;

}  // namespace

TEST_CASE("hwloc topologies are read into nodes sockets cores and caches") {
  cpu_topology t = synthetic_cpu_topology(two_sockets);
  REQUIRE(t.numa_node_cpus.size() == 4);
  CHECK(format_cpu_list(t.numa_node_cpus.at(1)) == "16-31");
  CHECK(t.package_of.at(40) == 1);
  CHECK(t.core_of.at(5) == 4);
  CHECK(t.cache_of.at(13) == 8);
  CHECK(format_cpu_list(t.allowed) == "0-63");
  CHECK(t.source == "synthetic topology '" + two_sockets + "'");
  CHECK_THROWS_AS(synthetic_cpu_topology("bogus:7"), std::runtime_error);
}

TEST_CASE("node mode binds each rank to all of its GPU's NUMA node") {
  cpu_topology t = synthetic_cpu_topology(two_sockets);
  CHECK(lists(numa_affinity::node, t, {0, 0, 1, 1, 2, 2, 3, 3}, 8) ==
        strings{"0-15", "0-15", "16-31", "16-31", "32-47", "32-47", "48-63", "48-63"});
  // Fewer workers than GPUs: local rank n still takes GPU n.
  CHECK(lists(numa_affinity::node, t, {3, 2, 1, 0}, 2) == strings{"48-63", "32-47"});
}

TEST_CASE("node mode stays within the agent's allowed CPUs") {
  cpu_topology t = synthetic_cpu_topology(two_sockets);
  t.allowed = parse_cpu_list("4-11,40");
  CHECK(lists(numa_affinity::node, t, {0, 2}, 2) == strings{"4-11", "40"});
}

TEST_CASE("socket mode binds to every NUMA node of the GPU's socket") {
  cpu_topology t = synthetic_cpu_topology(two_sockets);
  CHECK(lists(numa_affinity::socket, t, {0, 1, 2, 3}, 4) ==
        strings{"0-31", "0-31", "32-63", "32-63"});
  // One node per socket: the same as node mode.
  cpu_topology flat = synthetic_cpu_topology("package:2 numa:1 core:2 pu:1");
  CHECK(lists(numa_affinity::socket, flat, {1}, 1) == lists(numa_affinity::node, flat, {1}, 1));
}

TEST_CASE("exclusive mode splits a node's physical cores among its GPUs") {
  cpu_topology t = synthetic_cpu_topology(two_sockets);
  CHECK(lists(numa_affinity::exclusive, t, {0, 0, 1, 1}, 4) ==
        strings{"0-7", "8-15", "16-23", "24-31"});
  // 8 cores for 3 GPUs: the lowest GPUs get one extra core each.
  CHECK(lists(numa_affinity::exclusive, t, {0, 0, 0}, 3) == strings{"0-5", "6-11", "12-15"});
  // GPUs are ranked among those of their node, whatever their number.
  CHECK(lists(numa_affinity::exclusive, t, {1, 0, 1}, 3) == strings{"16-23", "0-15", "24-31"});
}

TEST_CASE("exclusive mode keeps hyperthreads of a core together") {
  cpu_topology t = synthetic_cpu_topology("numa:1 core:3 pu:2");
  CHECK(lists(numa_affinity::exclusive, t, {0, 0}, 2) == strings{"0-3", "4-5"});
  // Without a core level each CPU is a core of its own.
  cpu_topology no_cores = synthetic_cpu_topology("numa:1 pu:4");
  CHECK(lists(numa_affinity::exclusive, no_cores, {0, 0}, 2) == strings{"0-1", "2-3"});
}

TEST_CASE("exclusive mode refuses a node with fewer cores than GPUs") {
  cpu_topology t = synthetic_cpu_topology("numa:1 core:2 pu:2");
  CHECK_THROWS_WITH(numa_binding_cpus(numa_affinity::exclusive, t, {0, 0, 0}, 1),
                    "--numa-binding=exclusive: NUMA node 0 has 2 allowed physical core(s) for 3 "
                    "GPUs; use --numa-binding=node or give dtrun more CPUs");
}

TEST_CASE("core-complex mode gives each GPU a last-level cache of its node") {
  cpu_topology t = synthetic_cpu_topology(two_sockets);
  CHECK(lists(numa_affinity::core_complex, t, {0, 0, 2}, 3) == strings{"0-7", "8-15", "32-39"});
  // More GPUs than caches: they wrap around and share.
  CHECK(lists(numa_affinity::core_complex, t, {0, 0, 0}, 3) == strings{"0-7", "8-15", "0-7"});
  // The caches with the most allowed CPUs come first.
  t.allowed = parse_cpu_list("6-15");
  CHECK(lists(numa_affinity::core_complex, t, {0, 0}, 2) == strings{"8-15", "6-7"});
}

TEST_CASE("a mode whose level the topology lacks is refused") {
  cpu_topology no_package = synthetic_cpu_topology("numa:2 pu:4");
  CHECK_THROWS_WITH(numa_binding_cpus(numa_affinity::socket, no_package, {1}, 1),
                    "--numa-binding=socket: synthetic topology 'numa:2 pu:4' has no socket "
                    "(package) level; use --numa-binding=node");
  CHECK(lists(numa_affinity::node, no_package, {1}, 1) == strings{"4-7"});
  cpu_topology no_cache = synthetic_cpu_topology("numa:2 core:2 pu:2");
  CHECK_THROWS_WITH(numa_binding_cpus(numa_affinity::core_complex, no_cache, {0}, 1),
                    "--numa-binding=core-complex: synthetic topology 'numa:2 core:2 pu:2' lists "
                    "no cache for CPU 0; use --numa-binding=node");
}

TEST_CASE("binding without GPUs or with more workers than GPUs is refused") {
  cpu_topology t = synthetic_cpu_topology(two_sockets);
  CHECK_THROWS_WITH(numa_binding_cpus(numa_affinity::node, t, {}, 2),
                    "--numa-binding=node binds local rank n near GPU n, but no GPU is visible; "
                    "drop --numa-binding on machines without GPUs");
  CHECK_THROWS_WITH(numa_binding_cpus(numa_affinity::socket, t, {0, 1}, 3),
                    "--numa-binding=socket: local rank 2 has no GPU 2 (2 visible); run at most 2 "
                    "workers (--nproc-per-node=gpu) or drop --numa-binding");
}

TEST_CASE("a GPU on a missing node or a node without allowed CPUs is refused") {
  cpu_topology t = synthetic_cpu_topology(two_sockets);
  CHECK_THROWS_WITH(numa_binding_cpus(numa_affinity::node, t, {0, 7}, 2),
                    Catch::Contains("GPU 1 is on NUMA node 7, which synthetic topology"));
  t.allowed = parse_cpu_list("0-15");
  CHECK_THROWS_WITH(numa_binding_cpus(numa_affinity::node, t, {0, 1}, 2),
                    "--numa-binding=node: none of NUMA node 1's CPUs (16-31) is allowed to dtrun "
                    "(allowed: 0-15); widen dtrun's CPU affinity or drop --numa-binding");
  CHECK_THROWS_AS(numa_binding_cpus(numa_affinity::exclusive, t, {1}, 1), numa_binding_error);
  CHECK_THROWS_AS(numa_binding_cpus(numa_affinity::core_complex, t, {1}, 1), numa_binding_error);
  CHECK_THROWS_AS(numa_binding_cpus(numa_affinity::socket, t, {2}, 1), numa_binding_error);
}

TEST_CASE("mode names are torch's") {
  CHECK(parse_numa_affinity("core-complex") == numa_affinity::core_complex);
  CHECK(parse_numa_affinity("node") == numa_affinity::node);
  CHECK_FALSE(parse_numa_affinity("core_complex"));
  CHECK_FALSE(parse_numa_affinity("Node"));
  CHECK(std::string(to_string(numa_affinity::exclusive)) == "exclusive");
}
