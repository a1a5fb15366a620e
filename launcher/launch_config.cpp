#include "launcher/launch_config.h"

#include <algorithm>
#include <csignal>
#include <optional>
#include <cctype>
#include <filesystem>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/cpu_list.h"
#include "agent/exit_status.h"
#include "agent/numa_binding.h"
#include "launcher/legacy_launch.h"
#include "launcher/log_options.h"
#include "rendezvous/base/number_parse.h"
#include "launcher/torch_plugins.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher {
namespace {

// Runs parse(); when it refuses a value that came from PET_<FLAG> rather
// than the command line, the message names the variable too.
template <typename Parse>
auto naming_the_variable(const launch_options& o, const char* flag, Parse parse) {
  try {
    return parse();
  } catch (const usage_error& e) {
    auto source = o.given.find(flag);
    if (source == o.given.end() || source->second.rfind("PET_", 0) != 0) throw;
    std::string message = e.what();
    auto colon = message.find(':');
    if (colon == std::string::npos) {
      throw usage_error(fmt::format("{}: {}", source->second, message));
    }
    throw usage_error(fmt::format("{} ({}){}", source->second, message.substr(0, colon),
                                  message.substr(colon)));
  }
}

int capped_cpu_count() { return std::min<int>(agent::online_cpu_count(), max_nproc_per_node); }

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

int parse_nproc_with(const std::string& text, const agent::accelerator_inventory& devices,
                     const env_map& env) {
  if (text == "cpu") return capped_cpu_count();
  if (text == "gpu") {
    if (devices.gpus().empty()) {
      throw usage_error(fmt::format(
          "--nproc-per-node=gpu but no GPU is visible{}; give a number or 'cpu'",
          visibility_hint(env, {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                "ROCR_VISIBLE_DEVICES"})));
    }
    return std::min<int>(static_cast<int>(devices.gpus().size()), max_nproc_per_node);
  }
  if (text == "xpu") {
    if (devices.xpu.empty()) {
      throw usage_error(fmt::format(
          "--nproc-per-node=xpu but no Intel GPU is visible{}; give a number or 'cpu'",
          visibility_hint(env, {"ZE_AFFINITY_MASK"})));
    }
    return std::min<int>(static_cast<int>(devices.xpu.size()), max_nproc_per_node);
  }
  if (text == "auto") {
    const auto& accelerators = !devices.gpus().empty() ? devices.gpus() : devices.xpu;
    return accelerators.empty()
               ? capped_cpu_count()
               : std::min<int>(static_cast<int>(accelerators.size()), max_nproc_per_node);
  }
  try {
    return static_cast<int>(parse_integer(text, "--nproc-per-node", 1, max_nproc_per_node));
  } catch (const usage_error&) {
    throw usage_error(fmt::format(
        "--nproc-per-node: '{}' is not a whole number from 1 to {}, 'auto', 'cpu', 'gpu' or 'xpu'",
        text, max_nproc_per_node));
  }
}

}  // namespace

std::string system_root(const env_map& env) {
  auto root = env.find("DTRUN_SYSTEM_ROOT");
  return root == env.end() || root->second.empty() ? "/" : root->second;
}

