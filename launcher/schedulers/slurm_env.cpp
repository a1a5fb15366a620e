#include "launcher/schedulers/slurm_env.h"

#include <csignal>
#include <cstdint>

#include <fmt/format.h>

#include "launcher/schedulers/env_derivation.h"
#include "launcher/schedulers/slurm_hostlist.h"

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

namespace {

// What every task of a step reads alike.
struct slurm_step {
  variable job, step, nodes, nodelist, node_id, tasks, procid;
  int num_nodes = 0;
  int num_tasks = 0;
  int node = 0;       // SLURM_NODEID
  std::string host;   // the first host of the node list
  int port = 0;       // the rendezvous port, and where it came from
  std::string port_source;
  std::string run_id;
  std::string run_id_source;
};

constexpr const char* slurm_where = "Slurm step";

slurm_step read_step(const launch_options& o, const env_map& env) {
  slurm_step st;
  st.job = required(env, {"SLURM_JOB_ID"}, slurm_where);
  st.step = required(env, {"SLURM_STEP_ID", "SLURM_STEPID"}, slurm_where);
  st.nodes =
      required(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, slurm_where);
  st.nodelist =
      required(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, slurm_where);
  st.node_id = required(env, {"SLURM_NODEID"}, slurm_where);
  st.tasks = required(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}, slurm_where);
  st.procid = required(env, {"SLURM_PROCID"}, slurm_where);
  st.num_nodes = number_of(st.nodes);
  st.num_tasks = number_of(st.tasks);
  st.node = number_of(st.node_id);
  try {
    st.host = first_host(st.nodelist.value);
  } catch (const hostlist_error& e) {
    throw off_hint(fmt::format("{}: {}", st.nodelist.name, e.what()));
  }
  auto job_number = as_number(st.job.value);
  if (!job_number) {
    throw off_hint(fmt::format("{}={} is not a number", st.job.name, st.job.value));
  }
  st.port = slurm_port_base + static_cast<int>(*job_number % slurm_port_span);
  st.port_source =
      fmt::format("{}: {} + job id % {}", st.job.name, slurm_port_base, slurm_port_span);
  if (auto master_port = first_of(env, {"MASTER_PORT"})) {
    st.port = number_of(*master_port);
    st.port_source = master_port->name;
  }
  if (o.master_port.given()) {
    st.port = o.master_port.value;
    st.port_source = "--master-port";
  }
  st.run_id = st.job.value + "." + st.step.value;
  st.run_id_source = st.job.name + "." + st.step.name;
  return st;
}

// Several tasks on a node: each task is one worker. Every task of the
// step decides alike (the counts are the step's), so all agree.
void derive_task_per_worker(const launch_options& o, const env_map& env, const slurm_step& st,
                            deriver& d, scheduler_env& s) {
  s.style = "task-per-worker";
  if (o.nproc_per_node.given() && o.nproc_per_node.value.text() != "1") {
    throw usage_error(fmt::format(
        "srun started {} tasks on {} nodes and --nproc-per-node={} would make each task start "
        "{} workers; use srun --ntasks-per-node=1 with --nproc-per-node, or drop "
        "--nproc-per-node to run one worker per task",
        st.num_tasks, st.num_nodes, o.nproc_per_node.value.text(),
        o.nproc_per_node.value.text()));
  }
  variable localid = required(env, {"SLURM_LOCALID"}, slurm_where);
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
    if (st.node >= static_cast<int>(counts.size())) {
      throw off_hint(fmt::format("{}={} has no entry for SLURM_NODEID={}", per_node->name,
                                 per_node->value, st.node));
    }
    local_tasks = counts[static_cast<std::size_t>(st.node)];
    local_source = fmt::format("{}[SLURM_NODEID]", per_node->name);
  } else {
    variable n = required(env, {"SLURM_NTASKS_PER_NODE"}, slurm_where);
    local_tasks = number_of(n);
    local_source = n.name;
  }
  d.nnodes(st.num_tasks, st.tasks.name + " (one rendezvous member per task)");
  d.node_rank(number_of(st.procid), st.procid.name);
  d.nproc("1", "one worker per Slurm task");
  d.backend("static", "task-per-worker: ranks are SLURM_PROCID");
  d.master_addr(st.host, "first host of " + st.nodelist.name);
  d.master_port(st.port, st.port_source);
  d.run_id(st.run_id, st.run_id_source);
  d.worker_var("LOCAL_RANK", std::to_string(number_of(localid)), localid.name);
  d.worker_var("LOCAL_WORLD_SIZE", std::to_string(local_tasks), local_source);
  d.worker_var("GROUP_RANK", std::to_string(st.node), st.node_id.name);
  d.worker_var("GROUP_WORLD_SIZE", std::to_string(st.num_nodes), st.nodes.name);
}

void derive_agent_per_node(const launch_options& o, const env_map& env, const slurm_step& st,
                           deriver& d, scheduler_env& s) {
  s.style = "agent-per-node";
  d.nnodes(st.num_nodes, st.nodes.name);
  d.node_rank(st.node, st.node_id.name);
  if (auto gpus = first_of(env, {"SLURM_GPUS_ON_NODE"}); gpus && number_of(*gpus) > 0) {
    d.nproc(gpus->value, gpus->name);
  }
  d.run_id(st.run_id, st.run_id_source);
  if (o.nnodes.value.range().max <= 1) return;  // one node: nobody to meet
  d.backend("c10d", "Slurm step of several nodes");
  auto backend = [&] { return chosen_backend(o); };
  std::string endpoint_host = o.master_addr.given() ? o.master_addr.value : st.host;
  if (backend() == "c10d" &&
      d.endpoint(fmt::format("{}:{}", endpoint_host, st.port),
                 fmt::format("first host of {}, port from {}", st.nodelist.name,
                             st.port_source)) &&
      o.rdzv_conf.find("is_host") == std::string::npos) {
    // Node 0 of the step is the first host of its node list; deciding by
    // the node id avoids relying on host names resolving to this machine.
    s.host_store = o.node_rank.value == 0;
    s.host_store_because = fmt::format("{}={}: the step's node 0 hosts the store",
                                       st.node_id.name, o.node_rank.value);
  }
  if (backend() == "static") {
    d.master_addr(st.host, "first host of " + st.nodelist.name);
    d.master_port(st.port, st.port_source);
  }
  node_range range = o.nnodes.value.range();
  if (backend() == "c10d" && range.min == range.max && o.node_rank.value >= 0 &&
      o.node_rank.value < range.max) {
    s.pinned_group_rank = o.node_rank.value;  // GROUP_RANK == SLURM_NODEID
  }
}

}  // namespace

void derive_slurm(launch_options& o, const env_map& env, scheduler_env& s) {
  s.scheduler = "slurm";
  deriver d(o, s);
  const slurm_step st = read_step(o, env);
  s.extra_signals = {SIGUSR1, SIGUSR2};
  if (st.num_tasks > st.num_nodes) {
    derive_task_per_worker(o, env, st, d, s);
  } else {
    derive_agent_per_node(o, env, st, d, s);
  }
}

}  // namespace dtrun::launcher
