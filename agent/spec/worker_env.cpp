#include "agent/spec/worker_env.h"

#include <string_view>

extern char** environ;

namespace dtrun::agent {
namespace {

std::string inherited_or(const env_map& inherited, const std::string& key,
                         const std::string& fallback) {
  auto it = inherited.find(key);
  return it == inherited.end() ? fallback : it->second;
}

}  // namespace

int global_rank(const rendezvous::rendezvous_info& info, int local_rank) {
  return info.first_rank + local_rank;
}

int world_size(const rendezvous::rendezvous_info& info) { return info.world_size; }

env_map static_worker_env(const worker_group_spec& spec, int local_rank,
                          const env_map& inherited) {
  env_map env{
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(spec.local_world_size)},
      {"ROLE_NAME", spec.role},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(spec.max_restarts)},
      {"TORCHELASTIC_RUN_ID", spec.run_id},
      // Python's str(bool), which is what torch's workers compare against.
      {"TORCHELASTIC_USE_AGENT_STORE", spec.use_agent_store ? "True" : "False"},
      // As torchrun 2.x: only the TORCH_ name, default on. The old name
      // NCCL_ASYNC_ERROR_HANDLING is not set (torch >= 2.2 prints a
      // deprecation warning in every rank when it is; 1.13 defaults to on
      // without it); a value the user exported still reaches the workers.
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING",
       inherited_or(inherited, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")},
      // torchrun >= 2.9 exports its --signals-to-handle text to the agent's
      // environment, which the workers inherit (torch's own process
      // launchers inside a worker read it).
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", spec.signals_to_handle},
  };
  // The watchdog's pipe, only when it runs (torch sets it for the workers
  // in _setup_local_watchdog).
  if (!spec.timer_file.empty()) env.emplace("TORCHELASTIC_TIMER_FILE", spec.timer_file);
  // As torchrun: several workers each spawning one OpenMP thread per core
  // overload the machine, so default to one thread unless the user chose.
  if (spec.local_world_size > 1 && inherited.count("OMP_NUM_THREADS") == 0) {
    env.emplace("OMP_NUM_THREADS", "1");
  }
  return env;
}

env_map round_worker_env(const worker_group_spec& /*spec*/, const rendezvous::rendezvous_info& info,
                         int local_rank, int restart_count) {
  int rank = global_rank(info, local_rank);
  int world = world_size(info);
  // One role per job, so role ranks equal global ranks (as in torchrun).
  return {
      {"RANK", std::to_string(rank)},
      {"GROUP_RANK", std::to_string(info.group_rank)},
      {"ROLE_RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"GROUP_WORLD_SIZE", std::to_string(info.group_world_size)},
      {"ROLE_WORLD_SIZE", std::to_string(world)},
      {"MASTER_ADDR", info.master_addr},
      {"MASTER_PORT", std::to_string(info.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count)},
  };
}

void add_nccl_trace_env(env_map& env, const std::string& attempt_dir, bool hook) {
  std::string set;
  auto add = [&](const char* name, const char* renamed, std::string value) {
    if (env.count(name) != 0 || (renamed != nullptr && env.count(renamed) != 0)) return;
    env.emplace(name, std::move(value));
    if (!set.empty()) set += ',';
    set += name;
  };
  add("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "2000");
  add("TORCH_NCCL_DUMP_ON_TIMEOUT", nullptr, "1");
  add("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE",
      attempt_dir + "/" + nccl_trace_prefix);
  if (hook && !set.empty()) env["DTRUN_FLIGHT_RECORDER"] = set;
}

env_map current_environment() {
  env_map env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

}  // namespace dtrun::agent