int parse_nproc(const std::string& text, const agent::accelerator_inventory& devices) {
  return parse_nproc_with(text, devices, {});
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

node_range parse_nnodes(const std::string& text) {
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    int n = static_cast<int>(parse_integer(text, "--nnodes", 1, max_nnodes));
    return {n, n};
  }
  int lo = static_cast<int>(parse_integer(text.substr(0, colon), "--nnodes MIN", 1, max_nnodes));
  int hi = static_cast<int>(parse_integer(text.substr(colon + 1), "--nnodes MAX", 1, max_nnodes));
  if (lo > hi) {
    throw usage_error(fmt::format(
        "--nnodes: '{}' has MIN > MAX; give N or MIN:MAX with 1 <= MIN <= MAX <= {} (e.g. "
        "--nnodes=1:4)",
        text, max_nnodes));
  }
  return {lo, hi};
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

namespace {

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

nlohmann::json to_json(const rendezvous::store_access_options& a) {
  nlohmann::json networks = nlohmann::json::array();
  for (const auto& n : a.allowed_networks) networks.push_back(n.text);
  return {{"same_user_only", a.same_user_only}, {"allowed_networks", networks}};
}

}  // namespace

namespace {

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

}  // namespace

launch_config resolve_launch_config(const launch_options& options, const env_map& env,
                                    const scheduler_env& sched) {
  const launch_options o = with_overrides(options, sched.flags);
  launch_config c;
  c.nnodes = naming_the_variable(o, "nnodes", [&] { return parse_nnodes(o.nnodes); });
  if (o.standalone && (c.nnodes.min != 1 || c.nnodes.max != 1)) {
    // torchrun accepts this and waits for nodes that can never reach its
    // private store (localhost, a random port) until the join timeout;
    // dtrun used to run one node's workers while saying nnodes 2.
    auto source = o.given.find("nnodes");
    std::string flag = source != o.given.end() && source->second.rfind("PET_", 0) == 0
                           ? source->second + " (--nnodes)"
                           : std::string("--nnodes");
    throw usage_error(fmt::format(
        "--standalone runs a single node, but {}={} asks for more; for several nodes drop "
        "--standalone and give every node --rdzv-endpoint=HOST:PORT --rdzv-id=ID, for one "
        "node drop {}",
        flag, o.nnodes, flag));
  }
  const std::string root = system_root(env);
  const bool wants_devices = o.nproc_per_node == "gpu" || o.nproc_per_node == "xpu" ||
                             o.nproc_per_node == "auto" || !o.numa_binding.empty();
  const agent::accelerator_inventory devices =
      wants_devices ? agent::discover_accelerators(root, env) : agent::accelerator_inventory{};
  c.nproc_per_node = naming_the_variable(
      o, "nproc-per-node", [&] { return parse_nproc_with(o.nproc_per_node, devices, env); });
  if (!o.numa_binding.empty()) {
    c.numa_binding = o.numa_binding;
    c.worker_cpus = resolve_numa_binding(o.numa_binding, devices.gpus(), root,
                                         agent::load_cpu_topology(), c.nproc_per_node);
  }
  if (o.module && o.no_python) {
    throw usage_error("use either --no-python or -m/--module, not both");
  }
  c.logs = resolve_log_spec(o, c.nproc_per_node, env, c.warnings);
  c.store_access = parse_store_access(o);
  if (o.standalone) {
    // As torchrun: a fresh run id; any --rdzv-* values are ignored.
    c.spec.run_id = random_run_id();
    c.store_access.same_user_only = !o.store_allow_any_user;
  } else if (auto multi_node = resolve_multi_node(o, c.nnodes.min, c.nnodes.max,
                                                  c.nproc_per_node)) {
    c.standalone = false;
    c.spec.run_id = o.rdzv_id;
    place_by_scheduler(sched, *multi_node);
    multi_node->rendezvous.max_restarts = o.max_restarts;
    multi_node->rendezvous.store_access = c.store_access;
    c.store_host = multi_node->rendezvous.endpoint_host;
    c.store_port = multi_node->rendezvous.endpoint_port;
    c.warnings.insert(c.warnings.end(), multi_node->warnings.begin(), multi_node->warnings.end());
    c.multi_node = std::move(multi_node);
  } else {
    // One node and nobody to meet: the same as --standalone, but an
    // explicit --master-port is honoured. Without one, the newest torchrun
    // makes this a standalone run with a fresh run id (run.py's run());
    // dtrun does too, but keeps a run id the user or the scheduler gave.
    bool fresh_run_id = !o.master_port_given && o.rdzv_id == "none";
    c.spec.run_id = fresh_run_id ? random_run_id() : o.rdzv_id;
    c.store_access.same_user_only = !o.store_allow_any_user;
    if (o.master_port_given) {
      if (o.master_port < 0 || o.master_port > max_port) {
        throw usage_error(fmt::format("--master-port: '{}' is not a whole number from 0 to {}",
                                      o.master_port, max_port));
      }
      c.store_port = static_cast<std::uint16_t>(o.master_port);
    }
  }
  if (!c.multi_node && !c.store_access.allowed_networks.empty()) {
    c.warnings.push_back("--store-allow-networks has no effect on a single-node run: its store "
                         "listens on 127.0.0.1 only");
  }
  c.spec.role = o.role;
  c.spec.local_world_size = c.nproc_per_node;
  c.spec.max_restarts = o.max_restarts;
  c.spec.use_agent_store = !c.multi_node || c.multi_node->rendezvous.workers_use_agent_store;
  // Checked again here: options may come from elsewhere than the command
  // line (tests, scheduler detection), and a NaN would become any duration.
  c.stop_timeout = seconds_to_duration(o.stop_timeout, "--stop-timeout", {true, max_duration_s});
  if (o.max_restarts < 0 || o.max_restarts > max_restarts_limit) {
    throw usage_error(fmt::format("--max-restarts: '{}' is not a whole number from 0 to {}",
                                  o.max_restarts, max_restarts_limit));
  }
  c.hang_timeout = seconds_to_duration(o.hang_timeout, "--hang-timeout", {true, max_duration_s});
  // A positive timeout under a millisecond is the shortest one, not "off".
  if (o.hang_timeout > 0 && c.hang_timeout.count() == 0) c.hang_timeout = std::chrono::milliseconds(1);
  c.stack_hook = !o.no_stack_hook && !o.no_python;
  if (o.metrics_port > max_port) {
    throw usage_error(fmt::format("--metrics-port: '{}' is not a whole number from 0 to {}",
                                  o.metrics_port, max_port));
  }
  c.metrics_port = o.metrics_port;
  c.metrics_host = o.metrics_host;
  c.signals = parse_signals(o.signals_to_handle);
  for (int sig : sched.extra_signals) {
    if (std::find(c.signals.begin(), c.signals.end(), sig) == c.signals.end()) {
      c.signals.push_back(sig);
    }
  }
  c.spec.signals_to_handle = o.signals_to_handle;
  c.log_dir = o.log_dir;
  if (o.quiet && o.verbose) {
    throw usage_error("--quiet and --verbose contradict each other; pass one of them");
  }
  c.report.level = o.quiet     ? agent::verbosity::quiet
                   : o.verbose ? agent::verbosity::verbose
                               : agent::verbosity::normal;
  c.report.event_log = resolve_torch_plugins(o);  // --event-log, --event-log-handler

  // torchrun's worker command line: [python, -u, (-m), script, *args].
  c.program_is_python = !o.no_python;
  c.script = o.script;
  if (o.no_python) {
    c.program = o.script;
    c.args = o.script_args;
  } else {
    // --python, DTRUN_PYTHON, then torchrun's PYTHON_EXEC, then the
    // environment dtrun is installed in (torchrun's sys.executable), then
    // PATH.
    auto set = [&env](const char* name) {
      auto it = env.find(name);
      return it != env.end() && !it->second.empty() ? std::optional(it->second) : std::nullopt;
    };
    std::string fallback = o.installed_python.empty() ? "python3" : o.installed_python;
    c.program = !o.python.empty() ? o.python
                                  : set("DTRUN_PYTHON").value_or(
                                        set("PYTHON_EXEC").value_or(fallback));
    if (!o.python.empty()) {
      // --python reads DTRUN_PYTHON as its default (CLI11's envname).
      auto given = o.given.find("python");
      c.python_source = given != o.given.end() && given->second != "command line"
                            ? given->second
                            : "--python";
    } else if (set("DTRUN_PYTHON")) {
      c.python_source = "DTRUN_PYTHON";
    } else if (set("PYTHON_EXEC")) {
      c.python_source = "PYTHON_EXEC";
    } else if (!o.installed_python.empty()) {
      c.python_source = "the Python environment dtrun is installed in";
    }
    c.args = {"-u"};
    if (o.module) c.args.push_back("-m");
    c.args.push_back(o.script);
    c.args.insert(c.args.end(), o.script_args.begin(), o.script_args.end());
  }
  if (!o.flags_after_script.empty()) {
    c.warnings.push_back(fmt::format(
        "{} after the script go{} to the script, not to dtrun (as with torchrun); put dtrun's "
        "flags before {} (or write 'dtrun [OPTIONS] -- {} ...' to pass them on without this "
        "warning)",
        fmt::join(o.flags_after_script, ", "), o.flags_after_script.size() == 1 ? "es" : "",
        o.script, o.script));
  }
  if (c.nproc_per_node > 1 && env.count("OMP_NUM_THREADS") == 0) {
    c.warnings.push_back(
        "OMP_NUM_THREADS is not set; each worker gets OMP_NUM_THREADS=1 (as with torchrun) so "
        "the workers do not overload the machine; set it to tune");
  }
  c.worker_args = resolve_worker_args(o, env);
  for (const auto& [k, v] : sched.worker_env) c.worker_args.env_overrides[k] = v;
  c.warnings.insert(c.warnings.end(), sched.warnings.begin(), sched.warnings.end());
  c.scheduler = sched;
  check_worker_args(c);
  return c;
}

namespace {

nlohmann::json to_json(const std::vector<derived_setting>& settings) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& d : settings) {
    a.push_back({{"setting", d.setting}, {"value", d.value}, {"source", d.source}});
  }
  return a;
}

