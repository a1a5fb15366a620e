// The launch, resolved: validated flags turned into what the agent needs.
// One plain struct, printable as JSON (dtrun --dry-run).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/devices/accelerators.h"
#include "agent/devices/cpu_topology.h"
#include "agent/spec/agent_options.h"
#include "agent/spec/log_spec.h"
#include "agent/spec/report_options.h"
#include "agent/spec/worker_args.h"
#include "launcher/cli/launch_options.h"
#include "launcher/config/rendezvous_config.h"
#include "launcher/schedulers/scheduler_env.h"
#include "rendezvous/base/env_map.h"
#include "rendezvous/store/store_access.h"

namespace dtrun::launcher {

// A run that meets nobody (--standalone, or one node without an
// endpoint): this node's store on loopback.
struct single_node_config {
  std::string store_host = "127.0.0.1";
  std::uint16_t store_port = 0;  // 0: a free port
  // Who may connect to it.
  rendezvous::store_access_options store_access;
};

struct launch_config {
  node_range nnodes;
  // This node's worker count: the worker group's local world size.
  int nproc_per_node() const { return agent.spec.local_world_size; }
  // How this node meets the others: the one rendezvous plan, alone on
  // loopback, or a multi-node rendezvous (c10d, static or etcd-v3, its
  // endpoint and who may use the store there).
  std::variant<single_node_config, multi_node_config> plan;
  const single_node_config* single_node() const {
    return std::get_if<single_node_config>(&plan);
  }
  const multi_node_config* multi_node() const { return std::get_if<multi_node_config>(&plan); }
  multi_node_config* multi_node() { return std::get_if<multi_node_config>(&plan); }
  // What the agent runs and how (agent/spec/agent_options.h), resolved here and
  // handed to it as it is: the worker group (run id, role, restarts), the
  // program's path (found on PATH by find_program, launcher/config/program_lookup.h;
  // empty until then, or when it is not found) and its arguments after
  // argv[0], the script as the user named it, per-worker edits (legacy
  // --local-rank, templates, scheduler variables), each local rank's CPUs
  // (--numa-binding), the stop and hang timeouts, the Python stack hook,
  // metrics, signals, logs (--redirects, --tee, --local-ranks-filter) and
  // verbosity (--quiet / -v, --event-log).
  agent::agent_options agent;
  // The program as the workers' argv[0] names it (an interpreter or
  // --no-python's program), before it is found on PATH.
  std::string program;
  bool program_is_python = true;
  // Where the interpreter's name came from (--python, DTRUN_PYTHON,
  // PYTHON_EXEC), named when it cannot be found; empty: the default.
  std::string python_source;
  // Warnings to print before launching (one line each).
  std::vector<std::string> warnings;
  // What scheduler detection derived (printed before a launch and by
  // --dry-run); its settings are applied in the fields above.
  scheduler_report scheduler;
  // --numa-binding's mode (empty: none); the CPUs are in agent.worker_cpus.
  std::string numa_binding;
};

// The multi-node rendezvous's options as the rendezvous is made with them:
// the plan's, with the job's run id and restart budget from the agent's
// options, where they are kept (one source, so the rendezvous's keys and
// count and the workers' TORCHELASTIC_RUN_ID and _MAX_RESTARTS cannot
// disagree). `c` must be a multi-node config.
rendezvous::dynamic_rendezvous_options rendezvous_options(const launch_config& c);
// etcd-v3's client options, with the job's run id from the same place;
// nullopt for the other backends and for single-node configs.
std::optional<rendezvous::etcd_options> etcd_options(const launch_config& c);

// "4", "auto", "cpu", "gpu", "xpu" -> a worker count, as torchrun's
// determine_local_world_size: gpu counts the GPUs torch.cuda would see
// (an error when none), xpu the Intel GPUs, auto the GPUs, else the Intel
// GPUs, else the online CPUs. Throws usage_error; `env`'s visibility
// variables are named when no device is visible.
int parse_nproc(const nproc_flag& nproc, const agent::accelerator_inventory& devices,
                const env_map& env = {});

// The signals to forward: SIGINT, SIGTERM, SIGHUP, SIGQUIT always, plus the
// ones named in `list` ("SIGUSR1,SIGUSR2"). Throws usage_error.
std::vector<int> parse_signals(const std::string& list);

// Where dtrun reads /sys and /proc: DTRUN_SYSTEM_ROOT from `env` (a fake
// tree, for tests), else "/".
std::string system_root(const env_map& env);

// Each local rank's CPUs for --numa-binding=`mode` with `gpus` (torch's
// device order) and `topology`. Throws usage_error with a one-line reason.
std::vector<std::vector<int>> resolve_numa_binding(const std::string& mode,
                                                   const std::vector<agent::accelerator>& gpus,
                                                   const std::string& root,
                                                   const agent::cpu_topology& topology,
                                                   int nproc_per_node);

// The configuration as JSON (dtrun --dry-run): the scheduler and what it
// derived, and each local rank's environment and argv as far as they are
// known before rendezvous (what the workers get on top of the agent's
// environment; RANK and WORLD_SIZE where a fixed node rank and node count
// decide them).
nlohmann::json to_json(const launch_config& config, const env_map& env);

// A random version-4 UUID, the run id of standalone runs (as torchrun).
std::string random_run_id();

}  // namespace dtrun::launcher
