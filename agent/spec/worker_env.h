// The environment torchrun gives each worker, computed as plain data so it
// can be unit-tested and printed by --dry-run.
//
// Split in two: what is known before rendezvous (per local rank) and what
// only a round tells (global ranks, world size, master address, restart
// count). A worker's full environment is the agent's own environment with
// both parts laid on top.
#pragma once

#include <map>
#include <string>

#include "rendezvous/algorithm/rendezvous_handler.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::agent {

// What the worker environment depends on besides the rendezvous round.
struct worker_group_spec {
  std::string role = "default";
  int local_world_size = 1;
  int max_restarts = 0;
  std::string run_id = "none";
  // Workers build their process group on the agent's store
  // (PrefixStore("/worker/attempt_<restart>") over MASTER_ADDR:PORT).
  bool use_agent_store = true;
  // --signals-to-handle as the user wrote it (TORCHELASTIC_SIGNALS_TO_HANDLE).
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  // The file-timer watchdog's pipe (TORCHELASTIC_TIMER_FILE), set by the
  // agent when TORCHELASTIC_ENABLE_FILE_TIMER=1; empty: the watchdog is off.
  std::string timer_file;
};

// Variables fixed for a local rank before rendezvous: LOCAL_RANK,
// LOCAL_WORLD_SIZE, ROLE_NAME, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
// TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_SIGNALS_TO_HANDLE,
// TORCH_NCCL_ASYNC_ERROR_HANDLING (taken from `inherited` when set there,
// "1" otherwise), TORCHELASTIC_TIMER_FILE when spec.timer_file is set (an
// inherited value passes through otherwise, as in torch), and OMP_NUM_THREADS=1 when `inherited` lacks it and there
// are several workers. Never NCCL_ASYNC_ERROR_HANDLING (torchrun 2.x's set).
env_map static_worker_env(const worker_group_spec& spec, int local_rank,
                          const env_map& inherited);

// Variables that depend on the round: RANK, GROUP_RANK, ROLE_RANK,
// WORLD_SIZE, GROUP_WORLD_SIZE, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RESTART_COUNT.
env_map round_worker_env(const worker_group_spec& spec, const rendezvous::rendezvous_info& info,
                         int local_rank, int restart_count);

// The global rank of `local_rank` on this node: the workers of every lower
// group rank come first.
int global_rank(const rendezvous::rendezvous_info& info, int local_rank);
int world_size(const rendezvous::rendezvous_info& info);

// The agent's environment (environ) as a map.
env_map current_environment();

// torch's NCCL flight recorder for a worker, each unless the user set it
// (under either name): TORCH_NCCL_TRACE_BUFFER_SIZE=2000 (the last
// collectives kept), TORCH_NCCL_DUMP_ON_TIMEOUT=1 (dumped when a collective
// times out) and TORCH_NCCL_DEBUG_INFO_TEMP_FILE=<attempt_dir>/nccl_trace_rank_
// (torch appends the rank). Set only on nodes with NVIDIA GPUs: NCCL's
// alone. These are the names every torch reads; torch 2.8 renamed two
// (TORCH_FR_BUFFER_SIZE, TORCH_FR_DUMP_TEMP_FILE) and warns of the old
// ones on every rank. With `hook`, DTRUN_FLIGHT_RECORDER lists the names
// set here, and the Python hook, seeing a torch that reads the new names,
// moves them (python_hook.cpp).
void add_nccl_trace_env(env_map& env, const std::string& attempt_dir, bool hook);
inline constexpr const char* nccl_trace_prefix = "nccl_trace_rank_";

}  // namespace dtrun::agent