// The node's group rank and the node count, where the configuration fixes
// both (a single node; a static rank or a pinned one with a fixed --nnodes).
std::optional<std::pair<int, int>> known_group(const launch_config& c) {
  if (!c.multi_node) return std::pair{0, 1};
  int group_rank = c.multi_node->rendezvous.fixed_rank;
  if (group_rank < 0 || c.nnodes.min != c.nnodes.max) return std::nullopt;
  return std::pair{group_rank, c.nnodes.max};
}

// One local rank's environment, CPUs and (where it differs from the
// group's) argv, as far as they are known before rendezvous.
nlohmann::json worker_json(const launch_config& c, int local_rank, const env_map& agent_env) {
  nlohmann::json w = {{"local_rank", local_rank},
                      {"env", agent::static_worker_env(c.spec, local_rank, agent_env)}};
  if (static_cast<std::size_t>(local_rank) < c.worker_cpus.size()) {
    w["cpus"] = agent::format_cpu_list(c.worker_cpus[static_cast<std::size_t>(local_rank)]);
  }
  auto& env = w["env"];
  if (auto group = known_group(c)) {
    env["RANK"] = std::to_string(group->first * c.nproc_per_node + local_rank);
    env["WORLD_SIZE"] = std::to_string(group->second * c.nproc_per_node);
    env["GROUP_RANK"] = std::to_string(group->first);
  }
  for (const auto& [k, v] : c.worker_args.env_overrides) env[k] = v;
  if (c.worker_args.changes_args() || c.worker_args.virtual_local_rank ||
      agent::has_local_rank_macro(c.args)) {
    // This worker's own argv (${local_rank}, --local-rank, placeholders)
    // and virtual local rank, as far as known.
    env_map known;
    for (const auto& [k, v] : env.items()) known[k] = v.get<std::string>();
    std::vector<std::string> args = c.args;
    agent::customize_worker(c.worker_args, args, known);
    for (const auto& [k, v] : known) env[k] = v;
    nlohmann::json argv = nlohmann::json::array({c.program});
    for (const auto& a : args) argv.push_back(a);
    w["argv"] = argv;
  }
  return w;
}

}  // namespace

