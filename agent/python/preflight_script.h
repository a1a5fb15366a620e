// dtrun's own check script for --preflight (docs/agent.md, "Preflight"),
// embedded in the binary as the start-up hook is (dtrun ships as one
// file). The agent writes it into the run folder and starts it in place
// of the training, once, with the training's interpreter, environment and
// ranks (RANK, WORLD_SIZE, MASTER_ADDR/PORT...):
//   <python> dtrun_preflight.py <plan.json> <result.json>
// The plan is preflight_plan's JSON (agent/health/preflight_plan.h); the
// result is preflight_rank_result's (preflight_result.h), written whole
// (beside, then renamed). The script meets its peers under a store prefix
// of its own, so the training's process group, started after it in the
// same round and on the same store, never sees its keys. It uses the
// job's backend: NCCL on CUDA devices, gloo elsewhere ("auto"). It prints
// nothing unless it fails (a traceback, exit 1).
#pragma once

#include <string>

namespace dtrun::agent {

// The script's Python source.
const char* preflight_script_source();

// Writes it as `dir`/dtrun_preflight.py (the folder created) and returns
// the path. Throws std::runtime_error naming the path on failure.
std::string write_preflight_script(const std::string& dir);

}  // namespace dtrun::agent
