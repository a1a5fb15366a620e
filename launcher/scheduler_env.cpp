#include "launcher/scheduler_env.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdint>
#include <initializer_list>

#include <fmt/format.h>

#include "agent/exit_status.h"
#include "launcher/launch_config.h"
#include "launcher/slurm_hostlist.h"

namespace dtrun::launcher {
namespace {

using agent::env_map;

// Slurm's rendezvous port: derived from the job id, so two jobs whose
// first node is the same (shared nodes) do not meet on one port. Kept
// below Linux's ephemeral range (32768+).
constexpr int slurm_port_base = 20000;
constexpr int slurm_port_span = 10000;

// Step ids Slurm reserves for the batch script, the extern step and
// interactive shells (0xFFFFFFF0 and up): not a parallel step.
constexpr std::uint64_t first_special_step_id = 0xFFFFFFF0ULL;

struct variable {
  std::string name;
  std::string value;
};

std::optional<variable> first_of(const env_map& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = env.find(name);
    if (it != env.end() && !it->second.empty()) return variable{name, it->second};
  }
  return std::nullopt;
}

bool has(const env_map& env, const char* name) { return first_of(env, {name}).has_value(); }

std::optional<std::uint64_t> as_number(const std::string& text) {
  if (text.empty() || text.size() > 12 ||
      !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  return std::stoull(text);
}

usage_error off_hint(const std::string& what) {
  return usage_error(fmt::format("{} (give the flags yourself, or --no-scheduler-detect)", what));
}

int number_of(const variable& v) {
  auto n = as_number(v.value);
  if (!n || *n > 10'000'000) throw off_hint(fmt::format("{}={} is not a number", v.name, v.value));
  return static_cast<int>(*n);
}

variable required(const env_map& env, std::initializer_list<const char*> names,
                  const std::string& scheduler) {
  if (auto v = first_of(env, names)) return *v;
  throw off_hint(fmt::format("inside a {} but {} is not set", scheduler, *names.begin()));
}

bool given(const launch_options& o, const char* flag) { return o.given.count(flag) > 0; }

class deriver {
 public:
  deriver(launch_options& o, scheduler_env& s) : o_(o), s_(s) {}

  void nnodes(int n, const std::string& source) {
    if (given(o_, "nnodes")) return;
    o_.nnodes = std::to_string(n);
    note("nnodes", o_.nnodes, source);
  }
  void node_rank(int rank, const std::string& source) {
    if (given(o_, "node-rank")) return;
    o_.node_rank = rank;
    note("node-rank", std::to_string(rank), source);
  }
  void nproc(const std::string& n, const std::string& source) {
    if (given(o_, "nproc-per-node")) return;
    o_.nproc_per_node = n;
    note("nproc-per-node", n, source);
  }
  void backend(const std::string& b, const std::string& source) {
    if (given(o_, "rdzv-backend") || given(o_, "rdzv-endpoint")) return;
    o_.rdzv_backend = b;
    o_.rdzv_backend_given = true;
    note("rdzv-backend", b, source);
  }
  bool endpoint(const std::string& e, const std::string& source) {
    if (given(o_, "rdzv-endpoint")) return false;
    o_.rdzv_endpoint = e;
    note("rdzv-endpoint", e, source);
    return true;
  }
  void run_id(const std::string& id, const std::string& source) {
    if (given(o_, "rdzv-id")) return;
    o_.rdzv_id = id;
    note("rdzv-id", id, source);
  }
  void master_addr(const std::string& addr, const std::string& source) {
    if (given(o_, "master-addr")) return;
    o_.master_addr = addr;
    note("master-addr", addr, source);
  }
  void master_port(int port, const std::string& source) {
    if (given(o_, "master-port")) return;
    if (port <= 0 || port > 65535) throw off_hint(fmt::format("{}={} is not a port", source, port));
    o_.master_port = port;
    o_.master_port_given = true;
    note("master-port", std::to_string(port), source);
  }
  void worker_var(const std::string& name, const std::string& value, const std::string& source) {
    s_.worker_env[name] = value;
    note(name, value, source);
  }
  void note(const std::string& setting, const std::string& value, const std::string& source) {
    s_.derived.push_back({setting, value, source});
  }

 private:
  launch_options& o_;
  scheduler_env& s_;
};

// A parallel step: srun's tasks carry the step id and their task ids. An
// sbatch/salloc shell has the job's variables but no step id: not a step,
// so it is left alone (it runs on one node).
bool in_slurm_step(const env_map& env) {
  auto step = first_of(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
  if (!has(env, "SLURM_JOB_ID") || !step || !has(env, "SLURM_PROCID")) return false;
  auto id = as_number(step->value);
  return id && *id < first_special_step_id;
}

void derive_slurm(launch_options& o, const env_map& env, scheduler_env& s) {
  const std::string where = "Slurm step";
  s.scheduler = "slurm";
  deriver d(o, s);
  variable job = required(env, {"SLURM_JOB_ID"}, where);
  variable step = required(env, {"SLURM_STEP_ID", "SLURM_STEPID"}, where);
  variable nodes = required(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, where);
  variable nodelist =
      required(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, where);
  variable node_id = required(env, {"SLURM_NODEID"}, where);
  variable tasks = required(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}, where);
  variable procid = required(env, {"SLURM_PROCID"}, where);
  int num_nodes = number_of(nodes);
  int num_tasks = number_of(tasks);
  int node = number_of(node_id);

  std::string host;
  try {
    host = first_host(nodelist.value);
  } catch (const hostlist_error& e) {
    throw off_hint(fmt::format("{}: {}", nodelist.name, e.what()));
  }
  auto job_number = as_number(job.value);
  if (!job_number) throw off_hint(fmt::format("{}={} is not a number", job.name, job.value));
  int port = slurm_port_base + static_cast<int>(*job_number % slurm_port_span);
  std::string port_source = fmt::format("{}: {} + job id % {}", job.name, slurm_port_base,
                                        slurm_port_span);
  if (auto master_port = first_of(env, {"MASTER_PORT"})) {
    port = number_of(*master_port);
    port_source = master_port->name;
  }
  if (given(o, "master-port")) {
    port = o.master_port;
    port_source = "--master-port";
  }
  std::string run_id = job.value + "." + step.value;
  std::string run_id_source = job.name + "." + step.name;
  s.extra_signals = {SIGUSR1, SIGUSR2};

  if (num_tasks > num_nodes) {
    // Several tasks on a node: each task is one worker. Every task of the
    // step decides alike (the counts are the step's), so all agree.
    s.style = "task-per-worker";
    if (given(o, "nproc-per-node") && o.nproc_per_node != "1") {
      throw usage_error(fmt::format(
          "srun started {} tasks on {} nodes and --nproc-per-node={} would make each task start "
          "{} workers; use srun --ntasks-per-node=1 with --nproc-per-node, or drop "
          "--nproc-per-node to run one worker per task",
          num_tasks, num_nodes, o.nproc_per_node, o.nproc_per_node));
    }
    variable localid = required(env, {"SLURM_LOCALID"}, where);
    auto per_node = first_of(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
    int local_tasks = 0;
    std::string local_source;
    if (per_node) {
      std::vector<int> counts;
      try {
        counts = expand_tasks_per_node(per_node->value);
      } catch (const hostlist_error& e) {
        throw off_hint(fmt::format("{}: {}", per_node->name, e.what()));
      }
      if (node >= static_cast<int>(counts.size())) {
        throw off_hint(fmt::format("{}={} has no entry for SLURM_NODEID={}", per_node->name,
                                   per_node->value, node));
      }
      local_tasks = counts[static_cast<std::size_t>(node)];
      local_source = fmt::format("{}[SLURM_NODEID]", per_node->name);
    } else {
      variable n = required(env, {"SLURM_NTASKS_PER_NODE"}, where);
      local_tasks = number_of(n);
      local_source = n.name;
    }
    d.nnodes(num_tasks, tasks.name + " (one rendezvous member per task)");
    d.node_rank(number_of(procid), procid.name);
    d.nproc("1", "one worker per Slurm task");
    d.backend("static", "task-per-worker: ranks are SLURM_PROCID");
    d.master_addr(host, "first host of " + nodelist.name);
    d.master_port(port, port_source);
    d.run_id(run_id, run_id_source);
    d.worker_var("LOCAL_RANK", std::to_string(number_of(localid)), localid.name);
    d.worker_var("LOCAL_WORLD_SIZE", std::to_string(local_tasks), local_source);
    d.worker_var("GROUP_RANK", std::to_string(node), node_id.name);
    d.worker_var("GROUP_WORLD_SIZE", std::to_string(num_nodes), nodes.name);
    return;
  }

  s.style = "agent-per-node";
  d.nnodes(num_nodes, nodes.name);
  d.node_rank(node, node_id.name);
  if (auto gpus = first_of(env, {"SLURM_GPUS_ON_NODE"}); gpus && number_of(*gpus) > 0) {
    d.nproc(gpus->value, gpus->name);
  }
  d.run_id(run_id, run_id_source);
  if (parse_nnodes(o.nnodes).max <= 1) return;  // one node: nobody to meet
  d.backend("c10d", "Slurm step of several nodes");
  // As resolve_multi_node decides: an endpoint without a backend is c10d.
  auto backend = [&] {
    return o.rdzv_backend_given || o.rdzv_endpoint.empty() ? o.rdzv_backend : std::string("c10d");
  };
  std::string endpoint_host = given(o, "master-addr") ? o.master_addr : host;
  if (backend() == "c10d" &&
      d.endpoint(fmt::format("{}:{}", endpoint_host, port),
                 fmt::format("first host of {}, port from {}", nodelist.name, port_source)) &&
      o.rdzv_conf.find("is_host") == std::string::npos) {
    // Node 0 of the step is the first host of its node list; deciding by
    // the node id avoids relying on host names resolving to this machine.
    s.host_store = o.node_rank == 0;
    s.host_store_because = fmt::format("{}={}: the step's node 0 hosts the store",
                                       node_id.name, o.node_rank);
  }
  if (backend() == "static") {
    d.master_addr(host, "first host of " + nodelist.name);
    d.master_port(port, port_source);
  }
  node_range range = parse_nnodes(o.nnodes);
  if (backend() == "c10d" && range.min == range.max && o.node_rank >= 0 &&
      o.node_rank < range.max) {
    s.pinned_group_rank = o.node_rank;  // GROUP_RANK == SLURM_NODEID
  }
}

// Kubeflow's PyTorchJob (and platforms like it) give each pod node-level
// MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK; operators from v1.7 also
// PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR/PORT
// (read as flags already). Inside a torchrun/dtrun worker the same names
// are per-process values: LOCAL_RANK and friends tell them apart.
void derive_node_env(launch_options& o, const env_map& env, scheduler_env& s) {
  if (!has(env, "MASTER_ADDR") || !has(env, "MASTER_PORT") || !has(env, "WORLD_SIZE") ||
      !has(env, "RANK")) {
    return;
  }
  if (has(env, "LOCAL_RANK") || has(env, "GROUP_RANK") || has(env, "TORCHELASTIC_RUN_ID")) return;
  s.scheduler = has(env, "KUBERNETES_SERVICE_HOST") ? "kubernetes" : "node-env";
  if (given(o, "rdzv-endpoint")) return;  // elastic: PET_RDZV_* decide
  deriver d(o, s);
  variable world{"WORLD_SIZE", env.at("WORLD_SIZE")};
  variable rank{"RANK", env.at("RANK")};
  int world_size = number_of(world);
  if (!given(o, "nnodes")) {
    d.nnodes(world_size, "WORLD_SIZE (pods: without PET_NNODES, WORLD_SIZE counts nodes)");
  } else if (auto nproc = as_number(o.nproc_per_node)) {
    // Operators from v1.7 set WORLD_SIZE = pods x nproc; older ones pods.
    int nodes = parse_nnodes(o.nnodes).max;
    if (world_size != nodes && static_cast<std::uint64_t>(world_size) != nodes * *nproc) {
      s.warnings.push_back(fmt::format(
          "WORLD_SIZE={} is neither --nnodes={} nor nodes x --nproc-per-node={}; the workers get "
          "dtrun's own WORLD_SIZE",
          world_size, o.nnodes, o.nproc_per_node));
    }
  }
  d.node_rank(number_of(rank), "RANK (the pod's index)");
  d.master_addr(env.at("MASTER_ADDR"), "MASTER_ADDR");
  d.master_port(number_of({"MASTER_PORT", env.at("MASTER_PORT")}), "MASTER_PORT");
  int nodes = parse_nnodes(o.nnodes).max;
  if (o.node_rank >= nodes) {
    throw off_hint(fmt::format("this pod's node rank {} is not below the {} nodes (RANK={}, "
                               "WORLD_SIZE={})",
                               o.node_rank, nodes, rank.value, world.value));
  }
}

}  // namespace

scheduler_env detect_scheduler_env(launch_options& o, const env_map& env) {
  scheduler_env s;
  for (const auto& [flag, source] : o.given) {
    if (source.rfind("PET_", 0) != 0) continue;
    auto it = env.find(source);
    s.from_pet.push_back({flag, it == env.end() ? "" : it->second, source});
  }
  if (o.no_scheduler_detect || o.standalone) return s;
  // Kubeflow's operators before v1.7 spelled it PET_N_PROC_PER_NODE, which
  // torchrun never read.
  if (auto old = first_of(env, {"PET_N_PROC_PER_NODE"}); old && !given(o, "nproc-per-node")) {
    o.nproc_per_node = old->value;
    s.derived.push_back({"nproc-per-node", old->value, old->name});
  }
  if (in_slurm_step(env)) {
    derive_slurm(o, env, s);
  } else {
    derive_node_env(o, env, s);
  }
  return s;
}

void apply_scheduler_env(const scheduler_env& s, launch_config& c) {
  if (c.multi_node) {
    auto& r = c.multi_node->rendezvous;
    if (s.pinned_group_rank && c.multi_node->backend == "c10d" && r.fixed_rank < 0) {
      r.fixed_rank = *s.pinned_group_rank;
    }
    if (s.host_store) {
      r.host_store = *s.host_store;
      c.multi_node->host_decided_by = s.host_store_because;
    }
  }
  for (int sig : s.extra_signals) {
    if (std::find(c.signals.begin(), c.signals.end(), sig) == c.signals.end()) {
      c.signals.push_back(sig);
    }
  }
  for (const auto& [k, v] : s.worker_env) c.worker_args.env_overrides[k] = v;
  c.warnings.insert(c.warnings.end(), s.warnings.begin(), s.warnings.end());
}

std::vector<std::string> describe(const scheduler_env& s) {
  std::vector<std::string> lines;
  if (s.scheduler.empty() || s.derived.empty()) return lines;
  std::string what = s.style.empty() ? s.scheduler : s.scheduler + ", " + s.style;
  std::vector<std::string> parts;
  for (const auto& d : s.derived) parts.push_back(fmt::format("{}={} ({})", d.setting, d.value, d.source));
  lines.push_back(fmt::format("{}: derived {} (--no-scheduler-detect turns this off)", what,
                              fmt::join(parts, ", ")));
  return lines;
}

void add_scheduler_json(nlohmann::json& out, const scheduler_env& s, const launch_config& c) {
  auto list = [](const std::vector<derived_setting>& settings) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& d : settings) {
      a.push_back({{"setting", d.setting}, {"value", d.value}, {"source", d.source}});
    }
    return a;
  };
  out["scheduler"] = s.scheduler.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.scheduler);
  if (!s.style.empty()) out["scheduler_style"] = s.style;
  out["derived"] = list(s.derived);
  out["from_pet_env"] = list(s.from_pet);

  // The ranks each worker will get, where a fixed node rank and node count
  // decide them (every node running the same number of workers).
  int group_rank = -1;
  int groups = c.nnodes.min == c.nnodes.max ? c.nnodes.max : -1;
  if (!c.multi_node) {
    group_rank = 0;
    groups = 1;
  } else if (c.multi_node->rendezvous.fixed_rank >= 0) {
    group_rank = c.multi_node->rendezvous.fixed_rank;
  }
  for (auto& w : out["workers"]) {
    auto& env = w["env"];
    int local_rank = w["local_rank"].get<int>();
    if (group_rank >= 0 && groups > 0) {
      env["RANK"] = std::to_string(group_rank * c.nproc_per_node + local_rank);
      env["WORLD_SIZE"] = std::to_string(groups * c.nproc_per_node);
      env["GROUP_RANK"] = std::to_string(group_rank);
    }
    for (const auto& [k, v] : c.worker_args.env_overrides) env[k] = v;
    if (c.worker_args.local_rank != agent::local_rank_arg::none || c.worker_args.template_args) {
      // This worker's own argv (--local-rank, placeholders), as far as known.
      agent::env_map known;
      for (const auto& [k, v] : env.items()) known[k] = v.get<std::string>();
      std::vector<std::string> args = c.args;
      agent::customize_worker(c.worker_args, args, known);
      nlohmann::json argv = nlohmann::json::array({c.program});
      for (const auto& a : args) argv.push_back(a);
      w["argv"] = argv;
    }
  }
}

}  // namespace dtrun::launcher
