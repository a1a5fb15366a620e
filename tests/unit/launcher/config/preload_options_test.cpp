// --preload as the launcher resolves it: module names checked, and the
// flags a forked worker cannot run with refused (docs/agent.md, "Preload").
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "launcher/config/launch_config.h"
#include "launcher/config/resolve_launch_config.h"

using namespace dtrun;  // usage_error
using namespace dtrun::launcher;

namespace {

// A standalone run of train.py with --preload=`list`.
launch_options preloading(std::string list) {
  launch_options o;
  o.standalone = true;
  o.script = "train.py";
  o.preload = std::move(list);
  return o;
}

}  // namespace

TEST_CASE("the preload flag takes dotted module names, once each, in order") {
  launch_options o = preloading("");
  CHECK(resolve_launch_config(o, {}).agent.preload.empty());
  o.preload = "torch,torch.distributed,numpy,torch";
  CHECK(resolve_launch_config(o, {}).agent.preload ==
        std::vector<std::string>{"torch", "torch.distributed", "numpy"});
  o.preload = "_private.mod_2";
  CHECK(resolve_launch_config(o, {}).agent.preload == std::vector<std::string>{"_private.mod_2"});
}

TEST_CASE("the preload flag refuses what is not a module name, and workers it cannot fork") {
  auto error_of = [](std::string list, bool no_python = false, bool no_hook = false) {
    launch_options o = preloading(std::move(list));
    o.no_python = no_python;
    o.no_stack_hook = no_hook;
    try {
      resolve_launch_config(o, {});
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(error_of("torch numpy") ==
        "--preload: 'torch numpy' is not a Python module name; give modules such as "
        "torch,torch.distributed,numpy (comma-separated, no spaces)");
  for (const char* bad : {"1torch", "torch.", ".torch", "torch..nn", "-m", "torch;rm"}) {
    CHECK(error_of(bad).rfind("--preload: '", 0) == 0);
  }
  for (const char* empty : {"torch,,numpy", "torch,", ","}) {
    CHECK(error_of(empty) ==
          "--preload: an empty module name; give modules such as torch,torch.distributed "
          "(comma-separated)");
  }
  CHECK(error_of("torch", true) ==
        "--preload forks Python workers; it cannot be used with --no-python");
  CHECK(error_of("torch", false, true) ==
        "--preload needs dtrun's start-up hook in the workers; drop --no-stack-hook");
}