nlohmann::json to_json(const launch_config& c, const env_map& env) {
  nlohmann::json workers = nlohmann::json::array();
  for (int local_rank = 0; local_rank < c.nproc_per_node; ++local_rank) {
    workers.push_back(worker_json(c, local_rank, env));
  }
  nlohmann::json signals = nlohmann::json::array();
  for (int sig : c.signals) signals.push_back(agent::signal_name(sig));
  nlohmann::json argv =
      nlohmann::json::array({c.program_path.empty() ? c.program : c.program_path});
  for (const auto& a : c.args) argv.push_back(a);
  nlohmann::json out = {
      {"nnodes", {{"min", c.nnodes.min}, {"max", c.nnodes.max}}},
      {"nproc_per_node", c.nproc_per_node},
      {"standalone", c.standalone},
      {"rdzv_endpoint", fmt::format("{}:{}", c.store_host, c.store_port)},
      {"run_id", c.spec.run_id},
      {"role", c.spec.role},
      {"max_restarts", c.spec.max_restarts},
      {"stop_timeout_s", static_cast<double>(c.stop_timeout.count()) / 1000.0},
      {"signals_to_handle", signals},
      {"hang_timeout_s", static_cast<double>(c.hang_timeout.count()) / 1000.0},
      {"stack_hook", c.stack_hook},
      {"metrics", c.metrics_port < 0 ? nlohmann::json()
                                     : nlohmann::json(fmt::format("{}:{}", c.metrics_host,
                                                                  c.metrics_port))},
      {"use_agent_store", c.spec.use_agent_store},
      {"store_access", to_json(c.store_access)},
      {"log_dir", c.log_dir},
      {"logs", to_json(c.logs, c.nproc_per_node)},
      {"event_log", c.report.event_log},
      {"verbosity", c.report.level == agent::verbosity::quiet     ? "quiet"
                    : c.report.level == agent::verbosity::verbose ? "verbose"
                                                                  : "normal"},
      {"argv", argv},
      {"workers", workers},
  };
  if (c.multi_node) out["rendezvous"] = to_json(*c.multi_node);
  out["scheduler"] = c.scheduler.scheduler.empty() ? nlohmann::json(nullptr)
                                                   : nlohmann::json(c.scheduler.scheduler);
  if (!c.scheduler.style.empty()) out["scheduler_style"] = c.scheduler.style;
  out["derived"] = to_json(c.scheduler.derived);
  out["from_pet_env"] = to_json(c.scheduler.from_pet);
  out["numa_binding"] = c.numa_binding.empty() ? nlohmann::json() : nlohmann::json(c.numa_binding);
  return out;
}

}  // namespace dtrun::launcher
