#include <catch2/catch.hpp>

#include "agent/spec/virtual_local_rank.h"
#include "agent/spec/worker_args.h"
#include "rendezvous/base/env_map.h"

using namespace dtrun::agent;
using dtrun::env_map;

namespace {

env_map worker_env() {
  return {{"RANK", "5"},       {"LOCAL_RANK", "1"},       {"WORLD_SIZE", "8"},
          {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "1"}, {"GROUP_WORLD_SIZE", "2"},
          {"TORCHELASTIC_RESTART_COUNT", "3"}};
}

}  // namespace

TEST_CASE("placeholders take the worker's own values") {
  env_map env = worker_env();
  CHECK(expand_placeholders("--process_index={rank}", env) == "--process_index=5");
  CHECK(expand_placeholders("{local_rank}/{local_world_size}", env) == "1/4");
  CHECK(expand_placeholders("{world_size}-{group_rank}-{node_rank}-{group_world_size}", env) ==
        "8-1-1-2");
  CHECK(expand_placeholders("out/{round}/{restart_count}", env) == "out/3/3");
  // Anything else in braces is the script's business.
  CHECK(expand_placeholders("{\"a\": {rank}}", env) == "{\"a\": 5}");
  CHECK(expand_placeholders("{other} {rank", env) == "{other} {rank");
}

TEST_CASE("the legacy --local-rank argument goes right after the script") {
  std::vector<std::string> args = {"-u", "train.py", "--lr", "3"};
  env_map env = worker_env();
  worker_customization c;
  c.script_args_at = 2;
  c.local_rank = local_rank_arg::dash;
  customize_worker(c, args, env);
  CHECK(args == std::vector<std::string>{"-u", "train.py", "--local-rank=1", "--lr", "3"});

  args = {"-u", "-m", "pkg.train"};
  c.script_args_at = 3;
  c.local_rank = local_rank_arg::underscore;
  customize_worker(c, args, env);
  CHECK(args == std::vector<std::string>{"-u", "-m", "pkg.train", "--local_rank=1"});
}

TEST_CASE("environment overrides come first and the arguments read them") {
  std::vector<std::string> args = {"-u", "train.py", "-u", "--index={local_rank}"};
  env_map env = worker_env();
  worker_customization c;
  c.script_args_at = 2;
  c.env_overrides = {{"LOCAL_RANK", "0"}, {"GROUP_RANK", "7"}};
  c.template_args = true;
  c.local_rank = local_rank_arg::dash;
  customize_worker(c, args, env);
  CHECK(env.at("LOCAL_RANK") == "0");
  CHECK(env.at("GROUP_RANK") == "7");
  CHECK(args == std::vector<std::string>{"-u", "train.py", "--local-rank=0", "-u", "--index=0"});
}

TEST_CASE("without templating the script's arguments keep their braces") {
  std::vector<std::string> args = {"-u", "{rank}.py", "{rank}"};
  env_map env = worker_env();
  worker_customization c;
  c.script_args_at = 2;
  customize_worker(c, args, env);
  CHECK(args == std::vector<std::string>{"-u", "{rank}.py", "{rank}"});
  CHECK_FALSE(c.changes_args());
}

TEST_CASE("the local rank macro is replaced in every argument always") {
  // torchrun's macros.substitute runs on all of [-u, script, args...].
  std::vector<std::string> args = {"-u", "run_${local_rank}.py", "--out=/tmp/$local_rank",
                                   "${local_rank}${local_rank}", "$local_rankX", "${LOCAL_RANK}",
                                   "cost$$5", "$${local_rank}", "$", "${local_rank",
                                   "{local_rank}"};
  env_map env = worker_env();
  worker_customization c;
  c.script_args_at = 2;
  CHECK(has_local_rank_macro(args));
  customize_worker(c, args, env);
  CHECK(args == std::vector<std::string>{"-u", "run_1.py", "--out=/tmp/1", "11", "$local_rankX",
                                         "${LOCAL_RANK}", "cost$$5", "$${local_rank}", "$",
                                         "${local_rank", "{local_rank}"});
  CHECK_FALSE(has_local_rank_macro({"-u", "train.py", "{rank}"}));
}

TEST_CASE("virtual local rank sets LOCAL_RANK to 0 after the arguments took the real one") {
  std::vector<std::string> args = {"-u", "train.py", "--gpu=${local_rank}", "{local_rank}"};
  env_map env = worker_env();  // LOCAL_RANK=1
  worker_customization c;
  c.script_args_at = 2;
  c.template_args = true;
  c.local_rank = local_rank_arg::dash;
  c.virtual_local_rank = true;
  c.parent_visible_devices = "4, 5,6";
  customize_worker(c, args, env);
  CHECK(env.at("LOCAL_RANK") == "0");
  CHECK(env.at("CUDA_VISIBLE_DEVICES") == "5");
  CHECK(args ==
        std::vector<std::string>{"-u", "train.py", "--local-rank=1", "--gpu=1", "1"});
}

TEST_CASE("virtual local rank maps through the parent's visible devices") {
  CHECK(virtual_visible_device(0, std::nullopt) == "0");
  CHECK(virtual_visible_device(3, std::nullopt) == "3");
  CHECK(virtual_visible_device(0, std::string("2,3")) == "2");
  CHECK(virtual_visible_device(1, std::string("2,3")) == "3");
  CHECK(virtual_visible_device(1, std::string("GPU-aa, MIG-bb ")) == "MIG-bb");
  // Python's "".split(",") is [""]: one empty entry, as torch maps it.
  CHECK(virtual_visible_device(0, std::string("")) == "");
  CHECK_THROWS_AS(virtual_visible_device(1, std::string("")), no_visible_device);
  CHECK_THROWS_WITH(virtual_visible_device(2, std::string("0,1")),
                    Catch::Contains("local rank 2 has no device") &&
                        Catch::Contains("CUDA_VISIBLE_DEVICES='0,1' lists 2"));
}

TEST_CASE("virtual local rank maps through HIP_VISIBLE_DEVICES and sets both, as torch 2.15") {
  std::vector<std::string> args = {"-u", "train.py"};
  env_map env = worker_env();  // LOCAL_RANK=1
  worker_customization c;
  c.virtual_local_rank = true;
  c.parent_visible_devices = "6,7";
  c.parent_is_hip = true;
  customize_worker(c, args, env);
  CHECK(env.at("CUDA_VISIBLE_DEVICES") == "7");
  CHECK(env.at("HIP_VISIBLE_DEVICES") == "7");
  CHECK_THROWS_WITH(virtual_visible_device(2, std::string("0,1"), "HIP_VISIBLE_DEVICES"),
                    Catch::Contains("HIP_VISIBLE_DEVICES='0,1' lists 2"));
}

TEST_CASE("virtual local rank without a device for the worker throws") {
  std::vector<std::string> args = {"-u", "train.py"};
  env_map env = worker_env();
  worker_customization c;
  c.virtual_local_rank = true;
  c.parent_visible_devices = "7";
  CHECK_THROWS_AS(customize_worker(c, args, env), no_visible_device);
}
