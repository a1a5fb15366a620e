#include "launcher/config/launch_config.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <random>

#include <fmt/format.h>

#include "agent/devices/cpu_list.h"
#include "agent/devices/numa_binding.h"
#include "agent/spec/exit_status.h"
#include "rendezvous/base/env_map.h"
#include "rendezvous/base/number_parse.h"

namespace dtrun::launcher {
namespace {

int capped_cpu_count() { return std::min<int>(agent::usable_cpu_count(), max_nproc_per_node); }

// " (CUDA_VISIBLE_DEVICES='')" when a variable narrowed the devices.
std::string visibility_hint(const env_map& env, std::initializer_list<const char*> names) {
  std::string hint;
  for (const char* name : names) {
    auto it = env.find(name);
    if (it == env.end()) continue;
    hint += fmt::format("{}{}='{}'", hint.empty() ? " (" : ", ", name, it->second);
  }
  return hint.empty() ? hint : hint + ")";
}

}  // namespace

int parse_nproc(const nproc_flag& nproc, const agent::accelerator_inventory& devices,
                const env_map& env) {
  using kind = nproc_flag::kind;
  if (nproc.what() == kind::cpu) return capped_cpu_count();
  if (nproc.what() == kind::gpu) {
    if (devices.gpus().empty()) {
      throw usage_error(fmt::format(
          "--nproc-per-node=gpu but no GPU is visible{}; give a number or 'cpu'",
          visibility_hint(env, {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                "ROCR_VISIBLE_DEVICES"})));
    }
    return std::min<int>(static_cast<int>(devices.gpus().size()), max_nproc_per_node);
  }
  if (nproc.what() == kind::xpu) {
    if (devices.xpu.empty()) {
      throw usage_error(fmt::format(
          "--nproc-per-node=xpu but no Intel GPU is visible{}; give a number or 'cpu'",
          visibility_hint(env, {"ZE_AFFINITY_MASK"})));
    }
    return std::min<int>(static_cast<int>(devices.xpu.size()), max_nproc_per_node);
  }
  if (nproc.what() == kind::auto_detect) {
    const auto& accelerators = !devices.gpus().empty() ? devices.gpus() : devices.xpu;
    return accelerators.empty()
               ? capped_cpu_count()
               : std::min<int>(static_cast<int>(accelerators.size()), max_nproc_per_node);
  }
  return nproc.count();
}

std::string system_root(const env_map& env) {
  auto root = env.find("DTRUN_SYSTEM_ROOT");
  return root == env.end() || root->second.empty() ? "/" : root->second;
}

std::vector<std::vector<int>> resolve_numa_binding(const std::string& mode_name,
                                                   const std::vector<agent::accelerator>& gpus,
                                                   const std::string& root,
                                                   const agent::cpu_topology& topology,
                                                   int nproc_per_node) {
  auto mode = agent::parse_numa_affinity(mode_name);
  if (!mode) {
    throw usage_error(fmt::format(
        "--numa-binding: '{}' is not one of node, socket, exclusive, core-complex", mode_name));
  }
  std::vector<int> gpu_nodes;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    auto node = agent::pci_numa_node(root, gpus[i].pci_address);
    if (!node) {
      throw usage_error(fmt::format(
          "--numa-binding={}: cannot tell GPU {}'s NUMA node ({}); drop --numa-binding",
          mode_name, i,
          gpus[i].pci_address.empty()
              ? std::string("no PCI address")
              : fmt::format("{}/sys/bus/pci/devices/{}/numa_node is unreadable",
                            root == "/" ? "" : root, gpus[i].pci_address)));
    }
    gpu_nodes.push_back(*node);
  }
  try {
    return agent::numa_binding_cpus(*mode, topology, gpu_nodes, nproc_per_node);
  } catch (const agent::numa_binding_error& e) {
    throw usage_error(e.what());
  }
}

std::vector<int> parse_signals(const std::string& list) {
  std::vector<int> signals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = std::min(list.find(',', start), list.size());
    std::string name = list.substr(start, comma - start);
    name.erase(std::remove_if(name.begin(), name.end(),
                              [](unsigned char c) { return std::isspace(c); }),
               name.end());
    start = comma + 1;
    if (name.empty()) continue;
    int sig = agent::parse_signal(name);
    if (sig == 0 || sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) {
      throw usage_error(fmt::format(
          "--signals-to-handle: cannot handle '{}'; name signals like SIGUSR1,SIGUSR2", name));
    }
    if (std::find(signals.begin(), signals.end(), sig) == signals.end()) signals.push_back(sig);
  }
  return signals;
}

rendezvous::dynamic_rendezvous_options rendezvous_options(const launch_config& c) {
  rendezvous::dynamic_rendezvous_options r = c.multi_node()->rendezvous;
  r.run_id = c.agent.spec.run_id;
  r.max_restarts = c.agent.spec.max_restarts;
  return r;
}

std::optional<rendezvous::etcd_options> etcd_options(const launch_config& c) {
  const multi_node_config* multi_node = c.multi_node();
  if (multi_node == nullptr || !multi_node->etcd) return std::nullopt;
  rendezvous::etcd_options e = *multi_node->etcd;
  e.run_id = c.agent.spec.run_id;
  return e;
}

std::string random_run_id() {
  std::random_device rd;
  std::uniform_int_distribution<int> nibble(0, 15);
  std::string id = "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx";
  for (char& c : id) {
    if (c == 'x') c = "0123456789abcdef"[nibble(rd)];
    if (c == 'y') c = "89ab"[nibble(rd) & 3];
  }
  return id;
}

}  // namespace dtrun::launcher
