#include <catch2/catch.hpp>

#include "agent/worker_args.h"

using namespace dtrun::agent;

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
  CHECK(c.empty());
}
