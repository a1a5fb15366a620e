#include <catch2/catch.hpp>

#include <csignal>

#include "launcher/cli/cli.h"
#include "launcher/config/launch_config.h"
#include "launcher/config/resolve_launch_config.h"
#include "launcher/schedulers/scheduler_detect.h"
#include "launcher/schedulers/scheduler_env.h"
#include "rendezvous/base/env_map.h"
#include "tests/unit/launcher/env_guard.h"

using namespace dtrun::launcher;
using dtrun::env_map;

namespace {

launch_options parse_with_script(std::vector<std::string> args) {
  args.push_back("x.py");
  return parse_command_line(args).options;
}

// Detection, and its flag overrides applied to `o` (as resolve_launch_config
// applies them), so the derived flags can be checked there.
scheduler_env detect(launch_options& o, const env_map& env) {
  scheduler_env s = detect_scheduler_env(o, env);
  o = with_overrides(o, s.flags);
  return s;
}

std::string source_of(const scheduler_env& s, const std::string& setting) {
  for (const auto& d : s.derived) {
    if (d.setting == setting) return d.source;
  }
  return "";
}

// What a task sees under `srun -N2 --ntasks-per-node=1` in the project's
// Slurm test cluster (scripts/slurm-cluster, docs/slurm.md).
env_map slurm_agent_per_node(int node) {
  return {{"SLURM_JOB_ID", "2"},
          {"SLURM_JOB_NODELIST", "node[1-2]"},
          {"SLURM_NODELIST", "node[1-2]"},
          {"SLURM_STEP_NODELIST", "node[1-2]"},
          {"SLURM_NNODES", "2"},
          {"SLURM_JOB_NUM_NODES", "2"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_NTASKS", "2"},
          {"SLURM_NPROCS", "2"},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_PROCID", std::to_string(node)},
          {"SLURM_LOCALID", "0"},
          {"SLURMD_NODENAME", "node" + std::to_string(node + 1)},
          {"SLURM_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_NTASKS_PER_NODE", "1"},
          {"SLURM_CPUS_ON_NODE", "1"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_LAUNCH_NODE_IPADDR", "10.88.0.1"},
          {"SLURM_SRUN_COMM_HOST", "10.88.0.1"},
          {"SLURM_SUBMIT_HOST", "vm"},
          {"SLURM_JOB_NAME", "bash"}};
}

// `srun -N2 --ntasks-per-node=2`: PROCID 0-3, LOCALID 0/1 on each node.
env_map slurm_task_per_worker(int procid) {
  env_map env = slurm_agent_per_node(procid / 2);
  env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = env["SLURM_STEP_NUM_TASKS"] = "4";
  env["SLURM_PROCID"] = std::to_string(procid);
  env["SLURM_LOCALID"] = std::to_string(procid % 2);
  env["SLURM_TASKS_PER_NODE"] = env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  env["SLURM_NTASKS_PER_NODE"] = "2";
  return env;
}

}  // namespace

TEST_CASE("a Slurm step of one task per node derives a c10d rendezvous") {
  for (int node : {0, 1}) {
    launch_options o = parse_with_script({"--nproc-per-node=2"});
    scheduler_env s = detect(o, slurm_agent_per_node(node));
    CHECK(s.scheduler == "slurm");
    CHECK(s.style == "agent-per-node");
    CHECK(o.nnodes.value.text() == "2");
    CHECK(source_of(s, "nnodes") == "SLURM_STEP_NUM_NODES");
    CHECK(o.node_rank.value == node);
    CHECK(source_of(s, "node-rank") == "SLURM_NODEID");
    CHECK(o.rdzv_backend.value == "c10d");
    CHECK(o.rdzv_endpoint.value == "node1:20002");
    CHECK(o.rdzv_id.value == "2.0");
    CHECK(o.nproc_per_node.value.text() == "2");  // given: not derived
    CHECK(source_of(s, "nproc-per-node").empty());
    REQUIRE(s.host_store.has_value());
    CHECK(*s.host_store == (node == 0));
    CHECK(s.pinned_group_rank == node);
    CHECK(s.extra_signals == std::vector<int>{SIGUSR1, SIGUSR2});
    CHECK(s.worker_env.empty());

    launch_config c = resolve_launch_config(o, {}, s);
    REQUIRE(c.multi_node());
    CHECK(c.multi_node()->backend == "c10d");
    CHECK(c.multi_node()->rendezvous.fixed_rank == node);
    CHECK(c.multi_node()->rendezvous.host_store == (node == 0));
    CHECK(c.multi_node()->rendezvous.endpoint_port == 20002);
    CHECK(std::count(c.agent.signals.begin(), c.agent.signals.end(), SIGUSR1) == 1);
  }
}

TEST_CASE("Slurm: the older variable names and GPUs on the node fill in") {
  env_map env = slurm_agent_per_node(1);
  env.erase("SLURM_STEP_NUM_NODES");
  env.erase("SLURM_STEP_NODELIST");
  env["SLURM_JOB_NODELIST"] = "gpu[07-08]";
  env["SLURM_GPUS_ON_NODE"] = "4";
  env["MASTER_PORT"] = "12345";
  launch_options o = parse_with_script({});
  scheduler_env s = detect(o, env);
  CHECK(source_of(s, "nnodes") == "SLURM_NNODES");
  CHECK(o.nproc_per_node.value.text() == "4");
  CHECK(source_of(s, "nproc-per-node") == "SLURM_GPUS_ON_NODE");
  CHECK(o.rdzv_endpoint.value == "gpu07:12345");
}

TEST_CASE("Slurm: explicit flags win over the step's variables") {
  launch_options o = parse_with_script({"--nnodes=2", "--rdzv-endpoint=head:555", "--rdzv-id=mine",
                            "--node-rank=1", "--nproc-per-node=3"});
  scheduler_env s = detect(o, slurm_agent_per_node(0));
  CHECK(o.rdzv_endpoint.value == "head:555");
  CHECK(o.rdzv_id.value == "mine");
  CHECK(o.node_rank.value == 1);
  CHECK(o.nproc_per_node.value.text() == "3");
  CHECK_FALSE(s.host_store.has_value());  // the given endpoint's host decides
  CHECK(s.derived.empty());

  launch_options single = parse_with_script({"--nnodes=1"});
  detect(single, slurm_agent_per_node(0));
  CHECK(single.rdzv_endpoint.value.empty());  // one node: nobody to meet
  CHECK(single.rdzv_id.value == "2.0");
}

TEST_CASE("Slurm: several tasks per node run one worker each") {
  for (int procid = 0; procid < 4; ++procid) {
    launch_options o = parse_with_script({});
    scheduler_env s = detect(o, slurm_task_per_worker(procid));
    CHECK(s.style == "task-per-worker");
    CHECK(o.nnodes.value.text() == "4");
    CHECK(o.node_rank.value == procid);
    CHECK(o.nproc_per_node.value.text() == "1");
    CHECK(o.rdzv_backend.value == "static");
    CHECK(o.master_addr.value == "node1");
    CHECK(o.master_port.value == 20002);
    CHECK(s.worker_env.at("LOCAL_RANK") == std::to_string(procid % 2));
    CHECK(s.worker_env.at("LOCAL_WORLD_SIZE") == "2");
    CHECK(s.worker_env.at("GROUP_RANK") == std::to_string(procid / 2));
    CHECK(s.worker_env.at("GROUP_WORLD_SIZE") == "2");

    launch_config c = resolve_launch_config(o, {}, s);
    REQUIRE(c.multi_node());
    CHECK(c.multi_node()->rendezvous.fixed_rank == procid);
    CHECK(c.multi_node()->rendezvous.host_store == (procid == 0));
    CHECK(c.agent.worker_args.env_overrides.at("LOCAL_RANK") == std::to_string(procid % 2));
  }
}

TEST_CASE("Slurm: uneven tasks per node take this node's count") {
  env_map env = slurm_task_per_worker(2);
  env["SLURM_STEP_NUM_TASKS"] = "3";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2,1";
  env["SLURM_NODEID"] = "1";
  env["SLURM_LOCALID"] = "0";
  launch_options o = parse_with_script({});
  scheduler_env s = detect(o, env);
  CHECK(o.nnodes.value.text() == "3");
  CHECK(s.worker_env.at("LOCAL_WORLD_SIZE") == "1");
  CHECK(s.worker_env.at("GROUP_RANK") == "1");
}

TEST_CASE("Slurm: several workers per task with several tasks per node is refused") {
  launch_options o = parse_with_script({"--nproc-per-node=2"});
  CHECK_THROWS_WITH(detect(o, slurm_task_per_worker(0)),
                    Catch::Contains("--ntasks-per-node=1"));
}

TEST_CASE("Slurm: an sbatch script outside a step and --no-scheduler-detect derive nothing") {
  env_map batch = slurm_agent_per_node(0);
  for (const char* step_var : {"SLURM_STEP_ID", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST",
                               "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE"}) {
    batch.erase(step_var);
  }
  launch_options o = parse_with_script({});
  scheduler_env s = detect(o, batch);
  CHECK(s.scheduler.empty());
  CHECK(o.nnodes.value.text() == "1:1");

  env_map batch_step = slurm_agent_per_node(0);
  batch_step["SLURM_STEP_ID"] = "4294967294";  // the batch step's id
  launch_options b = parse_with_script({});
  CHECK(detect(b, batch_step).scheduler.empty());

  launch_options off = parse_with_script({"--no-scheduler-detect"});
  CHECK(detect(off, slurm_agent_per_node(1)).scheduler.empty());
  CHECK(off.nnodes.value.text() == "1:1");
  CHECK(off.rdzv_endpoint.value.empty());
}

TEST_CASE("Slurm: a broken step environment says which variable") {
  env_map env = slurm_agent_per_node(0);
  env["SLURM_STEP_NODELIST"] = "node[1-";
  launch_options o = parse_with_script({});
  CHECK_THROWS_WITH(detect(o, env), Catch::Contains("SLURM_STEP_NODELIST"));
  env = slurm_agent_per_node(0);
  env.erase("SLURM_NODEID");
  launch_options p = parse_with_script({});
  CHECK_THROWS_WITH(detect(p, env), Catch::Contains("SLURM_NODEID"));
  env = slurm_agent_per_node(0);
  env["SLURM_JOB_ID"] = "12x";
  launch_options q = parse_with_script({});
  CHECK_THROWS_WITH(detect(q, env), Catch::Contains("SLURM_JOB_ID=12x"));
}

namespace {

// Kubeflow training-operator < v1.7, PyTorchJob with Master (1) + Worker (1)
// replicas: WORLD_SIZE counts pods, RANK is the pod's index.
env_map kubeflow_v1_6(int rank) {
  return {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
          {"PYTHONUNBUFFERED", "0"},
          {"MASTER_PORT", "23456"},
          {"MASTER_ADDR", "job-master-0"},
          {"WORLD_SIZE", "2"},
          {"RANK", std::to_string(rank)}};
}

}  // namespace

TEST_CASE("Kubernetes: node-level MASTER_ADDR/WORLD_SIZE/RANK derive a static rendezvous") {
  for (int rank : {0, 1}) {
    launch_options o = parse_with_script({"--nproc-per-node=2"});
    scheduler_env s = detect(o, kubeflow_v1_6(rank));
    CHECK(s.scheduler == "kubernetes");
    CHECK(o.nnodes.value.text() == "2");
    CHECK(source_of(s, "nnodes").rfind("WORLD_SIZE", 0) == 0);
    CHECK(o.node_rank.value == rank);
    CHECK(o.master_addr.value == "job-master-0");
    CHECK(o.master_port.value == 23456);
    CHECK(o.master_port.given_or_derived());
    launch_config c = resolve_launch_config(o, {});
    REQUIRE(c.multi_node());
    CHECK(c.multi_node()->backend == "static");
    CHECK(c.multi_node()->rendezvous.fixed_rank == rank);
    CHECK(c.multi_node()->rendezvous.endpoint_host == "job-master-0");
    CHECK(c.multi_node()->rendezvous.endpoint_port == 23456);
  }
}

TEST_CASE("Kubernetes: from v1.7 the PET variables are flags and WORLD_SIZE is pods x nproc") {
  env_guard nnodes("PET_NNODES", "2");
  env_guard nproc("PET_NPROC_PER_NODE", "2");
  env_guard node_rank("PET_NODE_RANK", "1");
  env_guard addr("PET_MASTER_ADDR", "job-master-0");
  env_guard port("PET_MASTER_PORT", "23456");
  env_map env = kubeflow_v1_6(1);
  env["WORLD_SIZE"] = "4";
  env["PET_NNODES"] = "2";
  env["PET_NPROC_PER_NODE"] = "2";
  env["PET_NODE_RANK"] = "1";
  launch_options o = parse_with_script({});
  CHECK(o.nnodes.source == "PET_NNODES");
  scheduler_env s = detect(o, env);
  CHECK(o.nnodes.value.text() == "2");
  CHECK(o.node_rank.value == 1);
  CHECK(o.nproc_per_node.value.text() == "2");
  CHECK(s.derived.empty());  // everything came from PET_*
  CHECK(s.from_pet.size() == 5);
  CHECK(s.warnings.empty());

  env["WORLD_SIZE"] = "7";
  launch_options p = parse_with_script({});
  CHECK(detect(p, env).warnings.size() == 1);
}

TEST_CASE("Kubernetes: the old operator's PET_N_PROC_PER_NODE is honoured") {
  env_map env = kubeflow_v1_6(0);
  env["PET_N_PROC_PER_NODE"] = "3";
  launch_options o = parse_with_script({});
  scheduler_env s = detect(o, env);
  CHECK(o.nproc_per_node.value.text() == "3");
  CHECK(source_of(s, "nproc-per-node") == "PET_N_PROC_PER_NODE");
}

TEST_CASE("Kubernetes: inside a torchrun worker the variables are per-process: ignored") {
  env_map env = kubeflow_v1_6(1);
  env["LOCAL_RANK"] = "0";
  launch_options o = parse_with_script({});
  CHECK(detect(o, env).scheduler.empty());
  CHECK(o.nnodes.value.text() == "1:1");
}

TEST_CASE("Kubernetes: a rank beyond the node count is refused") {
  env_map env = kubeflow_v1_6(1);
  env["RANK"] = "5";
  launch_options o = parse_with_script({});
  CHECK_THROWS_WITH(detect(o, env), Catch::Contains("RANK=5"));
}

TEST_CASE("the flags given are recorded with where they came from") {
  env_guard pet("PET_MAX_RESTARTS", "3");
  launch_options o = parse_with_script({"--nproc_per_node", "2", "-m"});
  CHECK(o.nproc_per_node.source == "command line");
  CHECK(o.module);
  // Only the flags read from PET_* are listed (-m came from the command line).
  REQUIRE(o.from_variables.size() == 1);
  CHECK(o.from_variables[0].flag == "max-restarts");
  CHECK(o.from_variables[0].variable == "PET_MAX_RESTARTS");
  CHECK_FALSE(o.nnodes.given());
}
