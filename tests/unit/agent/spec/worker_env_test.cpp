#include <catch2/catch.hpp>

#include "agent/spec/worker_env.h"

using namespace dtrun::agent;
using dtrun::env_map;
using dtrun::rendezvous::rendezvous_info;

namespace {

rendezvous_info one_node(int nproc) {
  rendezvous_info info;
  info.local_world_size = nproc;
  info.world_size = nproc;
  info.master_addr = "127.0.0.1";
  info.master_port = 4242;
  return info;
}

}  // namespace

TEST_CASE("static env holds what is known before rendezvous") {
  worker_group_spec spec;
  spec.role = "trainer";
  spec.local_world_size = 4;
  spec.max_restarts = 2;
  spec.run_id = "abc";
  env_map env = static_worker_env(spec, 3, {});
  CHECK(env.at("LOCAL_RANK") == "3");
  CHECK(env.at("LOCAL_WORLD_SIZE") == "4");
  CHECK(env.at("ROLE_NAME") == "trainer");
  CHECK(env.at("TORCHELASTIC_MAX_RESTARTS") == "2");
  CHECK(env.at("TORCHELASTIC_RUN_ID") == "abc");
  CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "True");
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(env.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(env.at("OMP_NUM_THREADS") == "1");
  // torchrun 2.x sets only the TORCH_ name (torch >= 2.2 warns on the old).
  CHECK(env.count("NCCL_ASYNC_ERROR_HANDLING") == 0);
  CHECK(env.count("RANK") == 0);
}

TEST_CASE("inherited settings win over the defaults") {
  worker_group_spec spec;
  spec.local_world_size = 2;
  env_map inherited = {{"NCCL_ASYNC_ERROR_HANDLING", "0"},
                       {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"},
                       {"OMP_NUM_THREADS", "8"}};
  env_map env = static_worker_env(spec, 0, inherited);
  CHECK(env.count("NCCL_ASYNC_ERROR_HANDLING") == 0);  // inherited as it is
  CHECK(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "3");
  CHECK(env.count("OMP_NUM_THREADS") == 0);  // inherited as it is
}

TEST_CASE("SIGNALS_TO_HANDLE is the flag's text as torchrun exports it") {
  worker_group_spec spec;
  spec.signals_to_handle = "SIGUSR1,SIGUSR2";
  env_map inherited = {{"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM"}};
  CHECK(static_worker_env(spec, 0, inherited).at("TORCHELASTIC_SIGNALS_TO_HANDLE") ==
        "SIGUSR1,SIGUSR2");
}

TEST_CASE("a single worker keeps OpenMP's default") {
  worker_group_spec spec;
  spec.local_world_size = 1;
  CHECK(static_worker_env(spec, 0, {}).count("OMP_NUM_THREADS") == 0);
}

TEST_CASE("USE_AGENT_STORE is Python's str(bool)") {
  worker_group_spec spec;
  spec.use_agent_store = false;
  CHECK(static_worker_env(spec, 0, {}).at("TORCHELASTIC_USE_AGENT_STORE") == "False");
}

TEST_CASE("one node: ranks equal local ranks for every nproc") {
  for (int nproc : {1, 2, 3, 8}) {
    worker_group_spec spec;
    spec.local_world_size = nproc;
    rendezvous_info info = one_node(nproc);
    for (int lr = 0; lr < nproc; ++lr) {
      env_map env = round_worker_env(spec, info, lr, 5);
      CHECK(env.at("RANK") == std::to_string(lr));
      CHECK(env.at("ROLE_RANK") == std::to_string(lr));
      CHECK(env.at("GROUP_RANK") == "0");
      CHECK(env.at("WORLD_SIZE") == std::to_string(nproc));
      CHECK(env.at("ROLE_WORLD_SIZE") == std::to_string(nproc));
      CHECK(env.at("GROUP_WORLD_SIZE") == "1");
      CHECK(env.at("MASTER_ADDR") == "127.0.0.1");
      CHECK(env.at("MASTER_PORT") == "4242");
      CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "5");
    }
  }
}

TEST_CASE("several nodes: lower group ranks' workers come first") {
  rendezvous_info info;
  info.group_rank = 2;
  info.group_world_size = 3;
  info.first_rank = 6;  // ranks 0-1 run 4 and 2 workers
  info.local_world_size = 3;
  info.world_size = 9;
  CHECK(world_size(info) == 9);
  CHECK(global_rank(info, 0) == 6);
  CHECK(global_rank(info, 2) == 8);
  env_map env = round_worker_env({}, info, 1, 0);
  CHECK(env.at("RANK") == "7");
  CHECK(env.at("GROUP_RANK") == "2");
  CHECK(env.at("GROUP_WORLD_SIZE") == "3");
  CHECK(env.at("WORLD_SIZE") == "9");
}

TEST_CASE("the watchdog's pipe reaches the workers only when it runs") {
  worker_group_spec spec;
  CHECK(static_worker_env(spec, 0, {}).count("TORCHELASTIC_TIMER_FILE") == 0);
  spec.timer_file = "/tmp/run_x/watchdog_timer";
  CHECK(static_worker_env(spec, 0, {}).at("TORCHELASTIC_TIMER_FILE") == "/tmp/run_x/watchdog_timer");
}
