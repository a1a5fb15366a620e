#include "launcher/config/resolve_launch_config.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/devices/cpu_topology.h"
#include "launcher/config/legacy_launch.h"
#include "launcher/config/log_options.h"
#include "launcher/config/supervision_config.h"
#include "launcher/config/torch_plugins.h"
#include "rendezvous/base/env_map.h"
#include "rendezvous/base/number_parse.h"
#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/trim.h"

namespace dtrun::launcher {
namespace {

// Runs parse(); when it refuses a value that came from PET_<FLAG> rather
// than the command line, the message names the variable too.
template <typename T, typename Parse>
auto naming_the_variable(const given_value<T>& flag, Parse parse) {
  try {
    return parse();
  } catch (const usage_error& e) {
    if (!flag.from_pet()) throw;
    std::string message = e.what();
    auto colon = message.find(':');
    if (colon == std::string::npos) {
      throw usage_error(fmt::format("{}: {}", flag.source, message));
    }
    throw usage_error(fmt::format("{} ({}){}", flag.source, message.substr(0, colon),
                                  message.substr(colon)));
  }
}

// --store-allow-networks, parsed; the same-user rule is decided with the
// kind of run (it guards the single-node store on loopback).
rendezvous::store_access_options parse_store_access(const launch_options& o) {
  rendezvous::store_access_options access;
  try {
    access.allowed_networks = rendezvous::parse_client_networks(o.store_allow_networks);
  } catch (const std::invalid_argument& e) {
    throw usage_error(fmt::format("--store-allow-networks: {}", e.what()));
  }
  return access;
}

// The scheduler's settings of the rendezvous that no flag gives: this
// node's group rank (c10d) and who hosts the store.
void place_by_scheduler(const scheduler_env& s, multi_node_config& m) {
  auto& r = m.rendezvous;
  if (s.pinned_group_rank && m.backend == "c10d" && r.fixed_rank < 0) {
    r.fixed_rank = *s.pinned_group_rank;
  }
  if (s.host_store) {
    r.host_store = *s.host_store;
    r.join_if_store_port_in_use = false;
    m.host_decided_by = s.host_store_because;
  }
}

// --nnodes, --nproc-per-node (with the devices it counts) and the CPUs of
// --numa-binding.
void resolve_sizes(const launch_options& o, const env_map& env, launch_config& c) {
  c.nnodes = naming_the_variable(o.nnodes, [&] { return o.nnodes.value.range(); });
  if (o.standalone && (c.nnodes.min != 1 || c.nnodes.max != 1)) {
    // torchrun accepts this and waits for nodes that can never reach its
    // private store (localhost, a random port) until the join timeout;
    // dtrun used to run one node's workers while saying nnodes 2.
    std::string flag =
        o.nnodes.from_pet() ? o.nnodes.source + " (--nnodes)" : std::string("--nnodes");
    throw usage_error(fmt::format(
        "--standalone runs a single node, but {}={} asks for more; for several nodes drop "
        "--standalone and give every node --rdzv-endpoint=HOST:PORT --rdzv-id=ID, for one "
        "node drop {}",
        flag, o.nnodes.value.text(), flag));
  }
  const std::string root = system_root(env);
  const bool wants_devices =
      o.nproc_per_node.value.counts_accelerators() || !o.numa_binding.empty();
  const agent::accelerator_inventory devices =
      wants_devices ? agent::discover_accelerators(root, env) : agent::accelerator_inventory{};
  c.agent.spec.local_world_size = naming_the_variable(
      o.nproc_per_node, [&] { return parse_nproc(o.nproc_per_node.value, devices, env); });
  if (!o.numa_binding.empty()) {
    c.numa_binding = o.numa_binding;
    c.agent.worker_cpus = resolve_numa_binding(o.numa_binding, devices.gpus(), root,
                                               agent::load_cpu_topology(), c.nproc_per_node());
  }
}

// --node-unit K: every round's node count a multiple of K, so --nnodes's
// bounds must be.
int checked_node_unit(int unit, const node_range& nnodes) {
  if (unit < 1 || unit > max_nnodes) {
    throw usage_error(fmt::format("--node-unit: '{}' is not a whole number from 1 to {}", unit,
                                  max_nnodes));
  }
  if (nnodes.min % unit != 0 || nnodes.max % unit != 0) {
    throw usage_error(fmt::format(
        "--node-unit={}: --nnodes={}:{} must be multiples of {} (e.g. --nnodes={}:{})", unit,
        nnodes.min, nnodes.max, unit, std::max(unit, nnodes.min - nnodes.min % unit),
        std::max(unit, nnodes.max - nnodes.max % unit)));
  }
  return unit;
}

// How this node meets the others, or that it meets nobody: the rendezvous,
// the store and who may use it, the run id.
void resolve_rendezvous(const launch_options& o, const scheduler_env& sched, launch_config& c) {
  const rendezvous::store_access_options access = parse_store_access(o);
  if (o.standalone) {
    // As torchrun: a fresh run id; any --rdzv-* values are ignored.
    c.agent.spec.run_id = random_run_id();
    single_node_config single;
    single.store_access = access;
    single.store_access.same_user_only = !o.store_allow_any_user;
    c.plan = std::move(single);
  } else if (auto multi_node = resolve_multi_node(o, c.nnodes.min, c.nnodes.max,
                                                  c.nproc_per_node())) {
    c.agent.spec.run_id = o.rdzv_id.value;
    place_by_scheduler(sched, *multi_node);
    multi_node->rendezvous.store_access = access;
    multi_node->rendezvous.node_unit = checked_node_unit(o.node_unit, c.nnodes);
    c.warnings.insert(c.warnings.end(), multi_node->warnings.begin(), multi_node->warnings.end());
    c.plan = std::move(*multi_node);
  } else {
    // One node and nobody to meet: the same as --standalone, but an
    // explicit --master-port is honoured. Without one, the newest torchrun
    // makes this a standalone run with a fresh run id (run.py's run());
    // dtrun does too, but keeps a run id the user or the scheduler gave.
    bool fresh_run_id = !o.master_port.given_or_derived() && o.rdzv_id.value == "none";
    c.agent.spec.run_id = fresh_run_id ? random_run_id() : o.rdzv_id.value;
    single_node_config single;
    single.store_access = access;
    single.store_access.same_user_only = !o.store_allow_any_user;
    if (o.master_port.given_or_derived()) {
      if (o.master_port.value < 0 || o.master_port.value > max_port) {
        throw usage_error(fmt::format("--master-port: '{}' is not a whole number from 0 to {}",
                                      o.master_port.value, max_port));
      }
      single.store_port = static_cast<std::uint16_t>(o.master_port.value);
    }
    c.plan = std::move(single);
  }
  if (o.node_unit != 1 && (c.single_node() || c.multi_node()->backend == "static")) {
    checked_node_unit(o.node_unit, c.nnodes);
    c.warnings.push_back(fmt::format("--node-unit={} has no effect {}: only an elastic "
                                     "rendezvous (c10d, etcd-v3) takes nodes in units",
                                     o.node_unit, c.single_node() ? "on a single node"
                                                                  : "with the static backend"));
  }
  if (c.single_node() && !access.allowed_networks.empty()) {
    c.warnings.push_back("--store-allow-networks has no effect on a single-node run: its store "
                         "listens on 127.0.0.1 only");
  }
}

// What each worker runs: torchrun's worker command line, [python, -u,
// (-m), script, *args], or --no-python's program and its arguments.
void resolve_worker_program(const launch_options& o, const env_map& env, launch_config& c) {
  c.program_is_python = !o.no_python;
  c.agent.script_name = o.script;
  if (o.no_python) {
    c.program = o.script;
    c.agent.args = o.script_args;
    return;
  }
  // --python, DTRUN_PYTHON, then torchrun's PYTHON_EXEC, then the
  // environment dtrun is installed in (torchrun's sys.executable), then
  // PATH.
  auto set = [&env](const char* name) {
    auto it = env.find(name);
    return it != env.end() && !it->second.empty() ? std::optional(it->second) : std::nullopt;
  };
  std::string fallback = o.installed_python.empty() ? "python3" : o.installed_python;
  c.program = !o.python.value.empty()
                  ? o.python.value
                  : set("DTRUN_PYTHON").value_or(set("PYTHON_EXEC").value_or(fallback));
  if (!o.python.value.empty()) {
    // --python reads DTRUN_PYTHON as its default (CLI11's envname).
    c.python_source = o.python.given() && !o.python.on_command_line() ? o.python.source
                                                                       : "--python";
  } else if (set("DTRUN_PYTHON")) {
    c.python_source = "DTRUN_PYTHON";
  } else if (set("PYTHON_EXEC")) {
    c.python_source = "PYTHON_EXEC";
  } else if (!o.installed_python.empty()) {
    c.python_source = "the Python environment dtrun is installed in";
  }
  c.agent.args = {"-u"};
  if (o.module) c.agent.args.push_back("-m");
  c.agent.args.push_back(o.script);
  c.agent.args.insert(c.agent.args.end(), o.script_args.begin(), o.script_args.end());
}

// --preload's modules: dotted Python names. It forks Python workers from
// an interpreter dtrun's start-up hook runs, so it needs both.
std::vector<std::string> parse_preload(const launch_options& o) {
  std::vector<std::string> modules;
  if (o.preload.empty()) return modules;
  if (o.no_python) {
    throw usage_error("--preload forks Python workers; it cannot be used with --no-python");
  }
  if (o.no_stack_hook) {
    throw usage_error("--preload needs dtrun's start-up hook in the workers; drop "
                      "--no-stack-hook");
  }
  static const std::regex dotted_name(R"([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)");
  std::stringstream list(o.preload);
  const char* empty_name =
      "--preload: an empty module name; give modules such as torch,torch.distributed "
      "(comma-separated)";
  for (std::string name; std::getline(list, name, ',');) {
    if (name.empty()) throw usage_error(empty_name);
    if (!std::regex_match(name, dotted_name)) {
      throw usage_error(fmt::format(
          "--preload: '{}' is not a Python module name; give modules such as "
          "torch,torch.distributed,numpy (comma-separated, no spaces)",
          name));
    }
    if (std::find(modules.begin(), modules.end(), name) == modules.end()) {
      modules.push_back(name);
    }
  }
  if (modules.empty() || o.preload.back() == ',') throw usage_error(empty_name);
  return modules;
}

// torchrun 2.13's D-state check, which dtrun does not have: said once,
// so that a user who set it for torchrun does not count on it. torch
// reads a positive number of seconds; anything else turns it off.
void warn_about_ignored_variables(const env_map& env, std::vector<std::string>& warnings) {
  auto it = env.find("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT");
  if (it == env.end()) return;
  auto seconds = parse_whole<double>(trim(it->second));
  if (!seconds || *seconds <= 0) return;
  warnings.push_back(fmt::format(
      "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT={} is ignored: dtrun does not poll its "
      "workers' state; --hang-timeout=SECONDS fails a group that makes no progress, and a "
      "worker that then does not die on SIGKILL takes this node out of the job",
      it->second));
}

}  // namespace

launch_config resolve_launch_config(const launch_options& options, const env_map& env,
                                    const scheduler_env& sched) {
  const launch_options o = with_overrides(options, sched.flags);
  launch_config c;
  resolve_sizes(o, env, c);
  if (o.module && o.no_python) {
    throw usage_error("use either --no-python or -m/--module, not both");
  }
  c.agent.logs = resolve_log_spec(o, c.nproc_per_node(), env, c.warnings);
  resolve_rendezvous(o, sched, c);
  resolve_supervision(o, sched, c);
  resolve_worker_program(o, env, c);
  c.agent.preload = parse_preload(o);
  if (!o.flags_after_script.empty()) {
    c.warnings.push_back(fmt::format(
        "{} after the script go{} to the script, not to dtrun (as with torchrun); put dtrun's "
        "flags before {} (or write 'dtrun [OPTIONS] -- {} ...' to pass them on without this "
        "warning)",
        fmt::join(o.flags_after_script, ", "), o.flags_after_script.size() == 1 ? "es" : "",
        o.script, o.script));
  }
  if (c.nproc_per_node() > 1 && env.count("OMP_NUM_THREADS") == 0) {
    c.warnings.push_back(
        "OMP_NUM_THREADS is not set; each worker gets OMP_NUM_THREADS=1 (as with torchrun) so "
        "the workers do not overload the machine; set it to tune");
  }
  warn_about_ignored_variables(env, c.warnings);
  c.agent.worker_args = resolve_worker_args(o, env);
  for (const auto& [k, v] : sched.worker_env) c.agent.worker_args.env_overrides[k] = v;
  c.warnings.insert(c.warnings.end(), sched.warnings.begin(), sched.warnings.end());
  c.scheduler = sched;
  check_worker_args(c.agent);
  return c;
}

}  // namespace dtrun::launcher
