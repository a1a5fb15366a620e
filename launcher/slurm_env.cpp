#include "launcher/slurm_env.h"

#include <csignal>
#include <cstdint>

#include <fmt/format.h>

#include "launcher/env_derivation.h"
#include "launcher/launch_config.h"
#include "launcher/rendezvous_config.h"
#include "launcher/slurm_hostlist.h"

namespace dtrun::launcher {
namespace {

// Slurm's rendezvous port: derived from the job id, so two jobs whose
// first node is the same (shared nodes) do not meet on one port. Kept
// below Linux's ephemeral range (32768+).
constexpr int slurm_port_base = 20000;
constexpr int slurm_port_span = 10000;

// Step ids Slurm reserves for the batch script, the extern step and
// interactive shells (0xFFFFFFF0 and up): not a parallel step.
constexpr std::uint64_t first_special_step_id = 0xFFFFFFF0ULL;

}  // namespace

using namespace env_derivation;

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
  auto backend = [&] { return chosen_backend(o); };
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

}  // namespace dtrun::launcher
