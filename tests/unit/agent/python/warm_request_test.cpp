#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "agent/python/warm_request.h"

using namespace dtrun::agent;

namespace {

// A warm interpreter as the agent starts it, and a worker like it.
spawn_request warm_like() {
  spawn_request r;
  r.program = "/usr/bin/python3";
  r.args = {"-u", "train.py", "--lr", "{rank}"};
  r.env = {{"PATH", "/usr/bin"}, {"OMP_NUM_THREADS", "1"}, {"PYTHONPATH", "/run/python"},
           {"LOCAL_WORLD_SIZE", "2"}};
  return r;
}

spawn_request worker_like() {
  spawn_request r = warm_like();
  r.args = {"-u", "train.py", "--lr", "3"};
  r.env.insert({{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"MASTER_PORT", "29500"},
                {"TORCHELASTIC_RESTART_COUNT", "2"}, {"DTRUN_STACK_FILE", "/run/a/1/stacks"},
                {"CUDA_VISIBLE_DEVICES", "1"}, {"TORCHELASTIC_ERROR_FILE", "/run/a/1/e.json"}});
  return r;
}

}  // namespace

TEST_CASE("a worker differing only in its per-worker variables and script arguments forks") {
  CHECK_FALSE(preload_mismatch(warm_like(), worker_like(), 2));
  for (const char* name : {"RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "MASTER_ADDR",
                           "TORCHELASTIC_RESTART_COUNT", "CUDA_VISIBLE_DEVICES",
                           "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "DTRUN_HEARTBEAT_FILE",
                           "DTRUN_ANYTHING"}) {
    CHECK(is_per_worker_variable(name));
  }
  for (const char* name : {"OMP_NUM_THREADS", "PYTHONPATH", "PYTHONHASHSEED", "LD_PRELOAD",
                           "TORCH_LOGS", "RANKS", "XRANK"}) {
    CHECK_FALSE(is_per_worker_variable(name));
  }
}

TEST_CASE("a worker whose start-up differs from the warm interpreter's starts plainly") {
  spawn_request w = worker_like();
  w.env["OMP_NUM_THREADS"] = "4";  // libgomp read it when torch was imported
  CHECK(preload_mismatch(warm_like(), w, 2) == "the variable OMP_NUM_THREADS");
  w = worker_like();
  w.env["TORCH_LOGS"] = "+dynamo";  // set on one side only
  CHECK(preload_mismatch(warm_like(), w, 2) == "the variable TORCH_LOGS");
  w = worker_like();
  w.env.erase("PATH");
  CHECK(preload_mismatch(warm_like(), w, 2) == "the variable PATH");
  w = worker_like();
  w.program = "/opt/venv/bin/python";
  CHECK(preload_mismatch(warm_like(), w, 2) == "the program");
  w = worker_like();
  w.args[1] = "other.py";
  CHECK(preload_mismatch(warm_like(), w, 2) == "the interpreter's flags or the script");
  // A launch whose script cannot be told apart from its arguments.
  CHECK(preload_mismatch(warm_like(), worker_like(), 0) == "the interpreter's flags or the script");
  CHECK(preload_mismatch(warm_like(), worker_like(), 9) == "the interpreter's flags or the script");
}

TEST_CASE("the spawn request carries the folder, CPUs, script arguments and environment") {
  spawn_request w;
  w.args = {"-u", "-m", "pkg.train", "--x", ""};
  w.env = {{"A", "1"}, {"EMPTY", ""}};
  w.cpus = {2, 3};
  using namespace std::string_literals;
  CHECK(spawn_message(w, 3, "/work") ==
        "spawn\0/work\0002\0002\0003\0002\0--x\0\0A=1\0EMPTY="s);
  w.cpus.clear();
  w.args = {"-u", "train.py"};
  w.env.clear();
  CHECK(spawn_message(w, 2, "/") == "spawn\0/\0000\0000"s);
}

TEST_CASE("only a whole positive pid is a pid reply") {
  CHECK(pid_reply("pid 4242") == 4242);
  CHECK_FALSE(pid_reply("pid 0"));
  CHECK_FALSE(pid_reply("pid -3"));
  CHECK_FALSE(pid_reply("pid 12x"));
  CHECK_FALSE(pid_reply("error --preload: boom"));
  CHECK_FALSE(pid_reply(""));
  CHECK_FALSE(pid_reply("ready"));
}
